"""Sweeps over the paper's grid (Section 4.2, Appendix G): depth x width x n_train x seed, resumable.

Every run lives in its own folder ``<out>/<name>`` (``L3_m128_H4_ninf_s0``) with the files of
:func:`hoplib.train.train_run`: a run whose ``results.json`` is complete for the same configuration is skipped,
an interrupted one resumes from its checkpoint. :func:`collect` gathers all runs into one tidy table.

Profiles:

* ``quick``: CPU, a minute or two in all: N = 16, k <= 2, 1000 steps, m = 64, depths 1, 2, 3, which is
  enough for each extra layer to solve one more k. Run live by the chapter.
* ``medium``: CPU, under an hour on one core: N = 64, k <= 8, 4000 steps, m = 64, depths 2..5.
* ``small``: CPU, about 10-15 minutes on one core: the width and sample-size axes of Appendix G.3 and G.5 at
  small scale. N = 32, k <= 4, 2000 steps, depths 2 and 3; (m, H) in {(16, 1), (32, 2), (64, 4)} (heads grow
  with width, head size 16, as the paper's (128, 4) -> (256, 8)) with fresh samples, and n_train in {250, 1000}
  for (64, 4).
* ``paper``: the authors' grid for a GPU: L = 2..6, (m, H) in {(128, 4), (256, 8)}, n_train in {1000, 3000,
  infinite}, N = 100, k <= 16, 100k steps, their head (LayerNorm output as logits) and dropout 0.1.

With ``ensemble=True`` all unfinished runs of one architecture are trained together as one
:class:`hoplib.models.GPTEnsemble` (:func:`hoplib.train.fit_ensemble`): on a GPU, small models are bound by
kernel launches, and E stacked models cost about as many launches as one. Each run still gets its own folder,
``results.json`` and ``model.pt``; the group's checkpoint lives in ``<out>/_ensembles/<arch>/``.
For the paper grid on one GPU: 10 architecture groups (3 regimes stacked for m = 128, 1 run for m = 256);
start several processes with ``--ensemble --shard i/n`` so that groups also run side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hoplib._book.device import get_device
from hoplib._book.provenance import atomic_write_text
from hoplib._book.validate import check_choice
from hoplib.train import (
    RUN_KEYS,
    default_run_config,
    finished_results,
    fit_ensemble,
    model_for,
    results_record,
    task_for,
    train_run,
    write_run,
)

PROFILES = ("quick", "small", "medium", "paper")


@dataclass(frozen=True)
class Grid:
    """A sweep: the product depths x widths x n_trains x seeds, with shared settings for every run."""

    depths: tuple[int, ...]
    widths: tuple[tuple[int, int], ...]  # (d_model, heads)
    n_trains: tuple[int | None, ...] = (None,)
    seeds: tuple[int, ...] = (0,)
    settings: dict[str, Any] = field(default_factory=dict)
    exclude: tuple[tuple[int, int | None], ...] = ()  # (d_model, n_train) pairs left out

    def configs(self) -> list[dict[str, Any]]:
        """One full run configuration per grid point (see :func:`hoplib.train.default_run_config`)."""
        out = []
        for (m, h), n, s, depth in itertools.product(self.widths, self.n_trains, self.seeds, self.depths):
            if (m, n) in self.exclude:
                continue
            out.append(default_run_config(depth=depth, d_model=m, heads=h, n_train=n, seed=s, **self.settings))
        return out


def profile(name: str) -> Grid:
    """The grid of a named profile: ``"quick"``, ``"small"``, ``"medium"`` or ``"paper"`` (see the module doc)."""
    check_choice("name", name, PROFILES)
    if name == "quick":
        return Grid(depths=(1, 2, 3), widths=((64, 4),),
                    settings=dict(seq_len=16, max_hops=2, steps=1000, lr=3e-3, warmup_steps=50, eval_samples=200))
    if name == "small":
        return Grid(depths=(2, 3), widths=((16, 1), (32, 2), (64, 4)), n_trains=(250, 1000, None),
                    settings=dict(seq_len=32, max_hops=4, steps=2000, lr=2e-3, warmup_steps=100, eval_samples=100),
                    exclude=((16, 250), (16, 1000), (32, 250), (32, 1000)))
    if name == "medium":
        return Grid(depths=(2, 3, 4, 5), widths=((64, 4),),
                    settings=dict(seq_len=64, max_hops=8, steps=4000, lr=2e-3, warmup_steps=200, eval_samples=100))
    return Grid(depths=(2, 3, 4, 5, 6), widths=((128, 4), (256, 8)), n_trains=(1000, 3000, None),
                settings=dict(seq_len=100, max_hops=16, steps=100_000, lr=1e-4, warmup_steps=1000,
                              head="layernorm", dropout=0.1, eval_samples=100),
                exclude=((256, 1000), (256, 3000)))


def run_name(config: dict[str, Any]) -> str:
    """Folder name of a run, e.g. ``L3_m128_H4_ninf_s0``."""
    n = "inf" if config["n_train"] is None else str(config["n_train"])
    return f"L{config['depth']}_m{config['d_model']}_H{config['heads']}_n{n}_s{config['seed']}"


def run_sweep(grid: Grid | str, out: str | Path, *, device: str | torch.device = "auto", progress: bool = True,
              ensemble: bool = False, checkpoint_every: int = 1000, compile: bool = False,
              shard: tuple[int, int] = (0, 1)) -> list[dict[str, Any]]:
    """Train every run of ``grid`` (a :class:`Grid` or a profile name) under ``out``; return :func:`collect`.

    Finished runs are skipped and interrupted ones resumed, so calling it again after a crash continues.
    ``shard=(i, n)`` trains only every n-th unit of work (run, or architecture group with ``ensemble``)
    starting at i, so n processes (on one GPU, or several) can share a grid; each writes its own run folders.
    """
    if (not isinstance(shard, tuple) or len(shard) != 2 or not all(isinstance(v, int) for v in shard)
            or not 0 <= shard[0] < shard[1]):
        raise ValueError(f"shard must be a pair (i, n) of ints with 0 <= i < n, got {shard!r}")
    grid = profile(grid) if isinstance(grid, str) else grid
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a Grid or one of {PROFILES}, got {type(grid).__name__}")
    out = Path(out)
    configs = grid.configs()
    if ensemble:  # units of work are architecture groups, in a fixed order shared by every shard
        archs = list(dict.fromkeys(_arch(c) for c in configs))[shard[0]::shard[1]]
        mine = [c for c in configs if _arch(c) in archs]
    else:
        mine = configs[shard[0]::shard[1]]
    todo = [c for c in mine if finished_results(out / run_name(c), c) is None]
    if ensemble and todo:
        _run_ensembles(todo, out, device=device, progress=progress, checkpoint_every=checkpoint_every,
                       compile=compile)
    else:
        for c in todo:
            train_run(c, out / run_name(c), device=device, progress=progress, checkpoint_every=checkpoint_every,
                      compile=compile)
    table = collect(out, configs)
    atomic_write_text(out / "table.json", json.dumps(table, indent=1) + "\n")
    return table


def _arch(config: dict[str, Any]) -> tuple:
    """Everything but the data regime and seed: runs with equal keys can share a GPTEnsemble."""
    return tuple(config[k] for k in RUN_KEYS if k not in ("n_train", "seed"))


def _run_ensembles(todo: list[dict[str, Any]], out: Path, *, device, progress: bool, checkpoint_every: int,
                   compile: bool) -> None:
    dev = get_device(device)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for c in todo:
        groups.setdefault(_arch(c), []).append(c)
    for configs in groups.values():
        c0 = configs[0]
        if len(configs) == 1:  # a group of one: a plain run (the same computation, its checkpoint in its folder)
            train_run(c0, out / run_name(c0), device=dev, progress=progress, checkpoint_every=checkpoint_every,
                      compile=compile)
            continue
        task = task_for(c0)
        models = [model_for(c, task, dev) for c in configs]
        tag = f"L{c0['depth']}_m{c0['d_model']}_H{c0['heads']}_" + "-".join(run_name(c) for c in configs)
        ck = out / "_ensembles" / hashlib.sha1(tag.encode()).hexdigest()[:12] / "checkpoint.pt"
        trained, hists = fit_ensemble(models, task, steps=c0["steps"], seeds=[c["seed"] for c in configs],
                                      n_trains=[c["n_train"] for c in configs], batch_size=c0["batch_size"],
                                      lr=c0["lr"], warmup_steps=c0["warmup_steps"],
                                      weight_decay=c0["weight_decay"], device=dev, progress=progress,
                                      compile=compile, checkpoint=ck, checkpoint_every=checkpoint_every)
        for c, model, hist in zip(configs, trained, hists, strict=True):
            rec = results_record(model, task, hist, c, dev, command=f"hoplib.training.sweep ensemble of {len(configs)}",
                                 ensemble_size=len(configs))
            write_run(out / run_name(c), model, rec)


def collect(out: str | Path, configs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Tidy table of every finished run under ``out`` (or of ``configs`` only): one row per (run, k, metric)."""
    out = Path(out)
    rows = []
    paths = ([out / run_name(c) / "results.json" for c in configs] if configs is not None
             else sorted(out.glob("*/results.json")))
    for path in paths:
        if not path.exists():
            continue
        rec = json.loads(path.read_text(encoding="utf-8"))
        if not rec.get("complete"):
            continue
        c = rec["config"]
        labels = {"run": path.parent.name, "depth": c["depth"], "d_model": c["d_model"], "heads": c["heads"],
                  "n_train": c["n_train"], "seed": c["seed"], "steps": c["steps"]}
        for metric, key in (("paper", "per_k_error"), ("pooled", "per_k_error_pooled")):
            for k, e in rec[key].items():
                rows.append({**labels, "k": int(k), "metric": metric, "error": e})
    return rows


