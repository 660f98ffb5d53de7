"""Tests of hoplib.lower_bounds.communication: the blackboard model of Definition E.1, the players' blocks and the
bit encodings of what they post."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds import communication as comm


def test_block_sizes_give_player_one_the_extra_symbol():
    assert comm.block_sizes(2 * 3 * 5 + 1, 3) == [10, 10, 11]
    assert sum(comm.block_sizes(17, 4)) == 17
    with pytest.raises(ValueError, match="num_players"):
        comm.block_sizes(3, 4)


# --------------------------------------------------------------------------- Definition E.1
def test_blackboard_enforces_order_and_counts_bits():
    board = comm.Blackboard(3)
    board.post(1, 3, [1, 0])
    board.post(1, 1, (1, 1, 1))
    with pytest.raises(ValueError, match="P_2"):
        board.post(1, 2, [0])  # P_2 speaks before P_1 in a round
    with pytest.raises(ValueError, match="0 and 1"):
        board.post(2, 3, [2])
    board.post(2, 2, [])
    assert board.total_bits == 5
    assert board.max_message_bits == 3
    assert board.rounds == 2
    assert board.output == (1, 1, 1)
    assert board.last_message(3) == (1, 0)
    assert board.last_message(2, round=1) is None


@given(st.integers(0, 2**20 - 1))
def test_int_bits_roundtrip(v):
    assert comm.bits_to_int(comm.int_to_bits(v, 20)) == v


def test_block_bounds_tile_the_sequence_left_to_right_from_p_p_to_p_1():
    bounds = comm.block_bounds(31, 3)
    assert bounds == {3: (0, 10), 2: (10, 20), 1: (20, 31)}
    for n, p in [(1, 1), (7, 7), (40, 6)]:
        b = comm.block_bounds(n, p)
        assert [b[j] for j in range(p, 0, -1)] == list(zip(np.cumsum([0] + comm.block_sizes(n, p))[:-1],
                                                           np.cumsum(comm.block_sizes(n, p)), strict=True))


def test_run_protocol_calls_players_in_speaking_order_and_validates_the_board():
    calls = []

    def player(j):
        def play(r, board):
            calls.append((r, j))
            return (j % 2,) if r == 1 else None
        return play

    board = comm.run_protocol([player(j) for j in (1, 2, 3)], 2)
    assert calls == [(1, 3), (1, 2), (1, 1), (2, 3), (2, 2), (2, 1)]
    assert [(p.round, p.player, p.bits) for p in board.posts] == [(1, 3, (1,)), (1, 2, (0,)), (1, 1, (1,))]
    with pytest.raises(ValueError, match="empty"):
        comm.run_protocol([player(1)], 1, blackboard=board)


@pytest.mark.parametrize("n_classes, bits", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (1024, 10), (1025, 11)])
def test_class_bits_is_ceil_log2_and_at_least_one(n_classes, bits):
    assert comm.class_bits(n_classes) == bits


def test_float_bits_round_trip_is_exact():
    t = torch.randn(3, 5) * 1e3
    t[0, 0] = float("inf")
    t[0, 1] = -0.0
    bits = comm.floats_to_bits(t)
    assert len(bits) == 32 * 15 and set(bits) <= {0, 1}
    back = comm.bits_to_floats(bits, (3, 5))
    assert torch.equal(back, t) and torch.signbit(back[0, 1])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=20))
def test_float_bits_round_trip_any_float32(values):
    t = torch.tensor(values, dtype=torch.float32)
    assert torch.equal(comm.bits_to_floats(comm.floats_to_bits(t), t.shape), t)


def test_sequence_ids_accepts_numpy_and_torch_integers_only():
    assert torch.equal(comm.sequence_ids(np.array([3, 1], dtype=np.int32)), torch.tensor([3, 1]))
    assert comm.sequence_ids(torch.tensor([2, 0])).dtype == torch.long
    with pytest.raises(ValueError, match="integer ids"):
        comm.sequence_ids(np.zeros(3))
    with pytest.raises(ValueError, match="1-D"):
        comm.sequence_ids(np.zeros((2, 2), dtype=np.int64))
