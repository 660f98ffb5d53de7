"""Tests of hoplib.training.experiments: the training chapter's stored sweeps, published errors and tables."""

from __future__ import annotations

import shutil

import matplotlib
import pytest

from hoplib import report
from hoplib._book.results import results_dir
from hoplib.report import ErrorRecord
from hoplib.training import experiments as ex
from hoplib.training import sweep

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def test_depth_formulas_agree_exactly_at_powers_of_two():
    assert ex.depth_formulas(1) == (2, 2) and ex.depth_formulas(3) == (3, 4) and ex.depth_formulas(9) == (5, 6)
    for k in range(1, 300):
        lo, hi = ex.depth_formulas(k)
        assert 2 ** (lo - 2) <= k <= 2 ** (hi - 2) and (lo == hi) == (k & (k - 1) == 0)
    with pytest.raises(ValueError, match="k"):
        ex.depth_formulas(0)


def test_formula_agreement_sorts_each_k_by_the_formula_it_matches():
    star = {0: 2, 1: 2, 3: 3, 5: 5, 6: 3, 8: None}
    assert ex.formula_agreement(star) == {"both": [1], "floor": [3], "ceil": [5], "neither": [6],
                                          "not_reached": [8]}


def test_published_thresholds_follow_the_ceiling_formula_beyond_k_5():
    star = report.smallest_depth(ex.published(heads=4), threshold=0.05, metric="pooled")
    agree = ex.formula_agreement(star)
    assert agree["floor"] == [3, 5] and agree["ceil"] == [6, 7, *range(9, 16)]
    assert agree["both"] == [1, 2, 4, 8] and agree["not_reached"] == [16] and agree["neither"] == []


def test_k_list_collapses_runs():
    assert ex.k_list([6, 7, 9, 10, 11, 12, 15]) == "6, 7, 9-12, 15"
    assert ex.k_list([3]) == "3" and ex.k_list([]) == "none"


def test_passes_counts_whole_batches_only():
    assert ex.passes(1000, 100_000, 32) == pytest.approx(100_000 * 32 / 992)
    with pytest.raises(ValueError, match="batch"):
        ex.passes(10, 100, 32)


def test_stored_medium_sweep_loads_with_provenance():
    med = ex.load_stored_sweep("medium")
    assert len(med.runs) == 8 and med.missing == ()  # depths 2-5, seeds 0 and 1
    assert (med.task.seq_len, med.task.max_hops) == (64, 8)
    recs = med.records()
    assert {r.metric for r in recs} == {"paper"} and {r.depth for r in recs} == {2, 3, 4, 5}
    assert {r.k for r in recs} == set(range(9)) and {r.width for r in recs} == {64}
    html = med.provenance_html()
    assert html.startswith("<details>") and all(s.path.parent.name in html for s in med.runs)
    assert set(med.final_loss()) == {(64, None, d) for d in (2, 3, 4, 5)}
    lines = ex.load_stored_sweep("small").final_loss_lines()
    assert len(lines) == 10 and "m = 16, n_train = fresh, L = 2" in lines[0] and "n_train = 250" in lines[4]


def test_a_partly_stored_sweep_lists_its_missing_runs(tmp_path, monkeypatch):
    src = results_dir() / "training" / "medium" / "L2_m64_H4_ninf_s0"
    shutil.copytree(src, tmp_path / "training" / "medium" / src.name)
    monkeypatch.setenv("HOPLIB_RESULTS", str(tmp_path))
    med = ex.load_stored_sweep("medium")
    assert len(med.runs) == 1 and len(med.missing) == 7 and "L5_m64_H4_ninf_s0" in med.missing
    assert "not stored yet" in med.provenance_html()
    with pytest.raises(ValueError, match="small"):
        ex.load_stored_sweep("small")