AUTHORS_ERRORS = Path(__file__).resolve().parents[1] / "results" / "training" / "authors-errors.json"


def authors_table(path: str | Path = AUTHORS_ERRORS, *, heads: int = 4,
                  n_train: int | None = None) -> dict[int, dict[int, float]]:
    """Published errors (pooled metric) from ``authors-errors.json``: ``{depth: {k: error}}`` for one row set.

    Keys in that file are ``"((L, H, n_train), k)"`` with n_train -1 for infinite (paper-spec section 7);
    the book's copy (``results/training/authors-errors.json``) wraps them under ``"errors"`` beside their source.
    """
    import ast

    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if "errors" in raw and isinstance(raw["errors"], dict):
        raw = raw["errors"]
    want_n = -1 if n_train is None else n_train
    out: dict[int, dict[int, float]] = {}
    for key, val in raw.items():
        (depth, h, n), k = ast.literal_eval(key)
        if h == heads and n == want_n:
            out.setdefault(depth, {})[k] = float(val)
    return {d: dict(sorted(v.items())) for d, v in sorted(out.items())}


def load_run(run_dir: str | Path, device: str | torch.device = "cpu"):
    """``(model, record)`` of a finished run folder: the :class:`hoplib.models.GPT` with its final weights
    (``model.pt``, loaded with ``weights_only=True``) and the ``results.json`` record."""
    from hoplib.models import GPT, GPTConfig

    run_dir = Path(run_dir)
    rec = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    cfg = {k: v for k, v in rec["model"].items() if k != "parameters"}
    model = GPT(GPTConfig(**cfg))
    try:
        state = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{run_dir / 'model.pt'} is missing, corrupt or does not match results.json: {exc}") from exc
    return model.to(get_device(device)).eval(), rec


