"""Tests of hoplib.lower_bounds.efficient_attention (FAVOR+ kernel attention, Longformer masks, Corollaries 5.3
and 5.4), of the running sums, features and masked softmax of chapters/efficient_attention.md (its cells tagged
``attention-code``, run here on their own) and of the pluggable attention of hoplib.models that they use."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from _chapters import tagged_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds import efficient_attention as attn
from hoplib.models import (
    ATTENTIONS,
    GPT,
    AttentionSpec,
    CausalSelfAttention,
    GPTConfig,
    GPTEnsemble,
    SoftmaxAttention,
    gpt_for_task,
    register_attention,
)
from hoplib.tasks import HopTask

eff = SimpleNamespace(**tagged_cells("efficient_attention", "attention-code"))  # the chapter's features, sums, softmax


def _qkv(seed: int = 0, heads: int = 2, t: int = 24, d: int = 16, scale: float = 0.5):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, t, d, generator=gen) for _ in range(3))
    return q * scale, k * scale, v


def _exact(q, k):
    t = q.shape[-2]
    return eff.masked_softmax_weights(q, k, torch.ones(t, t, dtype=torch.bool).tril())


# --------------------------------------------------------------------------- FAVOR+


def test_orthogonal_features_have_orthogonal_rows_in_each_block_and_gaussian_norms():
    w = attn.orthogonal_features(40, 16, seed=0)
    assert w.shape == (40, 16)
    block = w[:16] / w[:16].norm(dim=1, keepdim=True)
    assert torch.allclose(block @ block.T, torch.eye(16), atol=1e-5)
    assert torch.equal(w, attn.orthogonal_features(40, 16, seed=0))
    assert not torch.equal(w, attn.orthogonal_features(40, 16, seed=1))
    # Norms of N(0, I_16) vectors concentrate around sqrt(16) = 4.
    big = attn.orthogonal_features(4000, 16, seed=2)
    assert abs(big.norm(dim=1).pow(2).mean().item() - 16) < 0.5


def test_positive_features_estimate_the_softmax_kernel_without_bias():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 8, generator=gen) * 0.6
    w = attn.orthogonal_features(200_000, 8, seed=3)
    est = (eff.positive_features(x[None], w) * eff.positive_features(y[None], w)).sum().item()
    exact = math.exp(float(x @ y) / math.sqrt(8))
    assert abs(est - exact) / exact < 0.01


def test_favor_error_decreases_as_the_number_of_features_grows():
    q, k, _ = _qkv(seed=1)
    exact = _exact(q, k)
    errs = {}
    for m in (16, 256, 4096):
        errs[m] = sum((attn.kernel_attention_weights(q, k, attn.orthogonal_features(m, 16, seed=s)) - exact)
                      .abs().mean().item() for s in range(3)) / 3
    assert errs[16] > errs[256] > errs[4096]
    assert errs[4096] < 0.003
    assert errs[16] > 4 * errs[4096]


def test_prefix_sum_form_equals_quadratic_form():
    q, k, v = _qkv(seed=2, scale=1.0)
    w = attn.orthogonal_features(64, 16, seed=0)
    y, state = eff.kernel_attention_prefix(q, k, v, w)
    assert torch.allclose(y, attn.kernel_attention_weights(q, k, w) @ v, atol=1e-5)
    assert [s.shape for s in state] == [(1, 2, 64, 16), (1, 2, 64), (1, 2)]


def test_prefix_sum_form_continues_from_a_state_block_by_block():
    q, k, v = _qkv(seed=3)
    w = attn.orthogonal_features(32, 16, seed=1)
    full, _ = eff.kernel_attention_prefix(q, k, v, w)
    state, parts = None, []
    for lo, hi in ((0, 5), (5, 6), (6, 24)):
        y, state = eff.kernel_attention_prefix(q[..., lo:hi, :], k[..., lo:hi, :], v[..., lo:hi, :], w, state=state)
        parts.append(y)
    assert torch.allclose(torch.cat(parts, dim=-2), full, atol=1e-6)


def test_kernel_weights_are_causal_and_rows_sum_to_one():
    q, k, _ = _qkv(seed=4, scale=2.0)
    a = attn.kernel_attention_weights(q, k, attn.orthogonal_features(32, 16, seed=0))
    assert torch.all(a.triu(diagonal=1) == 0) and torch.all(a >= 0)
    assert torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)), atol=1e-5)


def test_stabiliser_avoids_overflow_and_leaves_the_weights_unchanged():
    q, k, v = _qkv(seed=5, scale=1.0)
    w = attn.orthogonal_features(32, 16, seed=0)
    a = attn.kernel_attention_weights(q, k, w)
    # Unstabilised reference in float64 (fine at this scale).
    fq = eff.positive_features(q.double(), w.double())
    fk = eff.positive_features(k.double(), w.double())
    raw = (fq @ fk.transpose(-2, -1)).tril()
    assert torch.allclose(a.double(), raw / raw.sum(-1, keepdim=True), atol=1e-5)
    # Inputs so large that exp under- or overflows in float32 without the stabiliser (0/0 or inf/inf).
    big_q, big_k = q * 12, k * 12
    raw32 = (eff.positive_features(big_q, w) @ eff.positive_features(big_k, w).transpose(-2, -1)).tril()
    assert not torch.isfinite(raw32 / raw32.sum(-1, keepdim=True)).all()
    y, _ = eff.kernel_attention_prefix(big_q, big_k, v, w)
    assert torch.isfinite(attn.kernel_attention_weights(big_q, big_k, w)).all() and torch.isfinite(y).all()


# --------------------------------------------------------------------------- Longformer masks


def test_longformer_mask_small_example():
    m = attn.longformer_mask(7, window=1, global_every=3).int().tolist()
    assert m == [[1, 0, 0, 0, 0, 0, 0],
                 [1, 1, 0, 0, 0, 0, 0],
                 [1, 1, 1, 0, 0, 0, 0],
                 [1, 0, 1, 1, 0, 0, 0],
                 [1, 0, 0, 1, 1, 0, 0],
                 [1, 0, 0, 1, 1, 1, 0],
                 [1, 0, 0, 1, 0, 1, 1]]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), w=st.integers(0, 35), g=st.one_of(st.none(), st.integers(1, 12)))
def test_longformer_mask_matches_the_definition(n, w, g):
    m = attn.longformer_mask(n, w, g)
    for i in range(n):
        for j in range(n):
            want = j <= i and (abs(i - j) <= w or (g is not None and j % g == 0))
            assert bool(m[i, j]) == want
    assert m.any(dim=1).all()  # every row has a key


# --------------------------------------------------------------------------- the hook in hoplib.models

TASK = HopTask(seq_len=20, max_hops=4)
KINDS = {"softmax": SoftmaxAttention(), "performer": attn.PerformerAttention(n_features=32),
         "longformer": attn.LongformerAttention(window=3, global_every=5)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_attention_kind_is_causal(kind):
    torch.manual_seed(0)
    model = gpt_for_task(TASK, depth=3, d_model=32, heads=4, attention=KINDS[kind]).eval()
    x, _ = TASK.sample(2, seed=2)
    y = x.clone()
    y[:, 10] = TASK.vocab.first_letter + (y[:, 10] - TASK.vocab.first_letter + 1) % TASK.alphabet_size
    a, b = model(x), model(y)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.parametrize("kind", list(KINDS))
def test_returned_attention_rows_sum_to_one_and_match_the_forward_pass(kind):
    torch.manual_seed(1)
    model = gpt_for_task(TASK, depth=2, d_model=32, heads=4, attention=KINDS[kind]).eval()
    x, _ = TASK.sample(3, seed=3)
    logits, atts = model(x, return_attention=True)
    for att in atts:
        assert att.shape == (3, 4, 19, 19)
        assert torch.allclose(att.sum(-1), torch.ones(3, 4, 19), atol=1e-5)
        assert torch.all(att.triu(diagonal=1) == 0)
        if kind == "longformer":
            assert torch.all(att[..., ~attn.longformer_mask(19, 3, 5)] == 0)
    assert torch.allclose(logits, model(x), atol=1e-5)


def test_longformer_with_window_at_least_n_equals_softmax_attention():
    torch.manual_seed(2)
    soft = gpt_for_task(TASK, depth=2, d_model=32, heads=4).eval()
    long = gpt_for_task(TASK, depth=2, d_model=32, heads=4, attention=attn.LongformerAttention(TASK.length)).eval()
    long.load_state_dict(soft.state_dict())
    x, _ = TASK.sample(4, seed=4)
    a, atts_a = soft(x, return_attention=True)
    b, atts_b = long(x, return_attention=True)
    assert torch.equal(a, b) and all(torch.equal(s, t) for s, t in zip(atts_a, atts_b, strict=True))
    assert torch.allclose(soft(x), long(x), atol=1e-6)


def test_performer_with_many_features_approaches_the_softmax_model():
    torch.manual_seed(3)
    soft = gpt_for_task(TASK, depth=2, d_model=32, heads=2).eval()
    x, _ = TASK.sample(4, seed=5)
    gaps = []
    for m in (8, 2048):
        perf = gpt_for_task(TASK, depth=2, d_model=32, heads=2, attention=attn.PerformerAttention(m)).eval()
        state = {**perf.state_dict(), **soft.state_dict()}  # softmax weights, performer's own features
        perf.load_state_dict(state)
        _, a = soft(x, return_attention=True)
        _, b = perf(x, return_attention=True)
        gaps.append(max((s - t).abs().mean().item() for s, t in zip(a, b, strict=True)))
    assert gaps[1] < gaps[0] / 4


def test_elu_map_weights_are_causal_rows_of_the_exact_elu_kernel():
    q, k, _ = _qkv(seed=7)
    w = attn.elu_attention_weights(q, k)
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    t = q.shape[-2]
    for i in (0, 5, t - 1):  # row i: phi(q_i) . phi(k_j) over j <= i, normalised
        raw = (phi(q[..., i, :]).unsqueeze(-2) * phi(k[..., : i + 1, :])).sum(-1)
        assert torch.allclose(w[..., i, : i + 1], raw / raw.sum(-1, keepdim=True), atol=1e-6)
    assert torch.all(w.triu(1) == 0) and torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]))


def test_elu_map_is_deterministic_and_has_no_random_features():
    models = []
    for seed in (0, 1):  # the same weights, built after different RNG states
        torch.manual_seed(seed)
        model = gpt_for_task(TASK, depth=2, d_model=32, heads=2, attention=attn.PerformerAttention(16, "elu"))
        models.append(model.eval())
    models[1].load_state_dict(models[0].state_dict())
    assert not [n for n in models[0].state_dict() if n.endswith("features")]
    x, _ = TASK.sample(3, seed=8)
    assert torch.equal(models[0](x), models[1](x)) and torch.equal(models[0](x), models[0](x))
    torch.manual_seed(0)
    favor = [gpt_for_task(TASK, depth=2, d_model=32, heads=2, attention=attn.PerformerAttention(16)).eval()
             for _ in range(2)]
    favor[1].load_state_dict({**favor[0].state_dict(), **{n: t for n, t in favor[1].state_dict().items()
                                                          if n.endswith("features")}})
    assert not torch.equal(favor[0](x), favor[1](x))  # FAVOR+: another draw, another model


def test_elu_map_needs_as_many_features_as_the_head_width():
    with pytest.raises(ValueError, match="d_head = 16"):
        gpt_for_task(TASK, depth=1, d_model=32, heads=2, attention=attn.PerformerAttention(8, "elu"))


def test_performer_features_are_saved():
    torch.manual_seed(4)
    model = gpt_for_task(TASK, depth=2, d_model=32, heads=4, attention=attn.PerformerAttention(8))
    names = [n for n in model.state_dict() if n.endswith("features")]
    assert names == ["blocks.0.attn.features", "blocks.1.attn.features"]
    copy = GPT(model.config)
    copy.load_state_dict(model.state_dict())
    x, _ = TASK.sample(2, seed=6)
    assert torch.equal(copy.eval()(x), model.eval()(x))


def test_every_attention_has_the_softmax_parameters_under_the_same_names():
    torch.manual_seed(5)
    names = {kind: {n: p.shape for n, p in gpt_for_task(TASK, depth=2, d_model=32, heads=4, attention=spec)
                    .named_parameters()} for kind, spec in KINDS.items()}
    assert names["performer"] == names["softmax"] == names["longformer"]
    layers = [gpt_for_task(TASK, depth=1, d_model=32, heads=4, attention=spec).blocks[0].attn
              for spec in KINDS.values()]
    assert [type(a) for a in layers] == [CausalSelfAttention, attn.PerformerSelfAttention,
                                         attn.LongformerSelfAttention]
    assert all(isinstance(a, CausalSelfAttention) for a in layers)


def test_softmax_config_and_state_dict_are_unchanged_by_the_attention_field():
    cfg = GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=16, heads=2)
    assert "attention" not in cfg.to_dict() and GPTConfig(**cfg.to_dict()) == cfg
    old = {"vocab_size": 10, "n_positions": 8, "depth": 1, "d_model": 16, "heads": 2, "dropout": 0.0,
           "head": "linear", "n_classes": None, "layer_norm_eps": 1e-5}
    assert GPTConfig(**old).attention == SoftmaxAttention() and GPTConfig(**old, attention="softmax") == cfg
    assert not [n for n in GPT(cfg).state_dict() if "features" in n]
    perf = GPTConfig(**old, attention=attn.PerformerAttention(n_features=4))
    assert perf.to_dict()["attention"] == {"name": "performer", "n_features": 4, "feature_map": "favor"}
    before = {**old, "attention": {"name": "performer", "n_features": 4}}  # stored before feature_map existed
    assert GPTConfig(**before) == perf
    assert GPTConfig(**perf.to_dict()) == perf and perf.attention.name == "performer"
    long = GPTConfig(**old, attention=attn.LongformerAttention(window=2))
    assert GPTConfig(**long.to_dict()) == long and long.attention.global_every is None


@pytest.mark.parametrize("kind, kwargs, error, match", [
    ("performer", {"n_features": 0}, ValueError, "n_features"),
    ("performer", {"n_features": 4, "window": 2}, ValueError, "window"),
    ("longformer", {"window": -1}, ValueError, "window"),
    ("longformer", {"window": 2, "global_every": 0}, ValueError, "global_every"),
    ("longformer", {"window": 2, "n_features": 3}, ValueError, "n_features"),
    ("softmax", {"n_features": 8}, ValueError, "n_features"),
    ("softmax", {"window": 8}, ValueError, "window"),
    ("softmax", {"feature_map": "elu"}, ValueError, "feature_map"),
    ("performer", {"n_features": 4, "feature_map": "relu"}, ValueError, "feature_map"),
])
def test_attention_settings_are_validated(kind, kwargs, error, match):
    with pytest.raises(error, match=match):
        attn.attention_spec(kind, **kwargs)


def test_attention_spec_builds_the_named_attention():
    assert attn.attention_spec("softmax") == SoftmaxAttention()
    assert attn.attention_spec("performer", n_features=3) == attn.PerformerAttention(3)
    assert attn.attention_spec("longformer", window=2, global_every=4) == attn.LongformerAttention(2, 4)
    assert {ATTENTIONS[k] for k in attn.KINDS} == {SoftmaxAttention, attn.PerformerAttention,
                                                   attn.LongformerAttention}


@pytest.mark.parametrize("attention, error, match", [
    ("performer", TypeError, "n_features"),
    ("sparse", ValueError, "registered"),
    ({"name": "longformer", "window": -1}, ValueError, "window"),
    (3, ValueError, "AttentionSpec"),
])
def test_config_rejects_unknown_or_incomplete_attention(attention, error, match):
    with pytest.raises(error, match=match):
        GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=16, heads=2, attention=attention)


def test_a_new_attention_plugs_in_without_touching_the_model():
    class UniformSelfAttention(CausalSelfAttention):  # every query averages its prefix
        def attend(self, q, k, v, need_weights=False):
            t = q.shape[-2]
            att = torch.ones(t, t).tril()
            att = (att / att.sum(-1, keepdim=True)).expand(q.shape[0], q.shape[1], t, t)
            return att @ v, (att if need_weights else None)

    @register_attention
    class Uniform(AttentionSpec):
        name = "uniform-test"

        def build(self, config):
            return UniformSelfAttention(config)

    try:
        model = gpt_for_task(TASK, depth=1, d_model=16, heads=2, attention=Uniform()).eval()
        x, _ = TASK.sample(2, seed=8)
        _, atts = model(x, return_attention=True)
        assert torch.allclose(atts[0][0, 0, 3], torch.tensor([0.25] * 4 + [0.0] * 15))
        assert GPTConfig(**model.config.to_dict()).attention == Uniform()
        with pytest.raises(ValueError, match="already registered"):
            register_attention(type("Other", (AttentionSpec,), {"name": "uniform-test"}))
    finally:
        ATTENTIONS.pop("uniform-test", None)


def test_ensemble_refuses_efficient_attention():
    models = [gpt_for_task(TASK, depth=1, d_model=16, heads=2, attention=attn.LongformerAttention(2))
              for _ in range(2)]
    with pytest.raises(ValueError, match="softmax"):
        GPTEnsemble(models)


@pytest.mark.parametrize("kind", ["performer", "longformer"])
def test_a_sweep_point_with_efficient_attention_checks_its_ids_once_not_at_every_step(kind, monkeypatch):
    # a check is a device sync; training runs GPT.forward_unchecked (hoplib.train), like softmax GPTs
    import functools

    import hoplib.models
    import hoplib.train
    from hoplib.lower_bounds import families

    calls = []
    for module in (hoplib.models, hoplib.train):
        monkeypatch.setattr(module, "check_ids", lambda *a, check=module.check_ids: calls.append(1) or check(*a))
    build = functools.partial(families.attention_builder, heads=2, n_features=8, window=3, global_every=4)
    point = {"kind": kind, "d_model": 16, "depth": 1, "lr": 1e-3}

    def checks(steps: int) -> int:
        calls.clear()
        settings = {"steps": steps, "warmup_steps": 1, "batch_size": 8, "n_samples": 8}
        families.measure_point(0, point, TASK, build, settings)
        return len(calls)

    assert checks(30) == checks(10) > 0
