"""Tests of hoplib.models: the GPT-2-style model, the authors' head (the model of chapters/training.md, tagged
``training-code``), attention maps and the ensemble."""

from __future__ import annotations

import pytest
import torch
from _chapters import tagged_cells

from hoplib.models import GPT, GPTConfig, GPTEnsemble, count_parameters, gpt_for_task
from hoplib.tasks import HopTask

authors_gpt = tagged_cells("training", "training-code")["authors_gpt"]  # chapters/training.md's

# Table 3 of the paper: parameters for L = 2..6.
TABLE3 = {(128, 4): [413_440, 611_712, 809_984, 1_008_256, 1_206_528],
          (256, 8): [1_613_312, 2_403_072, 3_192_832, 3_982_592, 4_772_352]}


@pytest.mark.parametrize("width", [(128, 4), (256, 8)])
def test_authors_model_matches_table3_parameter_counts(width):
    task = HopTask()
    m, h = width
    got = [count_parameters(authors_gpt(task, depth=depth, d_model=m, heads=h)) for depth in range(2, 7)]
    assert got == TABLE3[width]


def test_forward_shape_and_classes_follow_the_sequence_model_interface():
    task = HopTask(seq_len=12, max_hops=3)
    x, _ = task.sample(5, seed=0)
    lin = gpt_for_task(task, depth=2, d_model=32, heads=4)
    assert lin(x).shape == (5, 11, task.vocab_size)
    ln = gpt_for_task(task, depth=2, d_model=32, heads=4, head="layernorm")
    assert ln(x).shape == (5, 11, 32) and ln.num_classes == 32 >= task.vocab_size


def test_layernorm_head_output_is_final_layernorm_output():
    task = HopTask(seq_len=12, max_hops=3)
    model = gpt_for_task(task, depth=1, d_model=16, heads=2, head="layernorm").eval()
    x, _ = task.sample(3, seed=1)
    captured = {}
    model.ln_f.register_forward_hook(lambda mod, inp, out: captured.setdefault("out", out))
    logits = model(x)
    assert model.unembed is None and torch.equal(logits, captured["out"])


def test_model_is_causal():
    task = HopTask(seq_len=20, max_hops=4)
    model = gpt_for_task(task, depth=3, d_model=32, heads=4).eval()
    x, _ = task.sample(2, seed=2)
    y = x.clone()
    y[:, 10] = task.vocab.first_letter + (y[:, 10] - task.vocab.first_letter + 1) % task.alphabet_size
    a, b = model(x), model(y)
    assert torch.equal(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_returned_attention_is_causal_stochastic_and_consistent_with_sdpa():
    task = HopTask(seq_len=16, max_hops=2)
    model = gpt_for_task(task, depth=2, d_model=32, heads=4).eval()
    x, _ = task.sample(3, seed=3)
    logits, atts = model(x, return_attention=True)
    assert len(atts) == 2
    for att in atts:
        assert att.shape == (3, 4, 15, 15)
        assert torch.allclose(att.sum(-1), torch.ones(3, 4, 15), atol=1e-5)
        assert torch.all(att.triu(diagonal=1) == 0)
    assert torch.allclose(logits, model(x), atol=1e-5)


def test_dropout_is_off_in_eval_mode_and_on_in_train_mode():
    task = HopTask(seq_len=16, max_hops=2)
    model = gpt_for_task(task, depth=2, d_model=32, heads=4, dropout=0.5)
    x, _ = task.sample(2, seed=4)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    assert not torch.equal(model(x), model(x))


@pytest.mark.parametrize("head", ["linear", "layernorm"])
def test_ensemble_forward_equals_each_model(head):
    task = HopTask(seq_len=14, max_hops=3)
    models = [gpt_for_task(task, depth=2, d_model=32, heads=4, head=head) for _ in range(3)]
    ens = GPTEnsemble(models).eval()
    x, _ = task.sample(12, seed=5)
    x = x.view(3, 4, -1)
    got = ens(x)
    for e, model in enumerate(models):
        assert torch.allclose(got[e], model.eval()(x[e]), atol=1e-5)
    back = ens.unstack()
    for a, b in zip(back, models, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_ensemble_rejects_mixed_architectures_and_bad_shapes():
    task = HopTask(seq_len=14, max_hops=3)
    a = gpt_for_task(task, depth=2, d_model=32, heads=4)
    b = gpt_for_task(task, depth=3, d_model=32, heads=4)
    with pytest.raises(ValueError, match="models\\[1\\]"):
        GPTEnsemble([a, b])
    with pytest.raises(ValueError, match="shape"):
        GPTEnsemble([a, a])(torch.zeros(3, 2, 5, dtype=torch.long))


def test_config_validation_names_the_argument():
    with pytest.raises(ValueError, match="d_model must be a multiple of heads"):
        GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=30, heads=4)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=32, heads=4, dropout=1.5)
    with pytest.raises(ValueError, match="head"):
        GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=32, heads=4, head="tied")
    with pytest.raises(ValueError, match="d_model must be >= vocab_size"):
        GPTConfig(vocab_size=40, n_positions=8, depth=1, d_model=32, heads=4, head="layernorm")
    with pytest.raises(TypeError, match="depth"):
        GPTConfig(vocab_size=10, n_positions=8, depth=2.0, d_model=32, heads=4)
    model = GPT(GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=32, heads=4))
    with pytest.raises(ValueError, match="n_positions"):
        model(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize("bad", [-1, 10, 99])
def test_gpt_rejects_token_ids_outside_its_vocabulary_with_a_clear_error(bad):
    model = GPT(GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=16, heads=2))
    ids = torch.tensor([[0, 3, bad, 9]])
    with pytest.raises(ValueError, match=r"ids must be token ids in \[0, 9\].*got values in"):
        model(ids)
    ens = GPTEnsemble([model, GPT(model.config)])
    with pytest.raises(ValueError, match=r"ids must be token ids in \[0, 9\]"):
        ens(ids.expand(2, 1, 4))
    assert model(torch.tensor([[0, 9]])).shape == (1, 2, 10)  # the two ends of the range are accepted


def test_gpt_accepts_int32_ids():
    model = GPT(GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=16, heads=2))
    assert model(torch.zeros(1, 3, dtype=torch.int32)).shape == (1, 3, 10)


@pytest.mark.parametrize("field, value", [
    ("layer_norm_eps", -1.0), ("layer_norm_eps", 0.0), ("layer_norm_eps", float("nan")),
    ("layer_norm_eps", float("inf")), ("dropout", float("nan")), ("dropout", -0.1), ("dropout", float("inf")),
])
def test_config_rejects_bad_float_settings_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=16, heads=2, **{field: value})
    assert GPTConfig(vocab_size=10, n_positions=8, depth=1, d_model=16, heads=2, layer_norm_eps=1e-6,
                     dropout=0).layer_norm_eps == 1e-6
