"""Tests of hoplib.lower_bounds.experiments: the profiles, measurements, tables and figures of the four lower-bound
chapters (Corollaries 5.2-5.6, Theorem 5.1, Corollaries 3.3 and 3.5 of the paper) and the stored runs they show."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
import torch

from hoplib._book.results import load_stored
from hoplib.lower_bounds import experiments as lbx
from hoplib.lower_bounds.experiments import chain_of_thought as cot_ex
from hoplib.lower_bounds.experiments import closing
from hoplib.lower_bounds.experiments import efficient_attention as eff_ex
from hoplib.lower_bounds.experiments import gnn as gnn_ex
from hoplib.lower_bounds.experiments import rnn as rnn_ex
from hoplib.report import ErrorRecord
from hoplib.tasks import HopTask

matplotlib.use("Agg")

RESULTS = Path(__file__).resolve().parent.parent / "results"
MODULES = [rnn_ex, eff_ex, cot_ex, gnn_ex]
STORED = [  # (file, module, keys checked, key of the part in runs of the former combined chapter)
    ("rnn/cpu/training.json", rnn_ex, rnn_ex.TRAIN_KEYS, None),
    ("efficient_attention/cpu/training.json", eff_ex, eff_ex.TRAIN_KEYS, "eff"),
    ("chain_of_thought/cpu/errors.json", cot_ex, cot_ex.TRAIN_KEYS, "cot"),
    ("gnn/cpu/learned.json", gnn_ex, gnn_ex.TRAIN_KEYS, "gnn"),
    ("gnn/cpu/depth_vs_diameter.json", gnn_ex, gnn_ex.STRUCTURE_KEYS, "gnn"),
]


def _records(table: dict[tuple[str, int], list[float]]) -> list[ErrorRecord]:
    return [ErrorRecord(fam, depth, k, e, 32) for (fam, depth), errs in table.items() for k, e in enumerate(errs)]


# --------------------------------------------------------------------------- profiles and stored runs


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_profile_of_a_chapter_has_the_same_settings(module):
    profiles = module.PROFILES
    assert set(profiles) == {"quick", "cpu", "paper"}
    keys = {name: set(settings) for name, settings in profiles.items()}
    assert keys["quick"] == keys["cpu"] == keys["paper"]
    assert set(module.TRAIN_KEYS) <= keys["quick"]


@pytest.mark.parametrize("name, module, keys, part", STORED, ids=[s[0] for s in STORED])
def test_stored_cpu_runs_were_made_with_the_cpu_profile(name, module, keys, part):
    stored = load_stored(name, root=RESULTS)
    lbx.check_stored_settings(stored.record["parameters"], module.PROFILES["cpu"], keys, part=part)
    assert stored.record["parameters"]["profile"] == "cpu"


def test_check_stored_settings_names_every_differing_setting():
    profile = {"steps": 10, "depths": [1, 2], "lr": 0.1}
    stored = {"eff": {"steps": 10, "depths": (1, 2), "lr": 0.2}}  # tuples and lists compare equal
    assert lbx.settings_mismatch(stored, profile, ["steps", "depths"], part="eff") == {}
    with pytest.raises(ValueError, match=r"lr: stored 0\.2, profile 0\.1"):
        lbx.check_stored_settings(stored, profile, ["steps", "lr"], part="eff")
    with pytest.raises(ValueError, match="not a setting"):
        lbx.check_stored_settings(stored, profile, ["width"], part="eff")


def test_part_settings_reads_nested_and_flat_parameters():
    assert lbx.part_settings({"eff": {"a": 1}, "profile": "cpu"}, "eff") == {"a": 1}
    assert lbx.part_settings({"a": 1, "profile": "cpu"}, "eff") == {"a": 1, "profile": "cpu"}
    with pytest.raises(TypeError, match="parameters"):
        lbx.part_settings([1, 2], "eff")


# --------------------------------------------------------------------------- shared tables


def test_error_records_converts_sweep_rows_and_rejects_incomplete_ones():
    rows = [{"kind": "gru", "depth": 2, "d_model": 32, "k": 3, "error": 0.25, "params": 1}]
    (rec,) = lbx.error_records(rows, run="x")
    assert rec == ErrorRecord("gru", 2, 3, 0.25, 32, "paper", "x")
    assert lbx.error_records([rec]) == [rec]
    with pytest.raises(ValueError, match="error"):
        lbx.error_records([{"kind": "gru", "depth": 2, "k": 3}])
    with pytest.raises(TypeError, match="dicts"):
        lbx.error_records([3])


def test_depth_needed_and_solved_up_to_read_the_error_table():
    recs = _records({("gru", 1): [0.0, 0.05, 0.5, 0.7], ("gru", 2): [0.0, 0.0, 0.08, 0.6],
                     ("lstm", 1): [0.0, 0.3, 0.6, 0.7]})
    assert lbx.depth_needed(recs, "gru", 0.1) == {0: 1, 1: 1, 2: 2, 3: None}
    assert lbx.solved_up_to(recs, "gru", 2, 0.1) == 2 and lbx.solved_up_to(recs, "lstm", 1, 0.1) == 0
    assert lbx.best_error(recs, "gru", 2) == 0.08
    assert lbx.families(recs, ["lstm"]) == ["lstm", "gru"]
    assert ">2" in lbx.depth_text(recs, 0.1) and "0.080" in lbx.error_text(recs)
    with pytest.raises(ValueError, match="mamba"):
        lbx.depth_needed(recs, "mamba", 0.1)
    with pytest.raises(ValueError, match="depth=3"):
        lbx.solved_up_to(recs, "gru", 3, 0.1)


def test_text_table_aligns_columns_and_formats_values():
    text = lbx.text_table([{"a": 1, "b": 0.123456, "c": None}, {"a": 100, "b": (2, 3), "c": "x"}])
    lines = text.splitlines()
    assert len(lines) == 3 and len({len(line) for line in lines}) == 1
    assert "0.123" in lines[1] and "-" in lines[1] and "(2, 3)" in lines[2]
    with pytest.raises(ValueError, match="non-empty"):
        lbx.text_table([])


def test_plot_families_draws_one_panel_per_family_and_one_curve_per_depth():
    recs = _records({("gru", 1): [0.0, 0.5], ("gru", 2): [0.0, 0.1], ("transformer", 1): [0.0, 0.4]})
    fig = lbx.plot_families(recs, ["transformer", "gru"], chance=0.75, title="t")
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["transformer", "gru"]
    assert sum(1 for line in axes[1].get_lines() if line.get_label().startswith("L =")) == 2
    with pytest.raises(ValueError, match="non-empty"):
        lbx.plot_families([])


def test_plot_families_wraps_four_families_into_a_legible_grid():
    from hoplib.plots import check_legible

    recs = _records({(fam, 2): [0.0, 0.3] for fam in ("gru", "lstm", "mamba", "transformer")})
    fig = lbx.plot_families(recs, ["transformer", "gru", "lstm", "mamba"], chance=0.75, title="t")
    assert [ax.get_title() for ax in fig.axes] == ["transformer", "gru", "lstm", "mamba"]
    assert fig.get_figwidth() < 8
    check_legible(fig)


# --------------------------------------------------------------------------- the RNN chapter


def test_random_encodings_of_pointer_chasing_all_decode_right():
    assert rnn_ex.check_random_encodings(40, seed=3) == {"instances": 40, "wrong": 0, "early": 0}


def test_every_protocol_uses_k_rounds_or_posts_q_bits():
    rows = rnn_ex.protocol_bit_rows([(2, 4), (3, 5)], seed=1)
    assert all(r["correct"] for r in rows) and rnn_ex.rounds_or_long_messages(rows)
    assert rows[0]["one_round (R, s)"][0] == 1 and rows[0]["k_rounds (R, s)"][0] == 2
    fake = dict(rows[0], **{"prefix_rnn (R, s)": (1, 3)})  # one round and 3 < q bits: impossible
    assert not rnn_ex.rounds_or_long_messages([fake])


def test_hand_built_rnns_compute_hop_exactly():
    rows = rnn_ex.check_constructions([1, 3], prefix_ks=(1,), n=8, length=30)
    assert [r["hop_rnn wrong"] for r in rows] == [0] * 4
    assert [r["prefix_rnn wrong"] for r in rows] == [0, 0, None, None]


def test_rnn_observations_compare_the_deepest_and_the_shallowest_model():
    table = {(kind, d): errs for kind in ("gru", "lstm", "mamba")
             for d, errs in ((1, [0, 0.0, 0.5, 0.6]), (2, [0, 0.0, 0.2, 0.4]))}
    table.update({("transformer", 1): [0, 0.0, 0.5, 0.6], ("transformer", 2): [0, 0.0, 0.3, 0.5]})
    assert rnn_ex.observations(_records(table)) == {"deeper_helps": True, "transformer_multi_hop": False}
    table[("lstm", 2)] = [0, 0.0, 0.6, 0.4]  # deeper LSTM worse at k = 2
    table[("transformer", 2)] = [0, 0.0, 0.05, 0.5]
    assert rnn_ex.observations(_records(table)) == {"deeper_helps": False, "transformer_multi_hop": True}


def test_rnn_sweep_rejects_settings_without_its_keys():
    with pytest.raises(ValueError, match="steps"):
        rnn_ex.sweep(None, {k: 1 for k in rnn_ex.TRAIN_KEYS if k != "steps"})


RNN_TINY = {"seq_len": 10, "max_hops": 2, "kinds": ["gru", "transformer"], "depths": [1], "widths": [8],
            "steps": 3, "lrs": [1e-3, 3e-3], "warmup_steps": 1, "n_samples": 8}


@pytest.mark.parametrize("bad, match", [({"lrs": [0.0]}, "lrs"), ({"lrs": [2]}, "lrs"),
                                        ({"kinds": ["rnn"]}, "kinds"), ({"depths": [0]}, "depths")])
def test_rnn_train_grid_refuses_bad_settings(bad, match):
    with pytest.raises(ValueError, match=match):
        rnn_ex.train_grid({**RNN_TINY, **bad})


def test_rnn_sweep_trains_every_family_depth_and_rate_and_workers_do_not_change_results():
    task = HopTask(seq_len=10, alphabet_size=4, max_hops=2)
    one = rnn_ex.sweep(task, RNN_TINY, seed=1, device="cpu")
    points = [(p["kind"], p["depth"], p["lr"]) for p in rnn_ex.train_grid(RNN_TINY)]
    assert [(r["kind"], r["depth"], r["lr"]) for r in one if r["k"] == 0] == points
    assert sorted({r["k"] for r in one}) == [0, 1, 2] and len(one) == 3 * len(points)
    assert all((r["state_bits"] > 0) == (r["kind"] != "transformer") for r in one)
    again = rnn_ex.sweep(task, RNN_TINY, seed=1, device="cpu", workers=2)
    assert [r["error"] for r in again] == [r["error"] for r in one]


def test_rnn_best_lr_keeps_the_rate_with_the_lowest_mean_error_over_k_from_one():
    rows = [{"kind": "gru", "d_model": 8, "depth": 1, "lr": lr, "k": k, "error": e}
            for lr, errs in ((1e-3, [0.9, 0.2, 0.4]), (3e-3, [0.0, 0.3, 0.4])) for k, e in enumerate(errs)]
    best = rnn_ex.best_lr(rows)
    assert {r["lr"] for r in best} == {1e-3} and len(best) == 3  # k = 0 does not count
    single = [{k: v for k, v in r.items() if k != "lr"} for r in rows[:3]]
    assert rnn_ex.best_lr(single) == single


def test_rnn_cli_stores_a_run_and_refuses_bad_arguments_before_work(tmp_path, capsys, monkeypatch):
    from hoplib._book.cli import run_cli

    assert run_cli(rnn_ex.main, ["--out", str(tmp_path), "--workers", "0"]) == 2
    assert "workers" in capsys.readouterr().err
    monkeypatch.setitem(rnn_ex.PROFILES, "quick", {**rnn_ex.PROFILES["quick"], **RNN_TINY})
    path = rnn_ex.main(["--out", str(tmp_path), "--profile", "quick"])
    stored = json.loads(path.read_text())
    lbx.check_stored_settings(stored["parameters"], rnn_ex.PROFILES["quick"], rnn_ex.TRAIN_KEYS)
    assert len(stored["data"]) == 3 * len(rnn_ex.train_grid(RNN_TINY))
    assert run_cli(rnn_ex.main, ["--out", str(tmp_path), "--profile", "quick"]) == 2
    assert "exists" in capsys.readouterr().err


# --------------------------------------------------------------------------- the efficient-attention chapter


EFF_TINY = {"seq_len": 10, "max_hops": 2, "kinds": ["performer", "longformer"], "depths": [1, 2], "widths": [8],
            "heads": 2, "n_features": 4, "window": 2, "global_every": None, "steps": 3, "lrs": [3e-3],
            "warmup_steps": 1, "n_samples": 8, "grid": "quick"}


def test_eff_matched_settings_follow_the_training_grid_with_the_alphabet_sweeps_attentions():
    from hoplib.training.sweep import GRIDS

    cpu = eff_ex.PROFILES["cpu"]["matched"]
    grid, alphabet = GRIDS[cpu["grid"]], eff_ex.PROFILES["cpu"]["alphabet"]
    assert (cpu["seq_len"], cpu["max_hops"], cpu["steps"], cpu["lrs"], cpu["warmup_steps"]) == (
        grid.settings["seq_len"], grid.settings["max_hops"], grid.settings["steps"], [grid.settings["lr"]],
        grid.settings["warmup_steps"])
    assert (cpu["widths"][0], cpu["heads"]) == grid.widths[0] and "softmax" not in cpu["kinds"]
    assert (cpu["n_features"], cpu["window"], cpu["global_every"]) == (
        alphabet["n_features"], alphabet["window"], cpu["seq_len"])  # only position 0, the hop count, is global


def test_eff_features_control_is_the_matched_performer_with_one_feature_per_position():
    for profile in eff_ex.PROFILES.values():
        matched, control = profile["matched"], profile["features"]
        assert control["kinds"] == ["performer"] and control["n_features"] == control["seq_len"]
        assert set(control["depths"]) <= set(matched["depths"])
        same = [key for key in eff_ex.MATCHED_KEYS if key not in ("kinds", "n_features", "depths")]
        assert all(control[key] == matched[key] for key in same)
    assert eff_ex.PROFILES["cpu"]["matched"]["n_features"] < eff_ex.PROFILES["cpu"]["features"]["n_features"]


@pytest.mark.parametrize("bad, match", [({"lrs": []}, "lrs"), ({"kinds": ["linear"]}, "kinds"),
                                        ({"widths": [0]}, "widths")])
def test_eff_matched_grid_refuses_bad_settings(bad, match):
    with pytest.raises(ValueError, match=match):
        eff_ex.matched_grid({**EFF_TINY, **bad})
    with pytest.raises(ValueError, match="steps"):
        eff_ex.matched_grid({k: v for k, v in EFF_TINY.items() if k != "steps"})


def test_eff_matched_sweep_trains_each_attention_and_depth_alike_in_workers():
    task = HopTask(seq_len=10, alphabet_size=4, max_hops=2)
    one = eff_ex.matched_sweep(task, EFF_TINY, seed=1, device="cpu")
    assert [(r["kind"], r["depth"]) for r in one if r["k"] == 0] == [(kd, d) for kd in ("performer", "longformer")
                                                                    for d in (1, 2)]
    assert all(r["n_features"] == 4 for r in one if r["kind"] == "performer")
    assert all(r["window"] == 2 and r["global_every"] is None for r in one if r["kind"] == "longformer")
    again = eff_ex.matched_sweep(task, EFF_TINY, seed=1, device="cpu", workers=2)
    assert [r["error"] for r in again] == [r["error"] for r in one]


def test_eff_cli_stores_the_matched_part_and_refuses_bad_arguments_before_work(tmp_path, capsys, monkeypatch):
    from hoplib._book.cli import run_cli

    assert run_cli(eff_ex.main, ["--out", str(tmp_path), "--seed", "-1"]) == 2
    assert "seed" in capsys.readouterr().err
    monkeypatch.setitem(eff_ex.PROFILES, "quick", {**eff_ex.PROFILES["quick"], "matched": EFF_TINY})
    path = eff_ex.main(["--out", str(tmp_path), "--profile", "quick"])
    assert path == tmp_path / "efficient_attention" / "quick" / "matched.json"
    stored = json.loads(path.read_text())
    lbx.check_stored_settings(stored["parameters"], EFF_TINY, (*eff_ex.MATCHED_KEYS, "grid"))
    assert len(stored["data"]) == 3 * 4 and not path.with_name("matched.partial.json").exists()
    assert run_cli(eff_ex.main, ["--out", str(tmp_path), "--profile", "quick"]) == 2
    assert "exists" in capsys.readouterr().err
    tiny_control = {**EFF_TINY, "kinds": ["performer"], "n_features": 10, "depths": [1]}
    monkeypatch.setitem(eff_ex.PROFILES, "quick", {**eff_ex.PROFILES["quick"], "features": tiny_control})
    control = eff_ex.main(["--out", str(tmp_path), "--profile", "quick", "--part", "features"])
    assert control.name == "features.json"
    assert {r["n_features"] for r in json.loads(control.read_text())["data"]} == {10}


def test_grid_points_nest_kind_width_depth_rate_and_refuse_what_they_cannot_train():
    from hoplib.lower_bounds.sweep import grid_points

    settings = {"kinds": ["a", "b"], "widths": [8], "depths": [1, 2], "lrs": [1e-3, 3e-3]}
    points = grid_points(settings, ("kinds", "widths", "depths", "lrs"), ("a", "b"))
    assert [(p["kind"], p["depth"], p["lr"]) for p in points][:3] == [("a", 1, 1e-3), ("a", 1, 3e-3), ("a", 2, 1e-3)]
    assert len(points) == 2 * 1 * 2 * 2
    with pytest.raises(ValueError, match="steps"):
        grid_points(settings, ("kinds", "steps"), ("a", "b"))
    for bad, match in (({"kinds": ["c"]}, "kinds"), ({"depths": [0]}, "depths"), ({"lrs": [-1.0]}, "lrs")):
        with pytest.raises(ValueError, match=match):
            grid_points({**settings, **bad}, (), ("a", "b"))


def test_sweep_points_needs_a_learning_rate_per_point_and_its_settings():
    from hoplib.lower_bounds.sweep import sweep_points

    task = HopTask(seq_len=10, alphabet_size=4, max_hops=2)
    with pytest.raises(ValueError, match="lr"):
        sweep_points(task, [{"kind": "gru", "d_model": 8, "depth": 1}], EFF_TINY, None)
    with pytest.raises(ValueError, match="n_samples"):
        sweep_points(task, [], {"steps": 1, "warmup_steps": 0}, None)
    with pytest.raises(TypeError, match="HopTask"):
        sweep_points(None, [], EFF_TINY, None)


def test_reach_summary_compares_with_any_reference_family():
    reach = {"Longformer": {2: 1, 3: 2, 4: 3, 5: 4}, "softmax, seed 0": {2: 1, 3: 3, 4: 3, 5: 6}}
    seen = lbx.reach_summary(reach, reference="softmax")
    assert seen == {"tf": {3: 3, 5: 6}, "tf_doubles": True, "steps": {"Longformer": 1},
                    "behind_at_high": {"Longformer": True}}
    with pytest.raises(ValueError, match="softmax"):
        lbx.reach_summary({"Longformer": reach["Longformer"]}, reference="softmax")


def test_favor_summary_reports_a_falling_error_and_its_slope():
    recs = [{"n_features": m, "draw": d, "weight_error": m ** -0.5 * (1 + 0.01 * d), "output_error": 0.0}
            for m in (4, 16, 64) for d in range(2)]
    s = eff_ex.favor_summary(recs)
    assert s["decreasing"] and s["slope"] == pytest.approx(-0.5, abs=1e-6)
    assert s["ratio"] == pytest.approx(4.0) and (s["m_lo"], s["m_hi"]) == (4, 64)
    assert not eff_ex.favor_summary(recs + [{"n_features": 256, "weight_error": 1.0}])["decreasing"]
    with pytest.raises(ValueError, match="two"):
        eff_ex.favor_summary(recs[:2])


def test_both_reductions_post_the_formula_bits_and_reproduce_the_model():
    settings = dict(eff_ex.PROFILES["quick"], bit_table=[(2, 3)])
    rows = eff_ex.reduction_rows(settings, seed=0)
    assert [r["kind"] for r in rows] == ["performer", "longformer"]
    assert eff_ex.reductions_exact(rows)
    assert not eff_ex.reductions_exact([dict(rows[0], bits=rows[0]["bits"] + 1)])
    with pytest.raises(ValueError, match="red_window"):
        eff_ex.reduction_rows({k: v for k, v in settings.items() if k != "red_window"})


def test_attention_summary_reads_solved_range_and_best_errors():
    recs = _records({("softmax", 2): [0, 0.0, 0.05, 0.4], ("softmax", 3): [0, 0.0, 0.2, 0.3],
                     ("performer", 2): [0, 0.2, 0.3, 0.5], ("longformer", 2): [0, 0.05, 0.5, 0.6]})
    s = eff_ex.summary(recs, 0.1)
    assert s["solved"] == {"softmax": 2, "performer": 0, "longformer": 1} and s["kmax"] == 3
    assert s["best"]["softmax"] == {1: 0.0, 2: 0.05, 3: 0.3}
    rows = eff_ex.summary_rows(s)
    assert [r["attention"] for r in rows] == ["softmax", "performer", "longformer"]
    assert rows[1]["solved up to k"] == 0 and rows[2]["best error k=2"] == "0.500"
    with pytest.raises(ValueError, match="attention types"):
        eff_ex.summary(_records({("gru", 1): [0.0, 0.1]}), 0.1)


# --------------------------------------------------------------------------- the chain-of-thought chapter


def test_one_layer_gpt_decodes_the_same_tokens_as_its_protocol():
    settings = dict(cot_ex.PROFILES["quick"], seq_len=10, max_hops=2, d_model=16, heads=2)
    check = cot_ex.protocol_check(settings, seed=0)
    assert check["tokens_equal"] and check["bits"] == check["formula"] and check["rounds"] == 4


def test_chain_lengths_show_half_chain_equals_full_chain_at_k_1():
    rows = {r["chain"]: r for r in cot_ex.chain_lengths([1, 2, 3])}
    assert [rows[c]["k=1"] for c in ("none", "half", "full")] == [0, 1, 1]
    assert rows["full"]["k=3"] == 5 and rows["full"]["max lookups/token"] == 1
    assert rows["half"]["max lookups/token"] == 3


def test_hand_built_one_layer_transformer_follows_the_chain_when_cold():
    settings = dict(cot_ex.PROFILES["quick"], build_seq_len=16, build_max_hops=3, build_samples=40,
                    coldness=[0.5, 30.0])
    assert cot_ex.construction_errors(settings, seed=0) == {"worst_error": 0.0, "min_chain_exact": 1.0}
    cold = cot_ex.coldness_sweep(settings, seed=0)
    assert cold[30.0] == 0.0 and cold[0.5] > 0.1


def test_errors_by_chain_needs_every_chain_format():
    rows = [{"chain": c, "k": k, "error": 0.1 * k} for c in ("none", "half", "full") for k in (1, 2)]
    assert cot_ex.errors_by_chain(rows)["half"] == {1: 0.1, 2: 0.2}
    with pytest.raises(ValueError, match="half"):
        cot_ex.errors_by_chain([r for r in rows if r["chain"] != "half"])


# --------------------------------------------------------------------------- the GNN chapter


def test_gnn_output_at_t_depends_only_on_its_ball():
    rows = gnn_ex.locality_table("path", 4, [1, 2], seed=0)
    assert len(rows) == 6
    assert all(r["change (outside L-ball)"] == 0.0 and r["change (outside (L-1)-ball)"] > 0.0 for r in rows)


def test_moving_the_source_is_invisible_below_the_diameter():
    assert gnn_ex.same_output_when_source_moves("path", 3, 4, seed=0) == [True] * 3 + [False] * 2


def test_exact_gnn_needs_d_layers_and_doubling_log_d_squarings():
    settings = {"exact_ds": [2, 5], "doubling_ds": [2, 8], "mpc_ds": [2, 4], "mpc_memory": 128}
    found = gnn_ex.depth_vs_diameter(settings, seed=0)
    assert gnn_ex.structure_holds(found) == {"exact_needs_D": True, "doubling_log_D": True, "mpc_correct": True}
    assert len(found["exact"]) == 2 * 3
    broken = dict(found, doubling=[dict(found["doubling"][0], squarings=5)])
    assert not gnn_ex.structure_holds(broken)["doubling_log_D"]


def test_learned_summary_applies_the_locality_bound_with_sampling_noise():
    rows = [{"model": "gnn", "D": 3, "depth": 2, "accuracy": 0.55}, {"model": "gnn", "D": 3, "depth": 3,
            "accuracy": 1.0}, {"model": "transformer", "D": 3, "depth": 1, "accuracy": 0.52}]
    s = gnn_ex.learned_summary(rows, 0.9, 400)
    assert s["noise"] == pytest.approx(0.125) and s["shallow_at_chance"] and s["tf_at_chance"]
    assert (s["deep_ok"], s["deep_n"], s["tf_best"]) == (1, 1, 0.52)
    assert s["all_or_nothing"]
    strict = gnn_ex.learned_summary(rows, 0.9, 10_000)  # noise 0.025: 0.55 is neither chance nor solved
    assert not strict["shallow_at_chance"] and not strict["all_or_nothing"]
    with pytest.raises(ValueError, match="transformers"):
        gnn_ex.learned_summary(rows[:2], 0.9, 400)


def _edge_rows(acc: dict[tuple[str, int], list[float]]) -> list[dict]:
    return [{"model": "edge-transformer", "family": fam, "D": d, "depth": i + 1, "accuracy": a, "edge_accuracy": a}
            for (fam, d), accs in acc.items() for i, a in enumerate(accs)]


def test_edge_summary_reads_the_smallest_solving_depth_and_its_growth():
    rows = _edge_rows({("path", 2): [1.0, 1.0, 1.0], ("path", 4): [0.5, 0.95, 1.0], ("path", 8): [0.5, 0.5, 0.95]})
    s = gnn_ex.edge_summary(rows, 0.9)
    assert s["needed"] == {("path", 2): 1, ("path", 4): 2, ("path", 8): 3}
    assert s["all_solved"] and s["below_D"] and s["within_log"] and s["grows"] and s["shallow_fails"]
    one_hop = _edge_rows({("path", 4): [0.5, 0.7, 1.0]})  # depth D - 1: passing the mark one edge a layer
    assert not gnn_ex.edge_summary(one_hop, 0.9)["within_log"]
    worse = _edge_rows({("path", 2): [0.5, 1.0, 1.0], ("path", 4): [0.9, 1.0, 1.0], ("path", 8): [0.5] * 3})
    w = gnn_ex.edge_summary(worse, 0.9)
    assert w["needed"][("path", 8)] is None and not w["all_solved"]
    assert not w["grows"] and not w["shallow_fails"]  # D = 4 solved at depth 1, D = 2 needs 2
    plots_ok = gnn_ex.plot_edge_sweep(rows, 0.9)
    from hoplib.plots import check_legible

    check_legible(plots_ok)
    matplotlib.pyplot.close(plots_ok)
    assert "0.950 (0.95)" in gnn_ex.edge_text(rows)


def test_edge_points_cover_the_profile_grid_and_skip_small_diameters():
    settings = dict(gnn_ex.PROFILES["quick"], edge_families=["path", "cycle"], edge_ds=[1, 2], edge_depths=[1])
    assert gnn_ex.edge_points(settings) == [{"family": "path", "D": 1, "depth": 1},
                                            {"family": "path", "D": 2, "depth": 1},
                                            {"family": "cycle", "D": 2, "depth": 1}]
    with pytest.raises(ValueError, match="lack"):
        gnn_ex.edge_points({"edge_ds": [2]})


def test_sweep_settings_read_the_pair_settings_under_edge_names():
    quick = gnn_ex.PROFILES["quick"]
    s = gnn_ex.sweep_settings(quick, "pair")
    assert s["pairs"] and s["edge_ds"] == quick["pair_ds"] and s["edge_steps"] == quick["pair_steps"]
    assert not gnn_ex.sweep_settings(quick, "edge")["pairs"]
    assert gnn_ex.edge_points(quick, "pair") == [{"family": "path", "D": d, "depth": L}
                                                 for d in quick["pair_ds"] for L in quick["pair_depths"]]
    with pytest.raises(ValueError, match="part"):
        gnn_ex.sweep_settings(quick, "pairs")
    for profile in gnn_ex.PROFILES.values():  # every profile defines both sweeps
        assert set(gnn_ex.PAIR_KEYS) <= set(profile) and set(gnn_ex.EDGE_KEYS) <= set(profile)
    row = gnn_ex.train_edge_point(0, {"family": "path", "D": 2, "depth": 1},
                                  dict(quick, pair_steps=5, eval_size=8), part="pair")
    assert row["target"] == "edges+pairs" and row["steps"] == 5


def test_edge_sweep_cli_control_run_records_its_steps_and_subset(tmp_path):
    path = gnn_ex.main(["--out", str(tmp_path), "--profile", "quick", "--diameters", "2", "--depths", "1",
                        "--steps", "3"])
    assert path.name == "edge_sweep_steps3.json"
    stored = json.loads(path.read_text())
    params = stored["parameters"]
    assert params["edge_steps"] == 3 and params["edge_ds"] == [2] and params["edge_depths"] == [1]
    assert [(r["D"], r["depth"], r["steps"]) for r in stored["data"]] == [(2, 1, 3)]
    deeper = gnn_ex.main(["--out", str(tmp_path), "--profile", "quick", "--part", "pair", "--diameters", "2",
                          "--depths", "4", "1", "--steps", "2"])  # a depth beyond the profile's: named in the file
    assert deeper.name == "pair_sweep_steps2_depths1-4.json"
    assert json.loads(deeper.read_text())["parameters"]["pair_depths"] == [1, 4]


def test_budget_text_puts_each_training_length_on_a_row_and_each_depth_in_a_column():
    row = {"D": 16, "edge_accuracy": 0.6, "accuracy": 0.5}
    rows = [{**row, "depth": 4, "steps": 12000}, {**row, "depth": 4, "steps": 24000, "accuracy": 0.95},
            {**row, "depth": 6, "steps": 24000}, {**row, "D": 8, "depth": 1, "steps": 12000}]
    table = gnn_ex.budget_text(rows, 16)
    assert table.header == ["steps", "depth 4", "depth 6"]
    assert table.body == [["12,000", "0.500 (0.60)", "-"], ["24,000", "0.950 (0.60)", "0.500 (0.60)"]]
    with pytest.raises(ValueError, match="D = 32"):
        gnn_ex.budget_text(rows, 32)


def test_edge_sweep_cli_rejects_bad_arguments_before_any_work(tmp_path, capsys):
    from hoplib._book.cli import run_cli

    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--workers", "0"]) == 2
    assert "workers" in capsys.readouterr().err
    (tmp_path / "gnn" / "quick").mkdir(parents=True)
    (tmp_path / "gnn" / "quick" / "edge_sweep.json").write_text("{}")
    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--profile", "quick"]) == 2
    assert "exists" in capsys.readouterr().err
    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--profile", "quick", "--diameters", "3"]) == 2
    assert "not in the profile" in capsys.readouterr().err
    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--profile", "quick", "--part", "pair",
                                 "--diameters", "8"]) == 2
    assert "not in the profile" in capsys.readouterr().err
    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--profile", "quick", "--depths", "0"]) == 2
    assert "depths" in capsys.readouterr().err
    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--profile", "quick", "--steps", "0"]) == 2
    assert "steps" in capsys.readouterr().err
    (tmp_path / "gnn" / "quick" / "pair_sweep.json").write_text("{}")
    assert run_cli(gnn_ex.main, ["--out", str(tmp_path), "--profile", "quick", "--part", "pair"]) == 2
    assert "exists" in capsys.readouterr().err


# --------------------------------------------------------------------------- the closing table


def test_closing_table_has_one_row_per_architecture_from_the_stored_runs(monkeypatch):
    monkeypatch.setenv("HOPLIB_RESULTS", str(RESULTS))
    rows, sources = closing.stored_closing_rows()
    assert [r["architecture"] for r in rows] == [t[0] for t in closing.THEORY.values()]
    assert all(set(r) == set(closing.COLUMNS) and r[closing.COLUMNS[-1]] for r in rows)
    assert "Conjecture 2.4" in rows[0]["depth needed (theory)"] and len(sources) == 8
    html = closing.sources_html(sources)
    assert html.count("<details>") == 8 and "results/training/medium/" in html
    assert "Provenance of results/efficient_attention/cpu/matched.json" in html
    assert all("N = 64, k ≤ 8" in rows[i][closing.COLUMNS[-1]] for i in range(4))  # one task for the four
    edge_set = rows[-1][closing.COLUMNS[-1]]  # the edge-set transformer's stored runs, edge labels first
    assert "path D=4: L=2" in edge_set.split("Edge and pair labels")[0] and "path D=8" in edge_set
    assert "GRU: L = 1, 2" in rows[3][closing.COLUMNS[-1]]
    html = closing.to_html([dict(rows[0], architecture="a<b")])
    assert html.startswith("<table") and "a&lt;b" in html


def test_closing_rows_state_each_architectures_reach_by_depth():
    reach = {"softmax": {"best of seeds": {2: 1, 3: 3}}, "performer": {"performer": {2: 1, 3: 2}},
             "longformer": {"longformer": {2: 0, 3: 1}}, "rnn": {"GRU": {1: 1, 2: 2}, "LSTM": {1: 1, 2: 1}}}
    cot_rows = [{"chain": c, "k": 1, "error": e} for c, e in (("full", 0.0), ("none", 0.4))]
    structure = {"exact": [{"D": 2}], "doubling": [{"D": 4}], "mpc": [{"D": 4, "iterations": 3}]}
    learned = [{"family": "path", "D": 2, "model": m, "depth": 2, "accuracy": a}
               for m, a in (("gnn", 1.0), ("transformer", 0.5))]
    edges = [{"family": "path", "D": 4, "model": "edge-transformer", "depth": 2, "accuracy": 0.95}]
    rows = closing.closing_rows(reach=reach, where="N = 8", cot_rows=cot_rows, structure=structure,
                                learned=learned, edges=edges)
    measured = [r[closing.COLUMNS[-1]] for r in rows]
    assert measured[2] == "largest K with error ≤ 0.1 at every k ≤ K, by depth: longformer: L = 2, 3: 0, 1 (N = 8)"
    assert "GRU: L = 1, 2: 1, 2; LSTM: L = 1, 2: 1, 1" in measured[3]
    assert "path D=2: L=2" in measured[5] and "path D=2: none up to L=2" in measured[6]  # the depths tried
    assert measured[7] == "edge labels: trained, smallest depth with accuracy ≥ 0.9: path D=4: L=2"
    pairs = [dict(edges[0], depth=d, accuracy=a) for d, a in ((1, 0.5), (3, 0.95))]
    with_pairs = closing.closing_rows(reach=reach, where="N = 8", cot_rows=cot_rows, structure=structure,
                                      learned=learned, edges=edges, pairs=pairs)[7][closing.COLUMNS[-1]]
    assert with_pairs == measured[7] + ". Edge and pair labels: trained, smallest depth with accuracy ≥ 0.9: " \
                                       "path D=4: L=3"
    with pytest.raises(ValueError, match="rnn"):
        closing.closing_rows(reach={k: v for k, v in reach.items() if k != "rnn"}, where="", cot_rows=cot_rows,
                             structure=structure, learned=learned, edges=edges)


def test_closing_table_needs_rows():
    with pytest.raises(ValueError, match="non-empty"):
        closing.to_html([])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_learned_accuracies_pivot_to_one_row_per_model_and_one_column_per_depth():
    rows = [{"family": "path", "D": 2, "model": "gnn", "depth": d, "accuracy": a} for d, a in ((1, 0.5), (2, 1.0))]
    rows.append({"family": "path", "D": 2, "model": "transformer", "depth": 1, "accuracy": 0.6})
    table = gnn_ex.learned_text(rows)
    assert table.header == ["family", "D", "model", "depth 1", "depth 2"]
    assert table.body == [["path", "2", "gnn", "0.500", "1.000"], ["path", "2", "transformer", "0.600", "-"]]


def test_rnn_reach_table_gives_the_largest_k_solved_from_one_on_per_depth():
    recs = _records({("gru", 1): [0, 0.0, 0.05, 0.3], ("gru", 2): [0, 0.2, 0.0, 0.0]})
    assert rnn_ex.reach_table({"GRU": recs}) == {"GRU": {1: 2, 2: 0}}  # depth 2 misses k = 1
    mixed = _records({("gru", 1): [0, 0.0], ("lstm", 1): [0, 0.0]})
    with pytest.raises(ValueError, match="one family"):
        rnn_ex.reach_table({"both": mixed})


def test_rnn_plot_reach_draws_every_group_and_both_constructions_legibly():
    from hoplib.plots import check_legible

    fig = rnn_ex.plot_reach({"GRU": {1: 2, 2: 3}, "transformer": {2: 1, 3: 3}}, max_hops=4, title="t")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels[2:] == ["GRU", "transformer"] and "one hop per layer" in labels[0]
    assert check_legible(fig) >= 11
    with pytest.raises(ValueError):
        rnn_ex.plot_reach({}, max_hops=4)


def test_plot_groups_draws_one_panel_per_depth_and_one_curve_per_group_legibly():
    from hoplib.plots import check_legible

    rows = [{"kind": kind, "depth": d, "k": k, "error": 0.1 * k} for kind in ("a", "b") for d in (3, 5)
            for k in range(4)]
    groups = {f"model {kind}": [r for r in lbx.error_records(rows) if r.family == kind] for kind in ("a", "b")}
    fig = lbx.plot_groups(groups, [3, 5], title="t")
    assert [ax.get_title() for ax in fig.axes] == ["depth L = 3", "depth L = 5"]
    assert fig.axes[1].get_legend_handles_labels()[1] == ["model a", "model b"]
    assert [len(line.get_xdata()) for line in fig.axes[0].lines[:2]] == [3, 3]  # k = 1..3; k = 0 is left out
    assert check_legible(fig) >= 11
    with pytest.raises(ValueError, match="depth 4"):
        lbx.plot_groups(groups, [4])
    with pytest.raises(ValueError):
        lbx.plot_groups({}, [3])


def test_rnn_matched_settings_follow_the_training_grid_and_the_cli_stores_them_as_their_own_part(
        tmp_path, monkeypatch):
    from hoplib.training.sweep import GRIDS

    cpu = rnn_ex.PROFILES["cpu"]["matched"]
    grid = GRIDS[cpu["grid"]]
    assert (cpu["seq_len"], cpu["steps"], cpu["lrs"]) == (grid.settings["seq_len"], grid.settings["steps"],
                                                          [grid.settings["lr"]])
    assert cpu["widths"] == [grid.widths[0][0]] and "transformer" not in cpu["kinds"]
    with pytest.raises(ValueError, match="grid"):
        rnn_ex.matched_settings("huge", ["gru"], [1])
    tiny = {**RNN_TINY, "kinds": ["gru"], "lrs": [1e-3], "grid": "quick"}
    monkeypatch.setitem(rnn_ex.PROFILES, "quick", {**rnn_ex.PROFILES["quick"], "matched": tiny})
    path = rnn_ex.main(["--out", str(tmp_path), "--profile", "quick", "--part", "matched"])
    assert path.name == "matched.json"
    params = json.loads(path.read_text())["parameters"]
    lbx.check_stored_settings(params, tiny, (*rnn_ex.TRAIN_KEYS, "grid"))
    assert params["part"] == "matched"


def test_rnn_model_table_has_a_row_per_family_and_a_column_per_depth():
    rows = [{"kind": kind, "depth": d, "params": 1000 * d, "lr": 3e-3, "k": 0, "error": 0.0}
            for kind in ("transformer", "gru") for d in (1, 2)]
    table = rnn_ex.model_table(rows)
    text = str(table)
    assert text.index("gru") < text.index("transformer") and "2k, lr 0.003" in text and "L=2" in text
    with pytest.raises(ValueError):
        rnn_ex.model_table([])


def test_rnn_reach_summary_reads_the_doubling_and_the_one_hop_steps():
    reach = {"GRU": {1: 2, 2: 3, 3: 4, 4: 5, 5: 5}, "transformer, seed 0": {2: 1, 3: 3, 4: 3, 5: 6},
             "transformer, seed 1": {2: 1, 3: 3, 4: 6, 5: 6}}
    seen = rnn_ex.reach_summary(reach)
    assert seen == {"tf": {3: 3, 5: 6}, "tf_doubles": True, "steps": {"GRU": 1}, "behind_at_high": {"GRU": True}}
    reach["GRU"][5] = 7
    seen = rnn_ex.reach_summary(reach)
    assert seen["steps"] == {"GRU": 2} and seen["behind_at_high"] == {"GRU": False}
    with pytest.raises(ValueError, match="transformer"):
        rnn_ex.reach_summary({"GRU": reach["GRU"]})


def test_run_sweep_and_the_rnn_sweep_measure_a_point_alike():
    from hoplib.lower_bounds import rnn
    from hoplib.lower_bounds.sweep import run_sweep
    from hoplib.train import TrainConfig

    task = HopTask(seq_len=10, alphabet_size=4, max_hops=2)
    settings = {**RNN_TINY, "kinds": ["gru"], "lrs": [3e-3]}
    config = TrainConfig(steps=3, batch_size=rnn_ex.BATCH_SIZE, lr=3e-3, warmup_steps=1, seed=2)
    direct = run_sweep(task, [{"kind": "gru", "d_model": 8, "depth": 1}], rnn._build(task, rnn_ex.HEADS), config,
                       n_samples=8, device="cpu", progress=False)
    via = rnn_ex.sweep(task, settings, seed=2, device="cpu")
    assert [r["error"] for r in via] == [r["error"] for r in direct]


def test_rnn_settings_text_states_a_sweep_in_words():
    text = rnn_ex.settings_text(rnn_ex.PROFILES["cpu"])
    assert text == "width 64, depths 1 to 4, N = 32, k ≤ 4, 4,000 steps, learning rates 0.001 and 0.003"
    assert rnn_ex.settings_text(rnn_ex.PROFILES["cpu"]["matched"]).endswith("learning rate 0.002")
    with pytest.raises(ValueError, match="settings lack"):
        rnn_ex.settings_text({"lrs": [1e-3]})


def test_eff_locality_table_has_one_row_per_depth():
    found = {"horizon": {2: 1, 3: 2}, "reach": {2: 1, 3: 1}, "above": {2: -0.009, 3: 0.08}}
    table = eff_ex.locality_table(found)
    assert table.body == [["2", "1", "1", "-0.01"], ["3", "2", "1", "+0.08"]]
