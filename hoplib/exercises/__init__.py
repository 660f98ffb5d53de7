"""What every chapter's exercise checkers share: :func:`check_function` runs a reader's function on test cases,
compares each answer with hoplib's own, and reports the first disagreements in words (input, expected, received),
so a student learns *what* is wrong. The checkers themselves (``check_find``, ``check_hop_program``, ...) are
defined in a collapsed cell of each chapter's Exercises section, tagged ``exercise-checkers``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class CheckResult:
    """Outcome of a checker: ``passed``, how many cases ran, and a message for the reader."""

    passed: bool
    cases: int
    message: str
    failures: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message

    def _repr_markdown_(self) -> str:
        return ("✅ " if self.passed else "❌ ") + self.message


def to_list(v: Any) -> Any:
    """Tensors and arrays as (nested) lists, anything else unchanged: the default form answers are compared in."""
    return v.detach().cpu().tolist() if isinstance(v, torch.Tensor) else v.tolist() if isinstance(v, np.ndarray) else v


def check_function(user_fn: Callable[..., Any], reference_fn: Callable[..., Any], cases: Iterable[tuple], *,
                   name: str = "your function", describe: str | Callable[[tuple], str] | None = None,
                   answer: Callable[[Any], Any] = to_list, max_failures: int = 3) -> CheckResult:
    """Compare ``answer(user_fn(*case))`` with ``answer(reference_fn(*case))`` on every case; explain mismatches.

    ``describe`` shows a case: a callable, or the arguments' names (``"n, k"`` shows ``n=5, k=2``). Exceptions
    raised by ``user_fn`` count as failures and are reported with their message.
    """
    if isinstance(describe, str):
        names = [s.strip() for s in describe.split(",")]
        describe = lambda c: ", ".join(f"{a}={to_list(v)}" for a, v in zip(names, c, strict=True))  # noqa: E731
    failures: list[str] = []
    n = 0
    for case in cases:
        n += 1
        shown = describe(case) if describe else ", ".join(repr(to_list(c)) for c in case)
        expected = answer(reference_fn(*case))
        try:
            got = answer(user_fn(*case))
        except Exception as exc:  # noqa: BLE001 - the reader's code may raise anything
            failures.append(f"on input {shown}: {name} raised {type(exc).__name__}: {exc}")
        else:
            if got != expected:
                failures.append(f"on input {shown}: expected {expected!r}, got {got!r}")
        if len(failures) >= max_failures:
            break
    if failures:
        msg = f"{name} is not right yet ({len(failures)} failing case(s) shown):\n  " + "\n  ".join(failures)
        return CheckResult(False, n, msg, failures)
    return CheckResult(True, n, f"{name} agrees with hoplib on all {n} test cases.")
