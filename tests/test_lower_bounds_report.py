"""Tests of the depth report of the lower-bound chapters: sweep records of hoplib.lower_bounds.rnn.depth_sweep and
hoplib.lower_bounds.efficient.attention_sweep read through hoplib.lower_bounds.experiments into hoplib.report
(formerly hoplib.lower_bounds.rnn_report and the report half of hoplib.lower_bounds.efficient)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from hoplib.lower_bounds import experiments as ex  # noqa: E402
from hoplib.report import ErrorRecord, chance_error, smallest_depth  # noqa: E402
from hoplib.tasks import HopTask  # noqa: E402


def _rows():
    errs = {("gru", 1): [0.0, 0.5, 0.7], ("gru", 2): [0.0, 0.05, 0.4], ("transformer", 1): [0.0, 0.3, 0.6]}
    return [{"kind": kind, "depth": d, "d_model": 32, "k": k, "error": e, "params": 100 * d}
            for (kind, d), row in errs.items() for k, e in enumerate(row)]


def test_sweep_rows_become_error_records_with_family_and_width():
    recs = ex.error_records(_rows(), run="stored")
    assert len(recs) == 9 and all(isinstance(r, ErrorRecord) for r in recs)
    assert recs[3] == ErrorRecord("gru", 2, 0, 0.0, 32, "paper", "stored")
    with pytest.raises(ValueError, match="lacks"):
        ex.error_records([{"kind": "gru"}])


def test_depth_needed_is_smallest_depth_under_threshold():
    recs = ex.error_records(_rows())
    assert ex.depth_needed(recs, "gru", 0.1) == {0: 1, 1: 2, 2: None}
    assert ex.depth_needed(recs, "transformer", 0.1) == {0: 1, 1: None, 2: None}
    assert ex.depth_needed(recs, "gru", 0.1) == smallest_depth(recs, threshold=0.1, family="gru")
    with pytest.raises(ValueError, match="no record"):
        ex.depth_needed(recs, "lstm", 0.1)


def test_best_error_takes_minimum_over_depths():
    recs = ex.error_records(_rows())
    assert ex.best_error(recs, "gru", 1) == 0.05
    with pytest.raises(ValueError, match="no record"):
        ex.best_error(recs, "lstm", 1)


def test_solved_up_to_stops_at_the_first_k_above_threshold():
    fake = ex.error_records([{"kind": "softmax", "depth": 2, "k": k, "error": e}
                             for k, e in enumerate([0.0, 0.01, 0.02, 0.5, 0.0])])
    assert ex.solved_up_to(fake, "softmax", 2, 0.05) == 2
    assert ex.solved_up_to(fake, "softmax", 2, 0.0) == 0


def test_error_text_lists_every_model_once():
    table = ex.error_text(ex.error_records(_rows()), order=("gru", "transformer")).splitlines()
    assert len(table) == 4 and "gru L=2 m=32" in table[2] and "0.05" in table[2]


def test_plot_families_has_a_panel_per_family_and_the_computed_chance_line():
    chance = chance_error(HopTask(alphabet_size=4))
    fig = ex.plot_families(ex.error_records(_rows()), ("gru", "transformer"), chance=chance)
    assert [ax.get_title() for ax in fig.axes] == ["gru", "transformer"]
    dotted = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == ":"]
    assert [line.get_ydata()[0] for line in dotted] == [pytest.approx(1 - 1 / 4)]
    plt.close(fig)
