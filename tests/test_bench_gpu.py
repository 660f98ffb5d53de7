"""Tests of the FLOP count of Section 4.2's models and of benchmarks/bench_gpu.py (CPU smoke
run)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from hoplib.lower_bounds.efficient_attention import PerformerAttention
from hoplib.models import GPT, GPTConfig, GPTEnsemble

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_B = _bench()
forward_flops, matmul_parameters, train_flops_per_step = _B.forward_flops, _B.matmul_parameters, _B.train_flops_per_step


def _cfg(**kw) -> GPTConfig:
    base = dict(vocab_size=12, n_positions=20, depth=2, d_model=32, heads=4, dropout=0.0, head="linear")
    return GPTConfig(**{**base, **kw})


def test_flops_match_a_count_by_hand():
    # L=2, m=32, C=12 (linear head): weights in products 2 * 12 * 32^2 + 32 * 12 = 24960; B=3, T=17.
    cfg = _cfg()
    assert matmul_parameters(cfg) == 24960
    by_hand_forward = 2 * 24960 * 3 * 17 + 2 * (2 * 2 * 3 * 17**2 * 32)
    assert forward_flops(cfg, 3, 17) == by_hand_forward
    assert train_flops_per_step(cfg, 3, 17) == 3 * by_hand_forward
    # the authors' LayerNorm head has no unembedding; a GPT and its config give the same count
    ln = _cfg(head="layernorm")
    assert matmul_parameters(ln) == 2 * 12 * 32**2
    assert train_flops_per_step(GPT(ln), 3, 17) == train_flops_per_step(ln, 3, 17)


@pytest.mark.parametrize("head,dropout", [("linear", 0.0), ("layernorm", 0.1)])
def test_flops_equal_torch_flop_counter_on_a_training_step(head, dropout):
    """FlopCounterMode counts mm/addmm/bmm exactly. torch's fused CPU attention kernel
    (_scaled_dot_product_flash_attention_for_cpu) has no FLOP formula there, so attention is forced onto the
    math backend, which computes Q K^T and A V as bmm over the full square (as CUDA's formulas count it)."""
    torch.manual_seed(0)
    cfg = _cfg(head=head, dropout=dropout)
    model = GPT(cfg).train()
    ids = torch.randint(0, cfg.vocab_size, (3, 17))
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(ids).reshape(-1, cfg.num_classes), ids.reshape(-1)).backward()
    assert counter.get_total_flops() == train_flops_per_step(cfg, 3, 17)
    # without attention the rest is the 6 N D of the linear layers
    no_attn = sum(v for k, v in counter.get_flop_counts()["Global"].items() if "bmm" not in str(k))
    assert no_attn == 6 * matmul_parameters(cfg) * 3 * 17


def test_ensemble_flops_are_e_times_one_model():
    torch.manual_seed(0)
    cfg = _cfg()
    ens = GPTEnsemble([GPT(cfg) for _ in range(3)]).train()
    ids = torch.randint(0, cfg.vocab_size, (3, 2, 9))
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        ens(ids).float().sum().backward()
    assert counter.get_total_flops() == 3 * train_flops_per_step(ens, 2, 9)


def test_flops_refuse_attention_they_do_not_count():
    with pytest.raises(ValueError, match="attention"):
        train_flops_per_step(_cfg(attention=PerformerAttention(n_features=4)), 3, 5)


def test_datasheet_peak_picks_the_most_specific_name():
    bench = _bench()
    assert bench.datasheet_peak("NVIDIA H200") == ("H200", 989.4)
    assert bench.datasheet_peak("NVIDIA H100 PCIe")[0] == "H100 PCIe"
    assert bench.datasheet_peak("NVIDIA A100-SXM4-80GB")[1] == 312.0
    assert bench.datasheet_peak("NVIDIA A10")[1] == 125.0
    assert bench.datasheet_peak("NVIDIA L40S")[0] == "L40S"
    assert bench.datasheet_peak("cpu") == (None, None)


@pytest.fixture
def one_thread():
    """The tiny models gain nothing from threads, and on a busy 2-core machine two threads thrash."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_tiny_cpu_run_writes_consistent_results(tmp_path, one_thread):
    bench = _bench()
    out = tmp_path / "bench.json"
    bench.main(["--tiny", "--device", "cpu", "--out", str(out), "--budget-s", "120"])
    rec = json.loads(out.read_text())
    assert {"parameters", "provenance", "data"} <= set(rec) and rec["provenance"]["device"] == "cpu"
    d = rec["data"]
    assert d["complete"] and d["peak"]["measured"] > 0 and d["peak"]["datasheet"] is None
    meas = d["measurements"]
    kinds = {(m["kind"], m["E"]) for m in meas}
    assert {("fit", 1), ("ensemble", 2), ("processes", 2)} <= kinds, (kinds, d["skipped"])
    for m in meas:
        assert m["steps_per_s"] > 0 and m["tflops"] > 0 and 0 < m["fraction_of_measured_peak"]
        per_model = sum(m["per_process_steps_per_s"]) if m["kind"] == "processes" else m["steps_per_s"]
        assert m["model_steps_per_s"] == pytest.approx(m["E"] * per_model)
        assert m["tflops"] == pytest.approx(m["flops_per_model_step"] * m["model_steps_per_s"] / 1e12)
        if m["kind"] != "processes":
            assert m["steps_per_s"] == pytest.approx(m["steps"] / m["seconds"])
    # projection = runs x steps / throughput, for one run at a time and for one ensemble per architecture
    grid = bench.TINY_GRID.configs()
    proj = d["projection"]
    assert proj["runs"] == len(grid) == 6
    rate = {(m["kind"], m["depth"], m["d_model"], m["E"]): m["steps_per_s"] for m in meas if m["processes"] == 1}
    one = sum(c.train.steps / rate["fit", c.depth, c.d_model, 1] for c in grid)
    assert proj["one_at_a_time"]["seconds"] == pytest.approx(one)
    groups = proj["groups"]  # m=16: n_train 64 and infinite stacked (E=2); m=32: one run (fit's speed)
    assert groups == {"L1_m16_H2": 2, "L2_m16_H2": 2, "L1_m32_H4": 1, "L2_m32_H4": 1}
    ens = sum(1000 / rate["ensemble" if e > 1 else "fit", int(k[1]), int(k.split("_m")[1].split("_")[0]), e]
              for k, e in groups.items())
    assert proj["ensemble_per_architecture"]["seconds"] == pytest.approx(ens)
    assert proj["ensemble_2_processes"]["seconds"] > 0


def test_a_tiny_budget_skips_measurements_and_still_writes(tmp_path):
    out = tmp_path / "b.json"
    data = _bench().main(["--tiny", "--device", "cpu", "--out", str(out), "--budget-s", "0"])
    assert data["measurements"] == [] and len(data["skipped"]) >= 9
    assert data["projection"]["one_at_a_time"]["seconds"] is None
    assert json.loads(out.read_text())["data"]["complete"]
