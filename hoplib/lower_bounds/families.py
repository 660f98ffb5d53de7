"""Every model family against hop_k (the lower-bound chapters): one model per grid point (a dict: ``kind``,
``d_model``, ``depth``, ``lr``), built by :func:`recurrent_builder` or :func:`attention_builder`, trained with
:func:`hoplib.train.fit` and measured with :func:`hoplib.evaluate.per_k_error`; the stored sweeps read back
(:func:`family_crossings`, :func:`capacity_runs`) and the book's headline figure (:func:`plot_headline`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from hoplib.device import get_device
from hoplib.evaluate import per_k_error
from hoplib.lower_bounds.efficient_attention import attention_spec
from hoplib.lower_bounds.rnn import recurrent_model
from hoplib.models import count_parameters, gpt_for_task
from hoplib.sweep import map_points
from hoplib.tasks import HopTask
from hoplib.train import Progress, TrainConfig, fit

Builder = Callable[[dict[str, Any]], tuple[nn.Module, dict[str, Any]]]
"""Makes the model of one grid point: ``point -> (model, extra record fields)``."""

BATCH_SIZE = 32  # the batch of every stored depth sweep of the lower-bound chapters
LAYER_KEYS = ("state_width", "d_state", "d_inner", "d_conv", "n_heads")  # sizes a point may give its layers


def recurrent_builder(task: HopTask, heads: int = 4) -> Builder:
    """Recurrent stacks of :func:`hoplib.lower_bounds.rnn.recurrent_model`, or GPTs for kind "transformer"."""

    def build(point: dict[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
        if point["kind"] == "transformer":
            return gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=heads), {"state_bits": 0}
        sizes = {key: point[key] for key in LAYER_KEYS if key in point}
        model = recurrent_model(point["kind"], task.vocab_size, d_model=point["d_model"], n_layers=point["depth"],
                                **sizes)
        return model, {"state_bits": model.state_bits()[0]}
    return build


def attention_builder(task: HopTask, heads: int, n_features: int | None, window: int | None,
                      global_every: int | None) -> Builder:
    """GPTs with softmax, Performer (``n_features``) or Longformer (``window``, ``global_every``) attention."""

    def build(point: dict[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
        kind = point["kind"]
        settings = {"n_features": n_features if kind == "performer" else None,
                    "window": window if kind == "longformer" else None,
                    "global_every": global_every if kind == "longformer" else None}
        model = gpt_for_task(task, depth=point["depth"], d_model=point["d_model"], heads=heads,
                             attention=attention_spec(kind, **settings))
        return model, {"heads": heads, **settings}
    return build


def measure_point(index: int, point: dict[str, Any], task: HopTask, make_build: Callable[[HopTask], Builder],
                  settings: Mapping[str, Any], *, seed: int = 0, device: str = "cpu",
                  progress: bool | Progress = False) -> list[dict[str, Any]]:
    """Build, train and measure the model of one point; its records, one per k. torch is seeded with
    ``seed + index`` before the model is built, so a result depends on the point's place in the grid only."""
    torch.manual_seed(seed + index)
    model, extra = make_build(task)(point)
    config = TrainConfig(steps=settings["steps"], batch_size=settings.get("batch_size", BATCH_SIZE),
                         lr=point["lr"], warmup_steps=settings["warmup_steps"], seed=seed)
    t0 = time.perf_counter()
    tail = fit(model, task, config, device=device, progress=progress)["loss"][-10:]
    wall = round(time.perf_counter() - t0, 2)
    errors = per_k_error(model, task, n_samples=settings["n_samples"], seed=seed, device=device)
    return [{**point, **extra, "params": count_parameters(model), "k": int(k), "error": float(err),
             "final_loss": float(sum(tail) / len(tail)), "train_time_s": wall} for k, err in errors.items()]


def point_job(task: HopTask, make_build: Callable[[HopTask], Builder], settings: Mapping[str, Any], *,
              seed: int = 0, device: str | torch.device = "auto",
              progress: bool | Progress = False) -> Callable[[int, dict[str, Any]], list]:
    """``(index, point) -> records``: :func:`measure_point` as the picklable job of :func:`hoplib.sweep.run_sweep`
    (``make_build`` must be a module-level function or a functools.partial of one; ``progress`` a bool unless
    the job runs in this process)."""
    return functools.partial(measure_point, task=task, make_build=make_build, settings=dict(settings), seed=seed,
                             device=str(get_device(device)), progress=progress)


