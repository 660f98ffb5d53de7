"""Depth sweeps of the lower-bound chapters: one model per grid point, trained on multi-task hop_k with
:func:`hoplib.train.fit` and measured with :func:`hoplib.evaluate.per_k_error`.

Section 5 of the paper says that recurrent models (Corollary 5.2) and transformers with kernel or Longformer
attention (Corollaries 5.3 and 5.4) need depth L >= k unless they are very wide, where softmax transformers need
only depth O(log k) (Theorem 4.2). The chapters test this by training models of each family and depth at equal
width: :func:`hoplib.lower_bounds.rnn.depth_sweep` (GRU, LSTM, Mamba-style, transformer) and
:func:`hoplib.lower_bounds.efficient.attention_sweep` (softmax, Performer, Longformer) are this module's
:func:`run_sweep` with their own model builders. Records are tidy dicts, one per model and k, as stored in the
results files; :func:`hoplib.lower_bounds.experiments.error_records` turns them into
:class:`hoplib.report.ErrorRecord` for the one depth report (:mod:`hoplib.report`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from hoplib._book.validate import check_choice, check_int, check_rates
from hoplib.models import count_parameters
from hoplib.tasks import HopTask
from hoplib.train import TrainConfig, fit

Builder = Callable[[dict[str, Any]], tuple[nn.Module, dict[str, Any]]]
"""Makes the model of one grid point: ``point -> (model, extra record fields)``."""


def train_and_measure(model: nn.Module, task: HopTask, config: TrainConfig, *, n_samples: int,
                      device: str | torch.device = "auto") -> dict[str, Any]:
    """Train ``model`` with :func:`hoplib.train.fit` (no progress bar), then measure its test error per k.

    Returns ``{"errors": {k: error}, "final_loss", "train_time_s", "params"}``: the paper's metric on
    ``n_samples`` samples per k (test seed ``config.seed``), the mean loss of the last 10 steps and the wall time
    of training.
    """
    from hoplib.evaluate import per_k_error

    t0 = time.perf_counter()
    hist = fit(model, task, config, device=device, progress=False)
    wall = time.perf_counter() - t0
    errors = per_k_error(model, task, n_samples=n_samples, seed=config.seed, device=device)
    tail = hist["loss"][-10:]
    return {"errors": {int(k): float(e) for k, e in errors.items()}, "final_loss": float(sum(tail) / len(tail)),
            "train_time_s": round(wall, 2), "params": count_parameters(model)}


def run_sweep(task: HopTask, grid: Sequence[dict[str, Any]], build: Builder, config: TrainConfig, *,
              n_samples: int = 100, device: str | torch.device = "auto", progress: bool = True,
              on_model: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Train one model per grid point and return tidy records, one per (point, k).

    Before building the model of point i, torch is seeded with ``config.seed + i`` (its initialisation);
    training seeds its data and dropout with ``config.seed``. Each record is the point, the builder's extra
    fields, then ``params``, ``k``, ``error``, ``final_loss`` and ``train_time_s``. ``on_model``, if given, is
    called with the records so far after each model (e.g. to save partial results of a long sweep).
    """
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a hoplib.train.TrainConfig, got {type(config).__name__}")
    n_samples = check_int("n_samples", n_samples, low=1)
    if progress:
        from tqdm.auto import tqdm
        points = tqdm(grid, desc="models")
    else:
        points = grid
    records: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        records += measure_point(i, point, task, build, config, n_samples=n_samples, device=device)
        if on_model is not None:
            on_model(records)
    return records


def measure_point(index: int, point: dict[str, Any], task: HopTask, build: Builder, config: TrainConfig, *,
                  n_samples: int, device: str | torch.device = "auto") -> list[dict[str, Any]]:
    """Build, train and measure the model of one grid point; its records, one per k (see :func:`run_sweep`).

    torch is seeded with ``config.seed + index`` before the model is built, so a point's result depends on its
    place in the grid only, not on the process that trains it; a point's ``"lr"``, if any, replaces
    ``config.lr`` (a learning-rate sweep)."""
    torch.manual_seed(config.seed + index)
    model, extra = build(point)
    if "lr" in point:
        config = dataclasses.replace(config, lr=point["lr"])
    out = train_and_measure(model, task, config, n_samples=n_samples, device=device)
    return [{**point, **extra, "params": out["params"], "k": k, "error": err, "final_loss": out["final_loss"],
             "train_time_s": out["train_time_s"]} for k, err in out["errors"].items()]


# --------------------------------------------------------------------------- stored sweeps, in parallel

BATCH_SIZE = 32  # the batch of every stored depth sweep of the lower-bound chapters


