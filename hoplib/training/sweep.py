"""Sweeps over the paper's grid (Section 4.2, Appendix G): depth x width x n_train x seed, resumable.

Every run lives in its own folder ``<out>/<name>`` (``L3_m128_H4_ninf_s0``) with the files of
:func:`hoplib.train.train_run`: a run whose ``results.json`` is finished for the same configuration is skipped,
an interrupted one resumes from its checkpoint, and one that diverges is recorded as such (``diverged: true``)
while the sweep goes on. :func:`collect` gathers the complete runs into one tidy table; :func:`run_status`
says which runs are complete, diverged, unfinished or missing.

Named grids (:data:`GRIDS`, :func:`grid`), each defined only here:

* ``quick``: CPU, a minute or two in all: N = 16, k <= 2, 1000 steps, m = 64, depths 1, 2, 3, which is
  enough for each extra layer to solve one more k. Run live by the chapter.
* ``small``: CPU, about 10-15 minutes on one core: the width and sample-size axes of Appendix G.3 and G.5 at
  small scale. N = 32, k <= 4, 2000 steps, depths 2 and 3; (m, H) in {(16, 1), (32, 2), (64, 4)} (heads grow
  with width, head size 16, as the paper's (128, 4) -> (256, 8)) with fresh samples, and n_train in {250, 1000}
  for (64, 4).
* ``medium``: CPU, about an hour on one core: N = 64, k <= 8, 4000 steps, m = 64, depths 2..5, seeds 0 and 1.
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
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hoplib._book.cli import run_cli
from hoplib._book.device import get_device
from hoplib._book.provenance import atomic_write_text
from hoplib._book.validate import check_choice
from hoplib.train import (
    DivergedError,
    OneLineErrorParser,
    RunConfig,
    finished_results,
    fit_ensemble,
    read_record,
    results_record,
    train_run,
    write_run,
)


@dataclass(frozen=True)
class Grid:
    """A sweep: the product depths x widths x n_trains x seeds; ``settings`` (flat :class:`RunConfig` settings,
    e.g. ``seq_len``, ``steps``, ``lr``) are shared by every run."""

    depths: tuple[int, ...]
    widths: tuple[tuple[int, int], ...]  # (d_model, heads)
    n_trains: tuple[int | None, ...] = (None,)
    seeds: tuple[int, ...] = (0,)
    settings: dict[str, Any] = field(default_factory=dict)
    exclude: tuple[tuple[int, int | None], ...] = ()  # (d_model, n_train) pairs left out

    def configs(self) -> list[RunConfig]:
        """One :class:`hoplib.train.RunConfig` per grid point, in a fixed order (width, n_train, seed, depth)."""
        out = []
        for (m, h), n, s, depth in itertools.product(self.widths, self.n_trains, self.seeds, self.depths):
            if (m, n) in self.exclude:
                continue
            out.append(RunConfig.from_dict(dict(self.settings, depth=depth, d_model=m, heads=h, n_train=n, seed=s)))
        return out


GRIDS: dict[str, Grid] = {
    "quick": Grid(depths=(1, 2, 3), widths=((64, 4),),
                  settings=dict(seq_len=16, max_hops=2, steps=1000, lr=3e-3, warmup_steps=50, eval_samples=200)),
    "small": Grid(depths=(2, 3), widths=((16, 1), (32, 2), (64, 4)), n_trains=(250, 1000, None),
                  settings=dict(seq_len=32, max_hops=4, steps=2000, lr=2e-3, warmup_steps=100, eval_samples=100),
                  exclude=((16, 250), (16, 1000), (32, 250), (32, 1000))),
    "medium": Grid(depths=(2, 3, 4, 5), widths=((64, 4),), seeds=(0, 1),
                   settings=dict(seq_len=64, max_hops=8, steps=4000, lr=2e-3, warmup_steps=200, eval_samples=100)),
    "paper": Grid(depths=(2, 3, 4, 5, 6), widths=((128, 4), (256, 8)), n_trains=(1000, 3000, None),
                  settings=dict(seq_len=100, max_hops=16, steps=100_000, lr=1e-4, warmup_steps=1000,
                                head="layernorm", dropout=0.1, eval_samples=100),
                  exclude=((256, 1000), (256, 3000))),
}


def grid(name: str) -> Grid:
    """The named grid ``"quick"``, ``"small"``, ``"medium"`` or ``"paper"`` of :data:`GRIDS` (module doc)."""
    return GRIDS[check_choice("name", name, tuple(GRIDS))]


def run_name(config: RunConfig) -> str:
    """Folder name of a run, e.g. ``L3_m128_H4_ninf_s0``."""
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a hoplib.train.RunConfig, got {type(config).__name__}")
    n = "inf" if config.train.n_train is None else str(config.train.n_train)
    return f"L{config.depth}_m{config.d_model}_H{config.heads}_n{n}_s{config.train.seed}"


def _check_shard(shard: object) -> tuple[int, int]:
    if (not isinstance(shard, tuple) or len(shard) != 2 or not all(type(v) is int for v in shard)
            or not 0 <= shard[0] < shard[1]):
        raise ValueError(f"shard must be a pair (i, n) of ints with 0 <= i < n, got {shard!r}")
    return shard


def run_sweep(grid: Grid | str, out: str | Path, *, device: str | torch.device = "auto", progress: bool = True,
              ensemble: bool = False, checkpoint_every: int = 1000, compile: bool = False,
              shard: tuple[int, int] = (0, 1)) -> list[dict[str, Any]]:
    """Train every run of ``grid`` (a :class:`Grid` or the name of one in :data:`GRIDS`) under ``out``; write
    and return :func:`collect`'s table of the complete runs.

    Finished runs are skipped and interrupted ones resumed, so calling it again after a crash continues; a run
    that diverges is recorded (``diverged: true``), warned about, and left out of the table.
    ``shard=(i, n)`` trains only every n-th unit of work (run, or architecture group with ``ensemble``)
    starting at i, so n processes (on one GPU, or several) can share a grid; each writes its own run folders.
    """
    shard = _check_shard(shard)
    grid = GRIDS[check_choice("grid", grid, tuple(GRIDS))] if isinstance(grid, str) else grid
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a Grid or one of {tuple(GRIDS)}, got {type(grid).__name__}")
    out = Path(out)
    configs = grid.configs()
    if ensemble:  # units of work are architecture groups, in a fixed order shared by every shard
        archs = list(dict.fromkeys(_arch(c) for c in configs))[shard[0]::shard[1]]
        mine = [c for c in configs if _arch(c) in archs]
    else:
        mine = configs[shard[0]::shard[1]]
    todo = [c for c in mine if finished_results(out / run_name(c), c) is None]
    kw = dict(device=device, progress=progress, checkpoint_every=checkpoint_every, compile=compile)
    if ensemble and todo:
        _run_ensembles(todo, out, **kw)
    else:
        for c in todo:
            _train_one(c, out, **kw)
    table = collect(out, configs)
    atomic_write_text(out / "table.json", json.dumps(table, indent=1) + "\n")
    return table


def _train_one(config: RunConfig, out: Path, **kw: Any) -> None:
    """:func:`hoplib.train.train_run` of one run; a divergence is warned about (and recorded by train_run)."""
    try:
        train_run(config, out / run_name(config), **kw)
    except DivergedError as exc:
        warnings.warn(f"run {run_name(config)} diverged: {exc}", RuntimeWarning, stacklevel=3)


def _arch(config: RunConfig) -> tuple:
    """Everything but the data regime and seed: runs with equal keys can share a GPTEnsemble."""
    return tuple(sorted(config.replace(n_train=None, seed=0).to_dict().items()))


def _run_ensembles(todo: list[RunConfig], out: Path, *, device, progress: bool, checkpoint_every: int,
                   compile: bool) -> None:
    dev = get_device(device)
    groups: dict[tuple, list[RunConfig]] = {}
    for c in todo:
        groups.setdefault(_arch(c), []).append(c)
    kw = dict(device=dev, progress=progress, checkpoint_every=checkpoint_every, compile=compile)
    for configs in groups.values():
        c0 = configs[0]
        if len(configs) == 1:  # a group of one: a plain run (the same computation, its checkpoint in its folder)
            _train_one(c0, out, **kw)
            continue
        task = c0.task
        models = [c.init_model(dev) for c in configs]
        tag = f"L{c0.depth}_m{c0.d_model}_H{c0.heads}_" + "-".join(run_name(c) for c in configs)
        ck = out / "_ensembles" / hashlib.sha1(tag.encode()).hexdigest()[:12] / "checkpoint.pt"
        try:
            trained, hists = fit_ensemble(models, task, [c.train for c in configs], checkpoint=ck, **kw)
        except DivergedError as exc:  # find out which models diverge: train the group's runs one by one
            warnings.warn(f"an ensemble of {len(configs)} runs diverged ({exc}); training them one by one",
                          RuntimeWarning, stacklevel=2)
            for c in configs:
                _train_one(c, out, **kw)
            continue
        for c, model, hist in zip(configs, trained, hists, strict=True):
            rec = results_record(model, task, hist, c, dev, command=f"hoplib.training.sweep ensemble of {len(configs)}",
                                 ensemble_size=len(configs))
            write_run(out / run_name(c), model, rec)


def _paths(out: Path, configs: list[RunConfig] | None) -> list[Path]:
    if configs is not None:
        return [out / run_name(c) / "results.json" for c in configs]
    return sorted(out.glob("*/results.json"))


def run_status(out: str | Path, configs: list[RunConfig] | None = None) -> dict[str, str]:
    """``{run folder name: "complete" | "diverged" | "unfinished" | "missing"}`` for ``configs`` (default:
    every run folder under ``out`` with a results.json). ``ValueError`` naming a file that is not a run record."""
    status = {}
    for path in _paths(Path(out), configs):
        if not path.exists():
            status[path.parent.name] = "unfinished" if (path.parent / "checkpoint.pt").exists() else "missing"
            continue
        rec = read_record(path)
        status[path.parent.name] = ("complete" if rec.get("complete") else
                                    "diverged" if rec.get("diverged") else "unfinished")
    return status


def _rows(path: Path, rec: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        c = RunConfig.from_dict(rec["config"])
        labels = {"run": path.parent.name, "depth": c.depth, "d_model": c.d_model, "heads": c.heads,
                  "n_train": c.train.n_train, "seed": c.train.seed, "steps": c.train.steps}
        return [{**labels, "k": int(k), "metric": metric, "error": float(e)}
                for metric, key in (("paper", "per_k_error"), ("pooled", "per_k_error_pooled"))
                for k, e in rec[key].items()]
    except KeyError as exc:
        raise ValueError(f"{path}: a complete run record lacks {exc}") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: malformed run record ({exc})") from exc


def collect(out: str | Path, configs: list[RunConfig] | None = None) -> list[dict[str, Any]]:
    """Tidy table of every complete run under ``out`` (or of ``configs`` only): one row per (run, k, metric).

    Runs that diverged or are unfinished are left out (see :func:`run_status`); a results.json that is not a
    valid run record raises ``ValueError`` naming the file and what is wrong."""
    rows = []
    for path in _paths(Path(out), configs):
        if path.exists():
            rec = read_record(path)
            if rec.get("complete"):
                rows += _rows(path, rec)
    return rows


def load_run(run_dir: str | Path, device: str | torch.device = "cpu"):
    """``(model, record)`` of a complete run folder: the :class:`hoplib.models.GPT` with its final weights
    (``model.pt``, loaded with ``weights_only=True``) and the ``results.json`` record."""
    from hoplib.models import GPT, GPTConfig

    run_dir = Path(run_dir)
    rec = read_record(run_dir / "results.json")
    if not rec.get("complete"):
        why = "it diverged: " + str(rec.get("error")) if rec.get("diverged") else "it is unfinished"
        raise ValueError(f"{run_dir} holds no trained model ({why})")
    cfg = {k: v for k, v in rec["model"].items() if k != "parameters"}
    model = GPT(GPTConfig(**cfg))
    try:
        state = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{run_dir / 'model.pt'} is missing, corrupt or does not match results.json: {exc}") from exc
    return model.to(get_device(device)).eval(), rec


def _parse_shard(p: argparse.ArgumentParser, text: str) -> tuple[int, int]:
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        p.error(f"--shard must look like i/n, got {text!r}")
    if not 0 <= i < n:
        p.error(f"--shard i/n needs 0 <= i < n, got {text!r}")
    return i, n


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Entry point of ``python -m hoplib.training.sweep``: run a named grid, resumably; returns the table
    (and exits with status 1, after one line on stderr, if some runs of the grid diverged)."""
    p = OneLineErrorParser(prog="python -m hoplib.training.sweep", description="Run a named grid, resumably.")
    p.add_argument("--grid", choices=tuple(GRIDS), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--ensemble", action="store_true", help="train runs of one architecture together (GPU)")
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--shard", default="0/1", help="i/n: train only the i-th of n interleaved parts of the grid")
    a = p.parse_args(argv)
    shard = _parse_shard(p, a.shard)
    if a.checkpoint_every < 1:
        p.error(f"--checkpoint-every must be >= 1, got {a.checkpoint_every}")
    table = run_sweep(a.grid, a.out, device=a.device, progress=not a.no_progress, ensemble=a.ensemble,
                      checkpoint_every=a.checkpoint_every, compile=a.compile, shard=shard)
    diverged = [name for name, s in run_status(a.out, grid(a.grid).configs()).items() if s == "diverged"]
    if diverged:
        print(f"error: {len(diverged)} run(s) diverged: {', '.join(diverged)} (see their results.json)",
              file=sys.stderr)
        raise SystemExit(1)
    return table


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` with one-line errors: exit 2 for a user error, 1 if some runs of the grid diverged."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
