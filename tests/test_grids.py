"""Tests of hoplib.grids (Section 4.2 / Appendix G's grids): named grids, skipping finished runs, resuming
interrupted ones, ensembles, the one runner's workers, job arrays and --overwrite, diverged runs, and clear errors
for damaged records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _chapters import tagged_cells
from _scripts import load_script

import hoplib.train as train_mod
from hoplib.grids import GRIDS, Grid, collect, grid, run_name, stored_folder, train_grid
from hoplib.train import RunConfig, finished_results

ROOT = Path(__file__).resolve().parents[1]
run_status = load_script("run_training").run_status
TINY = dict(seq_len=10, max_hops=2, steps=30, lr=3e-3, warmup_steps=3, batch_size=8, eval_samples=10)


def test_paper_grid_is_the_authors_v1_grid_and_grids_are_named_once():
    configs = grid("paper").configs()
    assert len(configs) == 20  # (4, 128): 5 depths x 3 regimes; (8, 256): 5 depths, infinite only
    assert all(isinstance(c, RunConfig) for c in configs)
    assert {(c.d_model, c.heads) for c in configs} == {(128, 4), (256, 8)}
    assert {c.train.n_train for c in configs if c.d_model == 256} == {None}
    assert {c.train.n_train for c in configs if c.d_model == 128} == {1000, 3000, None}
    c = configs[0]
    assert (c.seq_len, c.max_hops, c.train.steps, c.train.lr, c.train.warmup_steps, c.train.batch_size) == (
        100, 16, 100_000, 1e-4, 1000, 32)
    assert c.head == "layernorm" and c.dropout == 0.1 and c.train.weight_decay == 0.01
    assert {c.depth for c in configs} == {2, 3, 4, 5, 6}
    small = grid("small").configs()
    assert len(small) == 10 and {c.depth for c in small} == {2, 3}
    assert {(c.d_model, c.heads) for c in small} == {(16, 1), (32, 2), (64, 4)}
    assert {c.train.n_train for c in small if c.d_model == 64} == {250, 1000, None}
    assert {c.train.n_train for c in small if c.d_model < 64} == {None}
    assert all(c.seq_len == 32 and c.max_hops == 4 and c.head == "linear" for c in small)
    quick = grid("quick").configs()
    assert max(c.max_hops for c in quick) <= 4 and len(quick) >= 3
    assert set(GRIDS) == {"quick", "small", "cpu", "depth", "gpu", "paper"} and grid("quick") is GRIDS["quick"]


@pytest.mark.parametrize("name", ["small", "cpu"])
def test_stored_runs_still_count_as_finished_and_collect_to_their_table(name):
    where = ROOT / "results" / "training" / stored_folder(name)
    configs = grid(name).configs()
    assert all(finished_results(where / run_name(c), c) is not None for c in configs)
    assert set(run_status(where, configs).values()) == {"complete"}
    assert collect(where, configs) == json.loads((where / "table.json").read_text())["data"]


def test_sweep_skips_finished_runs_and_resumes_interrupted_ones(tmp_path, monkeypatch):
    g = Grid(depths=(1, 2), widths=((16, 2),), settings=TINY)
    ref = train_grid(g, tmp_path / "ref", device="cpu", progress=False, checkpoint_every=10)
    assert len(ref) == 2 * 3 * 2 and {r["depth"] for r in ref} == {1, 2}

    # Interrupt the first run after its step-20 checkpoint by failing inside the data stream.
    original = train_mod.DataStream.batch

    def failing(self, step):
        if step == 25 and self.task.seq_len == 10:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(train_mod.DataStream, "batch", failing)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_grid(g, out, device="cpu", progress=False, checkpoint_every=10)
    first = g.configs()[0]
    assert torch.load(out / run_name(first) / "checkpoint.pt", weights_only=True)["step"] == 20
    assert run_status(out, g.configs()) == {run_name(first): "unfinished", run_name(g.configs()[1]): "missing"}
    monkeypatch.setattr(train_mod.DataStream, "batch", original)
    table = train_grid(g, out, device="cpu", progress=False, checkpoint_every=10)
    assert table == ref  # resumed runs give exactly the uninterrupted results

    # A finished sweep trains nothing: make training impossible and run it again.
    monkeypatch.setattr("hoplib.grids.train_run",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    assert train_grid(g, out, device="cpu", progress=False) == ref
    assert json.loads((out / "table.json").read_text())["data"] == ref
    assert collect(out) == ref


def test_ensemble_sweep_matches_the_sequential_sweep(tmp_path):
    g = Grid(depths=(2,), widths=((16, 2),), n_trains=(None, 40), seeds=(0, 1), settings=TINY)
    seq = train_grid(g, tmp_path / "seq", device="cpu", progress=False)
    ens = train_grid(g, tmp_path / "ens", device="cpu", progress=False, ensemble=True)
    assert len(seq) == len(ens) == 4 * 3 * 2
    for c in g.configs():
        a = torch.load(tmp_path / "seq" / run_name(c) / "model.pt", weights_only=True)
        b = torch.load(tmp_path / "ens" / run_name(c) / "model.pt", weights_only=True)
        for name in a:
            assert torch.allclose(a[name], b[name], atol=1e-4), (run_name(c), name)
        rec = json.loads((tmp_path / "ens" / run_name(c) / "results.json").read_text())
        assert rec["complete"] and rec["provenance"]["ensemble_size"] == 4
    # and a second ensemble sweep skips everything
    assert train_grid(g, tmp_path / "ens", device="cpu", progress=False, ensemble=True) == ens


def test_ensemble_sweep_trains_a_group_of_one_as_a_plain_run(tmp_path):
    # like the paper grid's m = 256 architectures: one run per architecture group
    g = Grid(depths=(2,), widths=((16, 2), (32, 2)), n_trains=(None, 40), exclude=((32, 40),), settings=TINY)
    table = train_grid(g, tmp_path, device="cpu", progress=False, ensemble=True)
    sizes = {}
    for c in g.configs():
        rec = json.loads((tmp_path / run_name(c) / "results.json").read_text())
        assert rec["complete"]
        sizes[(c.d_model, c.train.n_train)] = rec["provenance"].get("ensemble_size")
    assert sizes == {(16, None): 2, (16, 40): 2, (32, None): None}
    assert {r["d_model"] for r in table} == {16, 32}


@pytest.mark.parametrize("ensemble", [False, True])
def test_diverged_runs_are_recorded_left_out_of_the_table_and_not_retrained(tmp_path, monkeypatch, ensemble):
    # a run with a NaN loss is recorded as diverged, not "complete" with errors 1.0, and stays out of the table
    g = Grid(depths=(1,), widths=((16, 2),), n_trains=(None, 40),
             settings={**TINY, "lr": 1e30, "warmup_steps": 0, "steps": 8})
    with pytest.warns(RuntimeWarning, match="diverged"):
        table = train_grid(g, tmp_path, device="cpu", progress=False, ensemble=ensemble, checkpoint_every=2)
    assert table == []
    assert set(run_status(tmp_path, g.configs()).values()) == {"diverged"}
    for c in g.configs():
        rec = json.loads((tmp_path / run_name(c) / "results.json").read_text())
        assert rec["diverged"] is True and rec["complete"] is False
    monkeypatch.setattr("hoplib.grids.train_run", lambda *a, **k: pytest.fail("retrained"))
    assert train_grid(g, tmp_path, device="cpu", progress=False, ensemble=ensemble) == []


def test_collect_mixes_complete_runs_and_skips_diverged_ones(tmp_path):
    stored = ROOT / "results" / "training" / "small" / "L2_m16_H1_ninf_s0"
    shutil.copytree(stored, tmp_path / stored.name)
    rec = json.loads((stored / "results.json").read_text())
    bad = tmp_path / "L9_bad"
    bad.mkdir()
    (bad / "results.json").write_text(json.dumps({"config": rec["config"], "complete": False, "diverged": True}))
    rows = collect(tmp_path)
    assert {r["run"] for r in rows} == {stored.name} and len(rows) == 2 * len(rec["per_k_error"])
    assert run_status(tmp_path) == {"L9_bad": "diverged", stored.name: "complete"}


@pytest.mark.parametrize("text, message", [
    ("{\"config\": {\"depth\": 2,", "cannot be read as JSON"),  # a partial file
    ("garbage", "cannot be read as JSON"),
    ("[1, 2]", "not a run record"),
    ("{\"config\": {\"depth\": 2, \"d_model\": 16, \"heads\": 2}, \"complete\": true}", "malformed run record"),
    ("{\"config\": {\"depth\": 2, \"d_model\": 16, \"heads\": 2, \"colour\": 1}, \"complete\": true}",
     "malformed run record"),
])
def test_collect_names_the_file_and_what_is_wrong_with_it(tmp_path, text, message):
    (tmp_path / "L2_run").mkdir()
    path = tmp_path / "L2_run" / "results.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        collect(tmp_path)
    assert str(path) in str(info.value)


def test_load_run_restores_the_trained_model_and_refuses_diverged_runs(tmp_path):
    from hoplib.evaluate import per_k_error

    load_run = tagged_cells("training", "training-code")["load_run"]  # chapters/training.md's

    g = Grid(depths=(2,), widths=((16, 2),), settings=TINY)
    train_grid(g, tmp_path, device="cpu", progress=False)
    c = g.configs()[0]
    model, rec = load_run(tmp_path / run_name(c))
    err = per_k_error(model, c.task, n_samples=c.train.eval_samples, seed=c.eval_seed, device="cpu")
    assert {str(k): v for k, v in err.items()} == rec["per_k_error"]
    (tmp_path / run_name(c) / "model.pt").write_bytes(b"broken")
    with pytest.raises(ValueError, match="model.pt"):
        load_run(tmp_path / run_name(c))
    (tmp_path / run_name(c) / "results.json").write_text(json.dumps(
        {"config": c.to_dict(), "complete": False, "diverged": True, "error": "training diverged: nan"}))
    with pytest.raises(ValueError, match="diverged"):
        load_run(tmp_path / run_name(c))


def _run_training_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_training", ROOT / "scripts" / "run_training.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("flags, ensemble, compile", [
    ([], False, False), (["--ensemble"], True, False), (["--ensemble", "arch"], True, False),
    (["--ensemble", "width"], "width", False), (["--compile"], False, True),
    (["--compile", "reduce-overhead", "--ensemble", "width"], "width", "reduce-overhead"),
])
def test_cli_passes_the_ensemble_and_compile_modes_to_the_sweep(tmp_path, monkeypatch, flags, ensemble, compile):
    script, seen = _run_training_script(), {}
    monkeypatch.setattr(script.grids, "train_grid", lambda name, out, **kw: seen.update(kw) or [])
    assert script.cli(["--grid", "quick", "--out", str(tmp_path), *flags]) == 0
    assert (seen["ensemble"], seen["compile"]) == (ensemble, compile)


@pytest.mark.parametrize("flags", [["--ensemble", "depth"], ["--compile", "fast"], ["--ensemble", "--depth", "2"],
                                   ["--slurm", "logs"], ["--partition", "gpu"], ["--workers", "2"]])
def test_cli_rejects_unknown_modes_and_the_grid_options_for_one_run_in_one_line(tmp_path, capsys, flags):
    code = _run_training_script().cli(["--out", str(tmp_path / "run"), "--d-model", "16", "--heads", "2",
                                       "--steps", "5", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and flags[0] in err[0]
    assert not (tmp_path / "run").exists()


def test_cli_trains_a_width_ensemble_of_a_tiny_grid(tmp_path, monkeypatch):
    tiny = Grid(depths=(1, 2), widths=((16, 2),), settings=TINY)
    monkeypatch.setitem(GRIDS, "quick", tiny)
    script = _run_training_script()
    assert script.cli(["--grid", "quick", "--out", str(tmp_path), "--ensemble", "width", "--no-progress",
                       "--device", "cpu"]) == 0
    for c in tiny.configs():
        rec = json.loads((tmp_path / run_name(c) / "results.json").read_text())
        assert rec["complete"] and rec["provenance"]["ensemble_size"] == 2


def test_an_interrupted_width_ensemble_sweep_resumes_from_its_folder_under_one_progress_bar(tmp_path, monkeypatch,
                                                                                            capsys):
    """The training chapter's live cell on CUDA: a width ensemble in out_dir, stopped and run again."""
    g = Grid(depths=(1, 2), widths=((16, 2),), settings={**TINY, "steps": 40})
    ref = train_grid(g, tmp_path / "ref", device="cpu", progress=False, ensemble="width", checkpoint_every=10)
    bars = []
    original_init, original_batch = train_mod.Progress.__init__, train_mod.DataStream.batch

    def init(self, total, *args, **kw):
        original_init(self, total, *args, **{**kw, "eta_after": 5})
        bars.append(self)

    def failing(self, step):
        if step == 25:
            raise KeyboardInterrupt
        return original_batch(self, step)

    monkeypatch.setattr(train_mod.Progress, "__init__", init)
    monkeypatch.setattr(train_mod.DataStream, "batch", failing)
    with pytest.raises(KeyboardInterrupt):
        train_grid(g, tmp_path / "run", device="cpu", ensemble="width", checkpoint_every=10)
    monkeypatch.setattr(train_mod.DataStream, "batch", original_batch)
    assert train_grid(g, tmp_path / "run", device="cpu", ensemble="width", checkpoint_every=10) == ref
    assert len(bars) == 2 and bars[0].total == 40  # one bar a sweep; an ensemble's step counts once
    assert bars[1].total == 40 - 20 and bars[1].done == 20  # resumed at the step-20 checkpoint
    told = [line for line in capsys.readouterr().out.splitlines() if "to go" in line]
    assert len(told) == 2 and "of 40 steps done" in told[0] and "of 20 steps done" in told[1]


