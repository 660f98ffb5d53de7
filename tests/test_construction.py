"""Tests for hoplib.construction: the hand-built transformer of Theorem 4.2 computes hop_k exactly."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.construction import (
    count_errors,
    hop_program,
    hop_transformer,
    multi_hop_transformer,
    program_hops,
)
from hoplib.construction.layout import ACC, KEEP, PTR
from hoplib.construction.model import lemma_a2_inverse_temperature, min_exact_inverse_temperature
from hoplib.report import depth_ceil, depth_floor
from hoplib.tasks import HopTask, find, find_k, hop

CPU = torch.device("cpu")


def no_repeat_letters(batch: int, n: int, alphabet: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return HopTask(seq_len=n + 2, alphabet_size=alphabet).letters(batch, gen, CPU)


def random_letters(batch: int, n: int, alphabet: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, alphabet, (batch, n), generator=gen)


# --------------------------------------------------------------------------- depth and programs
def test_depth_formulas_agree_exactly_on_powers_of_two():
    for k in range(1, 600):
        assert depth_ceil(k) == math.ceil(math.log2(k)) + 2
        assert depth_floor(k) == math.floor(math.log2(k)) + 2
        assert (depth_ceil(k) == depth_floor(k)) == (k & (k - 1) == 0)
    assert depth_ceil(0) == depth_floor(0) == 0


def test_hop_program_reaches_exactly_k_hops():
    for k in range(2, 600):
        prog = hop_program(k)
        assert len(prog) == depth_ceil(k) - 2
        assert program_hops(prog) == k
        for extra in (1, 3):  # padded programs of the multi-task model
            padded = hop_program(k, depth_ceil(k) + extra)
            assert len(padded) == depth_ceil(k) + extra - 2 and program_hops(padded) == k
    assert program_hops(hop_program(1, 3)) == 1 and program_hops(hop_program(0, 4)) == 0
    assert set(hop_program(11)) <= {KEEP, ACC, PTR}


def test_hop_program_rejects_too_few_layers():  # a short program would silently reach fewer hops
    with pytest.raises(AssertionError, match="n_layers"):
        hop_program(5, 4)


# --------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("k", range(1, 17))
def test_hop_transformer_exact_on_no_repeat_data_n100(k):
    x = no_repeat_letters(300, 100, 4, seed=k)
    model = hop_transformer(k, 100, 4)
    assert count_errors(model, x) == 0


@pytest.mark.slow
@pytest.mark.parametrize("k", range(1, 17))
def test_hop_transformer_exact_on_10000_no_repeat_sequences(k):
    x = no_repeat_letters(10_000, 100, 4, seed=1000 + k)
    assert count_errors(hop_transformer(k, 100, 4), x, batch_size=2000) == 0


def test_hop_0_is_the_identity_with_no_layers():
    model = hop_transformer(0, 20, 3)
    x = random_letters(5, 20, 3, seed=0)
    assert model.n_layers == 0
    assert torch.equal(model.predict(x), x)


@settings(max_examples=60, deadline=None)
@given(k=st.integers(0, 9), alphabet=st.integers(1, 6),
       seq=st.lists(st.integers(0, 5), min_size=1, max_size=14), extra=st.integers(0, 5))
def test_hop_transformer_exact_on_arbitrary_short_sequences_with_repeats(k, alphabet, seq, extra):
    x = torch.tensor([[v % alphabet for v in seq]])
    model = hop_transformer(k, len(seq) + extra, alphabet)
    assert torch.equal(model.predict(x), hop(x, k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("alphabet", [2, 7, 26])
def test_hop_transformer_exact_with_repeats_and_large_alphabets(dtype, alphabet):
    x = random_letters(40, 250, alphabet, seed=alphabet)
    for k in (1, 3, 6, 16):
        assert count_errors(hop_transformer(k, 250, alphabet, dtype=dtype), x) == 0


@pytest.mark.slow
@pytest.mark.parametrize("alphabet", [2, 4, 26])
def test_hop_transformer_exact_at_n1000(alphabet):
    x = torch.cat([random_letters(6, 1000, alphabet, seed=7), no_repeat_letters(6, 1000, alphabet, seed=8)])
    for k in (1, 2, 5, 12, 16, 33):
        assert count_errors(hop_transformer(k, 1000, alphabet), x, batch_size=4) == 0


def test_shorter_inputs_than_seq_len_are_exact():
    model = hop_transformer(6, 500, 4)
    x = no_repeat_letters(30, 77, 4, seed=3)
    assert count_errors(model, x) == 0


# --------------------------------------------------------------------------- shape of the model
def test_width_is_constant_and_depth_is_ceil_log2_k_plus_2():
    widths = set()
    for k in (1, 2, 3, 5, 8, 16, 100):
        for n in (10, 100, 2000):
            for a in (2, 26):
                model = hop_transformer(k, n, a)
                widths.add(model.d_model)
                assert model.n_layers == depth_ceil(k) == len(model.heads)
                assert model.pos_emb.shape[1] == model.d_model
    assert len(widths) == 1


def test_scores_shape_and_no_answer_class():
    model = hop_transformer(3, 50, 5)
    x = random_letters(4, 50, 5, seed=1)
    scores = model(x)
    assert scores.shape == (4, 50, 6)
    expect = hop(x, 3)
    pred = scores.argmax(-1)
    assert torch.equal(pred == 5, expect == -1)


def test_softmax_temperature_matters():
    """At a tiny inverse temperature attention averages and the model fails; Lemma A.2's value is exact."""
    x = no_repeat_letters(50, 100, 4, seed=5)
    model = hop_transformer(4, 100, 4, inverse_temperature=0.05)
    assert count_errors(model, x) > 0
    model.inverse_temperature = lemma_a2_inverse_temperature(100)
    assert count_errors(model, x) == 0


