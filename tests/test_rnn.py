"""Tests for hoplib.lower_bounds.rnn: the paper's RNN model (Corollary 5.2), trained kinds, and the hand-built
exact hop_k RNNs of chapters/rnn.md (its cells tagged ``rnn-code``, run here on their own)."""

import math

import pytest
import torch
import torch.nn.functional as F
from _chapters import tagged_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds import rnn
from hoplib.models import count_parameters
from hoplib.tasks import HopTask, hop

_CELLS = tagged_cells("rnn", "rnn-code")  # the chapter's hand-built RNNs and Corollary 5.2's reduction
hop_rnn, hop_classes = _CELLS["hop_rnn"], _CELLS["hop_classes"]


# --------------------------------------------------------------------------- bit encodings
def test_float_states_roundtrip_bitwise_exactly_including_special_values():
    specials = torch.tensor([[0.0, -0.0, float("inf"), -float("inf"), 1e-40] * 4] * 3)
    t = torch.cat([torch.randn(3, 20), specials], 1)
    layer = rnn.TorchRNNLayer(40)
    bits = layer.encode_state((t,))
    assert bits.shape == (3, 40 * 32) == (3, layer.state_bits())
    (back,) = layer.decode_state(bits)
    assert torch.equal(back.view(torch.int32), t.view(torch.int32))


@given(st.lists(st.integers(0, 2**13 - 1), min_size=1, max_size=30))
def test_uint_bits_roundtrip(values):
    v = torch.tensor([values])
    assert torch.equal(rnn.bits_to_uint(rnn.uint_to_bits(v, 13), 13), v)


def test_uint_to_bits_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError, match="width"):
        rnn.uint_to_bits(torch.tensor([[8]]), 3)


# --------------------------------------------------------------------------- hand-built models
@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 8), a=st.integers(1, 9), n=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_hop_rnn_is_exact_on_random_inputs_with_repeats(k, a, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, a, (6, n), generator=g)
    model = hop_rnn(k, a)
    assert model.n_layers == k
    logits = model(x)
    assert logits.shape == (6, n, a + 1)
    assert torch.equal(logits.argmax(-1), hop_classes(x, k, a))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 16])
def test_hop_rnn_is_exact_on_hop_task_letters_without_repeats(k):
    task = HopTask(seq_len=100, alphabet_size=4, max_hops=16)
    x = task.letters(32, torch.Generator().manual_seed(k), torch.device("cpu"))
    out = hop_rnn(k, 4)(x).argmax(-1)
    expected = hop(x, k)
    assert torch.equal(out, torch.where(expected < 0, torch.full_like(expected, 4), expected))


def test_hop_rnn_with_one_layer_too_few_is_wrong_somewhere():
    x = torch.randint(0, 4, (16, 50), generator=torch.Generator().manual_seed(0))
    assert not torch.equal(hop_rnn(2, 4)(x).argmax(-1), hop_classes(x, 3, 4))


@pytest.mark.parametrize("a", [1, 2, 3, 4, 7, 8, 100])
def test_hop_rnn_state_is_alphabet_plus_one_symbols_of_log_bits(a):
    model = hop_rnn(3, a)
    assert model.state_bits() == [(a + 1) * max(1, math.ceil(math.log2(a + 1)))] * 3


def test_hop_rnn_layers_run_blockwise_and_their_states_roundtrip_through_bits():
    model = hop_rnn(3, 5)
    x = torch.randint(0, 5, (3, 30), generator=torch.Generator().manual_seed(2))
    z = model.embed(x)
    for layer in model.layers:
        full, state = layer(z)
        left, mid = layer(z[:, :11])
        mid = layer.decode_state(layer.encode_state(mid))
        right, state2 = layer(z[:, 11:], mid)
        assert torch.equal(torch.cat([left, right], 1), full)
        assert all(torch.equal(s, s2) for s, s2 in zip(state, state2, strict=True))
        assert layer.encode_state(state).shape == (3, layer.state_bits())
        z = full


def test_hand_built_models_reject_ids_outside_the_alphabet():
    with pytest.raises(ValueError, match="ids"):
        hop_rnn(2, 3)(torch.tensor([[0, 3]]))


# --------------------------------------------------------------------------- trainable kinds
def _mamba_sequential(layer: rnn.MambaLayer, z: torch.Tensor) -> torch.Tensor:
    """The Mamba layer's recurrence written as a plain loop over positions (reference for the matrix form)."""
    b, t, _ = z.shape
    hn, p, s = layer.n_heads, layer.d_inner // layer.n_heads, layer.d_state
    u = layer.in_proj(layer.norm(z))
    g, xbc, dt = torch.split(u, [layer.d_inner, layer.conv_dim, hn], dim=-1)
    padded = F.pad(xbc.transpose(1, 2), (layer.d_conv - 1, 0))
    xbc = F.silu(F.conv1d(padded, layer.conv.weight, layer.conv.bias, groups=layer.conv_dim)).transpose(1, 2)
    v, bm, cm = torch.split(xbc, [layer.d_inner, s, s], dim=-1)
    v = v.reshape(b, t, hn, p)
    step = F.softplus(dt + layer.dt_bias)
    a = -torch.exp(layer.A_log)
    state = torch.zeros(b, hn, p, s)
    ys = []
    for i in range(t):
        decay = torch.exp(step[:, i] * a)[:, :, None, None]
        state = decay * state + (step[:, i, :, None] * v[:, i])[..., None] * bm[:, i, None, None, :]
        ys.append((state @ cm[:, i, None, :, None]).squeeze(-1) + layer.D[None, :, None] * v[:, i])
    y = torch.stack(ys, 1).reshape(b, t, layer.d_inner)
    return layer.mlp(z + layer.out_proj(layer.out_norm(y * F.silu(g))))


