"""The authors' style of data generator, the baseline of :mod:`hoplib.tasks`'s benchmark (``benchmarks/``)."""

from __future__ import annotations

import time

import numpy as np

from hoplib.tasks import HopTask


def authors_style_sample(task: HopTask, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One sample at a time, one string search per position per hop; same layout as ``HopTask.sample``."""
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
                j = s.rfind(s[p], 0, p)  # the last earlier occurrence of s[p]
                p = j + 1 if j >= 0 else -1
                if p < 0:
                    break
            answer.append(s[p] if p >= 0 else "~")
        inputs[b, 0], targets[b, 0] = k, v.blank
        for t, (c, a) in enumerate(zip(s[:-2], answer[:-2], strict=True), start=1):
            inputs[b, t] = v.first_letter + letters.index(c)
            targets[b, t] = v.no_answer if a == "~" else v.first_letter + letters.index(a)
    return inputs, targets


def measure_throughput(fn, items_per_call: int, min_seconds: float = 0.5, warmup: int = 1,
                       sync=None) -> dict[str, float]:
    """Call ``fn()`` for at least ``min_seconds`` after ``warmup`` calls; ``sync`` (``torch.cuda.synchronize``)
    runs before every clock reading, so GPU work is counted. Returns items per second, seconds per call, calls."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    calls, t0 = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - t0 < min_seconds:
        fn()
        calls += 1
        if sync:
            sync()
    elapsed = time.perf_counter() - t0
    return {"items_per_s": calls * items_per_call / elapsed, "seconds_per_call": elapsed / calls, "calls": calls}
