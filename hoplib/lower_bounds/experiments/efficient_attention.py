"""The measurements of the chapter on efficient attention (Corollaries 5.3 and 5.4 of the paper): FAVOR+
against softmax attention, the Performer and Longformer reductions on the inputs of Proposition E.4, the
training sweep of the three attention types with what its stored run shows, and the matched sweep: Performer
and Longformer models trained on the training chapter's task with its transformers' recipe
(:func:`matched_sweep`), stored with
``python -m hoplib.lower_bounds.experiments.efficient_attention --profile cpu --workers 2 --out results``,
and its control with one Performer feature per position (``--part features``).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hoplib._book.pool import add_run_options, run_device, store_sweep
from hoplib._book.tables import Table
from hoplib._book.timing import Job
from hoplib._book.validate import check_int
from hoplib.lower_bounds import efficient as eff
from hoplib.lower_bounds.experiments import best_error, recall, solved_up_to, text_table
from hoplib.lower_bounds.sweep import BATCH_SIZE, grid_points, matched_settings, sweep_points
from hoplib.report import ErrorRecord
from hoplib.tasks import HopTask

KINDS = ("softmax", "performer", "longformer")
TRAIN_KEYS = ("seq_len", "max_hops", "depths", "d_model", "heads", "n_features", "window", "global_every",
              "steps", "lr", "warmup_steps", "n_samples")
REDUCTION_COLUMNS = ("kind", "k", "q", "N", "bits", "formula_bits", "message_bits", "paper_scale", "N/k^6",
                     "max_abs_diff")
MATCHED_KEYS = ("seq_len", "max_hops", "kinds", "depths", "widths", "heads", "n_features", "window",
                "global_every", "steps", "lrs", "warmup_steps", "n_samples")
# the stored sweeps of this module's command, results/efficient_attention/<profile>/<part>.json: the matched
# sweep, and its Performer control with one feature per position
PARTS = ("matched", "features")
_REDUCTION = {"red_depth": 2, "red_width": 16, "red_heads": 2, "red_features": 8, "red_window": 3, "red_global": 8}



def _matched(grid: str, depths: Sequence[int], profile: str) -> dict[str, Any]:
    """The matched sweep: Performer and Longformer at the training chapter's grid ``grid`` (task and recipe,
    :func:`hoplib.lower_bounds.sweep.matched_settings`), with the features and window of the alphabet sweep
    of ``profile``. The Longformer's one global position is 0 (``global_every`` = N: the hop-count token,
    which a model must see to know which k to answer, and which itself sees nothing else), so that all else
    reaches a position through windows: w positions per layer."""
    a = recall.ATTENTION_PROFILES[profile]
    s = matched_settings(grid, ["performer", "longformer"], depths)
    return {**s, "n_features": a["n_features"], "window": a["window"], "global_every": s["seq_len"]}


def _features(matched: Mapping[str, Any], depths: Sequence[int]) -> dict[str, Any]:
    """The control run of the matched sweep: its Performer with as many random features as positions
    (m' = N), at ``depths``. A FAVOR+ score matrix, phi(Q) phi(K)^T before the causal mask, is a product
    through m' features, so its rank is at most m'; with m' = N that limit of the matched run (m' < N) is
    gone, and only the kernel estimate differs from softmax attention."""
    return {**matched, "kinds": ["performer"], "n_features": matched["seq_len"], "depths": list(depths)}


PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"favor_ms": [4, 16, 64, 256, 1024, 4096], "favor_draws": 3,
              "bit_table": [(2, 3), (3, 4), (4, 4), (4, 8)], **_REDUCTION,
              "seq_len": 12, "max_hops": 2, "depths": [1, 2], "d_model": 32, "heads": 2, "n_features": 16,
              "window": 2, "global_every": 8, "steps": 40, "lr": 0.003, "warmup_steps": 5, "n_samples": 30,
              "threshold": 0.1,
            "alphabet": recall.ATTENTION_PROFILES["quick"], "matched": _matched("quick", [1, 2], "quick")},
    "cpu": {"favor_ms": [4, 16, 64, 256, 1024, 4096, 16384], "favor_draws": 10,
            "bit_table": [(2, 3), (3, 4), (4, 4), (4, 8), (4, 16), (6, 16)], **_REDUCTION,
            "seq_len": 16, "max_hops": 3, "depths": [2, 3], "d_model": 32, "heads": 2, "n_features": 16,
            "window": 2, "global_every": 8, "steps": 2000, "lr": 0.003, "warmup_steps": 100, "n_samples": 100,
            "threshold": 0.1,
          "alphabet": recall.ATTENTION_PROFILES["cpu"], "matched": _matched("medium", [2, 3, 4, 5, 6], "cpu")},
    "paper": {"favor_ms": [4, 16, 64, 256, 1024, 4096, 16384], "favor_draws": 10,
              "bit_table": [(2, 3), (3, 4), (4, 4), (4, 8), (4, 16), (6, 16), (8, 32)], **_REDUCTION,
              "seq_len": 100, "max_hops": 16, "depths": [2, 3, 4, 5, 6], "d_model": 128, "heads": 4,
              "n_features": 32, "window": 8, "global_every": 25, "steps": 20000, "lr": 0.001,
              "warmup_steps": 1000, "n_samples": 100, "threshold": 0.1,
            "alphabet": recall.ATTENTION_PROFILES["paper"],
              "matched": _matched("paper", [2, 3, 4, 5, 6, 7, 8], "paper")},
}
for _profile, _depths in (("quick", [2]), ("cpu", [3, 5]), ("paper", [3, 5, 7])):
    PROFILES[_profile]["features"] = _features(PROFILES[_profile]["matched"], _depths)


def favor_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """From :func:`hoplib.lower_bounds.efficient.favor_error` records: the mean weight error per m'
    (``means``), whether it falls at every step (``decreasing``), the ratio of the first to the last mean
    (``ratio``) and the log-log slope (``slope``, about -1/2 for a Monte Carlo estimate)."""
    ms = sorted({int(r["n_features"]) for r in records})
    if len(ms) < 2:
        raise ValueError("records must cover at least two feature counts m'")
    means = {m: float(np.mean([r["weight_error"] for r in records if r["n_features"] == m])) for m in ms}
    return {"means": means, "decreasing": all(means[a] > means[b] for a, b in zip(ms, ms[1:], strict=False)),
            "ratio": means[ms[0]] / means[ms[-1]], "slope": eff.favor_slope(list(records)),
            "m_lo": ms[0], "m_hi": ms[-1]}


def reduction_rows(settings: Mapping[str, Any], *, seed: int = 0) -> list[dict[str, Any]]:
    """:func:`hoplib.lower_bounds.efficient.reduction_record` of both reductions (Performer with
    ``red_features`` features, Longformer with window ``red_window`` and global spacing ``red_global``) for
    every (k, q) of ``bit_table``, on GPTs of depth ``red_depth``, width ``red_width``, ``red_heads`` heads."""
    missing = [key for key in ("bit_table", *_REDUCTION) if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")
    extra = {"performer": {"n_features": settings["red_features"]},
             "longformer": {"window": settings["red_window"], "global_every": settings["red_global"]}}
    return [eff.reduction_record(kind, int(k), int(q), depth=settings["red_depth"], d_model=settings["red_width"],
                                 heads=settings["red_heads"], seed=seed, **extra[kind])
            for k, q in settings["bit_table"] for kind in ("performer", "longformer")]


def reductions_exact(rows: Sequence[Mapping[str, Any]], tol: float = 1e-4) -> bool:
    """Every reduction posted exactly the formula's bits and reproduced the forward pass within ``tol``."""
    return all(r["bits"] == r["formula_bits"] and r["max_abs_diff"] < tol for r in rows)


