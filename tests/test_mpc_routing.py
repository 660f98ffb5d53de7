"""Lemma 3.2's routing layer delivers valid routings exactly, and Theorem 3.1's transformer equals the
simulator: both are the cells of chapters/mpc.md tagged ``transformer-mpc``, run here on their own."""

import numpy as np
import pytest
from _chapters import tagged_cells

from hoplib.mpc import MPCProtocolError
from hoplib.mpc.protocols import hop_protocol
from hoplib.tasks import hop

_CELLS = tagged_cells("mpc", "transformer-mpc")  # the names the chapter's transformer-mpc cells define
TransformerMPC, input_independent_width = _CELLS["TransformerMPC"], _CELLS["input_independent_width"]
RoutingLayer, random_routing = _CELLS["RoutingLayer"], _CELLS["random_routing"]
routing_is_exact, split_words, join_words = (_CELLS[k] for k in ("routing_is_exact", "split_words",
                                                                 "join_words"))


@pytest.mark.parametrize("n,s,beta,seed", [(16, 1, 1, 0), (16, 2, 3, 1), (64, 3, 2, 2), (128, 4, 1, 3)])
def test_routing_layer_delivers_every_message_and_nothing_else(n, s, beta, seed):
    src, dest, msg = random_routing(n, s, beta, seed=seed)
    res = RoutingLayer(n, s, beta, seed=seed).forward(src, dest, msg)
    assert routing_is_exact(res, src, dest, msg)
    assert res.max_offtarget_score <= 0.5  # sparse propagation's margin: targets score 1, start token 3/4


def test_routing_layer_handles_partial_and_empty_routings():
    layer = RoutingLayer(20, 3, 2)
    src, dest, msg = random_routing(20, 3, 2, seed=5, fill=0.34)
    keep = np.arange(len(src)) % 3 == 0
    assert routing_is_exact(layer.forward(src[keep], dest[keep], msg[keep]), src[keep], dest[keep], msg[keep])
    empty = layer.forward(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2), np.int64))
    assert len(empty.src) == 0


def test_routing_keeps_64_bit_words_and_repeated_messages():
    layer = RoutingLayer(8, 3, 2)
    src, dest = np.array([0, 0, 1, 5]), np.array([3, 3, 3, 2])
    msg = np.array([[2**62 + 7, -5], [2**62 + 7, -5], [np.iinfo(np.int64).max, 0], [1, 2]])
    assert routing_is_exact(layer.forward(src, dest, msg), src, dest, msg)


def test_words_split_into_16_bit_pieces_and_join_back():
    words = np.array([[0, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max], [1, 2**40 + 3, -7, 65535]])
    pieces = split_words(words)
    assert pieces.shape == (2, 16) and pieces.min() >= 0 and pieces.max() < 2**16
    np.testing.assert_array_equal(join_words(pieces), words)
    assert join_words(split_words(np.zeros((0, 2), np.int64))).shape == (0, 2)


def test_too_few_slots_lose_messages_and_the_check_notices():
    src, dest, msg = random_routing(64, 4, 1, seed=0)
    res = RoutingLayer(64, 4, 1, slots=4).forward(src, dest, msg)
    assert not routing_is_exact(res, src, dest, msg)


def test_invalid_routing_is_rejected():
    layer = RoutingLayer(8, 1, 1)
    with pytest.raises(ValueError, match="valid routing"):
        layer.forward(np.array([0, 0]), np.array([1, 2]), np.zeros((2, 1), np.int64))


def hop_as_transformer(x, k, memory):
    """hop_protocol on TransformerMPC machines (the chapter's Theorem 3.1 run)."""
    made = []

    def machines(q, s, audit=False):
        made.append(TransformerMPC(q, s, audit=audit, num_tokens=len(x)))
        return made[0]

    return hop_protocol(x, k, memory, simulator=machines)[0], made[0]


def test_hop_protocol_as_a_transformer_equals_the_simulator_with_depth_rounds_plus_one():
    x = np.random.default_rng(4).integers(0, 3, 24)
    answer, sim = hop_as_transformer(x, 3, 32)
    direct, stats = hop_protocol(x, 3, 32)
    np.testing.assert_array_equal(answer, direct)
    np.testing.assert_array_equal(answer, hop(x, 3))
    assert sim.layers == stats.rounds + 1 == sim.stats.rounds + 1
    assert all(entry["exact"] for entry in sim.layer_log)


def test_transformer_mpc_refuses_float_messages():
    sim = TransformerMPC(2, 16)
    sim.load("a", np.array([0]), np.array([[1, 2]]))
    from hoplib.mpc import Message

    with pytest.raises(TypeError, match="integer"):
        sim.round(lambda ctx, mem: (mem, {"f": Message([0], [1], np.array([[0.5]]))}))


def test_transformer_mpc_raises_when_routing_fails(monkeypatch):
    original = _CELLS["RoutingLayer"]

    def tiny(*a, **k):
        k["slots"] = 1
        return original(*a, **k)

    monkeypatch.setitem(_CELLS, "RoutingLayer", tiny)
    sim = TransformerMPC(4, 32)
    with pytest.raises(MPCProtocolError, match="lost or invented"):
        sim.load("a", np.array([0, 0, 1, 2, 3, 3]), np.arange(12).reshape(6, 2))


def test_transformer_layers_are_fitted_to_the_input_and_report_the_input_independent_width():
    x = np.random.default_rng(5).integers(0, 3, 24)
    _, sim = hop_as_transformer(x, 2, 32)
    routed = [e for e in sim.layer_log if e["messages"]]
    assert routed and all(e["width"] < e["input_independent_width"] for e in routed)
    assert all(e["input_independent_width"] == input_independent_width(sim.num_tokens, 32, e["message_words"])
               for e in routed)
    assert input_independent_width(100, 4, 1) > input_independent_width(100, 2, 1) > input_independent_width(10, 2, 1)