def sweep_points(task: HopTask, points: Sequence[dict[str, Any]], settings: Mapping[str, Any],
                 make_build: Callable[[HopTask], Builder], *, seed: int = 0, device: str | torch.device = "auto",
                 workers: int = 1, progress: bool = False, keep: str | Path | None = None) -> list[dict[str, Any]]:
    """:func:`measure_point` for every point (``settings``: steps, warmup_steps, n_samples), in ``workers``
    processes of one thread each on a CPU; the records of all of them. ``progress``: one bar over every step of
    the sweep and an estimate of its end (one worker). ``keep``: a results file that keeps the finished points
    (:func:`hoplib.sweep.kept_sweep`): a stopped sweep resumes, a finished one is read back."""
    from hoplib.sweep import kept_sweep, points_done

    params = {"task": repr(task), **settings, "seed": seed}
    finished = keep is not None and Path(keep).exists()  # read back, nothing to train
    bar = Progress(len(points) * settings["steps"], f"{len(points)} models",
                   enabled=progress and workers == 1 and not finished)
    if keep is not None:
        bar.resumed(points_done(points, keep, params) * settings["steps"])
    job = point_job(task, make_build, settings, seed=seed, device=device, progress=bar if workers == 1 else False)
    try:
        if keep is not None:
            return [r for rec in kept_sweep(job, points, keep, params, device=job.keywords["device"],
                                            workers=workers) for r in (rec if isinstance(rec, list) else [rec])]
        return [r for records in map_points(job, points, workers=workers)
                for r in records]
    finally:
        bar.close()


def grid_points(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The points (kind, width, depth, learning rate), in that order of nesting."""
    return [{"kind": kind, "d_model": w, "depth": d, "lr": lr} for kind in settings["kinds"]
            for w in settings["widths"] for d in settings["depths"] for lr in settings["lrs"]]


def best_lr(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the better learning rate of each (kind, width, depth): the lowest mean error over k >= 1
    (the first listed on a tie). Every family of a stored sweep gets the same rates, so the same tuning."""
    groups: dict[tuple, dict[float, list[dict[str, Any]]]] = {}
    for r in records:
        groups.setdefault((r["kind"], r.get("d_model"), r["depth"]), {}).setdefault(r.get("lr"), []).append(r)

    def mean_error(rows: list[dict[str, Any]]) -> float:
        errs = [r["error"] for r in rows if r["k"] >= 1]
        return sum(errs) / max(len(errs), 1)

    return [dict(r) for by_lr in groups.values() for r in min(by_lr.values(), key=mean_error)]


def family_crossings(seeds: Sequence[int] = (0, 1, 2)):
    """The k where the error crosses :data:`hoplib.report.THRESHOLD`, per family, depth and seed, of every model
    the book trains on the training chapter's cpu task (N = 64, k <= 8, 4,000 steps, width 64): the equal-tuning
    run of the rnn chapter (GRU, LSTM, Mamba-style, transformer, each at its own best rate) and the
    efficient-attention chapter's matched run (Performer, Longformer at the transformers' 2e-3), ``seeds`` where
    stored. A DataFrame with ``family, depth, seed, k*, censored, run, lr`` (the model's learning rate)."""
    import pandas as pd

    from hoplib import report
    from hoplib.results import load_stored

    def run_file(run: str, name: str, seed: int):
        return run, load_stored(f"{name}{f'_seed{seed}' if seed else ''}.json", required=seed == 0)

    runs = [run_file("equal", "rnn/cpu/equal", s) for s in seeds]
    runs += [run_file("matched", "efficient_attention/cpu/matched", s) for s in seeds]
    rows = []
    for run, stored in runs:
        if stored is None:
            continue
        seed = stored.record["parameters"]["seed"]
        by_model: dict[tuple[str, int], dict[int, float]] = {}
        rates: dict[tuple[str, int], float | None] = {}
        for r in stored.data:
            if r["k"] >= 1:
                by_model.setdefault((r["kind"], r["depth"]), {})[r["k"]] = r["error"]
                rates[r["kind"], r["depth"]] = r.get("lr")
        for (kind, depth), errors in by_model.items():
            k, censored = report.crossing_k(errors)
            rows.append({"family": kind, "depth": depth, "seed": seed, "k*": k, "censored": censored,
                         "run": run, "lr": rates[kind, depth]})
    return pd.DataFrame(rows)


def plot_headline():
    """The book's headline figure, from stored results only: on top the transformers' reach against depth up to
    k = 16 (:func:`hoplib.report.plot_growth`: our ``depth`` sweep, the published errors, the released models);
    below, the capacity sweep at one hop (:func:`plot_capacity`: error against the recurrent state over the
    one-hop table, every family, at :func:`replicated_budget`)."""
    import matplotlib.pyplot as plt

    from hoplib import report
    from hoplib.grids import growth_points

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 9.0))
    report.plot_growth(*growth_points("depth"), ax=top)
    top.set_title("transformers, k ≤ 16 (ours: N = 64, 10,000 steps)")
    runs = capacity_runs()
    steps = replicated_budget(runs)
    plot_capacity(runs, ax=bottom, steps=steps)
    n = runs[runs.steps == steps].seed.nunique()
    bottom.set_title(f"one hop, |Σ| = 32, N = 128 ({steps:,} steps, {n} seeds)")
    fig.tight_layout()
    return fig