def test_a_cut_grid_keeps_every_shape_and_trains_at_most_max_steps():
    g = GRIDS["paper"].cut(300)
    assert [c.replace(steps=1, warmup_steps=1) for c in g.configs()] == [
        c.replace(steps=1, warmup_steps=1) for c in GRIDS["paper"].configs()]
    assert {c.train.steps for c in g.configs()} == {300} and {c.train.warmup_steps for c in g.configs()} == {300}
    assert GRIDS["quick"].cut(10**6).configs() == GRIDS["quick"].configs()
    with pytest.raises(ValueError, match="max_steps"):
        GRIDS["quick"].cut(0)


def test_a_grid_in_two_local_workers_gives_the_table_of_one_process(tmp_path):
    # the points of the one runner: each run a point, in two spawned processes of one thread each
    g = Grid(depths=(1, 2), widths=((16, 2),), settings={**TINY, "steps": 6})
    one = train_grid(g, tmp_path / "one", device="cpu", progress=False)
    two = train_grid(g, tmp_path / "two", device="cpu", progress=False, workers=2)
    assert two == one and len(one) == 2 * 3 * 2
    record = json.loads((tmp_path / "two" / "table.json").read_text())
    assert record["data"] == one and record["provenance"]["workers"] == 2


def test_a_grid_as_a_job_array_through_submitit_gives_the_table_of_one_process(tmp_path):
    # submitit's local executor runs the same job array as Slurm would, as local processes
    from hoplib.sweep import slurm_executor

    g = Grid(depths=(1, 2), widths=((16, 2),), settings={**TINY, "steps": 6})
    one = train_grid(g, tmp_path / "one", device="cpu", progress=False)
    executor = slurm_executor(tmp_path / "logs", cluster="local", timeout_min=5)
    array = train_grid(g, tmp_path / "array", device="cpu", progress=False, executor=executor)
    assert array == one
    assert len(list((tmp_path / "logs").glob("*_log.out"))) == len(g.configs())  # a task a run, each logged
    for c in g.configs():
        assert json.loads((tmp_path / "array" / run_name(c) / "results.json").read_text())["complete"]


def test_overwrite_trains_every_run_afresh_and_replaces_the_table(tmp_path, monkeypatch):
    g = Grid(depths=(1, 2), widths=((16, 2),), settings={**TINY, "steps": 6})
    first = train_grid(g, tmp_path, device="cpu", progress=False)
    trained = []
    original = train_mod.train_run
    monkeypatch.setattr("hoplib.grids.train_run", lambda c, out, **kw: trained.append(kw["overwrite"]) or
                        original(c, out, **kw))
    assert train_grid(g, tmp_path, device="cpu", progress=False) == first and trained == []  # read back
    again = train_grid(g, tmp_path, device="cpu", progress=False, overwrite=True)
    assert trained == [True, True] and again == first  # the same seeds: the same runs, trained again
    with pytest.raises(ValueError, match="other settings"):  # another grid in the folder: refused
        train_grid(Grid(depths=(1,), widths=((16, 2),), settings={**TINY, "steps": 6}), tmp_path, progress=False)
