"""Checkers for the book's exercises.

A checker runs a reader's function on a set of test cases, compares each answer with hoplib's own, and
reports the first disagreement in words (the input, the expected and the received value), so a student
learns *what* is wrong rather than only *that* something is. Each chapter's checkers live in a submodule
named after the chapter (``hoplib.exercises.tasks``, ``hoplib.exercises.construction``, ...), all built on
:func:`check_function`.
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


def _to_list(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def check_function(user_fn: Callable[..., Any], reference_fn: Callable[..., Any], cases: Iterable[tuple],
                   *, name: str = "your function", describe: Callable[[tuple], str] | None = None,
                   max_failures: int = 3) -> CheckResult:
    """Compare ``user_fn(*case)`` with ``reference_fn(*case)`` on every case; explain mismatches.

    Exceptions raised by ``user_fn`` count as failures and are reported with their message.
    """
    if not callable(user_fn):
        raise TypeError(f"user_fn must be callable, got {type(user_fn).__name__}")
    failures: list[str] = []
    n = 0
    for case in cases:
        n += 1
        shown = describe(case) if describe else ", ".join(repr(_to_list(c)) for c in case)
        expected = _to_list(reference_fn(*case))
        try:
            got = _to_list(user_fn(*case))
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
