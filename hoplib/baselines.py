"""Straightforward reference implementations in the style of the authors' code, for comparison only.

The authors' data generator (``chsanford/hop-induction-heads``) builds one Python string per sample and
answers each position and each hop by searching the string backwards. It is correct and simple; it is
also the baseline that :mod:`hoplib.tasks`'s vectorised pointer doubling is benchmarked against.
"""

from __future__ import annotations

import numpy as np

from hoplib._book.validate import check_int
from hoplib.tasks import HopTask


def _find_in_string(s: str, i: int) -> int:
    """Largest j in [1, i] with s[j-1] == s[i] (string search), or -1."""
    j = s.rfind(s[i], 0, i)
    return j + 1 if j >= 0 else -1


def authors_style_sample(task: HopTask, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One sample at a time, one string search per position per hop; same layout as ``HopTask.sample``."""
    batch_size = check_int("batch_size", batch_size, low=1)
    v = task.vocab
    letters = "abcdefghijklmnopqrstuvwxyz"[: task.alphabet_size]
    inputs = np.empty((batch_size, task.length), dtype=np.int64)
    targets = np.empty((batch_size, task.length), dtype=np.int64)
    for b in range(batch_size):
        k = int(rng.integers(task.min_hops, task.max_hops + 1))
        chars = [letters[rng.integers(task.alphabet_size)]]
        while len(chars) < task.seq_len:
            c = letters[rng.integers(task.alphabet_size)]
            if c != chars[-1]:
                chars.append(c)
        s = "".join(chars)
        answer = []
        for i in range(len(s)):
            p = i
            for _ in range(k):
                p = _find_in_string(s, p)
                if p < 0:
                    break
            answer.append(s[p] if p >= 0 else "~")
        s, answer = s[:-2], answer[:-2]
        inputs[b, 0] = k
        targets[b, 0] = v.blank
        for t, (c, a) in enumerate(zip(s, answer, strict=True), start=1):
            inputs[b, t] = v.first_letter + letters.index(c)
            targets[b, t] = v.no_answer if a == "~" else v.first_letter + letters.index(a)
    return inputs, targets


def measure_throughput(fn, items_per_call: int, min_seconds: float = 0.5, warmup: int = 1,
                       sync=None) -> dict[str, float]:
    """Call ``fn()`` repeatedly for at least ``min_seconds`` (after ``warmup`` calls); items per second.

    ``sync`` (e.g. ``torch.cuda.synchronize``) is called before reading the clock, so GPU work is counted.
    Returns ``{"items_per_s", "seconds_per_call", "calls"}``.
    """
    import time

    items_per_call = check_int("items_per_call", items_per_call, low=1)
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        if sync:
            sync()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            break
    return {"items_per_s": calls * items_per_call / elapsed, "seconds_per_call": elapsed / calls, "calls": calls}
