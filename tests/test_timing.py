"""Tests of hoplib._book.timing: the time each profile takes (CPU measured by stored runs, GPU estimated)."""

from __future__ import annotations

import json

import pytest
import torch

from hoplib._book import timing
from hoplib._book.provenance import save_results


def test_jobs_are_validated_and_count_six_flops_per_weight_and_token():
    assert timing.Job(params=10, tokens=4, steps=3).flops == 6 * 10 * 4 * 3
    with pytest.raises(ValueError):
        timing.Job(params=0, tokens=1, steps=1)


def test_small_models_are_bounded_by_the_step_floor_large_ones_by_flops():
    gpu = timing.GPU_CLASSES[0]
    tiny = timing.Job(params=1000, tokens=100, steps=1000)
    assert timing.estimate_seconds([tiny], gpu) == pytest.approx(1000 * gpu.step_floor_s)
    big = timing.Job(params=10**9, tokens=10**5, steps=10)
    rate = gpu.peak_tflops * 1e12 * gpu.efficiency
    assert timing.estimate_seconds([big], gpu) == pytest.approx(big.flops / rate)
    assert timing.estimate_seconds([big], timing.GPU_CLASSES[1]) < timing.estimate_seconds([big], gpu)


def test_measured_time_is_the_notebooks_longest_file_plus_separate_runs(tmp_path):
    folder = tmp_path / "rnn" / "cpu"
    save_results(folder / "a.json", [], {"chapter": "rnn", "profile": "cpu"}, "cpu", 100.0)
    save_results(folder / "b.json", [], {"chapter": "rnn", "profile": "cpu"}, "cpu", 300.0)
    save_results(folder / "alphabet.json", [], {"chapter": "rnn", "part": "alphabet"}, "cpu", 50.0)
    save_results(folder / "alphabet.partial.json", [], {"chapter": "rnn", "part": "alphabet"}, "cpu", 9.0)
    (folder / "notes.json").write_text(json.dumps({"no": "provenance"}))
    assert timing.measured_cpu_seconds("rnn", "cpu", root=tmp_path) == pytest.approx(350.0)
    assert timing.measured_cpu_seconds("rnn", "paper", root=tmp_path) is None


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (45, "45 s"), (600, "10 min"), (4 * 3600, "4.0 h")])
def test_durations_read_in_the_unit_that_fits(seconds, text):
    assert timing.duration(seconds) == text


def test_time_rows_mark_estimates_and_leave_the_seeded_generator_alone(tmp_path):
    def jobs(profile):
        torch.randn(100)  # building models draws random numbers
        return [timing.Job(params=1000, tokens=10, steps=10)] if profile == "cpu" else []

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    rows = timing.time_rows("rnn", ["quick", "cpu"], jobs, root=tmp_path)
    assert torch.equal(torch.rand(3), expected)
    assert rows[0]["T4-class GPU (estimate)"] == "-" and rows[1]["T4-class GPU (estimate)"].startswith("≈")
    assert all(row["CPU (stored run, measured)"] == "-" for row in rows)


def test_tables_print_as_text_and_render_as_html_with_their_caption():
    from hoplib._book.tables import Table

    table = Table(["a", "b<"], [["1", "22"]], caption="Sizes")
    assert str(table).splitlines() == ["Sizes", "a  b<", "1  22"]
    assert "<caption>Sizes</caption>" in table._repr_html_() and "b&lt;" in table._repr_html_()
    assert table._repr_html_().count('style="padding') == 4  # every cell: columns never run together
    assert repr(table) == str(table)  # a notebook's text/plain (the PDF) shows the table, not a quoted string
    from IPython.lib.pretty import pretty

    assert pretty(table) == str(table)


def test_a_chapter_start_shows_the_time_table_only_when_something_is_known(capsys, tmp_path, monkeypatch):
    from hoplib._book import notebook

    monkeypatch.setenv("HOPLIB_RESULTS", str(tmp_path))
    notebook.start("hop_task", "quick", "cpu", 0, None, {"quick": {}})
    assert "Time per profile" not in capsys.readouterr().out
    notebook.start("rnn", "quick", "cpu", 0, None, {"quick": {}},
                   jobs=lambda p: [timing.Job(params=10, tokens=10, steps=10)])
    assert "Time per profile" in capsys.readouterr().out


def test_outside_the_repository_nothing_is_measured(tmp_path, monkeypatch):
    monkeypatch.delenv("HOPLIB_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert timing.measured_cpu_seconds("rnn", "cpu") is None
