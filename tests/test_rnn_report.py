"""Tests of hoplib.lower_bounds.rnn_report: depth thresholds, best errors, the text table and the figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from hoplib.lower_bounds import rnn_report  # noqa: E402


def _records():
    errs = {("gru", 1): [0.0, 0.5, 0.7], ("gru", 2): [0.0, 0.05, 0.4], ("transformer", 1): [0.0, 0.3, 0.6]}
    return [{"kind": kind, "depth": d, "d_model": 32, "k": k, "error": e, "params": 100 * d}
            for (kind, d), row in errs.items() for k, e in enumerate(row)]


def test_depth_needed_is_smallest_depth_under_threshold():
    need = rnn_report.depth_needed(_records(), 0.1)
    assert need["gru", 0] == 1 and need["gru", 1] == 2 and need["gru", 2] is None
    assert need["transformer", 1] is None and need["lstm", 0] is None


def test_best_depth_error_takes_minimum_over_depths():
    assert rnn_report.best_depth_error(_records(), "gru", 1) == 0.05
    with pytest.raises(ValueError, match="no record"):
        rnn_report.best_depth_error(_records(), "lstm", 1)


def test_error_table_lists_every_model_once():
    table = rnn_report.error_table(_records()).splitlines()
    assert len(table) == 4 and "gru L=2 m=32" in table[2] and "0.050" in table[2]


def test_plot_sweep_has_a_panel_per_architecture():
    fig = rnn_report.plot_sweep(_records(), "t")
    assert [ax.get_title() for ax in fig.axes] == ["gru", "transformer"]


def test_reports_reject_bad_input():
    with pytest.raises(ValueError, match="at least one record"):
        rnn_report.depth_needed([], 0.1)
    with pytest.raises(ValueError, match="threshold must be in"):
        rnn_report.depth_needed(_records(), 2.0)
    with pytest.raises(ValueError, match="missing"):
        rnn_report.error_table([{"kind": "gru"}])
