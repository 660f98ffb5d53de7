"""Tests of the support modules: device choice, provenance files, the chapter runner, benchmark baseline, checkers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import hoplib
from hoplib import device, results
from hoplib._book import notebook
from hoplib.tasks import HopTask, hop_reference


def test_get_device_auto_and_cpu():
    assert device.get_device("cpu") == torch.device("cpu")
    assert device.get_device("auto").type in {"cpu", "cuda", "mps"}
    assert device.get_device(torch.device("cpu")).type == "cpu"


def test_get_device_rejects_unknown_and_missing():
    with pytest.raises(ValueError, match="device must be one of"):
        device.get_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            device.get_device("cuda")


def test_seed_everything_makes_torch_reproducible():
    device.seed_everything(3)
    a = torch.rand(3)
    device.seed_everything(3)
    assert torch.equal(a, torch.rand(3))


def test_save_results_is_atomic_and_has_provenance(tmp_path):
    path = results.save_results(tmp_path / "sub" / "r.json", {"x": np.arange(3)}, {"p": 1}, "cpu", 1.23456)
    record = json.loads(path.read_text())
    assert record["data"] == {"x": [0, 1, 2]}
    assert record["parameters"] == {"p": 1}
    prov = record["provenance"]
    assert prov["hoplib_version"] == hoplib.__version__
    assert prov["device"] == "cpu" and prov["wall_time_s"] == 1.235
    assert prov["torch_version"] == torch.__version__ and prov["git_commit"]
    assert [p.name for p in path.parent.iterdir()] == ["r.json"], "no temporary file left behind"


def test_atomic_write_keeps_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "r.json"
    results.save_results(path, {"ok": 1}, {}, "cpu")
    with pytest.raises(TypeError):
        results.save_results(path, {"bad": object()}, {}, "cpu")
    assert json.loads(path.read_text())["data"] == {"ok": 1}
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_chapter_run_validates_and_saves(tmp_path, capsys):
    profiles = {"quick": {"n": 1}, "paper": {"n": 100}}
    run = notebook.start("demo", "paper", "cpu", 0, str(tmp_path), profiles)
    assert run["n"] == 100 and run.device.type == "cpu"
    assert "profile paper" in capsys.readouterr().out
    path = run.save("numbers", {"a": 1})
    assert path == tmp_path / "demo" / "paper" / "numbers.json"
    assert json.loads(path.read_text())["parameters"]["n"] == 100
    assert notebook.start("demo", "quick", "cpu", 0, "", profiles).save("x", {}) is None
    with pytest.raises(ValueError, match="profile must be one of"):
        notebook.start("demo", "huge", "cpu", 0, "", profiles)


def _chapter_generator() -> dict:
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_tasks.py"
    spec = importlib.util.spec_from_file_location("bench_tasks", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.chapter_generator()


def test_benchmark_runs_the_chapters_authors_style_generator_in_hoptask_layout():
    gen = _chapter_generator()
    task = HopTask(seq_len=40, max_hops=6)
    inputs, targets = gen["authors_style_sample"](task, 20, np.random.default_rng(0))
    assert inputs.shape == targets.shape == (20, 39)
    v = task.vocab
    for row in range(20):
        k = int(inputs[row, 0])
        letters = inputs[row, 1:] - v.first_letter
        assert (letters[1:] != letters[:-1]).all()
        expected = [a + v.first_letter if a >= 0 else v.no_answer for a in hop_reference(letters.tolist(), k)]
        assert targets[row, 1:].tolist() == expected and targets[row, 0] == v.blank
    out = gen["measure_throughput"](lambda: None, 10, min_seconds=0.01)
    assert out["calls"] >= 1 and out["items_per_s"] > 0


@pytest.mark.parametrize("capability, bf16", [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_autocast_uses_bf16_only_where_the_gpu_has_it_natively(monkeypatch, capability, bf16):
    import contextlib

    import torch

    cuda = torch.device("cuda")  # a mocked T4 (7.5), A100 (8.0), H100 (9.0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # true on a T4: emulation
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    monkeypatch.setattr(torch, "autocast", lambda device_type, dtype: (device_type, dtype))
    got = device.autocast(cuda)
    assert got == ("cuda", torch.bfloat16) if bf16 else isinstance(got, contextlib.nullcontext)
    assert isinstance(device.autocast(torch.device("cpu")), contextlib.nullcontext)


def test_provenance_names_the_source_commit_given_for_a_copy_sent_elsewhere(monkeypatch):
    from hoplib.results import git_commit, provenance

    monkeypatch.setenv("HOPLIB_SOURCE_COMMIT", "b4e9c66f14e7b39b08322ad6d1e0f83c0cbdb715")
    assert git_commit() == provenance("cpu")["git_commit"] == "b4e9c66f14e7b39b08322ad6d1e0f83c0cbdb715"
    monkeypatch.delenv("HOPLIB_SOURCE_COMMIT")
    assert git_commit() != "b4e9c66f14e7b39b08322ad6d1e0f83c0cbdb715"
