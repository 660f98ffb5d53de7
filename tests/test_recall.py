"""Tests of hoplib.lower_bounds.experiments.recall: the RNN chapter's alphabet sweep (k = 1, |Σ| growing with N)."""

from __future__ import annotations

import json

import matplotlib
import pytest

from hoplib.lower_bounds.experiments import recall

matplotlib.use("Agg")

TINY = {"alphabets": [4, 8], "kinds": ["gru", "transformer"], "depth": 1, "widths": [8, 16], "lrs": [3e-3],
        "steps": 3, "batch_size": 4, "warmup_steps": 1, "heads": 2, "n_samples": 4}


def _rec(kind: str, width: int, a: int, lr: float, error: float) -> dict:
    return {"kind": kind, "d_model": width, "alphabet_size": a, "lr": lr, "error": error, "depth": 2,
            "seq_len": recall.seq_len_for(a), "params": 100 * width, "state_bits": 0 if kind == "transformer"
            else 32 * width}


FAKE = [_rec(kind, w, a, lr, err)
        for kind, errs in {"gru": {4: 0.0, 8: 0.3, 16: 0.8}, "transformer": {4: 0.0, 8: 0.02, 16: 0.05}}.items()
        for a, err in errs.items() for w, shift in ((16, 0.1), (64, 0.0)) for lr, bump in ((1e-3, 0.2),
                                                                                            (3e-3, 0.0))
        for err in [min(1.0, errs[a] + shift + bump)]]


def test_every_profile_is_valid_and_the_cpu_profiles_train_every_family():
    for table in recall.PART_PROFILES.values():
        for settings in table.values():
            assert recall.check_settings(settings)
    assert set(recall.PROFILES["cpu"]["kinds"]) | set(recall.ATTENTION_PROFILES["cpu"]["kinds"]) == \
        set(recall.KINDS) | {"softmax"}


def test_grid_covers_every_combination_with_growing_length():
    points = recall.grid(TINY)
    assert len(points) == 2 * 2 * 2 * 1
    assert {p["seq_len"] for p in points} == {recall.seq_len_for(4), recall.seq_len_for(8)}
    assert recall.seq_len_for(32) == 96


