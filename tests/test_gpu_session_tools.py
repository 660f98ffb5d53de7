"""Tests of the GPU session's tools: benchmarks/run_plain.py (a notebook in plain Python, every cell timed) and
benchmarks/gpu_summary.py (what a session did, as one results file)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notebook(path: Path, *sources: str, tags: dict[int, list[str]] | None = None) -> Path:
    cells = [{"cell_type": "code", "source": src, "metadata": {"tags": (tags or {}).get(i, [])},
              "outputs": [], "execution_count": None} for i, src in enumerate(sources)]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_run_plain_places_parameters_after_the_parameters_cell_and_times_every_cell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # run_plain moves into the notebook's folder
    nb = _notebook(tmp_path / "c.ipynb", 'profile = "quick"\nsteps = 1', "print(profile, steps * 2)",
                   tags={0: ["parameters"]})
    out = tmp_path / "out.ipynb"
    assert _load("run_plain").main([str(nb), "--out", str(out), "-p", "profile", "gpu", "-p", "steps", "21"]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert cells[1]["metadata"]["tags"] == ["injected-parameters"]
    assert cells[2]["outputs"][0]["text"] == "gpu 42\n"
    assert all(c["metadata"]["wall_s"] >= 0 for c in cells)


def test_run_plain_stops_at_a_failing_cell_with_its_traceback_in_the_notebook(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # run_plain moves into the notebook's folder
    nb = _notebook(tmp_path / "c.ipynb", "x = 1", "assert x == 2, 'x is not 2'", "y = 3")
    out = tmp_path / "out.ipynb"
    assert _load("run_plain").main([str(nb), "--out", str(out)]) == 1
    cells = json.loads(out.read_text())["cells"]
    assert cells[1]["outputs"][-1]["evalue"] == "x is not 2"
    assert "wall_s" not in cells[2]["metadata"]  # never ran


def test_run_plain_refuses_to_overwrite_the_notebook_it_runs(tmp_path):
    nb = _notebook(tmp_path / "c.ipynb", "x = 1")
    with pytest.raises(SystemExit):
        _load("run_plain").main([str(nb), "--out", str(nb)])


def test_gpu_summary_reads_the_largest_progress_bar_and_projects_its_time():
    log = ("3 models:  10%|#  | 600/6000 [00:30<04:30, 20.0step/s]\r"
           "3 models:  20%|## | 1200/6000 [01:00<04:00, 20.0step/s]\n"
           "eval: 100%|####| 5/5 [00:01<00:00, 5.0it/s]\n")
    bar = _load("gpu_summary").last_progress(log)
    assert bar == {"done": 1200, "total": 6000, "elapsed_s": 60, "projected_training_s": 300}


def test_gpu_summary_stores_each_chapters_status_and_refuses_to_overwrite(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.status").write_text("a exit 124 wall 385 s\n")
    (work / "a.log").write_text("5 runs: 50%| | 50/100 [00:10<00:10, 5step/s]")
    _notebook(work / "a.ipynb", "x = 1")
    out = tmp_path / "summary.json"
    summary = _load("gpu_summary")
    summary.main([str(work), "--out", str(out), "--chapters", "a b"])
    a, b = json.loads(out.read_text())["data"]["chapters"]
    assert (a["exit"], a["stopped_by_time_box"], a["training_progress"]["projected_training_s"]) == (124, True, 20)
    assert b == {"chapter": "b", "started": False}
    with pytest.raises(SystemExit):
        summary.main([str(work), "--out", str(out)])