def test_small_sweep_groups_by_width_and_by_sample_size():
    by_width, by_n = ex.width_and_sample_groups(ex.load_stored_sweep("small"))
    assert list(by_width) == ["m = 16", "m = 32", "m = 64"] and list(by_n) == ["n = 250", "n = 1000", "fresh"]
    assert {r.width for r in by_n["n = 250"]} == {64}
    means = ex.mean_table(by_width, [2, 3])
    assert set(means) == set(by_width) and all(0 <= v <= 1 for row in means.values() for v in row.values())
    assert means["m = 64"][2] == pytest.approx(ex.mean_error(by_n["fresh"], 2))
    with pytest.raises(ValueError, match="depth"):
        ex.mean_error(by_width["m = 16"], 7)


def test_parameter_counts_are_the_papers_table_3():
    assert ex.parameter_counts() == ex.TABLE3


def test_recipe_has_one_line_per_named_grid():
    lines = ex.recipe_lines()
    assert len(lines) == 1 + len(sweep.GRIDS)
    assert all(line.split()[0] == name for line, name in zip(lines[1:], sweep.GRIDS, strict=True))


def test_live_sweep_trains_a_named_grid(tmp_path, monkeypatch):
    tiny = sweep.Grid(depths=(1, 2), widths=((16, 2),), settings=dict(seq_len=10, max_hops=2, steps=20, lr=3e-3,
                                                                      warmup_steps=2, batch_size=8,
                                                                      eval_samples=10))
    monkeypatch.setitem(sweep.GRIDS, "tiny", tiny)
    recs = ex.live_sweep("tiny", seed=3, device="cpu", out_dir=tmp_path)
    assert {r.depth for r in recs} == {1, 2} and {r.metric for r in recs} == {"paper"}
    assert {r.k for r in recs} == {0, 1, 2}
    assert sorted(p.parent.name for p in (tmp_path / "runs").glob("*/results.json")) == [
        "L1_m16_H2_ninf_s3", "L2_m16_H2_ninf_s3"]
    assert ex.grid_task("tiny").seq_len == 10


def test_chapter_figures_have_their_panels_and_are_legible_at_page_width():
    from hoplib.plots import check_legible

    med, pub = ex.load_stored_sweep("medium").records(), ex.published()
    fig = ex.plot_depth_pair(med, pub, titles=("a", "b"), chances=(0.75, 0.75))
    assert len(fig.axes) == 2 and fig.axes[1].get_xscale() == "log"
    check_legible(fig)
    heat = ex.plot_heatmap_pair(med, pub, titles=("a", "b"))
    assert len(heat.axes) == 2
    check_legible(heat)
    groups = ex.width_and_sample_groups(ex.load_stored_sweep("small"))
    fig = ex.plot_width_samples(groups, ({"m = 128": pub}, {"fresh": pub}), titles=list("abcd"),
                                chances=(0.75, 0.75))
    assert len(fig.axes) == 4
    check_legible(fig)
    with pytest.raises(ValueError, match="titles"):
        ex.plot_width_samples(groups, ({"m = 128": pub}, {"fresh": pub}), titles=["a"], chances=(0.75, 0.75))
    plt.close("all")


def test_wall_time_sums_the_stored_runs():
    med = ex.load_stored_sweep("medium")
    assert med.wall_time_s() == pytest.approx(sum(s.record["provenance"]["wall_time_s"] for s in med.runs))
    assert med.wall_time_s() > 60


def test_records_split_by_seed_and_reach_per_seed():
    recs = [ErrorRecord("transformer", d, k, e, run=f"L{d}_m8_H2_ninf_s{s}")
            for s, errs in ((0, {2: (0.0, 0.3), 3: (0.0, 0.01)}), (1, {2: (0.0, 0.01), 3: (0.0, 0.0)}))
            for d, (e1, e2) in errs.items() for k, e in ((1, e1), (2, e2))]
    by_seed = ex.records_by_seed(recs)
    assert sorted(by_seed) == [0, 1] and all(len(v) == 4 for v in by_seed.values())
    assert ex.reach_by_seed(recs) == {0: {2: 1, 3: 2}, 1: {2: 2, 3: 2}}
    with pytest.raises(ValueError, match="seed"):
        ex.records_by_seed([ErrorRecord("transformer", 2, 1, 0.0, run="no-seed")])
