"""Tests of hoplib.training.heads: alignment scores of attention heads against a noise floor (Appendix G.4)."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from hoplib import construction
from hoplib.evaluate import find_pattern
from hoplib.tasks import HopTask
from hoplib.training import heads

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TASK = HopTask(seq_len=40, alphabet_size=4, max_hops=4)
PATTERNS = ["prev", 0, 1, 2, "start"]


def _inputs(k=1, n=12, seed=3):
    x, _ = TASK.sample(n, k=k, seed=seed)
    return x


def _recent_window(t, width=3):
    """A head with no content: equal attention to the last ``width`` positions up to its own."""
    m = torch.zeros(t, t)
    for i in range(t):
        m[i, max(0, i - width + 1): i + 1] = 1.0
    return m / m.sum(dim=1, keepdim=True)


def test_derangements_move_every_sample_and_are_reproducible():
    perms = heads.derangements(5, 30, seed=1)
    assert len(perms) == 30 and all(not bool((p == torch.arange(5)).any()) for p in perms)
    assert all(sorted(p.tolist()) == list(range(5)) for p in perms)
    assert all(torch.equal(a, b) for a, b in zip(perms, heads.derangements(5, 30, seed=1), strict=True))
    with pytest.raises(ValueError, match="n"):
        heads.derangements(1, 3)


def test_a_head_that_computes_find1_clears_its_floor():
    x = _inputs()
    exact = find_pattern(x, TASK, 1)
    exact[:, 0, 0] = 1.0  # row 0 (the k-token's query) attends to itself
    out = heads.alignment_with_floor([exact], x, TASK, PATTERNS)
    i = out["patterns"].index("find^1")
    assert out["scores"].shape == (1, 1, len(PATTERNS))
    assert out["scores"][0, 0, i] == pytest.approx(1.0, abs=1e-5)
    assert out["floor"][0, 0, i] < 0.5
    reading = heads.cleared({**out, "scores": out["scores"][:, :, None], "floor": out["floor"][:, :, None],
                             "ks": [1]})
    assert reading["patterns"][int(reading["best"][0, 0, 0])] == "find^1"


def test_recent_window_attention_scores_like_find1_but_stays_on_the_floor():
    x = _inputs()
    att = _recent_window(x.shape[1]).expand(x.shape[0], 2, -1, -1)  # two identical heads
    out = heads.alignment_with_floor([att], x, TASK, PATTERNS)
    i = out["patterns"].index("find^1")
    score, floor = out["scores"][0, :, i], out["floor"][0, :, i]
    assert bool((score > 0.25).all())  # a sizeable score without any pointer computation ...
    assert bool(((score - floor).abs() < 0.05).all())  # ... that its floor explains
    table = {"ks": [1], "patterns": out["patterns"], "scores": out["scores"][:, :, None],
             "floor": out["floor"][:, :, None]}
    assert heads.content_summary(table)[0]["max_lift"] < 0.05
    reading = heads.cleared(table, min_lift=0.1)
    assert all(reading["patterns"][b] in ("prev", "find^0") for b in reading["best"].flatten().tolist() if b >= 0)


def test_input_independent_patterns_use_the_uniform_causal_floor():
    x = _inputs()
    t = x.shape[1]
    uniform = heads.uniform_causal(t)
    assert torch.allclose(uniform.sum(dim=1), torch.ones(t)) and float(uniform.triu(1).abs().sum()) == 0.0
    out = heads.alignment_with_floor([uniform.expand(x.shape[0], -1, -1)], x, TASK, ["prev", "start"])
    assert torch.allclose(out["scores"], out["floor"], atol=1e-5)  # uniform attention sits exactly on it


def test_hand_built_model_doubles_its_reach_above_the_floor():
    task = HopTask(seq_len=32, alphabet_size=4, max_hops=4)
    hand = construction.multi_hop_transformer(max_hops=4, seq_len=32, alphabet_size=4)
    table = heads.head_alignment(hand, task, ks=[4], patterns=["prev", 0, 1, 2, 3, 4, "start"], n_samples=8)
    assert table["scores"].shape[:3] == (len(hand.trace(task.sample(1)[0]).attentions), 1, 1)
    roles = heads.roles(heads.cleared(table, min_lift=0.1))
    assert "find^1" in roles[(2, 1)]
    assert "find^2" in roles[(max(layer for layer, _ in roles), 1)]


def test_cleared_marks_cells_where_nothing_clears_and_validates():
    table = {"ks": [1, 2], "patterns": ["a", "b"], "scores": torch.tensor([[[[0.5, 0.9], [0.3, 0.3]]]]),
             "floor": torch.tensor([[[[0.2, 0.85], [0.3, 0.25]]]])}
    reading = heads.cleared(table, min_lift=0.1)
    assert reading["best"].tolist() == [[[0, -1]]]
    assert reading["lift"][0, 0, 0] == pytest.approx(0.3) and reading["score"][0, 0, 1] == 0
    assert heads.roles(reading) == {(1, 1): {"a": [1]}}


def test_plot_cleared_labels_layers_from_one_and_leaves_blank_cells_white():
    table = {"ks": [1, 2], "patterns": ["prev", "find^1"], "scores": torch.tensor([[[[0.9, 0.1], [0.1, 0.2]]],
                                                                                   [[[0.1, 0.9], [0.1, 0.9]]]]),
             "floor": torch.full((2, 1, 2, 2), 0.2)}
    ax = heads.plot_cleared(heads.cleared(table), plt.figure().gca())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["L1 h1", "L2 h1"]
    assert [t.get_text() for t in ax.texts] == ["p\n.90", "1\n.90", "1\n.90"]
    assert ax.get_images()[0].get_array()[0, 1].tolist() == [1.0, 1.0, 1.0]
    plt.close("all")

