"""Tests of the training chapter's stored sweeps read back (hoplib.grids) and the depth formulas and
per-seed reach of hoplib.report that the chapter asserts with."""

from __future__ import annotations

import shutil

import pytest

from hoplib import grids, report
from hoplib.report import ErrorRecord
from hoplib.results import results_dir


def test_depth_formulas_agree_exactly_at_powers_of_two():
    assert (report.depth_floor(1), report.depth_ceil(1)) == (2, 2)
    assert (report.depth_floor(3), report.depth_ceil(3)) == (3, 4)
    assert (report.depth_floor(9), report.depth_ceil(9)) == (5, 6)
    for k in range(1, 300):
        lo, hi = report.depth_floor(k), report.depth_ceil(k)
        assert 2 ** (lo - 2) <= k <= 2 ** (hi - 2) and (lo == hi) == (k & (k - 1) == 0)


def test_stored_cpu_sweep_loads_from_its_folder_with_provenance():
    med = grids.load_stored_sweep("cpu")  # stored under results/training/medium/
    assert len(med.runs) == 8 and med.missing == ()  # depths 2-5, seeds 0 and 1
    assert (med.task.seq_len, med.task.max_hops) == (64, 8)
    recs = med.records()
    assert {r.metric for r in recs} == {"paper"} and {r.depth for r in recs} == {2, 3, 4, 5}
    assert {r.k for r in recs} == set(range(9)) and {r.width for r in recs} == {64}
    html = med.provenance_html()
    assert "results/training/medium/" in html
    assert html.startswith("<details>") and all(s.path.parent.name in html for s in med.runs)
    assert med.wall_time_s() == pytest.approx(sum(s.record["provenance"]["wall_time_s"] for s in med.runs))
    assert len(grids.load_stored_sweep("small").records(n_train=250)) == 2 * 5


def test_a_partly_stored_sweep_lists_its_missing_runs(tmp_path, monkeypatch):
    src = results_dir() / "training" / "medium" / "L2_m64_H4_ninf_s0"
    shutil.copytree(src, tmp_path / "training" / "medium" / src.name)
    monkeypatch.setenv("HOPLIB_RESULTS", str(tmp_path))
    med = grids.load_stored_sweep("cpu")
    assert len(med.runs) == 1 and len(med.missing) == 7 and "L5_m64_H4_ninf_s0" in med.missing
    assert "not stored yet" in med.provenance_html()
    with pytest.raises(ValueError, match="small"):
        grids.load_stored_sweep("small")


def test_published_errors():  # the paper's Table 3: tests/test_models.py and the chapter
    pub = report.error_table(grids.published(heads=4), metric="pooled")
    assert sorted(pub) == [2, 3, 4, 5, 6] and pub[6][16] == pytest.approx(0.062, abs=5e-4)


def test_records_split_by_seed_and_reach_per_seed():
    recs = [ErrorRecord("transformer", d, k, e, run=f"L{d}_m8_H2_ninf_s{s}")
            for s, errs in ((0, {2: (0.0, 0.3), 3: (0.0, 0.01)}), (1, {2: (0.0, 0.01), 3: (0.0, 0.0)}))
            for d, (e1, e2) in errs.items() for k, e in ((1, e1), (2, e2))]
    by_seed = report.records_by_seed(recs)
    assert sorted(by_seed) == [0, 1] and all(len(v) == 4 for v in by_seed.values())
    assert {s: report.largest_solved(r) for s, r in by_seed.items()} == {0: {2: 1, 3: 2}, 1: {2: 2, 3: 2}}