def sweep(task: HopTask, settings: Mapping[str, Any], *, seed: int = 0, device: str | torch.device = "auto",
          progress: bool = False) -> list[dict[str, Any]]:
    """:func:`hoplib.lower_bounds.efficient.attention_sweep` with the training settings of a profile."""
    missing = [key for key in TRAIN_KEYS if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")
    keys = ("depths", "d_model", "heads", "n_features", "window", "global_every", "steps", "lr", "warmup_steps",
            "n_samples")
    return eff.attention_sweep(task, **{key: settings[key] for key in keys}, seed=seed, device=device,
                               progress=progress)


def jobs(profile: str) -> list[Job]:
    """The training work of a profile (the depth sweep at batch 32, then the alphabet sweep), for the time
    estimates of :mod:`hoplib._book.timing`."""
    from hoplib.models import count_parameters

    s = PROFILES[profile]
    task = HopTask(seq_len=s["seq_len"], alphabet_size=4, max_hops=s["max_hops"])
    build = eff._build(task, s["heads"], s["n_features"], s["window"], s["global_every"])
    out = [Job(count_parameters(build({"kind": kind, "depth": d, "d_model": s["d_model"]})[0]),
               32 * task.length, s["steps"]) for kind in KINDS for d in s["depths"]]
    return out + recall.jobs(s["alphabet"])


def summary(records: Sequence[ErrorRecord], threshold: float) -> dict[str, Any]:
    """What the chapter reads off a sweep: ``solved[kind]``, the largest K such that one depth has error at
    most ``threshold`` for every k = 1..K; ``best[kind][k]``, the best error over depths at each k >= 1; and
    ``kmax``, the largest k."""
    kinds = [kd for kd in KINDS if any(r.family == kd for r in records)]
    if not kinds:
        raise ValueError(f"records hold none of the attention types {KINDS}")
    kmax = max(r.k for r in records)
    depths = sorted({r.depth for r in records})
    solved = {kd: max(solved_up_to(records, kd, d, threshold) for d in depths
                      if any(r.family == kd and r.depth == d for r in records)) for kd in kinds}
    best = {kd: {k: best_error(records, kd, k) for k in range(1, kmax + 1)} for kd in kinds}
    return {"solved": solved, "best": best, "kmax": kmax}


def summary_rows(found: Mapping[str, Any]) -> list[dict[str, Any]]:
    """:func:`summary` as table rows: per attention type, the K it solves up to and its best error per k."""
    return [{"attention": kind, "solved up to k": found["solved"][kind],
             **{f"best error k={k}": f"{e:.3f}" for k, e in found["best"][kind].items()}}
            for kind in found["solved"]]


def locality_table(found: Mapping[str, Any]) -> Table:
    """:func:`hoplib.lower_bounds.efficient.locality_check` as a table, one row per depth: the K the windows
    allow, the K the trained Longformer solves, and how far its error stays above the out-of-reach share."""
    return text_table([{"depth L": d, "K allowed by the window": found["horizon"][d], "K solved": found["reach"][d],
                        "largest error - share": f"{found['above'][d]:+.2f}"} for d in found["horizon"]])


def matched_grid(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The matched sweep's points (kind, width, depth, learning rate), in that order of nesting
    (:func:`hoplib.lower_bounds.sweep.grid_points`)."""
    return grid_points(settings, MATCHED_KEYS, KINDS)


def matched_sweep(task: HopTask, settings: Mapping[str, Any], *, seed: int = 0,
                  device: str | torch.device = "auto", workers: int = 1,
                  on_model: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Train every point of :func:`matched_grid` on ``task`` (``workers`` processes of one thread each on a
    CPU, :func:`hoplib.lower_bounds.sweep.sweep_points`) and return tidy records ``{"kind", "d_model",
    "depth", "lr", "heads", "n_features", "window", "global_every", "params", "k", "error", "final_loss",
    "train_time_s"}``, one per model and k."""
    points = matched_grid(settings)
    make_build = functools.partial(eff._build, heads=check_int("heads", settings["heads"], low=1),
                                   n_features=settings["n_features"], window=settings["window"],
                                   global_every=settings["global_every"])
    return sweep_points(task, points, dict(settings), make_build, seed=seed, device=device, workers=workers,
                        on_model=on_model)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hoplib.lower_bounds.experiments.efficient_attention",
                                description="Train the efficient-attention chapter's matched sweep (Performer "
                                            "and Longformer at the training chapter's task and recipe) and "
                                            "store it.")
    p.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    p.add_argument("--part", default="matched", choices=PARTS,
                   help="matched: Performer and Longformer; features: the Performer with m' = N features")
    p.add_argument("--out", required=True,
                   help="results root; writes <out>/efficient_attention/<profile>/<part>.json")
    add_run_options(p, seed_help="seeds other than 0 write <part>_seed<seed>.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    """The command line: validate everything, then run :func:`matched_sweep` and write the results file
    atomically (a ``.partial.json`` beside it holds the models finished so far, marked incomplete)."""
    args = _parse(argv)
    device = run_device(args)
    source = PROFILES[args.profile][args.part]
    settings = {key: source[key] for key in MATCHED_KEYS}
    matched_grid(settings)
    task = HopTask(seq_len=settings["seq_len"], alphabet_size=4, max_hops=settings["max_hops"])
    name = args.part + ("" if args.seed == 0 else f"_seed{args.seed}") + ".json"
    path = Path(args.out) / "efficient_attention" / args.profile / name
    params = {"chapter": "efficient_attention", "part": args.part, "profile": args.profile, "device": device,
              "seed": args.seed, "alphabet_size": 4, "batch_size": BATCH_SIZE, "grid": source["grid"],
              **settings}
    run = functools.partial(matched_sweep, task, settings, seed=args.seed, device=device, workers=args.workers)
    return store_sweep(path, params, run, device=device, workers=args.workers, overwrite=args.overwrite)


__all__ = ["KINDS", "MATCHED_KEYS", "PARTS", "PROFILES", "REDUCTION_COLUMNS", "TRAIN_KEYS", "favor_summary", "jobs",
           "locality_table", "main", "matched_grid", "matched_sweep", "reduction_rows", "reductions_exact", "summary",
           "summary_rows", "sweep"]


if __name__ == "__main__":
    from hoplib._book.cli import run_cli

    raise SystemExit(run_cli(main))