def train_point(index: int, point: dict[str, Any], task: HopTask, settings: dict[str, Any], *,
                make_build: Callable[[HopTask], Builder], seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    """One grid point of a stored sweep, trained on multi-task hop_k (batch :data:`BATCH_SIZE`, the point's
    learning rate, ``settings``' steps, warm-up and test samples) and measured by :func:`measure_point`;
    ``{"records": one per k}``. ``make_build(task)`` gives the builder (a picklable factory, so that worker
    processes can run this)."""
    config = TrainConfig(steps=settings["steps"], batch_size=BATCH_SIZE, lr=point["lr"],
                         warmup_steps=settings["warmup_steps"], seed=seed)
    return {"records": measure_point(index, dict(point), task, make_build(task), config,
                                     n_samples=settings["n_samples"], device=device)}


def sweep_points(task: HopTask, points: Sequence[dict[str, Any]], settings: dict[str, Any],
                 make_build: Callable[[HopTask], Builder], *, seed: int = 0, device: str | torch.device = "auto",
                 workers: int = 1, on_model: Callable[[list[dict[str, Any]]], None] | None = None
                 ) -> list[dict[str, Any]]:
    """:func:`train_point` for every point (each with its ``"lr"``), in ``workers`` processes of one thread
    each on a CPU (:func:`hoplib._book.pool.map_points`; a point's result does not depend on the worker), and
    the tidy records of all of them, one per model and k. ``on_model`` is called with the records so far."""
    import functools

    from hoplib._book.device import get_device
    from hoplib._book.pool import map_points

    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    missing = [key for key in ("steps", "warmup_steps", "n_samples") if key not in settings]
    if missing or any("lr" not in p for p in points):
        raise ValueError(f"settings lack {missing}" if missing else "every point needs an 'lr'")
    device = str(get_device(device))
    job = functools.partial(train_point, task=task, settings=dict(settings), make_build=make_build, seed=seed,
                            device=device)

    def flat(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for result in results for r in result["records"]]

    done = None if on_model is None else (lambda results: on_model(flat(results)))
    return flat(map_points(job, points, workers=workers, device=device, on_result=done))


def best_lr(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the better learning rate of each (kind, width, depth): the one with the lowest mean error
    over k >= 1 (the first listed on a tie); records without ``lr`` (a run with one rate) pass through. Every
    family of a stored sweep gets the same rates, so each gets the same tuning effort."""
    groups: dict[tuple, dict[float, list[dict[str, Any]]]] = {}
    for r in records:
        key = (r["kind"], r.get("d_model"), r["depth"])
        groups.setdefault(key, {}).setdefault(r.get("lr"), []).append(r)

    def mean_error(rows: list[dict[str, Any]]) -> float:
        errs = [r["error"] for r in rows if r["k"] >= 1]
        return sum(errs) / max(len(errs), 1)

    out: list[dict[str, Any]] = []
    for by_lr in groups.values():
        out += [dict(r) for r in min(by_lr.values(), key=mean_error)]
    return out


def grid_points(settings: Mapping[str, Any], keys: Sequence[str], kinds: Sequence[str]) -> list[dict[str, Any]]:
    """The points of a sweep (kind, width, depth, learning rate), in that order of nesting, from settings
    that must hold every one of ``keys``; each kind must be one of ``kinds``, each width and depth a positive
    integer and each learning rate positive (``ValueError`` otherwise)."""
    missing = [key for key in keys if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")
    for kind in settings["kinds"]:
        check_choice("kinds[i]", kind, tuple(kinds))
    widths = [check_int("widths[i]", w, low=1) for w in settings["widths"]]
    depths = [check_int("depths[i]", d, low=1) for d in settings["depths"]]
    rates = check_rates("lrs", settings["lrs"])
    return [{"kind": kind, "d_model": w, "depth": d, "lr": lr}
            for kind in settings["kinds"] for w in widths for d in depths for lr in rates]


def matched_settings(grid: str, kinds: Sequence[str], depths: Sequence[int]) -> dict[str, Any]:
    """Sweep settings with the task and the training recipe of the training chapter's grid ``grid``
    (:data:`hoplib.training.sweep.GRIDS`: N, k, steps, learning rate, warm-up, width, heads, test samples),
    for ``kinds`` at ``depths``: models trained with them compare with that grid's stored transformers at
    equal tuning effort (one learning rate, the transformers'), and the two runs cannot drift apart."""
    from hoplib.training.sweep import GRIDS

    g = GRIDS[check_choice("grid", grid, tuple(GRIDS))]
    s = g.settings
    return {"seq_len": s["seq_len"], "max_hops": s["max_hops"], "kinds": list(kinds), "depths": list(depths),
            "widths": [g.widths[0][0]], "heads": g.widths[0][1], "steps": s["steps"], "lrs": [s["lr"]],
            "warmup_steps": s["warmup_steps"], "n_samples": s["eval_samples"], "grid": grid}
