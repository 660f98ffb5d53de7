"""Tests of hoplib.lower_bounds.reductions: the kernel and Longformer reductions (Cor. 5.3, 5.4), and of the
attention sweeps and the Longformer's out-of-reach share."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import efficient_attention as attn
from hoplib.lower_bounds import pointer_chasing as pc
from hoplib.lower_bounds import reductions as eff
from hoplib.models import GPT, GPTConfig, gpt_for_task
from hoplib.report import ErrorRecord, smallest_depth
from hoplib.tasks import HopTask


def _gpt(kind: str, n: int, vocab: int, seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=vocab, n_positions=n, depth=kw.pop("depth", 2), d_model=kw.pop("d_model", 16),
                    heads=kw.pop("heads", 2), attention=attn.attention_spec(kind, **kw))
    return GPT(cfg).eval()


@pytest.mark.parametrize("k, q", [(1, 3), (2, 3), (3, 4), (4, 2)])
def test_kernel_protocol_output_equals_forward_pass_and_bits_match_formula(k, q):
    inst = pc.random_instance(k, q, seed=k)
    x, _ = pc.to_hop_sequence(inst)
    model = _gpt("performer", len(x), inst.alphabet_size, seed=k, n_features=12)
    board = comm.Blackboard(k)
    out, bits = eff.simulate_kernel_protocol(model, x, k, blackboard=board)
    direct = model(torch.from_numpy(x)[None])[0, -1]
    assert (out - direct).abs().max().item() < 1e-5
    assert bits == board.total_bits == eff.kernel_protocol_bits(2, k, 2, 8, 12, model.num_classes)
    assert board.rounds == 2
    # Every message except the output is the same size, independent of N.
    sizes = {len(p.bits) for p in board.posts if p.player > 1}
    assert sizes <= {32 * 2 * (12 * (8 + 1) + 1)}  # 32 H (m'(d_head + 1) + 1)


@pytest.mark.parametrize("num_players", [1, 2, 5, 13])
def test_kernel_protocol_works_for_any_number_of_players(num_players):
    gen = np.random.default_rng(num_players)
    x = gen.integers(0, 9, size=13)
    model = _gpt("performer", 13, 9, seed=1, n_features=8, depth=3)
    out, bits = eff.simulate_kernel_protocol(model, x, num_players)
    assert torch.allclose(out, model(torch.from_numpy(x)[None])[0, -1], atol=1e-5)
    assert bits == eff.kernel_protocol_bits(3, num_players, 2, 8, 8, model.num_classes)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 24), p=st.integers(1, 6), w=st.integers(0, 10), g=st.one_of(st.none(), st.integers(1, 7)),
       seed=st.integers(0, 1000))
def test_longformer_protocol_output_equals_forward_pass_and_bits_match_formula(n, p, w, g, seed):
    p = min(p, n)
    x = np.random.default_rng(seed).integers(0, 7, size=n)
    model = _gpt("longformer", n, 7, seed=seed, window=w, global_every=g)
    out, bits = eff.simulate_longformer_protocol(model, x, p)
    direct = model(torch.from_numpy(x)[None])[0, -1]
    assert (out - direct).abs().max().item() < 1e-5
    assert bits == eff.longformer_protocol_bits(n, p, 2, 16, w, g, model.num_classes)


def test_longformer_posts_only_positions_that_a_later_query_attends():
    n, p, w, g = 23, 5, 3, 4
    mask = attn.longformer_mask(n, w, g)
    starts = np.concatenate([[0], np.cumsum(comm.block_sizes(n, p))])
    posts = eff.posted_positions(n, p, w, g)
    for j, positions in posts.items():
        end = starts[p - j + 1]
        for t in positions:
            assert mask[end:, t].any(), f"P_{j} posts position {t}, which no later query attends"
        # And everything a later query attends in this block was posted.
        needed = {t for t in range(starts[p - j], end) if mask[end:, t].any()}
        assert needed == set(positions)


def test_longformer_protocol_fails_if_a_needed_token_is_withheld(monkeypatch):
    inst = pc.random_instance(3, 4, seed=0)
    x, _ = pc.to_hop_sequence(inst)
    model = _gpt("longformer", len(x), inst.alphabet_size, seed=2, window=2, global_every=5)
    direct = model(torch.from_numpy(x)[None])[0, -1]
    real = eff.posted_positions

    def fewer(*args):
        posts = real(*args)
        posts[2] = posts[2][:-1]  # P_2 withholds its last token
        return posts

    monkeypatch.setattr(eff, "posted_positions", fewer)
    out, _ = eff.simulate_longformer_protocol(model, x, 3)
    assert (out - direct).abs().max().item() > 1e-4


def test_protocols_validate_their_inputs():
    model = _gpt("performer", 10, 5, n_features=4)
    x = np.arange(5)
    with pytest.raises(ValueError, match="longformer"):
        eff.simulate_longformer_protocol(model, x, 2)
    with pytest.raises(ValueError, match="num_players"):
        eff.simulate_kernel_protocol(model, x, 6)
    with pytest.raises(ValueError, match="eval"):
        eff.simulate_kernel_protocol(model.train(), x, 2)


def _attention_sweep(task, kinds, depths, seed=0, **attention):
    from hoplib.lower_bounds import sweep

    settings = {"steps": attention.pop("steps", 3), "warmup_steps": 1, "n_samples": attention.pop("n_samples", 4)}
    points = [{"kind": kind, "depth": d, "d_model": 16, "lr": 1e-3} for kind in kinds for d in depths]
    spec = {"n_features": None, "window": None, "global_every": None, **attention}

    def build(t):
        return sweep.attention_builder(t, 2, **spec)
    return sweep.sweep_points(task, points, settings, build, seed=seed, device="cpu")


def test_attention_sweep_records_feed_the_depth_report():
    task = HopTask(seq_len=10, max_hops=2)
    recs = _attention_sweep(task, attn.KINDS, [1], n_features=8, window=2, global_every=4)
    assert {r["kind"] for r in recs} == set(attn.KINDS) and len(recs) == 3 * 3
    assert all(0 <= r["error"] <= 1 for r in recs)
    perf = [r for r in recs if r["kind"] == "performer"]
    assert all((r["n_features"], r["window"], r["heads"]) == (8, None, 2) for r in perf)
    long = [r for r in recs if r["kind"] == "longformer"]
    assert all((r["n_features"], r["window"], r["global_every"]) == (None, 2, 4) for r in long)
    records = [ErrorRecord(r["kind"], r["depth"], r["k"], r["error"], r["d_model"]) for r in recs]
    assert smallest_depth(records, threshold=1.0, family="performer") == {0: 1, 1: 1, 2: 1}


def test_attention_sweep_trains_each_model_like_fit_with_the_same_seeds():
    from hoplib.evaluate import per_k_error
    from hoplib.train import TrainConfig, fit

    task = HopTask(seq_len=10, max_hops=2)
    recs = _attention_sweep(task, ["longformer"], [1, 2], seed=3, window=2, steps=4, n_samples=8)
    torch.manual_seed(3 + 1)  # the second grid point
    model = gpt_for_task(task, depth=2, d_model=16, heads=2, attention=attn.LongformerAttention(2))
    hist = fit(model, task, TrainConfig(steps=4, lr=1e-3, warmup_steps=1, seed=3), device="cpu", progress=False)
    errors = per_k_error(model, task, n_samples=8, seed=3, device="cpu")
    got = {r["k"]: r for r in recs if r["depth"] == 2}
    assert {k: got[k]["error"] for k in got} == {int(k): float(e) for k, e in errors.items()}
    assert got[0]["final_loss"] == pytest.approx(sum(hist["loss"]) / 4)


def test_gpt_for_task_forwards_attention_settings():
    task = HopTask(seq_len=10, max_hops=2)
    m = gpt_for_task(task, depth=1, d_model=16, heads=2, attention=attn.LongformerAttention(1, 3))
    assert (m.config.attention.window, m.config.attention.global_every) == (1, 3)
    assert isinstance(m.blocks[0].attn, attn.LongformerSelfAttention)