def test_min_exact_inverse_temperature_is_below_lemma_a2_and_is_a_threshold():
    x = no_repeat_letters(40, 60, 4, seed=11)
    model = hop_transformer(4, 60, 4)
    c = min_exact_inverse_temperature(model, x, rel_tol=0.05)
    assert 0.5 < c < lemma_a2_inverse_temperature(60)
    assert model.inverse_temperature == lemma_a2_inverse_temperature(60)  # restored
    model.inverse_temperature = c
    assert count_errors(model, x) == 0
    model.inverse_temperature = c / 1.2
    assert count_errors(model, x) > 0


# --------------------------------------------------------------------------- inspection
def test_trace_attention_is_causal_and_heads_point_at_find_powers():
    k = 8
    x = no_repeat_letters(3, 60, 4, seed=2)
    model = hop_transformer(k, 60, 4)
    tr = model.trace(x)
    assert len(tr.residuals) == model.n_layers + 1 and len(tr.attentions) == model.n_layers
    f1 = find(x)
    for ell, attn in enumerate(tr.attentions, start=1):
        assert attn.shape == (3, 61, 61)
        assert torch.allclose(attn.sum(-1), torch.ones(3, 61, dtype=attn.dtype))
        assert float(attn.triu(1).abs().max()) == 0.0
        top = attn.argmax(-1)[:, 1:] - 1  # letter index attended to, -1 = start token
        if ell == 1:
            expect = torch.arange(60).expand(3, 60) - 1
        elif ell == 2:
            expect = f1
        else:
            expect = find_k(x, 2 ** (ell - 3))
        assert torch.equal(top, expect), f"layer {ell}"
    last = model.decode(tr.residuals[-1][:, 1:])
    assert torch.equal(last["acc"], find_k(x, k))
    assert torch.equal(last["acc_letter"], hop(x, k))
    assert torch.equal(model.decode(tr.residuals[2][:, 1:])["ptr"], f1)
    assert torch.equal(tr.logits[:, 1:], model(x))


def test_named_subspaces_tile_the_residual_stream():
    model = hop_transformer(5, 30, 4)
    covered = sorted((s.start, s.stop) for s in model.subspaces.values())
    assert covered[0][0] == 0 and covered[-1][1] == model.d_model
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:], strict=False))


# --------------------------------------------------------------------------- multi-task model
def test_multi_hop_transformer_exact_on_hoptask_for_every_k():
    model = multi_hop_transformer(max_hops=16, seq_len=100, alphabet_size=4)
    task = model.task
    assert model.n_layers == 6
    for k in range(17):
        inputs, targets = task.sample(60, k=k, seed=100 + k)
        logits = model(inputs)
        assert logits.shape == (60, 99, task.vocab_size)
        assert int((logits.argmax(-1) != targets).sum()) == 0, f"k={k}"


@pytest.mark.slow
def test_multi_hop_transformer_exact_on_mixed_batches():
    model = multi_hop_transformer()
    inputs, targets = model.task.sample(4000, seed=123)
    pred = torch.cat([model(inputs[i:i + 1000]).argmax(-1) for i in range(0, 4000, 1000)])
    assert int((pred != targets).sum()) == 0


