"""Checkers for the exercises of the chapter on the k-hop task (Definition 4.1)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hoplib.exercises import CheckResult, check_function
from hoplib.tasks import find, hop, letters_to_str


def _cases(seed: int = 0, n_random: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    fixed = [[0], [0, 0], [1, 0, 4, 1, 2, 0, 1, 4, 1, 3, 4, 0], [0, 1, 0, 1, 0, 1], [2, 2, 2, 1, 1]]  # baebcabebdea
    return [np.array(x) for x in fixed] + [rng.integers(0, int(rng.integers(2, 6)), size=int(rng.integers(1, 30)))
                                           for _ in range(n_random)]


def _show(case: tuple) -> str:
    return f"x={letters_to_str(case[0])!r} (as numbers {case[0].tolist()})" + "".join(f", k={k}" for k in case[1:])


def check_find(user_find: Callable[[np.ndarray], object]) -> CheckResult:
    """Check a reader's ``find(x)`` (1-D numpy array in, list or array of positions out, -1 for none)."""
    return check_function(user_find, find, [(x,) for x in _cases()], name="find", describe=_show)


def check_hop(user_hop: Callable[[np.ndarray, int], object]) -> CheckResult:
    """Check a reader's ``hop(x, k)`` on random sequences, with repeats, for k = 0..6."""
    cases = [(x, k) for x in _cases(seed=1, n_random=20) for k in range(7)]
    return check_function(user_hop, hop, cases, name="hop", describe=_show)
