"""Tests of hoplib.report, which reads the stored sweeps of the lower-bound chapters into the
book's one depth report (hoplib.report)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")


from hoplib import grids, report
from hoplib.report import ErrorRecord  # noqa: E402


def _rows():
    errs = {("gru", 1): [0.0, 0.5, 0.7], ("gru", 2): [0.0, 0.05, 0.4], ("transformer", 1): [0.0, 0.3, 0.6]}
    return [{"kind": kind, "depth": d, "d_model": 32, "k": k, "error": e, "params": 100 * d}
            for (kind, d), row in errs.items() for k, e in enumerate(row)]


def test_sweep_rows_become_error_records_with_family_and_width():
    recs = report.error_records(_rows(), run="stored")
    assert len(recs) == 9 and all(isinstance(r, ErrorRecord) for r in recs)
    assert recs[3] == ErrorRecord("gru", 2, 0, 0.0, 32, "paper", "stored")


def test_reach_stops_at_the_first_k_above_the_threshold():
    fake = report.error_records([{"kind": "softmax", "depth": 2, "k": k, "error": e}
                             for k, e in enumerate([0.0, 0.01, 0.02, 0.5, 0.0])])
    assert report.reach_table({"s": fake}, 0.05) == {"s": {2: 2}}
    assert report.reach_table({"s": fake}, 0.0) == {"s": {2: 0}}


def test_reference_groups_read_the_training_chapters_stored_transformers_per_seed():
    groups, runs = grids.reference_groups("medium")
    assert list(groups) == ["transformer, seed 0", "transformer, seed 1"]
    assert {c["n_train"] for c in runs.configs} == {None}
    assert all(r.family == "transformer" and r.width == 64 for recs in groups.values() for r in recs)
    assert "results/training/medium/" in runs.provenance_html()