@pytest.mark.parametrize("max_hops,alphabet", [(1, 2), (5, 3), (8, 26)])
def test_multi_hop_transformer_other_sizes(max_hops, alphabet):
    model = multi_hop_transformer(max_hops=max_hops, seq_len=64, alphabet_size=alphabet)
    inputs, targets = model.task.sample(200, seed=max_hops)
    assert int((model(inputs).argmax(-1) != targets).sum()) == 0


# --------------------------------------------------------------------------- bad input
def test_inputs_that_would_be_read_as_other_tokens_raise():
    model = hop_transformer(2, 10, 4)
    with pytest.raises(ValueError, match="seq_len=10"):
        model(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"letters in \[0, 3\]"):
        model(torch.tensor([[0, 4]]))
    with pytest.raises(ValueError, match=r"letters in \[0, 3\]"):
        model(torch.tensor([[0, -1]]))
    multi = multi_hop_transformer(max_hops=4, seq_len=20)
    with pytest.raises(ValueError, match="k-tokens"):
        multi(torch.tensor([[5, 6, 7]]))
    with pytest.raises(ValueError, match="letter ids"):
        multi(torch.tensor([[2, 6, 1]]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_runs_on_cuda():
    model = hop_transformer(5, 100, 4).to("cuda")
    x = no_repeat_letters(500, 100, 4, seed=0).to("cuda")
    assert count_errors(model, x) == 0


# --------------------------------------------------------------------------- Lemma D.2 as written, precision study
def test_the_induction_head_is_find():
    x = no_repeat_letters(200, 40, 4, seed=9)
    model = hop_transformer(1, 40, 4)
    fixed = model.decode(model.trace(x).residuals[2][:, 1:])["ptr"]
    assert torch.equal(fixed, find(x))


def test_precision_study_small():
    from hoplib.construction import precision_study

    recs = precision_study([16, 48], k=2, total_letters=800)
    assert len(recs) == 4
    for r in recs:
        assert r["errors_at_lemma_a2"] == 0
        assert r["c_min"] is not None and r["c_min"] < r["c_lemma_a2"]


# --------------------------------------------------------------------------- inverse temperature
@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf"), -float("inf")])
def test_setting_a_nan_or_non_positive_inverse_temperature_raises(bad):
    model = hop_transformer(3, 20, 4)
    before = model.inverse_temperature
    with pytest.raises(ValueError, match="inverse_temperature"):
        model.inverse_temperature = bad
    assert model.inverse_temperature == before  # the model is left usable
    x = no_repeat_letters(5, 20, 4, seed=0)
    assert count_errors(model, x) == 0


# --------------------------------------------------------------------------- layout and layer builders
def test_layout_parts_name_pieces_of_their_subspace():
    from hoplib.construction.layout import REGISTERS, hop_layout

    lay = hop_layout(n_ops=3, multi=True)
    fetch = lay["fetch"]
    parts = [lay[f"fetch.{r}"] for r in REGISTERS]
    assert parts[0].start == fetch.start and parts[-1].stop == fetch.stop
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:], strict=False))
    assert [lay.size(f"fetch.{r}") for r in REGISTERS] == [lay.size(r) for r in REGISTERS]
    assert lay.coord("letter.bot") == lay["letter"].stop - 1
    assert lay.coord("gates.ptr5") == lay["gates"].stop - 1
    assert "fetch.acc" in lay and "fetch.nope" not in lay
    with pytest.raises(KeyError, match="nope"):
        lay["nope"]
    with pytest.raises(AssertionError, match="coordinates"):
        lay.coord("pos")


def _written(head) -> set[int]:
    return set(torch.nonzero(head.wo.abs().sum(0)).flatten().tolist())


def _coords(model, *names) -> set[int]:
    return {i for n in names for i in range(model.subspaces[n].start, model.subspaces[n].stop)}


def test_each_layer_writes_only_its_named_subspaces():
    model = hop_transformer(6, 40, 4)
    heads, mlps = model.heads, model.mlps
    assert _written(heads[0]) == _coords(model, "prev_letter")
    assert _written(heads[1]) == _coords(model, "ptr", "ptr_letter")
    for ell in range(3, model.n_layers + 1):
        assert _written(heads[ell - 1]) == _coords(model, "fetch")
        mlp_out = set(torch.nonzero(mlps[ell - 1].w2.abs().sum(0)).flatten().tolist())
        assert mlp_out <= _coords(model, "ptr", "ptr_letter", "acc", "acc_letter", "fetch")
    assert model.head_names[2] == "lookUp(P): P = find^2" and model.head_names[4] == "lookUp(P): P = find^8"