@pytest.mark.parametrize("bad", [{"alphabets": [1]}, {"kinds": ["rnn"]}, {"lrs": [0.0]}, {"steps": 0}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        recall.check_settings({**TINY, **bad})
    with pytest.raises(ValueError, match="lack"):
        recall.check_settings({"alphabets": [4]})


def test_sweep_records_every_point_in_grid_order_and_workers_do_not_change_results():
    one = recall.sweep(TINY, seed=1)
    assert [(r["alphabet_size"], r["kind"], r["d_model"]) for r in one] == \
        [(p["alphabet_size"], p["kind"], p["d_model"]) for p in recall.grid(TINY)]
    assert all(0.0 <= r["error"] <= 1.0 and r["params"] > 0 for r in one)
    assert all((r["state_bits"] > 0) == (r["kind"] != "transformer") for r in one)
    again = recall.sweep(TINY, seed=1, workers=2)
    assert [r["error"] for r in again] == [r["error"] for r in one]


def test_best_table_keeps_the_best_learning_rate():
    best = recall.best_table(FAKE)
    assert best[("gru", 64, 8)]["lr"] == 3e-3 and best[("gru", 64, 8)]["error"] == pytest.approx(0.3)


def test_widths_needed_is_the_smallest_solving_width_or_none():
    needed = recall.widths_needed(FAKE, threshold=0.1)
    assert needed["transformer"] == {4: 16, 8: 64, 16: 64}
    assert needed["gru"] == {4: 16, 8: None, 16: None}


def test_observations_say_which_family_fails_where():
    seen = recall.observations(FAKE, width=64)
    assert seen["transformer"] == {"solves_all": True, "unsolved": [], "rises": False}
    assert seen["gru"]["unsolved"] == [8, 16] and seen["gru"]["rises"]


def test_error_rows_and_plot_show_every_family():
    rows = recall.error_rows(FAKE, width=64)
    assert [r["family"] for r in rows] == ["gru", "transformer"]
    assert rows[0]["|Σ|=16"] == "0.800"
    fig = recall.plot_sweep(FAKE, width=64)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) >= 3


def test_cli_refuses_bad_arguments_before_work(tmp_path, capsys):
    from hoplib._book.cli import run_cli

    assert run_cli(recall.main, ["--out", str(tmp_path), "--workers", "0"]) == 2
    assert "workers" in capsys.readouterr().err
    target = tmp_path / "rnn" / "cpu" / "alphabet.json"
    target.parent.mkdir(parents=True)
    target.write_text("{}")
    assert run_cli(recall.main, ["--out", str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err
    assert json.loads(target.read_text()) == {}


def test_attention_profiles_build_performer_and_longformer_models():
    tiny = {**recall.ATTENTION_PROFILES["quick"], "alphabets": [4], "widths": [8], "heads": 2, "steps": 2,
            "batch_size": 4, "warmup_steps": 1, "n_samples": 4}
    records = recall.sweep(tiny)
    assert [r["kind"] for r in records] == ["softmax", "performer", "longformer"]
    assert all(r["state_bits"] == 0 and 0.0 <= r["error"] <= 1.0 for r in records)
    fig = recall.plot_sweep(records, width=8)
    assert len(fig.axes) == 1, "one width: no width panel"


def test_performer_settings_without_features_are_refused():
    settings = {key: value for key, value in recall.ATTENTION_PROFILES["cpu"].items() if key != "n_features"}
    with pytest.raises(ValueError, match="n_features"):
        recall.check_settings(settings)


def test_the_stored_rnn_profile_keeps_the_families_it_was_run_with():
    assert recall.PROFILES["cpu"]["kinds"] == ["gru", "lstm", "mamba", "transformer"]
    assert recall.PART_PROFILES["efficient_attention"] is recall.ATTENTION_PROFILES


def test_errors_by_alphabet_keep_the_best_rate_in_the_books_family_order():
    fake = [_rec(kind, 64, a, 3e-3, err) for kind, err in (("longformer", 0.5), ("softmax", 0.0)) for a in (4, 8)]
    errs = recall.errors_by_alphabet(fake + FAKE, width=64)
    assert list(errs) == ["gru", "transformer", "softmax", "longformer"]
    assert errs["gru"] == {4: 0.0, 8: 0.3, 16: 0.8}
    assert list(recall.widths_needed(fake, 0.1)) == ["softmax", "longformer"]


def test_cli_runs_other_seeds_on_chosen_alphabets_into_their_own_file(tmp_path, capsys, monkeypatch):
    from hoplib._book.cli import run_cli
    from hoplib._book.provenance import load_results

    monkeypatch.setitem(recall.PART_PROFILES["rnn"], "quick", {**TINY, "widths": [8]})
    assert run_cli(recall.main, ["--out", str(tmp_path), "--profile", "quick", "--alphabets", "5"]) == 2
    assert "not in the profile" in capsys.readouterr().err
    assert run_cli(recall.main, ["--out", str(tmp_path), "--profile", "quick", "--alphabets", "8",
                                 "--seed", "3"]) == 0
    stored = load_results(tmp_path / "rnn" / "quick" / "alphabet_seed3.json")
    assert stored["parameters"]["alphabets"] == [8] and stored["parameters"]["seed"] == 3
    assert {r["alphabet_size"] for r in stored["data"]} == {8}
    assert not (tmp_path / "rnn" / "quick" / "alphabet.json").exists()
    assert run_cli(recall.main, ["--out", str(tmp_path), "--profile", "quick", "--steps", "0"]) == 2
    assert "steps" in capsys.readouterr().err
    assert run_cli(recall.main, ["--out", str(tmp_path), "--profile", "quick", "--alphabets", "8",
                                 "--steps", "3"]) == 0
    control = load_results(tmp_path / "rnn" / "quick" / "alphabet_steps3_a8.json")
    assert control["parameters"]["steps"] == 3 and control["parameters"]["seed"] == 0


def test_seed_tables_set_runs_of_several_seeds_side_by_side():
    other = [dict(r, error=0.5) for r in FAKE]
    errs = recall.seed_errors([(0, FAKE), (1, other)], alphabet_size=16, width=64)
    assert errs["gru"] == {0: pytest.approx(0.8), 1: 0.5}
    table = recall.seed_table([(0, FAKE), (1, other)], alphabet_size=16, width=64)
    assert table.header == ["family", "seed 0", "seed 1"] and table.body[1] == ["transformer", "0.050", "0.500"]
    longer = recall.seed_table([(2000, FAKE), (4000, other)], alphabet_size=16, width=64, column="{:,} steps")
    assert longer.header == ["family", "2,000 steps", "4,000 steps"]


@pytest.mark.parametrize(("needed", "grows"), [({4: 16, 8: 32, 16: None}, True), ({4: 16, 8: 16}, False),
                                                ({4: 32, 8: 16, 16: 64}, False), ({4: None, 8: None}, False)])
def test_width_grows_means_never_falling_and_larger_at_the_end(needed, grows):
    assert recall.width_grows(needed) is grows


def test_without_a_width_each_family_gets_its_best_width():
    errs = recall.errors_by_alphabet(FAKE)
    assert errs["gru"] == {4: 0.0, 8: pytest.approx(0.3), 16: pytest.approx(0.8)}
    assert recall.observations(FAKE)["transformer"]["solves_all"]
    assert "best of widths 16, 64" in recall.plot_sweep(FAKE).axes[0].get_title()
