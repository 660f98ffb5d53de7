"""Checkers for the exercises of the MPC chapter (the MPC model, Theorems 3.1 and 3.4)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hoplib.exercises import CheckResult, check_function
from hoplib.mpc.layer_sim import AttentionLayer, layer_as_mpc
from hoplib.mpc.protocols import hop_protocol
from hoplib.mpc.simulator import Message, MPCLimitError, MPCSimulator


def _machine0_sums(step: Callable, q: int, s: int, per: int, seed: int) -> list[int] | str:
    """Load ``per`` values on each of q machines, run ``step`` once (audited): what machine 0 holds."""
    sim = MPCSimulator(q, s, audit=True)
    sim.load("v", np.repeat(np.arange(q), per), np.random.default_rng(seed).integers(0, 100, (q * per, 1)))
    try:
        sim.round(step)
    except MPCLimitError as err:
        return f"MPCLimitError({err.kind})"
    t = sim.table("sums")
    return sorted(int(v) for v in t.data[t.machine == 0, 0])


def _reference_sum_step(ctx, mem):
    sums = np.zeros(ctx.num_machines, dtype=np.int64)
    np.add.at(sums, mem["v"].machine, mem["v"].data[:, 0])
    return {}, {"sums": Message(ctx.active, np.zeros(len(ctx.active), np.int64), sums[ctx.active])}


def check_sum_step(user_step: Callable) -> CheckResult:
    """Check a one-round step in which every machine sends the sum of its values (table ``"v"``) to machine 0,
    into table ``"sums"``; with more machines than words of memory it must fail with a receive-limit error."""
    cases = [(2, 8, 3, 0), (5, 8, 1, 1), (8, 8, 4, 2), (9, 8, 2, 3), (4, 16, 0, 4)]
    return check_function(lambda *c: _machine0_sums(user_step, *c), lambda *c: _machine0_sums(_reference_sum_step, *c),
                          cases, name="your step", describe="q, s, values_per_machine, seed")


def check_doubling_rounds(user_rounds: Callable[[int], int]) -> CheckResult:
    """Check a formula for the rounds :func:`hoplib.mpc.protocols.hop_protocol` spends on pointer doubling."""
    x = np.random.default_rng(0).integers(0, 4, 300)
    return check_function(user_rounds, lambda k: hop_protocol(x, k, 128)[1].phases.get("pointer doubling", 0),
                          [(k,) for k in (0, 1, 2, 3, 7, 8, 16, 100, 1000)], name="your round count", describe="k")


def check_layer_rounds(user_rounds: Callable[[int, int, int, int], int]) -> CheckResult:
    """Check a formula ``rounds(N, memory, width, heads)`` for :func:`hoplib.mpc.layer_sim.layer_as_mpc`."""

    def measured(n: int, memory: int, width: int, heads: int) -> int:
        return layer_as_mpc(AttentionLayer.random(width, heads), np.zeros((n, width)), memory)[1].rounds

    cases = [(2, 64, 4, 2), (16, 64, 4, 2), (17, 64, 4, 2), (16, 128, 4, 2), (50, 96, 2, 1), (9, 300, 3, 3)]
    return check_function(user_rounds, measured, cases, name="your round count", describe="N, s, m, H")
