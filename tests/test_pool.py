"""Tests of hoplib._book.pool: worker processes give the same results, and stored sweeps lose nothing."""

from __future__ import annotations

import json

import pytest

from hoplib._book.pool import map_points, store_sweep


def _square(index: int, point: int) -> dict:
    return {"index": index, "value": point * point}


def test_map_points_keeps_the_points_order_with_and_without_workers():
    seen = []
    one = map_points(_square, [3, 1, 2], on_result=lambda done: seen.append(len(done)))
    assert one == [{"index": 0, "value": 9}, {"index": 1, "value": 1}, {"index": 2, "value": 4}]
    assert seen == [1, 2, 3]
    assert map_points(_square, [3, 1, 2], workers=2) == one
    with pytest.raises(ValueError, match="workers"):
        map_points(_square, [1], workers=2, device="cuda")


def test_store_sweep_writes_once_and_keeps_finished_models_when_a_sweep_fails(tmp_path):
    path = tmp_path / "part" / "sweep.json"

    def run(on_model):
        on_model([{"m": 1}])
        return [{"m": 1}, {"m": 2}]

    assert store_sweep(path, {"p": 1}, run, device="cpu", workers=1) == path
    record = json.loads(path.read_text())
    assert record["data"] == [{"m": 1}, {"m": 2}] and record["parameters"] == {"p": 1}
    assert not (tmp_path / "part" / "sweep.partial.json").exists()
    with pytest.raises(ValueError, match="exists"):
        store_sweep(path, {"p": 1}, run, device="cpu", workers=1)

    def diverges(on_model):
        on_model([{"m": 1}])
        raise FloatingPointError("loss is nan")

    with pytest.raises(FloatingPointError):
        store_sweep(path, {"p": 1}, diverges, device="cpu", workers=1, overwrite=True)
    partial = json.loads((tmp_path / "part" / "sweep.partial.json").read_text())
    assert partial["parameters"]["complete"] is False and partial["data"] == [{"m": 1}]
    assert json.loads(path.read_text())["data"] == [{"m": 1}, {"m": 2}]  # the complete file is untouched


def test_run_options_are_shared_and_checked_before_any_work():
    import argparse

    from hoplib._book.pool import add_run_options, run_device

    parser = argparse.ArgumentParser()
    add_run_options(parser, seed_help="seed")
    args = parser.parse_args(["--workers", "2", "--seed", "3"])
    assert (args.workers, args.seed, args.device, args.overwrite) == (2, 3, "cpu", False)
    assert run_device(args) == "cpu"
    for bad, match in ((["--workers", "0"], "workers"), (["--seed", "-1"], "seed"),
                       (["--device", "tpu"], "device")):
        with pytest.raises(ValueError, match=match):
            run_device(parser.parse_args(bad))


def test_learning_rate_lists_are_checked_in_one_place():
    from hoplib._book.validate import check_rates

    assert check_rates("lrs", (1e-3, 3e-3)) == [1e-3, 3e-3]
    for bad, error in ((3e-3, TypeError), ("0.1", TypeError), ([], ValueError), ([0.0], ValueError),
                       ([1], ValueError), ([True], ValueError)):
        with pytest.raises(error, match="lrs"):
            check_rates("lrs", bad)