def errors_by_depth(table: list[dict[str, Any]], *, metric: str = "paper", d_model: int | None = None,
                    n_train: int | None | str = "any") -> dict[int, dict[int, float]]:
    """``{depth: {k: error}}`` from a :func:`collect` table (averaged over seeds), filtered by width and n_train."""
    check_choice("metric", metric, ("paper", "pooled"))
    acc: dict[int, dict[int, list[float]]] = {}
    for r in table:
        if r["metric"] != metric or (d_model is not None and r["d_model"] != d_model):
            continue
        if n_train != "any" and r["n_train"] != n_train:
            continue
        acc.setdefault(r["depth"], {}).setdefault(r["k"], []).append(r["error"])
    return {d: {k: sum(v) / len(v) for k, v in sorted(ks.items())} for d, ks in sorted(acc.items())}


def depth_threshold(errors: dict[int, dict[int, float]], threshold: float = 0.05) -> dict[int, int | None]:
    """Empirical L*(k): the smallest depth whose error on k is at most ``threshold`` (None if no depth is)."""
    ks = sorted({k for row in errors.values() for k in row})
    return {k: next((d for d in sorted(errors) if errors[d].get(k, 1.0) <= threshold), None) for k in ks}


def plot_error_vs_k(errors: dict[int, dict[int, float]], ax=None, *, title: str = "", logx: bool = False,
                    min_k: int = 0):
    """One curve per depth: error against k (Figure 2 of the paper when ``logx`` and k >= 1)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    cmap = plt.get_cmap("viridis")
    depths = sorted(errors)
    for i, d in enumerate(depths):
        ks = [k for k in errors[d] if k >= min_k]
        ax.plot(ks, [errors[d][k] for k in ks], "o-", ms=3, color=cmap(i / max(1, len(depths) - 1)), label=f"L={d}")
    if logx:
        ax.set_xscale("log", base=2)
    ax.axhline(0.75, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("k (hops)")
    ax.set_ylabel("test error")
    ax.set_ylim(-0.02, 0.85)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return ax


def plot_error_vs_k_groups(groups: dict[str, dict[int, dict[int, float]]], ax=None, *, depths=None,
                           title: str = "", logx: bool = False, min_k: int = 0):
    """Error against k for several settings at once: one colour per group (a width or an n_train, the keys of
    ``groups``, each a ``{depth: {k: error}}`` map), one line style per depth (only ``depths`` if given).
    The width and sample-size figures of Appendix G.3 and G.5 (Figures 9 and 16-19 of the paper)."""
    import matplotlib.pyplot as plt

    if not isinstance(groups, dict) or not groups:
        raise ValueError("groups must be a non-empty dict from a label to {depth: {k: error}}")
    ax = ax or plt.gca()
    colours = plt.get_cmap("plasma")
    all_depths = sorted({d for errs in groups.values() for d in errs if depths is None or d in depths})
    styles = ["-", "--", ":", "-."]
    for i, (label, errs) in enumerate(groups.items()):
        colour = colours(0.85 * i / max(1, len(groups) - 1))
        for j, d in enumerate(all_depths):
            if d not in errs:
                continue
            ks = [k for k in errs[d] if k >= min_k]
            ax.plot(ks, [errs[d][k] for k in ks], marker="o", ms=3, ls=styles[j % len(styles)], color=colour,
                    label=f"{label}, L={d}")
    if logx:
        ax.set_xscale("log", base=2)
    else:
        ax.set_xticks(sorted({k for errs in groups.values() for row in errs.values() for k in row if k >= min_k}))
    ax.axhline(0.75, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("k (hops)")
    ax.set_ylabel("test error")
    ax.set_ylim(-0.02, 0.85)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=6, ncol=2 if len(ax.get_lines()) > 6 else 1)
    return ax


def plot_error_heatmap(errors: dict[int, dict[int, float]], ax=None, *, title: str = ""):
    """Depth x k heatmap of errors with the values written in (Figure 8 of the paper)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    depths = sorted(errors)
    ks = sorted({k for row in errors.values() for k in row})
    grid = [[errors[d].get(k, float("nan")) for k in ks] for d in depths]
    ax.imshow(grid, cmap="magma_r", vmin=0, vmax=0.8, aspect="auto", origin="lower")
    ax.set_xticks(range(len(ks)), [str(k) for k in ks], fontsize=7)
    ax.set_yticks(range(len(depths)), [str(d) for d in depths])
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}".lstrip("0") if v == v else "", ha="center", va="center", fontsize=6,
                    color="white" if v > 0.4 else "black")
    ax.set_xlabel("k")
    ax.set_ylabel("depth L")
    ax.set_title(title, fontsize=10)
    return ax


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(prog="python -m hoplib.training.sweep", description="Run a profile's grid, resumably.")
    p.add_argument("--profile", choices=PROFILES, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--ensemble", action="store_true", help="train runs of one architecture together (GPU)")
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--shard", default="0/1", help="i/n: train only the i-th of n interleaved parts of the grid")
    a = p.parse_args(argv)
    try:
        i, n = (int(v) for v in a.shard.split("/"))
    except ValueError:
        p.error(f"--shard must look like i/n, got {a.shard!r}")
    return run_sweep(a.profile, a.out, device=a.device, progress=not a.no_progress, ensemble=a.ensemble,
                     checkpoint_every=a.checkpoint_every, compile=a.compile, shard=(i, n))


if __name__ == "__main__":
    main()
