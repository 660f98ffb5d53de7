"""Tests of hoplib.report: error records, chance level, depth thresholds and the depth-against-k figures."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch

from hoplib import report
from hoplib.evaluate import errors_from_predictions
from hoplib.report import (
    ErrorRecord,
    authors_records,
    chance_error,
    error_table,
    records_from_table,
    smallest_depth,
)
from hoplib.results import results_dir
from hoplib.tasks import HopTask

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _synthetic(seeds=(0, 1)):
    """Depth d solves k <= d - 2 exactly; elsewhere error 0.5 + 0.1 * seed."""
    return [{"depth": d, "d_model": 8, "n_train": None, "k": k, "metric": "paper", "seed": s, "run": f"L{d}s{s}",
             "error": 0.0 if k <= d - 2 else 0.5 + 0.1 * s} for d in (2, 3, 4) for k in range(4) for s in seeds]


@pytest.fixture(scope="module")
def published():
    return json.loads((results_dir() / "training" / "authors-errors.json").read_text(encoding="utf-8"))


def test_error_record_rejects_errors_that_would_average_in_silently():
    ErrorRecord("GRU", 1, 0, 0.0)
    for bad in (1.2, -0.1, math.nan):
        with pytest.raises(ValueError, match="error"):
            ErrorRecord("transformer", 2, 1, bad)
    with pytest.raises(ValueError, match="metric"):
        ErrorRecord("transformer", 2, 1, 0.1, metric="mean")


def test_error_table_averages_seeds_and_refuses_to_mix_models():
    recs = records_from_table(_synthetic())
    table = error_table(recs)
    assert table[3][1] == 0.0 and table[2][1] == pytest.approx(0.55)
    assert sorted(table) == [2, 3, 4] and list(table[2]) == [0, 1, 2, 3]
    assert error_table(recs, width=16) == {} and error_table(recs, metric="pooled") == {}
    wider = [ErrorRecord("transformer", 2, 1, 0.0, width=16)]
    with pytest.raises(ValueError, match="width"):
        error_table(recs + wider)
    assert error_table(recs + wider, width=16) == {2: {1: 0.0}}
    with pytest.raises(ValueError, match="family"):
        error_table(recs + [ErrorRecord("GRU", 2, 1, 0.0, width=8)])


def test_records_from_table_keeps_one_training_set_size():
    rows = _synthetic(seeds=(0,)) + [{**r, "n_train": 250, "error": 0.9} for r in _synthetic(seeds=(0,))]
    fresh = records_from_table(rows, n_train=None)
    assert len(fresh) == 12 and max(r.error for r in fresh) == pytest.approx(0.5)
    assert {r.error for r in records_from_table(rows, n_train=250)} == {0.9}
    assert len(records_from_table(rows)) == 24


def test_smallest_depth_is_the_first_depth_under_the_threshold():
    recs = records_from_table(_synthetic())
    assert smallest_depth(recs, threshold=0.05) == {0: 2, 1: 3, 2: 4, 3: None}
    assert smallest_depth(recs, threshold=0.6) == {0: 2, 1: 2, 2: 2, 3: 2}  # seed mean 0.55
    gap = [r for r in recs if not (r.depth == 3 and r.k == 1)]  # depth 3 never evaluated at k = 1
    assert smallest_depth(gap, threshold=0.05)[1] == 4
    assert smallest_depth(error_table(recs), threshold=0.05) == smallest_depth(recs, threshold=0.05)
    assert smallest_depth(recs) == smallest_depth(recs, threshold=report.THRESHOLD)  # the book's one threshold


def test_authors_records_read_the_published_table(published):
    recs = authors_records(published, heads=4)
    table = error_table(recs, metric="pooled")
    assert sorted(table) == [2, 3, 4, 5, 6] and all(sorted(v) == list(range(17)) for v in table.values())
    assert table[2][1] == pytest.approx(0.010, abs=5e-4) and table[6][16] == pytest.approx(0.062, abs=5e-4)
    assert {r.width for r in recs} == {128} and {r.metric for r in recs} == {"pooled"}
    few = error_table(authors_records(published["errors"], heads=4, n_train=1000), metric="pooled")
    assert few[2][1] == pytest.approx(0.18, abs=0.005)
    assert {r.width for r in authors_records(published, heads=8)} == {256}
    with pytest.raises(ValueError, match="n_train"):
        authors_records(published, heads=8, n_train=1000)  # the wide models saw fresh samples only


def test_published_depth_thresholds_at_five_percent(published):
    star = smallest_depth(authors_records(published), threshold=0.05, metric="pooled")
    assert star[1] == 2 and star[2] == 3 and star[3] == 3 and star[4] == 4 and star[8] == 5 and star[12] == 6
    assert star[16] is None  # even depth 6 has error 0.062 at k = 16


@pytest.mark.parametrize("alphabet", [2, 3, 4, 6])
def test_chance_error_is_the_error_of_every_constant_guess(alphabet):
    task = HopTask(seq_len=40, alphabet_size=alphabet, max_hops=4)
    chance = chance_error(task)
    x, y = task.sample(4000, seed=1)
    first = task.vocab.first_letter
    for metric in ("paper", "pooled"):
        assert chance_error(task, metric) == chance
        errs = [errors_from_predictions(torch.full_like(y, first + a), y, task, metric) for a in range(alphabet)]
        assert max(abs(e - chance) for e in errs) < 0.02, (metric, errs, chance)
    assert chance_error(HopTask(alphabet_size=4)) == pytest.approx(0.75)


def _tick_labels(ax):
    return [t.get_text() for t in ax.get_xticklabels()]


def test_error_vs_k_plot_has_integer_ticks_one_curve_per_depth_and_chance(published):
    ax = report.plot_error_vs_k(authors_records(published), plt.figure().gca(), chance=0.75, logx=True, min_k=1)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["L = 2", "L = 3", "L = 4", "L = 5", "L = 6", "chance"]
    assert _tick_labels(ax) == ["1", "2", "4", "8", "16"] and ax.get_xscale() == "log"  # powers of two on log k
    assert sorted(ax.xaxis.get_minorticklocs()) == [3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15]
    assert list(ax.get_lines()[-1].get_ydata()) == [0.75, 0.75]
    assert ax.get_lines()[0].get_xdata()[0] == 1
    plt.close("all")
    with pytest.raises(ValueError, match="metric"):
        report.plot_error_vs_k(authors_records(published) + records_from_table(_synthetic()), plt.figure().gca(),
                               width=None)
    plt.close("all")


def test_group_plot_draws_one_line_per_group_and_depth():
    recs = records_from_table(_synthetic(seeds=(0,)))
    narrow = [r for r in recs if r.depth == 2]
    ax = report.plot_error_vs_k_groups({"m=16": recs, "m=32": narrow}, plt.figure().gca(), depths=(2, 3), min_k=1)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["m=16, L = 2", "m=16, L = 3", "m=32, L = 2"]
    assert list(ax.get_lines()[0].get_xdata()) == [1, 2, 3] and _tick_labels(ax) == ["1", "2", "3"]
    plt.close("all")


def test_largest_solved_stops_at_the_first_failure():
    recs = records_from_table(_synthetic(seeds=(0,)))
    assert report.largest_solved(recs, threshold=0.05) == {2: 0, 3: 1, 4: 2}
    holes = recs + [ErrorRecord("transformer", 5, k, e, width=8) for k, e in ((1, 0.0), (2, 0.3), (3, 0.0))]
    assert report.largest_solved(holes, threshold=0.05)[5] == 1  # k = 3 solved again does not count
    assert report.largest_solved(error_table(holes, width=8), threshold=0.05)[5] == 1  # a table works too
    assert report.largest_solved({2: {0: 0.0, 1: 0.0, 2: 0.0}}) == {2: 2}


def test_crossing_k_interpolates_between_the_last_solved_and_the_first_failed_k():
    from hoplib.report import crossing_k

    assert crossing_k({0: 0.0, 1: 0.0, 2: 0.05, 3: 0.25}) == (2.25, False)
    assert crossing_k({1: 0.3}) == (pytest.approx(1 / 3), False)  # from 0 at k = 0
    assert crossing_k({1: 0.0, 2: 0.1}) == (2.0, True)  # never above: censored at the largest k
    k, censored = crossing_k({1: 0.0, 2: 0.2, 3: 0.05, 4: 0.9})
    assert (k, censored) == (1.5, False)  # the first rise counts, a later dip does not


def test_group_plot_keeps_the_colours_it_is_given_and_can_leave_the_legend_out():
    recs = records_from_table(_synthetic(seeds=(0,)))
    colours = {"m=16": "#123456", "m=32": "#abcdef"}
    ax = report.plot_error_vs_k_groups({"m=32": recs, "m=16": recs}, plt.figure().gca(), min_k=1,
                                       colours=colours, legend=False)
    lines = ax.get_lines()
    assert [line.get_color() for line in lines] == ["#abcdef"] * 3 + ["#123456"] * 3
    assert ax.get_legend() is None
    assert [line.get_linestyle() for line in lines[:3]] == ["-", "--", ":"]  # DEPTH_STYLES, shallowest first
    plt.close("all")


def test_family_crossings_are_the_interpolated_crossings_of_the_stored_errors():
    from hoplib.lower_bounds.families import family_crossings
    from hoplib.results import load_stored

    cross = family_crossings()
    assert set(cross["family"]) == {"transformer", "gru", "lstm", "mamba", "performer", "longformer"}
    assert set(cross.query("run == 'equal'")["depth"]) == {2, 3, 4}
    seed0 = load_stored("rnn/cpu/equal.json").data
    errors = {r["k"]: r["error"] for r in seed0 if r["kind"] == "gru" and r["depth"] == 3 and r["k"] >= 1}
    row = cross.query("run == 'equal' and family == 'gru' and depth == 3 and seed == 0").iloc[0]
    assert row["k*"] == report.crossing_k(errors)[0]
    k = math.floor(row["k*"])  # the error is at most the threshold up to k, above it at k + 1
    assert errors[k] <= report.THRESHOLD < errors[k + 1]
    assert cross.groupby(["family", "depth", "seed"]).size().max() == 1  # one row per model


def test_family_plot_draws_each_family_in_its_book_colour_with_its_seed_count():
    import pandas as pd

    cross = pd.DataFrame([{"family": f, "depth": d, "seed": s, "k*": d * (1 + s), "censored": False}
                          for f in ("gru", "transformer") for d in (2, 3) for s in ((0, 1) if f == "gru" else (0,))])
    ax = report.plot_families(cross, plt.figure().gca(), formulas=True).axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert labels[2:] == ["gru (2 seeds)", "transformer (1 seed)"]  # after the two formula lines
    bars = {c.get_label(): c for c in ax.containers}
    assert bars["gru (2 seeds)"].lines[0].get_color() == report.FAMILY_STYLE["gru"][0]
    assert list(bars["gru (2 seeds)"].lines[0].get_ydata()) == [3.0, 4.5]  # the mean over seeds
    plt.close("all")


def test_headline_figure_has_both_panels_and_is_legible_at_the_page_width():
    from hoplib import plots
    from hoplib.lower_bounds.families import plot_headline

    fig = plot_headline()
    assert len(fig.axes) == 2
    assert plots.check_legible(fig) >= plots.MIN_TEXT_PX
    bottom = fig.axes[1].get_legend_handles_labels()[1]
    assert any(label.startswith("transformer") for label in bottom) and any("gru" in b for b in bottom)
    plt.close("all")
