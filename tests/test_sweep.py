"""Tests of hoplib.training.sweep: grids, profiles, skipping finished runs, resuming interrupted ones, ensembles."""

from __future__ import annotations

import json

import pytest
import torch

import hoplib.train as train_mod
from hoplib.training.sweep import AUTHORS_ERRORS, Grid, authors_table, collect, profile, run_name, run_sweep

TINY = dict(seq_len=10, max_hops=2, steps=30, lr=3e-3, warmup_steps=3, batch_size=8, eval_samples=10)


def test_paper_profile_is_the_authors_v1_grid():
    configs = profile("paper").configs()
    assert len(configs) == 20  # (4, 128): 5 depths x 3 regimes; (8, 256): 5 depths, infinite only
    assert {(c["d_model"], c["heads"]) for c in configs} == {(128, 4), (256, 8)}
    assert {c["n_train"] for c in configs if c["d_model"] == 256} == {None}
    assert {c["n_train"] for c in configs if c["d_model"] == 128} == {1000, 3000, None}
    c = configs[0]
    assert (c["seq_len"], c["max_hops"], c["steps"], c["lr"], c["warmup_steps"], c["batch_size"]) == (
        100, 16, 100_000, 1e-4, 1000, 32)
    assert c["head"] == "layernorm" and c["dropout"] == 0.1 and c["weight_decay"] == 0.01
    assert {c["depth"] for c in configs} == {2, 3, 4, 5, 6}
    small = profile("small").configs()
    assert len(small) == 10 and {c["depth"] for c in small} == {2, 3}
    assert {(c["d_model"], c["heads"]) for c in small} == {(16, 1), (32, 2), (64, 4)}
    assert {c["n_train"] for c in small if c["d_model"] == 64} == {250, 1000, None}
    assert {c["n_train"] for c in small if c["d_model"] < 64} == {None}
    assert all(c["seq_len"] == 32 and c["max_hops"] == 4 and c["head"] == "linear" for c in small)
    quick = profile("quick").configs()
    assert max(c["max_hops"] for c in quick) <= 4 and len(quick) >= 3
    with pytest.raises(ValueError, match="name"):
        profile("huge")


def test_authors_table_reads_the_published_errors():
    if not AUTHORS_ERRORS.exists():
        pytest.skip("results/training/authors-errors.json not present")
    t = authors_table(heads=4)
    assert sorted(t) == [2, 3, 4, 5, 6] and all(sorted(v) == list(range(17)) for v in t.values())
    assert t[2][1] == pytest.approx(0.010, abs=5e-4) and t[6][16] == pytest.approx(0.062, abs=5e-4)
    assert authors_table(heads=4, n_train=1000)[2][1] == pytest.approx(0.18, abs=0.005)


