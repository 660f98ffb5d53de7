"""Tests of hoplib.lower_bounds.pointer_chasing (Definition E.2, Proposition E.4's encoding; the chapter rnn.md
checks Proposition E.3's two protocols) and of Corollary 5.2's reduction (``simulate_rnn_protocol``, a cell of
chapters/rnn.md tagged ``rnn-code``) on its instances."""

import math

import numpy as np
import pytest
import torch
from _chapters import tagged_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import pointer_chasing as pc
from hoplib.lower_bounds import rnn
from hoplib.tasks import find_k, hop, hop_reference

_CELLS = tagged_cells("rnn", "rnn-code")  # the chapter's hand-built RNNs and Corollary 5.2's reduction
hop_rnn, simulate_rnn_protocol = _CELLS["hop_rnn"], _CELLS["simulate_rnn_protocol"]


# --------------------------------------------------------------------------- Definition E.2
def test_random_instance_has_k_perfect_matchings_and_is_reproducible():
    inst = pc.random_instance(4, 9, seed=3)
    assert inst.matchings.shape == (4, 9)
    for row in inst.matchings:
        assert sorted(row.tolist()) == list(range(9))
    again = pc.random_instance(4, 9, seed=3)
    assert np.array_equal(inst.matchings, again.matchings)
    other = pc.random_instance(4, 9, seed=4)
    assert not np.array_equal(inst.matchings, other.matchings)


def test_instance_answer_follows_the_path():
    inst = pc.random_instance(3, 6, seed=1)
    v = inst.start
    for j in range(3):
        v = int(inst.matchings[j][v])
    assert inst.path()[-1] == v
    assert inst.answer == int(inst.split[v])


def test_the_split_halves_the_last_layer():
    s = pc.random_instance(1, 7, seed=0).split
    assert s.tolist() == [0, 0, 0, 1, 1, 1, 1]


