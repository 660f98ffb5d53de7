"""Tests of the Longformer reduction (Cor. 5.4) of chapters/efficient_attention.md, its cells tagged
``reduction-code`` run here on their own (the kernel one of Cor. 5.3 and both bit formulas are asserted in the
chapter), and of the attention sweeps."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _chapters import tagged_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds import communication as comm
from hoplib.lower_bounds import efficient_attention as attn
from hoplib.lower_bounds import pointer_chasing as pc
from hoplib.models import GPT, GPTConfig, gpt_for_task
from hoplib.report import ErrorRecord, smallest_depth
from hoplib.tasks import HopTask

_CELLS = tagged_cells("efficient_attention", "reduction-code")  # the names the chapter's reduction cells define
eff = SimpleNamespace(**_CELLS)


def _gpt(kind: str, n: int, vocab: int, seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=vocab, n_positions=n, depth=kw.pop("depth", 2), d_model=kw.pop("d_model", 16),
                    heads=kw.pop("heads", 2), attention=attn.attention_spec(kind, **kw))
    return GPT(cfg).eval()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 24), p=st.integers(1, 6), w=st.integers(0, 10), g=st.one_of(st.none(), st.integers(1, 7)),
       seed=st.integers(0, 1000))
def test_longformer_protocol_output_equals_forward_pass(n, p, w, g, seed):
    # its bits against the formula, and the kernel protocol: asserted in chapters/efficient_attention.md
    p = min(p, n)
    x = np.random.default_rng(seed).integers(0, 7, size=n)
    model = _gpt("longformer", n, 7, seed=seed, window=w, global_every=g)
    out, bits = eff.simulate_longformer_protocol(model, x, p)
    direct = model(torch.from_numpy(x)[None])[0, -1]
    assert (out - direct).abs().max().item() < 1e-5


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

    monkeypatch.setitem(_CELLS, "posted_positions", fewer)  # the name the protocol's cells look up
    out, _ = eff.simulate_longformer_protocol(model, x, 3)
    assert (out - direct).abs().max().item() > 1e-4


def test_protocols_validate_their_inputs():
    model = _gpt("performer", 10, 5, n_features=4)
    x = np.arange(5)
    with pytest.raises(ValueError, match="longformer"):
        eff.simulate_longformer_protocol(model, x, 2)
    model = _gpt("longformer", 10, 5, window=2)
    with pytest.raises(ValueError, match="num_players"):
        eff.simulate_longformer_protocol(model, x, 6)
    with pytest.raises(ValueError, match="eval"):
        eff.simulate_longformer_protocol(model.train(), x, 2)


def _attention_sweep(task, kinds, depths, seed=0, **attention):
    from hoplib.lower_bounds import families

    settings = {"steps": attention.pop("steps", 3), "warmup_steps": 1, "n_samples": attention.pop("n_samples", 4)}
    points = [{"kind": kind, "depth": d, "d_model": 16, "lr": 1e-3} for kind in kinds for d in depths]
    spec = {"n_features": None, "window": None, "global_every": None, **attention}

    def build(t):
        return families.attention_builder(t, 2, **spec)
    return families.sweep_points(task, points, settings, build, seed=seed, device="cpu")


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