def test_mamba_layer_matrix_form_equals_its_sequential_recurrence():
    torch.manual_seed(0)
    layer = rnn.MambaLayer(16, d_state=8, n_heads=4)
    z = torch.randn(3, 25, 16)
    out, _ = layer(z)
    torch.testing.assert_close(out, _mamba_sequential(layer, z), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", rnn.KINDS)
def test_trainable_layers_pass_their_state_exactly_between_blocks(kind):
    torch.manual_seed(1)
    model = rnn.recurrent_model(kind, 10, d_model=16, n_layers=1)
    layer = model.layers[0]
    z = model.embed(torch.randint(0, 10, (2, 30)))
    full, state = layer(z)
    left, mid = layer(z[:, :13])
    decoded = layer.decode_state(layer.encode_state(mid))
    assert all(torch.equal(a, b) for a, b in zip(mid, decoded, strict=True))
    right, state2 = layer(z[:, 13:], decoded)
    torch.testing.assert_close(torch.cat([left, right], 1), full, atol=1e-5, rtol=1e-5)
    for a, b in zip(state, state2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert layer.encode_state(state).shape == (2, layer.state_bits())


@pytest.mark.parametrize("kind,bits", [("gru", 16 * 32), ("lstm", 2 * 16 * 32)])
def test_gru_and_lstm_state_bits(kind, bits):
    assert rnn.recurrent_model(kind, 5, d_model=16, n_layers=3).state_bits() == [bits] * 3


@pytest.mark.parametrize("kind", rnn.KINDS)
def test_recurrent_model_is_causal_and_has_the_training_interface(kind):
    torch.manual_seed(0)
    task = HopTask(seq_len=20, alphabet_size=4, max_hops=4)
    model = rnn.recurrent_model(kind, task.vocab_size, d_model=16, n_layers=2)
    x, _ = task.sample(3, seed=0)
    logits = model(x)
    assert logits.shape == (3, task.length, task.vocab_size)
    x2 = x.clone()
    x2[:, 10:] = (x2[:, 10:] + 1) % task.vocab_size
    torch.testing.assert_close(model(x2)[:, :10], logits[:, :10])  # no position sees the future
    assert not torch.allclose(model(x2)[:, 10:], logits[:, 10:])


@pytest.mark.parametrize("kind", rnn.KINDS)
def test_recurrent_model_fits_a_fixed_batch(kind):
    torch.manual_seed(0)
    task = HopTask(seq_len=20, alphabet_size=4, max_hops=2)
    model = rnn.recurrent_model(kind, task.vocab_size, d_model=32, n_layers=1)
    x, y = task.sample(8, seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_mamba_layer_needs_heads_that_divide_its_width():
    with pytest.raises(ValueError, match="n_heads"):
        rnn.MambaLayer(10, n_heads=3)


def test_count_parameters_counts_trainable_weights():
    m = rnn.recurrent_model("gru", 10, d_model=8, n_layers=1, mlp_ratio=0)
    gru = 3 * (8 * 8 + 8 * 8 + 2 * 8)
    assert count_parameters(m) == 10 * 8 + 2 * 8 + gru + 2 * 8 + 8 * 10 + 10


# --------------------------------------------------------------------------- the chapter's sweep
def _sweep(task, kinds, depths, seed=0, workers=1):
    from hoplib.lower_bounds import families

    settings = {"kinds": kinds, "depths": depths, "widths": [8], "lrs": [1e-3], "steps": 3,
                "warmup_steps": 1, "n_samples": 4}
    return families.sweep_points(task, families.grid_points(settings), settings, families.recurrent_builder, seed=seed,
                                 device="cpu", workers=workers)


def test_depth_sweep_returns_one_record_per_model_and_k():
    task = HopTask(seq_len=12, alphabet_size=4, max_hops=2)
    recs = _sweep(task, ["gru", "transformer"], [1, 2])
    assert len(recs) == 2 * 2 * 3
    assert {(r["kind"], r["depth"]) for r in recs} == {("gru", 1), ("gru", 2), ("transformer", 1), ("transformer", 2)}
    assert all(0.0 <= r["error"] <= 1.0 for r in recs)
    assert all(r["state_bits"] == (8 * 32 if r["kind"] == "gru" else 0) for r in recs)
    assert all(set(r) == {"kind", "d_model", "depth", "lr", "state_bits", "params", "k", "error", "final_loss",
                          "train_time_s"} for r in recs)


def test_depth_sweep_is_reproducible_and_records_feed_the_depth_report():
    from hoplib.report import ErrorRecord, error_table

    task = HopTask(seq_len=10, alphabet_size=4, max_hops=1)
    runs = [_sweep(task, ["lstm"], [1, 2], seed=1) for _ in range(2)]
    strip = [[{k: v for k, v in r.items() if k != "train_time_s"} for r in run] for run in runs]
    assert strip[0] == strip[1]
    records = [ErrorRecord(r["kind"], r["depth"], r["k"], r["error"], r["d_model"]) for r in runs[0]]
    table = error_table(records, family="lstm")
    assert sorted(table) == [1, 2] and all(sorted(row) == [0, 1] for row in table.values())
