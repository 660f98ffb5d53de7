"""Tests of scripts/run_rnn.py and scripts/run_efficient_attention.py, which regenerate the stored runs of the
RNN and efficient-attention chapters, and of the alphabet sweep they share (run_rnn.alphabet_point)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _scripts import load_script as _script

ROOT = Path(__file__).resolve().parent.parent
TINY = {"alphabets": [4, 8], "kinds": ["gru", "transformer"], "depth": 1, "widths": [8], "lrs": [3e-3],
        "steps": 3, "batch_size": 4, "warmup_steps": 1, "heads": 2, "n_samples": 4}




def _stored(chapter: str, name: str) -> dict:
    return json.loads((ROOT / "results" / chapter / "cpu" / f"{name}.json").read_text())["parameters"]


@pytest.mark.parametrize("chapter, name, part, changes", [
    ("rnn", "training", "training", {}), ("rnn", "matched", "matched", {}), ("rnn", "alphabet", "alphabet", {}),
    ("rnn", "state_lr", "state_lr", {}), ("rnn", "state", "state", {}), ("rnn", "state_seed1", "state", {}),
    ("efficient_attention", "matched", "matched", {}), ("efficient_attention", "features", "features", {}),
    ("efficient_attention", "alphabet", "alphabet", {}),
    ("efficient_attention", "alphabet_seed1", "alphabet", {"alphabets": [16]}),
    ("efficient_attention", "alphabet_steps4000_a16", "alphabet", {"alphabets": [16], "steps": 4000}),
    ("efficient_attention", "alphabet_steps4000_a32", "alphabet", {"alphabets": [32], "steps": 4000}),
])
def test_stored_runs_were_made_with_the_scripts_cpu_settings(chapter, name, part, changes):
    params = _stored(chapter, name)
    settings = {**_script(f"run_{chapter}").PROFILES["cpu"][part], **changes}
    assert {key: params[key] for key in settings} == json.loads(json.dumps(settings))


def test_alphabet_sweep_records_every_point_in_order_and_workers_do_not_change_results():
    run_rnn = _script("run_rnn")
    one = run_rnn.alphabet_run(TINY, seed=1, device="cpu", workers=1)
    assert [(r["alphabet_size"], r["kind"], r["seq_len"]) for r in one] == \
        [(a, kind, 2 * a + 32) for a in (4, 8) for kind in ("gru", "transformer")]
    assert all(0.0 <= r["error"] <= 1.0 and r["params"] > 0 for r in one)
    assert all((r["state_bits"] > 0) == (r["kind"] != "transformer") for r in one)
    again = run_rnn.alphabet_run(TINY, seed=1, device="cpu", workers=2)
    assert [r["error"] for r in again] == [r["error"] for r in one]


def _tiny_state(run_rnn) -> dict:
    """The state sweep's settings shrunk to seconds: two lengths, one recurrent family, two rates."""
    return {**run_rnn.STATE, "lengths": [8, 16], "kinds": ["gru"], "widths": [4], "transformer_width": 8,
            "reference": (8, 4), "lrs": [1e-3, 3e-3], "steps": 2, "batch_size": 4, "warmup_steps": 1,
            "heads": 2, "n_samples": 4}


