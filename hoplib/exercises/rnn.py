"""Checkers for the exercises of the RNN chapter: one step of the hand-built hop RNN, an encoding of
pointer chasing as hop_k (Proposition E.4), and the bits the depth-k hop RNN posts as a protocol."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hoplib.exercises import CheckResult, check_function
from hoplib.lower_bounds import pointer_chasing as pc
from hoplib.lower_bounds import rnn
from hoplib.tasks import hop


def _reference_step(memory: list[int], prev: int, x: int, y: int, alphabet_size: int) -> tuple:
    m, p, out = rnn.HopLayer(alphabet_size).step(*(torch.tensor([v]) for v in (memory, prev, x, y)))
    return m[0], p[0], out[0]


def check_hop_step(user_fn: Callable[[list[int], int, int, int, int], Any]) -> CheckResult:
    """Check ``user_fn(memory, prev, x, y, alphabet_size) -> (new_memory, new_prev, output)`` against
    :meth:`hoplib.lower_bounds.rnn.HopLayer.step`."""
    rng = np.random.default_rng(0)
    cases = [([3, 3, 3], 3, 0, 1, 3), ([3, 3, 3], 0, 0, 2, 3), ([1, 3, 0], 2, 1, 3, 3)]
    for _ in range(200):
        a = int(rng.integers(1, 8))
        memory = rng.integers(0, a + 1, size=a).tolist()
        cases.append((memory, int(rng.integers(0, a + 1)), int(rng.integers(0, a)), int(rng.integers(0, a + 1)), a))
    return check_function(lambda memory, *rest: user_fn(list(memory), *rest), _reference_step, cases,
                          name="your step function", describe="memory, prev, x, y, alphabet_size",
                          answer=lambda out: [[int(v) for v in out[0]], int(out[1]), int(out[2])])


def check_encoding(user_fn: Callable[[pc.PointerChasingInstance], Any], n_instances: int = 60) -> CheckResult:
    """Check that ``user_fn(instance)`` is a sequence over [2q + 2] of length at most 2kq + 1 whose hop_k at
    the last position is 2q + the answer."""

    def user(inst: pc.PointerChasingInstance) -> Any:
        x = np.asarray(user_fn(inst), dtype=np.int64).reshape(-1)
        if x.size == 0:
            return "an empty sequence"
        if x.size > inst.length or x.min() < 0 or x.max() >= inst.alphabet_size:
            return (f"length {x.size} (at most 2kq + 1 = {inst.length}), symbols in [{x.min()}, {x.max()}] "
                    f"(allowed: [0, {inst.alphabet_size}))")
        return pc.decode_answer(inst, hop(x, inst.k)[-1])

    cases = [(pc.random_instance(int(k), int(q), seed),) for seed, (k, q) in
             enumerate([(1, 2), (2, 3), (3, 4)] + [(1 + s % 6, 2 + s % 7) for s in range(n_instances)])]
    return check_function(user, lambda inst: inst.answer, cases, name="your encoding",
                          describe=lambda c: f"k={c[0].k}, q={c[0].q}, matchings={c[0].matchings.tolist()}")


def protocol_bits(k: int, q: int) -> int:
    """Bits posted by ``simulate_rnn_protocol`` for ``hop_rnn(k, 2q + 2)``, measured."""
    inst = pc.random_instance(k, q, seed=0)
    x, _ = pc.to_hop_sequence(inst)
    return rnn.simulate_rnn_protocol(rnn.hop_rnn(k, inst.alphabet_size), x, k)[1]


def check_protocol_bits(user_fn: Callable[[int, int], int]) -> CheckResult:
    """Check a formula ``user_fn(k, q)`` for the bits the depth-k hop RNN posts on a pointer-chasing sequence."""
    return check_function(user_fn, protocol_bits, [(k, q) for k in (1, 2, 3, 5) for q in (2, 3, 7, 16, 31)],
                          name="your bit count", answer=int,
                          describe=lambda c: f"k={c[0]}, q={c[1]} (alphabet {2 * c[1] + 2}, "
                                             f"{math.ceil(math.log2(2 * c[1] + 3))} bits per symbol)")