def test_a_single_layer_builder_can_be_run_on_its_own():
    from hoplib.construction.layers import Spec, doubling_layer
    from hoplib.construction.layout import hop_layout

    spec = Spec(n_layers=4, programs={3: ["acc", "acc"]}, circle=21, alphabet_size=4)
    lay = hop_layout(spec.n_layers - 2, multi=False)
    head, mlp = doubling_layer(spec, lay, 3, torch.float64)
    x = torch.zeros(1, 4, lay.width, dtype=torch.float64)
    x[..., lay["fetch"]] = 0.5  # scratch left over: the MLP clears it
    assert torch.allclose((x + mlp(x))[..., lay["fetch"]], torch.zeros(1, 4, 10, dtype=torch.float64))
    assert head.wq.shape == (lay.width, 2) and head.name == "lookUp(P): P = find^2"


def test_weight_builders_reject_mismatched_subspaces():
    from hoplib.construction.blocks import HeadWeights, MLPWeights
    from hoplib.construction.layout import hop_layout

    lay = hop_layout(2, multi=False)
    hw = HeadWeights(lay, n_scores=2)
    with pytest.raises(AssertionError, match="sizes differ"):
        hw.score("pos", "letter")
    with pytest.raises(AssertionError, match="cannot copy"):
        hw.copy("letter", "prev_letter")
    with pytest.raises(AssertionError, match="sizes differ"):
        MLPWeights(lay).replace("acc", "fetch.acc_letter")


# --------------------------------------------------------------------------- the stored runs' command
def test_run_construction_writes_a_results_file_and_keeps_an_existing_one(tmp_path):
    import json

    from _scripts import load_script

    script = load_script("run_construction")
    out = tmp_path / "precision.json"
    script.main(["precision", "--ns", "16", "--total-letters", "64", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert [r["dtype"] for r in rec["data"]] == ["float32", "float64"]
    assert rec["parameters"]["rel_tol"] == 0.05 and "provenance" in rec
    with pytest.raises(SystemExit, match="exists"):
        script.main(["search", "--max-layers", "1", "--out", str(out)])


# --------------------------------------------------------------------------- dtype rule
def neighbouring_letters(batch: int, n: int, alphabet: int, seed: int) -> torch.Tensor:
    """Two neighbouring letters per sequence: lastOccurrence's smallest mismatch gap, many margin-1 ties."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (batch, n), generator=gen) + torch.randint(0, alphabet - 1, (batch, 1), generator=gen)


def test_sizes_float32_cannot_resolve_are_built_in_float64_and_exact():
    model = hop_transformer(1, 1000, 512)  # was float32, with hundreds of wrong positions here
    assert model.dtype == torch.float64
    x = torch.cat([neighbouring_letters(6, 1000, 512, seed=0), random_letters(2, 1000, 512, seed=1)])
    assert count_errors(model, x, batch_size=4) == 0


def test_requesting_a_dtype_that_cannot_be_exact_raises_one_line():
    with pytest.raises(ValueError, match=r"float32 is not exact at seq_len=1000, alphabet_size=512 .*float64"):
        hop_transformer(1, 1000, 512, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"float32 is not exact at seq_len=2000, alphabet_size=2000"):
        multi_hop_transformer(4, seq_len=2000, alphabet_size=2000, dtype=torch.float32)
    with pytest.raises(ValueError, match="no float dtype is exact"):
        hop_transformer(1, 10**6, 10**6)


def test_default_dtype_at_small_sizes_stays_float32():
    for k, n, a in [(6, 100, 4), (16, 1000, 26), (2, 4096, 4), (1, 256, 256)]:
        model = hop_transformer(k, n, a)
        assert model.dtype == torch.float32 and model.inverse_temperature == lemma_a2_inverse_temperature(n)
    assert multi_hop_transformer().dtype == torch.float32


def test_float32_is_exact_at_the_largest_alphabet_the_rule_allows():
    model = hop_transformer(1, 1024, 141)
    assert model.dtype == torch.float32 and hop_transformer(1, 1024, 142).dtype == torch.float64
    assert count_errors(model, neighbouring_letters(8, 1024, 141, seed=2), batch_size=4) == 0