# --------------------------------------------------------------------------- Proposition E.4
@settings(max_examples=150, deadline=None)
@given(k=st.integers(1, 7), q=st.integers(2, 12), seed=st.integers(0, 10**6))
def test_hop_k_of_the_encoding_decodes_to_the_answer(k, q, seed):
    inst = pc.random_instance(k, q, seed)
    x, answer = pc.to_hop_sequence(inst)
    assert x.shape == (2 * k * q + 1,)
    assert x.min() >= 0 and x.max() < 2 * q + 2
    assert answer == inst.answer
    assert pc.decode_answer(inst, hop(x, k)[-1]) == answer


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 6), q=st.integers(2, 8), seed=st.integers(0, 10**6))
def test_each_find_step_moves_one_block_left_along_one_edge(k, q, seed):
    inst = pc.random_instance(k, q, seed)
    x, _ = pc.to_hop_sequence(inst)
    path = inst.path()
    for j in range(1, k + 1):
        pos = int(find_k(x, j)[-1])
        block = k - 1 - (pos // (2 * q))  # 0-based block from the right: P_{block+1}
        assert block == j - 1, f"find^{j} should land in P_{j}'s block"
        if j < k:  # the symbol there is v_{j+1} written in V_{j+1}'s symbol range
            assert x[pos] == (path[j] if (j + 1) % 2 == 1 else q + path[j])
        else:
            assert x[pos] == 2 * q + inst.answer


def test_encoding_matches_the_reference_hop_and_is_not_answered_earlier():
    for seed in range(20):
        inst = pc.random_instance(4, 5, seed)
        x, answer = pc.to_hop_sequence(inst)
        assert hop_reference(x, 4)[-1] == 2 * 5 + answer
        for j in range(1, 4):  # fewer hops land on a vertex, which decodes to None
            assert pc.decode_answer(inst, hop(x, j)[-1]) is None


def test_both_answers_occur_and_flipping_the_split_flips_the_answer():
    answers = {pc.random_instance(3, 6, s).answer for s in range(40)}
    assert answers == {0, 1}
    inst = pc.random_instance(3, 6, seed=2)
    flipped = pc.PointerChasingInstance(inst.k, inst.q, inst.matchings, 1 - inst.split, inst.start)
    x, a = pc.to_hop_sequence(flipped)
    assert a == 1 - inst.answer
    assert pc.decode_answer(flipped, hop(x, 3)[-1]) == a


def test_player_block_depends_only_on_its_own_matching():
    inst = pc.random_instance(4, 6, seed=5)
    other = pc.random_instance(4, 6, seed=6)
    mixed = inst.matchings.copy()
    mixed[[0, 2]] = other.matchings[[0, 2]]  # change E_1 and E_3
    changed = pc.PointerChasingInstance(4, 6, mixed, inst.split, inst.start)
    assert np.array_equal(pc.player_block(inst, 2), pc.player_block(changed, 2))
    assert np.array_equal(pc.player_block(inst, 4), pc.player_block(changed, 4))
    assert not np.array_equal(pc.player_block(inst, 1), pc.player_block(changed, 1))


def test_decode_answer_accepts_tensors_and_rejects_other_symbols():
    inst = pc.random_instance(2, 4, seed=0)
    assert pc.decode_answer(inst, torch.tensor(8)) == 0
    assert pc.decode_answer(inst, np.int64(9)) == 1
    assert pc.decode_answer(inst, 3) is None
    assert pc.decode_answer(inst, -1) is None


# --------------------------------------------------------------------------- Corollary 5.2's reduction
@pytest.mark.parametrize("k,q", [(1, 3), (2, 4), (3, 5), (4, 3)])
def test_depth_k_hop_rnn_run_as_a_protocol_answers_pointer_chasing(k, q):
    for seed in range(8):
        inst = pc.random_instance(k, q, seed)
        x, answer = pc.to_hop_sequence(inst)
        model = hop_rnn(k, inst.alphabet_size)
        board = comm.Blackboard(k)
        out, bits = simulate_rnn_protocol(model, x, k, blackboard=board)
        assert torch.equal(out, model(torch.from_numpy(x)[None])[0, -1])
        symbol = int(out.argmax())
        assert pc.decode_answer(inst, -1 if symbol == inst.alphabet_size else symbol) == answer
        c = inst.alphabet_size + 1
        assert bits == k * (k - 1) * model.state_bits()[0] + math.ceil(math.log2(c))
        assert bits == board.total_bits
        assert board.rounds == k
        assert comm.bits_to_int(board.output) == symbol


def test_shallower_hop_rnn_protocol_does_not_reach_the_answer():
    inst = pc.random_instance(4, 6, seed=0)
    x, _ = pc.to_hop_sequence(inst)
    out, _ = simulate_rnn_protocol(hop_rnn(3, inst.alphabet_size), x, 4)
    assert pc.decode_answer(inst, int(out.argmax())) is None


@pytest.mark.parametrize("kind", rnn.KINDS)
@pytest.mark.parametrize("players", [1, 3, 7])
def test_trained_style_rnn_protocol_output_equals_forward_pass(kind, players):
    torch.manual_seed(0)
    model = rnn.recurrent_model(kind, 12, d_model=16, n_layers=2, n_classes=13)
    x = torch.randint(0, 12, (23,))
    board = comm.Blackboard(players)
    out, bits = simulate_rnn_protocol(model, x, players, blackboard=board)
    direct = model(x[None])[0, -1]
    torch.testing.assert_close(out, direct, atol=1e-5, rtol=1e-5)
    assert int(out.argmax()) == comm.bits_to_int(board.output)
    assert bits == 2 * (players - 1) * model.state_bits()[0] + math.ceil(math.log2(13))


def test_simulate_rnn_protocol_rejects_bad_inputs():
    model = hop_rnn(2, 3)
    with pytest.raises(ValueError, match="1-D"):
        simulate_rnn_protocol(model, np.zeros((2, 4), dtype=np.int64), 2)
    with pytest.raises(ValueError, match="num_players"):
        simulate_rnn_protocol(model, np.zeros(4, dtype=np.int64), 5)
    with pytest.raises(ValueError, match="integer ids"):
        simulate_rnn_protocol(model, np.zeros(4), 2)


def test_lower_bound_scale():
    assert pc.lower_bound_scale(64, 2) == 1.0
