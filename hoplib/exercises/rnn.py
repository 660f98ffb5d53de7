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


def _reference_step(memory: list[int], prev: int, x: int, y: int, alphabet_size: int) -> tuple[list[int], int, int]:
    layer = rnn.HopLayer(alphabet_size)
    m, p, out = layer.step(torch.tensor([memory]), torch.tensor([prev]), torch.tensor([x]), torch.tensor([y]))
    return m[0].tolist(), int(p[0]), int(out[0])


def _step_cases(n: int = 200, seed: int = 0) -> list[tuple[list[int], int, int, int, int]]:
    rng = np.random.default_rng(seed)
    cases = [([3, 3, 3], 3, 0, 1, 3), ([3, 3, 3], 0, 0, 2, 3), ([1, 3, 0], 2, 1, 3, 3)]
    for _ in range(n):
        a = int(rng.integers(1, 8))
        memory = rng.integers(0, a + 1, size=a).tolist()
        cases.append((memory, int(rng.integers(0, a + 1)), int(rng.integers(0, a)), int(rng.integers(0, a + 1)), a))
    return cases


def check_hop_step(user_fn: Callable[[list[int], int, int, int, int], Any]) -> CheckResult:
    """Check ``user_fn(memory, prev, x, y, alphabet_size) -> (new_memory, new_prev, output)`` against
    :meth:`hoplib.lower_bounds.rnn.HopLayer.step`."""

    def user(*case: Any) -> Any:
        memory, prev, out = user_fn(list(case[0]), *case[1:])
        return [list(memory), int(prev), int(out)]

    def ref(*case: Any) -> Any:
        return list(_reference_step(*case))

    return check_function(user, ref, _step_cases(), name="your step function",
                          describe=lambda c: f"memory={c[0]}, prev={c[1]}, x={c[2]}, y={c[3]}, alphabet_size={c[4]}")


def check_encoding(user_fn: Callable[[pc.PointerChasingInstance], Any], n_instances: int = 60) -> CheckResult:
    """Check that ``user_fn(instance)`` is a sequence over [2q + 2] of length at most 2kq + 1 whose hop_k at
    the last position is 2q + the answer."""
    cases = [(pc.random_instance(int(k), int(q), seed),) for seed, (k, q) in
             enumerate([(1, 2), (2, 3), (3, 4)] + [(1 + s % 6, 2 + s % 7) for s in range(n_instances)])]

    def user(inst: pc.PointerChasingInstance) -> Any:
        x = np.asarray(user_fn(inst), dtype=np.int64).reshape(-1)
        if x.size == 0:
            return "an empty sequence"
        problems = []
        if x.size > inst.length:
            problems.append(f"length {x.size} > 2kq + 1 = {inst.length}")
        if x.min() < 0 or x.max() >= inst.alphabet_size:
            problems.append(f"symbols outside [0, {inst.alphabet_size})")
        if problems:
            return "; ".join(problems)
        return pc.decode_answer(inst, hop(x, inst.k)[-1])

    def ref(inst: pc.PointerChasingInstance) -> Any:
        return inst.answer

    return check_function(user, ref, cases, name="your encoding",
                          describe=lambda c: f"k={c[0].k}, q={c[0].q}, matchings={c[0].matchings.tolist()}")


def protocol_bits(k: int, q: int) -> int:
    """Bits posted by ``simulate_rnn_protocol`` for ``hop_rnn(k, 2q + 2)``, measured."""
    inst = pc.random_instance(k, q, seed=0)
    x, _ = pc.to_hop_sequence(inst)
    _, bits = rnn.simulate_rnn_protocol(rnn.hop_rnn(k, inst.alphabet_size), x, k)
    return bits


def check_protocol_bits(user_fn: Callable[[int, int], int]) -> CheckResult:
    """Check a formula ``user_fn(k, q)`` for the bits the depth-k hop RNN posts on a pointer-chasing sequence."""
    cases = [(k, q) for k in (1, 2, 3, 5) for q in (2, 3, 7, 16, 31)]
    return check_function(lambda k, q: int(user_fn(k, q)), protocol_bits, cases, name="your bit count",
                          describe=lambda c: f"k={c[0]}, q={c[1]} (alphabet {2 * c[1] + 2}, "
                                             f"{math.ceil(math.log2(2 * c[1] + 3))} bits per symbol)")