def replicated_budget(runs: Any, min_seeds: int = 3) -> int:
    """The largest step budget of :func:`capacity_runs` stored with at least ``min_seeds`` seeds (default: all
    three of the sweep, so that a budget whose seeds are still training is not drawn)."""
    seeds = runs.groupby("steps").seed.nunique()
    if not (seeds >= min_seeds).any():
        raise ValueError(f"no capacity budget is stored with {min_seeds} seeds (seeds a budget: "
                         f"{seeds.to_dict()})")
    return int(seeds[seeds >= min_seeds].index.max())


def capacity_runs(root: str | None = None):  # root: a results/ folder (default the book's)
    """Every stored model of the rnn chapter's capacity sweep (``rnn/cpu/capacity[_seed<s>][_steps<B>].json``),
    one row each: ``kind, size`` (its state width, or the Mamba-style layer's inner width; the transformer: 0),
    ``seed, steps, error`` at k = 1, ``state_bits`` (all layers), ``ratio``, the state over the
    |Sigma| log2 |Sigma| bits of the one-hop table, and ``device`` (a GPU's generator draws other batches than
    the CPU's for the same seed). A DataFrame."""
    import math
    from pathlib import Path

    import pandas as pd

    from hoplib.results import load_stored, results_dir

    rows = []
    for path in sorted((Path(root or results_dir()) / "rnn" / "cpu").glob("capacity*.json")):
        name = path.stem
        if name.endswith(".partial") or name.startswith("capacity_lr"):
            continue
        stored = load_stored(f"rnn/cpu/{path.name}", root=path.parents[2])
        p = stored.record["parameters"]
        table = p["alphabet_size"] * math.log2(p["alphabet_size"])
        for r in stored.data:
            bits = r["state_bits"] * r["depth"]
            rows.append({"kind": r["kind"], "size": r.get("state_width", r.get("d_inner")),
                         "seed": p["seed"], "steps": p["steps"], "error": r["error"], "state_bits": bits,
                         "ratio": bits / table, "lr": r["lr"], "device": p["device"]})
    return pd.DataFrame(rows)


def plot_capacity(runs: Any, ax=None, *, steps: int | None = None):
    """Test error at k = 1 against the recurrent state over the one-hop table (log scale) per family, from
    :func:`capacity_runs` at ``steps`` (default the largest budget): the mean over seeds with a bar from the
    lowest to the highest; the transformer, which carries no state, as one line across the panel a run."""
    import matplotlib.pyplot as plt

    from hoplib import report

    if ax is None:
        ax = plt.subplots(figsize=(6.4, 3.8))[1]
    runs = runs[runs.steps == (steps or runs.steps.max())]
    for kind, group in runs.groupby("kind", sort=False):
        colour, marker = report.FAMILY_STYLE[kind]
        e = group.groupby("ratio").error.agg(["mean", "min", "max"])
        if kind == "transformer":  # one line a run: they either answer or guess
            for i, error in enumerate(group.error):
                ax.axhline(error, color=colour, lw=1.2, label="transformer, a line a run" if i == 0 else None)
            continue
        ax.errorbar(e.index, e["mean"], yerr=[e["mean"] - e["min"], e["max"] - e["mean"]], color=colour,
                    marker=marker, capsize=3, label=kind)
    ax.axvline(1, color="0.4", ls=":", lw=1)
    ax.axhline(report.THRESHOLD, color="0.6", lw=0.8)
    ax.set(xscale="log", ylim=(-0.03, 1.03), xlabel="state bits / (|Σ| log₂ |Σ|)", ylabel="test error at k = 1")
    ax.legend(fontsize=9, loc="lower left", bbox_to_anchor=(0.0, 0.12))  # clear of the lines
    return ax
