"""The one sweep runner (hoplib.sweep): same results in any executor, nothing lost, nothing run twice."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from hoplib.sweep import map_points, run_sweep, slurm_executor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from cli import add_run_options, run_device  # noqa: E402


def _square(index: int, point: int) -> dict:
    return {"index": index, "value": point * point}


def _fails_once(index: int, point: dict) -> list[dict]:
    """Fails on its first call for the point marked ``fail`` (a marker file says it ran), then succeeds."""
    marker = Path(point["dir"]) / f"ran{index}"
    calls = Path(point["dir"]) / f"calls{index}"
    calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
    if point.get("fail") and not marker.exists():
        marker.write_text("1")
        raise RuntimeError("pre-empted")
    return [{"i": index, "k": k} for k in range(2)]


def test_map_points_keeps_the_points_order_with_and_without_workers():
    seen = []
    one = map_points(_square, [3, 1, 2], on_result=lambda done: seen.append(len(done)))
    assert one == [{"index": 0, "value": 9}, {"index": 1, "value": 1}, {"index": 2, "value": 4}]
    assert seen == [1, 2, 3]
    assert map_points(_square, [3, 1, 2], workers=2) == one


def test_a_stopped_sweep_resumes_without_rerunning_finished_points(tmp_path):
    points = [{"dir": str(tmp_path)}, {"dir": str(tmp_path), "fail": True}, {"dir": str(tmp_path)}]
    path = tmp_path / "out" / "sweep.json"
    with pytest.raises(RuntimeError, match="pre-empted"):
        run_sweep(_fails_once, points, path, {"p": 1})
    assert not path.exists() and (tmp_path / "out" / "sweep.partial.json").exists()
    rows = run_sweep(_fails_once, points, path, {"p": 1})
    assert rows == [{"i": i, "k": k} for i in range(3) for k in range(2)]
    assert [(tmp_path / f"calls{i}").read_text() for i in range(3)] == ["1", "2", "1"], "point 0 ran once"
    record = json.loads(path.read_text())
    assert record["data"] == rows and record["parameters"] == {"p": 1} and "git_commit" in record["provenance"]
    assert not (tmp_path / "out" / "sweep.partial.json").exists()
    with pytest.raises(ValueError, match="exists; pass --overwrite"):
        run_sweep(_fails_once, points, path, {"p": 1})


def test_a_partial_file_of_other_points_is_not_resumed(tmp_path):
    path = tmp_path / "sweep.json"
    points = [{"dir": str(tmp_path)}, {"dir": str(tmp_path), "fail": True}]
    with pytest.raises(RuntimeError):
        run_sweep(_fails_once, points, path, {"p": 1})
    with pytest.raises(ValueError, match="other settings"):  # nor discarded without overwrite
        run_sweep(_fails_once, points, path, {"p": 2})
    run_sweep(_fails_once, points, path, {"p": 2}, overwrite=True)  # other parameters: starts afresh
    assert (tmp_path / "calls0").read_text() == "2"


def test_a_slurm_job_array_through_submitit_gives_the_local_results(tmp_path):
    points = [{"dir": str(tmp_path)} for _ in range(3)]
    local = run_sweep(_fails_once, points, tmp_path / "local.json", {"p": 1})
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job runs where tests/ is not importable
    executor = slurm_executor(tmp_path / "logs", cluster="local", timeout_min=5)
    array = run_sweep(_fails_once, points, tmp_path / "array.json", {"p": 1}, executor=executor)
    assert array == local


def test_a_failed_overwrite_keeps_the_complete_file_and_the_finished_points(tmp_path):
    path = tmp_path / "part" / "sweep.json"
    points = [{"dir": str(tmp_path)}, {"dir": str(tmp_path)}]
    rows = run_sweep(_fails_once, points, path, {"p": 1})
    failing = [{"dir": str(tmp_path)}, {"dir": str(tmp_path), "fail": True}]
    with pytest.raises(RuntimeError, match="pre-empted"):
        run_sweep(_fails_once, failing, path, {"p": 1}, overwrite=True)
    partial = json.loads((tmp_path / "part" / "sweep.partial.json").read_text())
    assert partial["parameters"]["complete"] is False and list(partial["data"]["done"]) == ["0"]
    assert json.loads(path.read_text())["data"] == rows  # the complete file is untouched


def test_run_options_are_shared_and_checked_before_any_work():
    parser = argparse.ArgumentParser()
    add_run_options(parser, seed_help="seed")
    args = parser.parse_args(["--workers", "2", "--seed", "3"])
    assert (args.workers, args.seed, args.device, args.overwrite, args.slurm) == (2, 3, "cpu", False, None)
    assert run_device(args) == "cpu"
    for bad, match in ((["--workers", "0"], "workers"), (["--device", "tpu"], "device")):
        with pytest.raises(ValueError, match=match):
            run_device(parser.parse_args(bad))
