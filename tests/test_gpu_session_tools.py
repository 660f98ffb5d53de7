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


def test_gpu_session_runs_the_sweeps_beside_no_chapters_and_brings_their_files_back(tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    import tarfile

    tree = tmp_path / "repo"
    (tree / "scripts").mkdir(parents=True)
    (tree / "benchmarks").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_session.sh", tree / "scripts")
    shutil.copy(ROOT / "benchmarks" / "gpu_summary.py", tree / "benchmarks")
    (tree / "hoplib").symlink_to(ROOT / "hoplib")
    (tree / "scripts" / "fake_sweep.py").write_text(
        "import json, pathlib, sys\n"
        "args = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "out = pathlib.Path(args['--out']) / 'fake' / f\"seed{args['--seed']}.json\"\n"
        "out.parent.mkdir(parents=True, exist_ok=True)\n"
        "out.write_text(json.dumps(args))\n"
        "print('wrote', out)\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "DEVICE": "cpu", "CHAPTERS": "", "BENCH_S": "0", "TOTAL_S": "120",
           "PYTHON": sys.executable, "SOURCE_COMMIT": "abc",
           "SWEEPS": "fake_sweep.py --seed 0;fake_sweep.py --seed 1"}
    run = subprocess.run(["bash", str(tree / "scripts" / "gpu_session.sh")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "2 sweeps beside the chapters" in run.stdout
    for seed in (0, 1):  # each sweep got the device and the results root, and its file came back
        kept = json.loads((out / "work" / "results" / "fake" / f"seed{seed}.json").read_text())
        assert kept == {"--seed": str(seed), "--device": "cpu", "--out": "results"}
    with tarfile.open(out / "session.tar.gz") as tar:
        assert "./results/fake/seed1.json" in tar.getnames()