def test_sweep_skips_finished_runs_and_resumes_interrupted_ones(tmp_path, monkeypatch):
    grid = Grid(depths=(1, 2), widths=((16, 2),), settings=TINY)
    ref = run_sweep(grid, tmp_path / "ref", device="cpu", progress=False, checkpoint_every=10)
    assert len(ref) == 2 * 3 * 2 and {r["depth"] for r in ref} == {1, 2}

    # Interrupt the second run after its step-20 checkpoint by failing inside the data stream.
    original = train_mod.DataStream.batch

    def failing(self, step):
        if step == 25 and self.task.seq_len == 10:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(train_mod.DataStream, "batch", failing)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(grid, out, device="cpu", progress=False, checkpoint_every=10)
    first = grid.configs()[0]
    assert torch.load(out / run_name(first) / "checkpoint.pt", weights_only=True)["step"] == 20
    monkeypatch.setattr(train_mod.DataStream, "batch", original)
    table = run_sweep(grid, out, device="cpu", progress=False, checkpoint_every=10)
    assert table == ref  # resumed runs give exactly the uninterrupted results

    # A finished sweep trains nothing: make training impossible and run it again.
    monkeypatch.setattr("hoplib.training.sweep.train_run",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained")))
    assert run_sweep(grid, out, device="cpu", progress=False) == ref
    assert json.loads((out / "table.json").read_text()) == ref
    assert collect(out) == ref


def test_ensemble_sweep_matches_the_sequential_sweep(tmp_path):
    grid = Grid(depths=(2,), widths=((16, 2),), n_trains=(None, 40), seeds=(0, 1), settings=TINY)
    seq = run_sweep(grid, tmp_path / "seq", device="cpu", progress=False)
    ens = run_sweep(grid, tmp_path / "ens", device="cpu", progress=False, ensemble=True)
    assert len(seq) == len(ens) == 4 * 3 * 2
    for c in grid.configs():
        a = torch.load(tmp_path / "seq" / run_name(c) / "model.pt", weights_only=True)
        b = torch.load(tmp_path / "ens" / run_name(c) / "model.pt", weights_only=True)
        for name in a:
            assert torch.allclose(a[name], b[name], atol=1e-4), (run_name(c), name)
        rec = json.loads((tmp_path / "ens" / run_name(c) / "results.json").read_text())
        assert rec["complete"] and rec["provenance"]["ensemble_size"] == 4
    # and a second ensemble sweep skips everything
    assert run_sweep(grid, tmp_path / "ens", device="cpu", progress=False, ensemble=True) == ens


def test_ensemble_sweep_trains_a_group_of_one_as_a_plain_run(tmp_path):
    # like the paper grid's m = 256 architectures: one run per architecture group
    grid = Grid(depths=(2,), widths=((16, 2), (32, 2)), n_trains=(None, 40), exclude=((32, 40),), settings=TINY)
    table = run_sweep(grid, tmp_path, device="cpu", progress=False, ensemble=True)
    sizes = {}
    for c in grid.configs():
        rec = json.loads((tmp_path / run_name(c) / "results.json").read_text())
        assert rec["complete"]
        sizes[(c["d_model"], c["n_train"])] = rec["provenance"].get("ensemble_size")
    assert sizes == {(16, None): 2, (16, 40): 2, (32, None): None}
    assert {r["d_model"] for r in table} == {16, 32}


def test_depth_threshold_and_errors_by_depth_on_a_synthetic_table():
    from hoplib.training.sweep import depth_threshold, errors_by_depth

    table = [{"depth": d, "d_model": 8, "n_train": None, "k": k, "metric": "paper", "seed": s,
              "error": 0.0 if k <= d - 2 else 0.5 + 0.1 * s} for d in (2, 3, 4) for k in range(4) for s in (0, 1)]
    errs = errors_by_depth(table)
    assert errs[3][1] == 0.0 and errs[2][1] == pytest.approx(0.55)  # averaged over seeds
    assert depth_threshold(errs, 0.05) == {0: 2, 1: 3, 2: 4, 3: None}
    assert errors_by_depth(table, d_model=16) == {}


def test_load_run_restores_the_trained_model(tmp_path):
    from hoplib.evaluate import per_k_error
    from hoplib.train import task_for
    from hoplib.training.sweep import load_run

    grid = Grid(depths=(2,), widths=((16, 2),), settings=TINY)
    run_sweep(grid, tmp_path, device="cpu", progress=False)
    c = grid.configs()[0]
    model, rec = load_run(tmp_path / run_name(c))
    err = per_k_error(model, task_for(c), n_samples=c["eval_samples"], seed=c["eval_seed"], device="cpu")
    assert {str(k): v for k, v in err.items()} == rec["per_k_error"]
    (tmp_path / run_name(c) / "model.pt").write_bytes(b"broken")
    with pytest.raises(ValueError, match="model.pt"):
        load_run(tmp_path / run_name(c))


def test_shards_split_the_grid_and_together_cover_it(tmp_path):
    grid = Grid(depths=(1, 2, 3), widths=((16, 2),), settings={**TINY, "steps": 4})
    run_sweep(grid, tmp_path, device="cpu", progress=False, shard=(0, 2))
    done = {p.parent.name for p in tmp_path.glob("*/results.json")}
    assert done == {run_name(c) for c in grid.configs()[0::2]}
    table = run_sweep(grid, tmp_path, device="cpu", progress=False, shard=(1, 2))
    assert {r["depth"] for r in table} == {1, 2, 3}
    with pytest.raises(ValueError, match="shard"):
        run_sweep(grid, tmp_path, shard=(2, 2))


def test_group_plot_draws_one_line_per_group_and_depth():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hoplib.training.sweep import plot_error_vs_k_groups

    errs = {2: {0: 0.0, 1: 0.2, 2: 0.5}, 3: {0: 0.0, 1: 0.0, 2: 0.3}, 4: {1: 0.0}}
    ax = plot_error_vs_k_groups({"m=16": errs, "m=32": {2: errs[2]}}, plt.figure().gca(), depths=(2, 3), min_k=1)
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["m=16, L=2", "m=16, L=3", "m=32, L=2"]
    assert list(ax.get_lines()[0].get_xdata()) == [1, 2]
    plt.close("all")
    with pytest.raises(ValueError, match="groups"):
        plot_error_vs_k_groups({})