def test_state_sweep_gives_each_family_the_rate_it_won_on_the_reference_runs(tmp_path, monkeypatch):
    run_rnn = _script("run_rnn")
    tiny = _tiny_state(run_rnn)
    monkeypatch.setitem(run_rnn.PROFILES["cpu"], "state_lr", tiny)
    monkeypatch.setitem(run_rnn.PROFILES["cpu"], "state", tiny)
    run_rnn.main(["--part", "state_lr", "--out", str(tmp_path)])
    ref = json.loads((tmp_path / "rnn" / "cpu" / "state_lr.json").read_text())["data"]
    assert sorted((r["kind"], r["lr"], r["seq_len"], r["d_model"]) for r in ref) == [
        ("gru", 1e-3, 8, 4), ("gru", 3e-3, 8, 4), ("transformer", 1e-3, 8, 8), ("transformer", 3e-3, 8, 8)]
    run_rnn.main(["--part", "state", "--seed", "1", "--out", str(tmp_path)])
    stored = json.loads((tmp_path / "rnn" / "cpu" / "state_seed1.json").read_text())
    chosen = stored["parameters"]["lr_by_kind"]
    for kind in ("gru", "transformer"):
        errors = {r["lr"]: r["error"] for r in ref if r["kind"] == kind}
        assert chosen[kind] == min(errors, key=errors.get)
    assert sorted((r["seq_len"], r["alphabet_size"], r["kind"], r["lr"]) for r in stored["data"]) == sorted(
        (n, n // 4, kind, chosen[kind]) for n in (8, 16) for kind in ("gru", "transformer"))


def test_long_state_sweep_trains_the_transformer_at_every_width_with_the_picked_rates(tmp_path, monkeypatch):
    run_rnn = _script("run_rnn")
    tiny = _tiny_state(run_rnn)
    monkeypatch.setitem(run_rnn.PROFILES["cpu"], "state_lr", tiny)
    monkeypatch.setitem(run_rnn.PROFILES["cpu"], "state_long", {**tiny, "kinds": ["gru", "transformer"],
                                                              "widths": [4, 8], "transformer_width": None})
    run_rnn.main(["--part", "state_lr", "--out", str(tmp_path)])
    run_rnn.main(["--part", "state_long", "--out", str(tmp_path)])
    stored = json.loads((tmp_path / "rnn" / "cpu" / "state_long.json").read_text())
    chosen = stored["parameters"]["lr_by_kind"]
    assert sorted((r["seq_len"], r["kind"], r["d_model"], r["lr"]) for r in stored["data"]) == sorted(
        (n, kind, w, chosen[kind]) for n in (8, 16) for kind in ("gru", "transformer") for w in (4, 8))


def test_chosen_rate_is_the_lowest_error_and_the_first_on_a_tie():
    run_rnn = _script("run_rnn")
    records = [{"kind": "gru", "lr": 1e-3, "error": 0.5}, {"kind": "gru", "lr": 1e-2, "error": 0.5},
               {"kind": "lstm", "lr": 1e-3, "error": 0.5}, {"kind": "lstm", "lr": 1e-2, "error": 0.1}]
    assert run_rnn.chosen_lrs(records) == {"gru": 1e-3, "lstm": 1e-2}


def test_matched_settings_follow_the_training_grid():
    from hoplib.grids import GRIDS

    matched = _script("run_rnn").matched_settings("cpu", ["gru"], [1, 2])
    grid = GRIDS["cpu"]
    assert matched["grid"] == "medium"  # the folder its stored transformers keep
    assert (matched["seq_len"], matched["steps"], matched["lrs"], matched["warmup_steps"]) == (
        grid.settings["seq_len"], grid.settings["steps"], [grid.settings["lr"]], grid.settings["warmup_steps"])
    assert matched["widths"] == [grid.widths[0][0]] and matched["heads"] == grid.widths[0][1]


def test_the_attention_alphabet_sweep_builds_performer_and_longformer_models():
    settings = {**TINY, "n_features": 4, "window": 2, "global_every": None}
    for kind in ("softmax", "performer", "longformer"):
        point = {"alphabet_size": 4, "seq_len": 40, "kind": kind, "d_model": 8, "depth": 1, "lr": 3e-3}
        rec = _script("run_rnn").alphabet_point(0, point, settings)
        assert rec["state_bits"] == 0 and 0.0 <= rec["error"] <= 1.0


def test_a_control_run_names_its_steps_and_alphabets_and_never_overwrites(tmp_path, monkeypatch):
    script = _script("run_efficient_attention")
    monkeypatch.setitem(script.PROFILES["cpu"], "alphabet", {**TINY, "kinds": ["longformer"], "n_features": None,
                                                             "window": 2, "global_every": None})
    path = script.main(["--out", str(tmp_path), "--part", "alphabet", "--alphabets", "8", "--steps", "2"])
    assert path.name == "alphabet_steps2_a8.json"
    stored = json.loads(path.read_text())
    assert stored["parameters"]["steps"] == 2 and stored["parameters"]["alphabets"] == [8]
    assert {r["alphabet_size"] for r in stored["data"]} == {8}
    with pytest.raises(ValueError, match="exists"):
        script.main(["--out", str(tmp_path), "--part", "alphabet", "--alphabets", "8", "--steps", "2"])


def test_grid_part_trains_the_attention_each_point_names(tmp_path, monkeypatch):
    script = _script("run_efficient_attention")
    grid = [{"kind": "longformer", "window": 1, "global_every": 4},
            {"kind": "performer", "n_features": 8, "feature_map": "elu"}, {"kind": "softmax"}]
    tiny = {**script.PROFILES["cpu"]["longformer_grid"], "seq_len": 12, "max_hops": 2, "widths": [16],
            "heads": 2, "steps": 2, "warmup_steps": 1, "n_samples": 4, "attentions": grid}
    monkeypatch.setitem(script.PROFILES["cpu"], "longformer_grid", tiny)
    path = script.main(["--out", str(tmp_path), "--part", "longformer_grid"])
    records = json.loads(path.read_text())["data"]
    firsts = [next(r for r in records if r["kind"] == a["kind"]) for a in grid]
    assert [{key: r[key] for key in a} for r, a in zip(firsts, grid, strict=True)] == grid
    assert {r["k"] for r in records} == {0, 1, 2} and len(records) == 3 * len(grid)
    with pytest.raises(ValueError, match="exists"):
        script.main(["--out", str(tmp_path), "--part", "longformer_grid"])


@pytest.mark.parametrize("part", ["longformer_grid", "performer_grid"])
def test_stored_grids_were_made_with_the_scripts_cpu_settings(part):
    folder = ROOT / "results" / "efficient_attention" / "cpu"
    if (folder / f"{part}.json").exists():
        params = json.loads((folder / f"{part}.json").read_text())["parameters"]
    else:  # not finished: the partial file holds the settings it resumes with
        params = json.loads((folder / f"{part}.partial.json").read_text())["data"]["params"]
    settings = _script("run_efficient_attention").PROFILES["cpu"][part]
    assert {key: params[key] for key in settings} == json.loads(json.dumps(settings))


def test_capacity_sweep_tries_beyond_an_edge_pick_and_gives_each_family_its_rate_at_every_size(tmp_path,
                                                                                                 monkeypatch):
    run_rnn = _script("run_rnn")
    tiny = {**run_rnn.CAPACITY, "alphabet_size": 8, "seq_len": 24, "steps": 3, "warmup_steps": 1, "n_samples": 4,
            "lrs": [1e-3, 1e-2], "beyond": (1e-4, 1e-1),
            "models": {"gru": [{"d_model": 8, "state_width": h} for h in (1, 4)],
                       "mamba": [{"d_model": 8, "d_inner": 2, "d_state": 2, "d_conv": 2, "n_heads": 2}],
                       "transformer": [{"d_model": 8, "state_width": 0}]},
            "reference": {"gru": 4, "mamba": 2, "transformer": 0}}
    for part in ("capacity", "capacity_lr", "capacity_lr_edge"):
        monkeypatch.setitem(run_rnn.PROFILES["cpu"], part, tiny)
    for part in ("capacity_lr", "capacity_lr_edge", "capacity"):
        run_rnn.main(["--part", part, "--out", str(tmp_path)])
    run_rnn.main(["--part", "capacity", "--seed", "1", "--steps", "6", "--out", str(tmp_path)])
    folder = tmp_path / "rnn" / "cpu"
    grid = json.loads((folder / "capacity_lr.json").read_text())["data"]
    edge = json.loads((folder / "capacity_lr_edge.json").read_text())["data"]
    assert {(r["kind"], r["lr"]) for r in grid} == {(k, lr) for k in tiny["models"] for lr in tiny["lrs"]}
    assert {r["lr"] for r in edge} <= set(tiny["beyond"]) and {r["kind"] for r in edge} == set(tiny["models"])
    picked = run_rnn.chosen_lrs(grid + edge)
    for name, steps in (("capacity", 3), ("capacity_seed1_steps6", 6)):
        stored = json.loads((folder / f"{name}.json").read_text())
        assert stored["parameters"]["steps"] == steps
        assert [(r["kind"], r["lr"]) for r in stored["data"]] == [(k, picked[k]) for k, ms in
                                                                  tiny["models"].items() for _ in ms]
        assert [r["state_bits"] for r in stored["data"]] == [32, 128, 32 * (2 + 2 * 2) + 32 * 2 * 2, 0]  # conv, S


def test_cpu_settings_run_on_a_gpu_go_to_their_own_file(tmp_path, monkeypatch):
    run_rnn = _script("run_rnn")
    monkeypatch.setattr(run_rnn, "run_device", lambda args: "cuda:0")
    monkeypatch.setattr(run_rnn, "run_part", lambda args, s, path, params, depth: path)
    monkeypatch.setattr(run_rnn, "chosen_lrs", lambda rows: {})
    monkeypatch.setattr("hoplib.results.load_stored", lambda *a, **k: type("S", (), {"data": []})())
    path = run_rnn.main(["--part", "capacity", "--seed", "2", "--steps", "8000", "--out", str(tmp_path)])
    assert path.name == "capacity_seed2_steps8000_cuda.json"
    assert run_rnn.main(["--part", "alphabet", "--out", str(tmp_path)]).name == "alphabet_cuda.json"


def test_capacity_runs_read_every_budget_seed_and_device_and_the_headline_takes_a_replicated_budget(tmp_path):
    from hoplib.lower_bounds import families
    from hoplib.results import save_results

    folder = tmp_path / "rnn" / "cpu"
    row = {"kind": "gru", "state_width": 4, "depth": 2, "lr": 0.03, "state_bits": 128, "error": 0.9}
    base = {"alphabet_size": 32, "seq_len": 128}
    for name, seed, steps, device in (("capacity", 0, 2000, "cpu"), ("capacity_seed1", 1, 2000, "cpu"),
                                      ("capacity_steps4000", 0, 4000, "cpu"),
                                      ("capacity_steps8000_cuda", 0, 8000, "cuda")):
        save_results(folder / f"{name}.json", [row], {**base, "seed": seed, "steps": steps, "device": device},
                     device)
    save_results(folder / "capacity_lr.json", [row], {**base, "seed": 0, "steps": 2000, "device": "cpu"}, "cpu")
    (folder / "capacity_seed1_steps8000_cuda.partial.json").write_text("{}")
    runs = families.capacity_runs(root=str(tmp_path))
    got = sorted(zip(runs.seed, runs.steps, runs.device, strict=True))
    assert got == [(0, 2000, "cpu"), (0, 4000, "cpu"), (0, 8000, "cuda"), (1, 2000, "cpu")]
    assert runs.ratio.iloc[0] == 2 * 128 / 160
    assert families.replicated_budget(runs, min_seeds=2) == 2000
    assert families.replicated_budget(runs, min_seeds=1) == 8000
    with pytest.raises(ValueError, match="no capacity budget"):  # none on three seeds
        families.replicated_budget(runs)
