"""The MPC chapter's exercise checkers accept right answers and explain wrong ones."""

import numpy as np

from hoplib.exercises.mpc import check_doubling_rounds, check_layer_rounds, check_sum_step
from hoplib.mpc import Message
from hoplib.mpc.primitives import tree_depth


def _sum_step(ctx, mem):
    t = mem["v"]
    sums = np.zeros(ctx.num_machines, dtype=np.int64)
    np.add.at(sums, t.machine, t.data[:, 0])
    return {}, {"sums": Message(ctx.active, np.zeros(len(ctx.active), np.int64), sums[ctx.active])}


def _global_sum_step(ctx, mem):  # not local: every machine sends the total of all machines
    t = mem["v"]
    total = int(t.data[:, 0].sum())
    return {}, {"sums": Message(ctx.active, np.zeros(len(ctx.active), np.int64), np.full(len(ctx.active), total))}


def test_sum_step_checker_accepts_a_local_step_and_rejects_a_peeking_one():
    assert check_sum_step(_sum_step).passed
    result = check_sum_step(_global_sum_step)
    assert not result.passed and "not local" in result.message


def test_round_count_checkers():
    assert check_doubling_rounds(lambda k: 2 * k.bit_length()).passed
    assert not check_doubling_rounds(lambda k: 2 * k).passed
    assert check_layer_rounds(lambda n, s, m, h: 2 * max(1, tree_depth(n, s // (4 * m * h))) + 2).passed
    assert not check_layer_rounds(lambda n, s, m, h: 2 * tree_depth(n, 2) + 3).passed
