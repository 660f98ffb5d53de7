"""Theorem 3.4: a transformer layer run as an MPC protocol equals the direct forward pass."""

import numpy as np
import pytest

from hoplib.mpc.layer_sim import TOLERANCE, AttentionLayer, layer_as_mpc
from hoplib.mpc.primitives import tree_depth


@pytest.mark.parametrize("n,memory,causal,heads", [(5, 64, False, 2), (12, 64, True, 2), (9, 96, True, 1)])
def test_layer_as_mpc_matches_forward_pass_with_audit(n, memory, causal, heads):
    layer = AttentionLayer.random(4, heads, causal=causal, seed=n)
    x = np.random.default_rng(n).normal(size=(n, 4))
    y, stats, info = layer_as_mpc(layer, x, memory, audit=True)
    assert np.abs(y - layer.forward(x)).max() <= TOLERANCE
    assert stats.max_memory <= memory


@pytest.mark.parametrize("n,memory", [(16, 64), (40, 64), (40, 128), (100, 256)])
def test_rounds_are_two_depth_plus_two_within_the_theorems_two_depth_plus_three(n, memory):
    layer = AttentionLayer.random(4, 2, causal=True, seed=0)
    x = np.random.default_rng(0).normal(size=(n, 4)) * 3
    y, stats, info = layer_as_mpc(layer, x, memory)
    b = memory // (4 * 4 * 2)
    assert info["branching"] == b and info["depth"] == max(1, tree_depth(n, b))
    assert stats.rounds == 2 * info["depth"] + 2 <= 2 * info["depth"] + 3
    assert np.abs(y - layer.forward(x)).max() <= TOLERANCE
    assert info["num_machines"] <= n + n * n + 2 * n * n  # q = O(N^2)


def test_large_scores_do_not_overflow_thanks_to_log_space_sums():
    layer = AttentionLayer.random(4, 2, seed=3)
    layer.wq *= 30
    x = np.random.default_rng(1).normal(size=(20, 4)) * 5
    y, _, _ = layer_as_mpc(layer, x, 64)
    assert np.isfinite(y).all() and np.abs(y - layer.forward(x)).max() <= 1e-6 * max(1, np.abs(y).max())


def test_memory_too_small_for_the_trees_is_rejected():  # b = 1 would make the trees infinitely deep
    layer = AttentionLayer.random(4, 2, seed=0)
    with pytest.raises(ValueError, match="memory"):
        layer_as_mpc(layer, np.zeros((4, 4)), 63)


def test_wide_tokens_still_fit_the_memory_bound():
    layer = AttentionLayer.random(40, 1, seed=0)  # 41 words per token, s = 8 m H = 320 words
    x = np.random.default_rng(2).normal(size=(6, 40))
    y, stats, info = layer_as_mpc(layer, x, 320, audit=True)
    assert stats.max_memory <= 320 and info["branching"] == 2
    assert np.abs(y - layer.forward(x)).max() <= TOLERANCE


def test_run_mpc_layer_regime_writes_keeps_and_resumes(tmp_path):
    import json

    from _scripts import load_script

    script = load_script("run_mpc")
    out = tmp_path / "regime.json"
    script.main(["layer-regime", "--ns", "64,128", "--deltas", "0.9", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert [(r["N"], r["rounds"]) for r in rec["data"]] == [(64, 8), (128, 8)]  # s = 148, 275: b = 4, 8; D = 3
    assert all(r["memory"] < r["input_words"] and r["max_error"] <= TOLERANCE for r in rec["data"])
    with pytest.raises(SystemExit, match="exists"):
        script.main(["layer-regime", "--ns", "64,128", "--deltas", "0.9", "--out", str(out)])
    with pytest.raises(ValueError, match="other parameters"):
        script.main(["layer-regime", "--ns", "64", "--deltas", "0.9", "--out", str(out), "--resume"])
    rec["data"] = rec["data"][:1]
    out.write_text(json.dumps(rec))
    script.main(["layer-regime", "--ns", "64,128", "--deltas", "0.9", "--out", str(out), "--resume"])
    assert [r["N"] for r in json.loads(out.read_text())["data"]] == [64, 128]
