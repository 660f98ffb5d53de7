"""Tests of hoplib.report (stored depth sweeps) and hoplib.lower_bounds.families: reading stored sweeps (settings,
records, tables, figures) and the depth sweeps of the lower-bound chapters."""

from __future__ import annotations

import matplotlib

from hoplib import report
from hoplib.lower_bounds import families
from hoplib.report import ErrorRecord
from hoplib.tasks import HopTask

matplotlib.use("Agg")

RNN_TINY = {"kinds": ["gru", "transformer"], "depths": [1, 2], "widths": [8], "lrs": [1e-3, 3e-3], "steps": 2,
            "warmup_steps": 1, "n_samples": 4}


def _records(table: dict[tuple[str, int], list[float]]) -> list[ErrorRecord]:
    return [ErrorRecord(fam, depth, k, e, 32) for (fam, depth), errs in table.items() for k, e in enumerate(errs)]


# --------------------------------------------------------------------------- stored settings and tables


def test_error_records_converts_sweep_rows():
    rows = [{"kind": "gru", "depth": 2, "d_model": 32, "k": 3, "error": 0.25, "params": 1}]
    (rec,) = report.error_records(rows, run="x")
    assert rec == ErrorRecord("gru", 2, 3, 0.25, 32, "paper", "x")


# --------------------------------------------------------------------------- the depth sweeps


def test_grid_points_nest_kind_width_depth_rate():
    points = families.grid_points({"kinds": ["a", "b"], "widths": [8], "depths": [1, 2], "lrs": [1e-3, 3e-3]})
    assert [(p["kind"], p["depth"], p["lr"]) for p in points][:3] == [("a", 1, 1e-3), ("a", 1, 3e-3), ("a", 2, 1e-3)]
    assert len(points) == 2 * 1 * 2 * 2


def test_sweep_trains_every_family_depth_and_rate_and_workers_do_not_change_results():
    task = HopTask(seq_len=10, alphabet_size=4, max_hops=2)
    points = families.grid_points(RNN_TINY)

    def run(workers):
        return families.sweep_points(task, points, RNN_TINY, families.recurrent_builder, seed=1, device="cpu",
                                     workers=workers)

    one = run(1)
    assert [(r["kind"], r["depth"], r["lr"]) for r in one if r["k"] == 0] == \
        [(p["kind"], p["depth"], p["lr"]) for p in points]
    assert sorted({r["k"] for r in one}) == [0, 1, 2] and len(one) == 3 * len(points)
    assert all((r["state_bits"] > 0) == (r["kind"] != "transformer") for r in one)
    assert [r["error"] for r in run(2)] == [r["error"] for r in one]


def test_a_kept_sweep_resumes_after_a_stop_and_reads_a_finished_one_back(tmp_path, monkeypatch):
    """The chapters' live sweeps with out_dir set: a sweep stopped after some models resumes with them."""
    import pytest

    task = HopTask(seq_len=10, alphabet_size=4, max_hops=2)
    points, keep = families.grid_points(RNN_TINY), tmp_path / "live" / "steps2.json"
    ref = families.sweep_points(task, points, RNN_TINY, families.recurrent_builder, seed=1, device="cpu")
    original, calls = families.measure_point, []

    def stopping(index, *args, **kw):
        calls.append(index)
        if index == 3 and len(calls) == 4:
            raise KeyboardInterrupt  # the runtime disconnects during the fourth model
        return original(index, *args, **kw)

    monkeypatch.setattr(families, "measure_point", stopping)
    run = lambda: families.sweep_points(task, points, RNN_TINY, families.recurrent_builder, seed=1,  # noqa: E731
                                        device="cpu", progress=True, keep=keep)
    with pytest.raises(KeyboardInterrupt):
        run()
    def same(rows):  # everything but the wall time of training
        return [{k: v for k, v in r.items() if k != "train_time_s"} for r in rows]

    assert same(run()) == same(ref) and calls[4:] == list(range(3, len(points)))  # the first three were kept
    monkeypatch.setattr(families, "measure_point", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    assert same(run()) == same(ref)  # finished: read back, nothing trained


def test_best_lr_keeps_the_rate_with_the_lowest_mean_error_over_k_from_one():
    rows = [{"kind": "gru", "d_model": 8, "depth": 1, "lr": lr, "k": k, "error": e}
            for lr, errs in ((1e-3, [0.9, 0.2, 0.4]), (3e-3, [0.0, 0.3, 0.4])) for k, e in enumerate(errs)]
    best = families.best_lr(rows)
    assert {r["lr"] for r in best} == {1e-3} and len(best) == 3  # k = 0 does not count
    single = [{k: v for k, v in r.items() if k != "lr"} for r in rows[:3]]
    assert families.best_lr(single) == single
