"""The training chapter's grids (Section 4.2, Appendix G): trained through the one sweep runner, and the stored
ones read back.

Each run lives in ``<out>/<run_name>`` (``results.json`` and ``model.pt``, the files of
:func:`hoplib.train.train_run`); :func:`train_grid` hands the runs to :func:`hoplib.sweep.run_sweep` and stores
their table in ``<out>/table.json``. :data:`GRIDS`: ``quick`` (CPU, a minute), ``small`` (CPU, 10-15 minutes:
the width and sample-size axes of Appendix G.3, G.5), ``cpu`` (CPU, an hour: depths 2..5, two seeds; stored
under ``results/training/medium/``, see :data:`STORED_AS`), ``depth`` (CPU, 4 core-hours: depths 2..6, k <= 16,
three seeds), ``gpu`` (one free Colab T4, about half an hour: depths 2..6 at N = 100 and m = 128, trained
together) and ``paper`` (the authors' grid, for a large GPU or a Slurm cluster). Command line:
``scripts/run_training.py``.
"""

from __future__ import annotations

import functools
import hashlib
import html
import itertools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from hoplib import report
from hoplib.device import get_device
from hoplib.report import ErrorRecord
from hoplib.results import Stored, check_fields, load_stored, output_path
from hoplib.sweep import kept_sweep
from hoplib.tasks import HopTask
from hoplib.train import (
    DivergedError,
    Progress,
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
    """The product depths x widths x n_trains x seeds; ``settings`` (flat :class:`RunConfig` settings such as
    ``seq_len``, ``steps``, ``lr``) are shared by every run; ``exclude`` leaves (d_model, n_train) pairs out."""

    depths: tuple[int, ...]
    widths: tuple[tuple[int, int], ...]  # (d_model, heads)
    n_trains: tuple[int | None, ...] = (None,)
    seeds: tuple[int, ...] = (0,)
    settings: dict[str, Any] = field(default_factory=dict)
    exclude: tuple[tuple[int, int | None], ...] = ()

    def configs(self) -> list[RunConfig]:
        """One :class:`hoplib.train.RunConfig` per grid point, in a fixed order (width, n_train, seed, depth)."""
        return [RunConfig.from_dict(dict(self.settings, depth=d, d_model=m, heads=h, n_train=n, seed=s))
                for (m, h), n, s, d in itertools.product(self.widths, self.n_trains, self.seeds, self.depths)
                if (m, n) not in self.exclude]

    def cut(self, max_steps: int) -> Grid:
        """The grid with every run cut to at most ``max_steps`` steps (a trial of its shapes and speed; warm-up
        and evaluations cut alike)."""
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        steps = min(self.settings.get("steps", 100_000), max_steps)
        cut = {"steps": steps, "warmup_steps": min(self.settings.get("warmup_steps", 1000), steps)}
        if "eval_every" in self.settings:
            cut["eval_every"] = min(self.settings["eval_every"], steps)
        return replace(self, settings={**self.settings, **cut})


GPU_STEPS = 30_000
"""Steps of the ``gpu`` grid: five models trained as one width ensemble fit half an hour of a T4 (an estimate,
``scripts/profiles.py``)."""
STORED_AS = {"cpu": "medium"}
"""Grids stored under ``results/training/`` by another name (the folder keeps the name the runs were made under)."""

GRIDS: dict[str, Grid] = {
    "quick": Grid(depths=(1, 2, 3), widths=((64, 4),),
                  settings=dict(seq_len=16, max_hops=2, steps=1000, lr=3e-3, warmup_steps=50, eval_samples=200)),
    "small": Grid(depths=(2, 3), widths=((16, 1), (32, 2), (64, 4)), n_trains=(250, 1000, None),
                  settings=dict(seq_len=32, max_hops=4, steps=2000, lr=2e-3, warmup_steps=100, eval_samples=100),
                  exclude=((16, 250), (16, 1000), (32, 250), (32, 1000))),
    "cpu": Grid(depths=(2, 3, 4, 5), widths=((64, 4),), seeds=(0, 1),
                   settings=dict(seq_len=64, max_hops=8, steps=4000, lr=2e-3, warmup_steps=200, eval_samples=100)),
    "depth": Grid(depths=(2, 3, 4, 5, 6), widths=((64, 4),), seeds=(0, 1, 2),
                  settings=dict(seq_len=64, max_hops=16, steps=10_000, lr=2e-3, warmup_steps=200,
                                eval_samples=200, eval_every=2000)),
    "gpu": Grid(depths=(2, 3, 4, 5, 6), widths=((128, 4),),
                settings=dict(seq_len=100, max_hops=16, steps=GPU_STEPS, lr=1e-3, warmup_steps=1000,
                              eval_samples=100)),
    "paper": Grid(depths=(2, 3, 4, 5, 6), widths=((128, 4), (256, 8)), n_trains=(1000, 3000, None),
                  settings=dict(seq_len=100, max_hops=16, steps=100_000, lr=1e-4, warmup_steps=1000,
                                head="layernorm", dropout=0.1, eval_samples=100),
                  exclude=((256, 1000), (256, 3000))),
}


def grid(name: str) -> Grid:
    """The named grid of :data:`GRIDS`."""
    return GRIDS[name]


def stored_folder(name: str) -> str:
    """The folder under ``results/training/`` that holds the stored runs of grid ``name``."""
    return STORED_AS.get(name, name)


def run_name(config: RunConfig) -> str:
    """Folder name of a run, e.g. ``L3_m128_H4_ninf_s0``."""
    n = "inf" if config.train.n_train is None else str(config.train.n_train)
    return f"L{config.depth}_m{config.d_model}_H{config.heads}_n{n}_s{config.train.seed}"


# --------------------------------------------------------------------------- training a grid
def train_grid(grid: Grid | str, out: str | Path, *, device: str | torch.device = "auto", workers: int = 1,
               executor: Any = None, overwrite: bool = False, progress: bool = True, ensemble: bool | str = False,
               checkpoint_every: int = 1000, compile: bool | str = False,
               seeds: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    """Train every run of ``grid`` (a :class:`Grid` or a name of :data:`GRIDS`, with ``seeds`` if given) into
    ``out/<run_name>`` through the one runner, :func:`hoplib.sweep.run_sweep`: one point per unit of work (a
    run, or with ``ensemble`` one architecture's runs), in this process, in ``workers`` local processes or as a
    Slurm job array (``executor``). Finished runs are skipped, interrupted ones resumed from their checkpoints,
    diverged ones recorded, warned about and left out. The table of the complete runs (one row per run, k and
    metric) is stored in ``out/table.json`` and returned; a finished grid is read back from it, ``overwrite``
    trains every run afresh. ``progress``: one bar over the steps of the whole grid (in this process)."""
    g = GRIDS[grid] if isinstance(grid, str) else grid
    g = g if seeds is None else replace(g, seeds=tuple(seeds))
    out, configs = output_path(out, option="out"), g.configs()
    units = list(_groups(configs, ensemble).values()) if ensemble else [[c] for c in configs]
    dev = str(device) if executor is not None else str(get_device(device))  # a Slurm node picks its own
    here = executor is None and workers == 1
    todo = [u for u in units if overwrite or any(finished_results(out / run_name(c), c) is None for c in u)]
    bar = Progress(sum(max(c.train.steps for c in u) for u in todo), f"{len(configs)} runs",
                   enabled=progress and here and bool(todo) and not (out / "table.json").exists())
    job = functools.partial(_train_unit, out=str(out), overwrite=overwrite, ensemble=ensemble, device=dev,
                            progress=bar if here else False, checkpoint_every=checkpoint_every, compile=compile)
    params = {"grid": grid if isinstance(grid, str) else "custom", "ensemble": ensemble}
    try:
        return kept_sweep(job, [[c.to_dict() for c in u] for u in units], out / "table.json", params,
                          device=dev, workers=workers, executor=executor, overwrite=overwrite)
    finally:
        bar.close()


def _train_unit(_: int, unit: list[dict[str, Any]], *, out: str, overwrite: bool, ensemble: bool | str,
                **kw: Any) -> list[dict[str, Any]]:
    """The job of one point of :func:`train_grid`: train the unit's runs (one, or an ensemble group) and return
    the table rows of those that completed."""
    configs, out_dir = [RunConfig.from_dict(c) for c in unit], Path(out)
    todo = configs if overwrite else [c for c in configs if finished_results(out_dir / run_name(c), c) is None]
    if len(todo) > 1 and ensemble:
        _run_ensemble(todo, out_dir, overwrite=overwrite, **kw)
    else:
        for c in todo:
            _train_one(c, out_dir, overwrite=overwrite, **kw)
    return collect(out_dir, configs)


def _train_one(config: RunConfig, out: Path, **kw: Any) -> None:
    try:
        train_run(config, out / run_name(config), **kw)
    except DivergedError as exc:
        warnings.warn(f"run {run_name(config)} diverged: {exc}", RuntimeWarning, stacklevel=3)


def _arch(config: RunConfig, ensemble: bool | str) -> tuple:
    """Everything but the data regime and seed (and the depth, with ``ensemble="width"``): runs with equal keys
    share a GPTEnsemble."""
    depth = {"depth": 1} if ensemble == "width" else {}
    return tuple(sorted(config.replace(n_train=None, seed=0, **depth).to_dict().items()))


def _groups(todo: list[RunConfig], ensemble: bool | str) -> dict[tuple, list[RunConfig]]:
    groups: dict[tuple, list[RunConfig]] = {}
    for c in todo:
        groups.setdefault(_arch(c, ensemble), []).append(c)
    return groups


def _run_ensemble(configs: list[RunConfig], out: Path, *, device: str, overwrite: bool, **kw: Any) -> None:
    """Train one architecture group as a :class:`~hoplib.models.GPTEnsemble` (deepest first); if it diverges,
    its runs one by one, to find out which."""
    dev = get_device(device)
    configs = sorted(configs, key=lambda c: -c.depth)
    c0 = configs[0]
    tag = f"L{c0.depth}_m{c0.d_model}_H{c0.heads}_" + "-".join(run_name(c) for c in configs)
    ck = out / "_ensembles" / hashlib.sha1(tag.encode()).hexdigest()[:12] / "checkpoint.pt"
    if overwrite:
        ck.unlink(missing_ok=True)
    try:
        trained, hists = fit_ensemble([c.init_model(dev) for c in configs], c0.task, [c.train for c in configs],
                                      checkpoint=ck, device=dev, **kw)
    except DivergedError as exc:
        warnings.warn(f"an ensemble of {len(configs)} runs diverged ({exc}); training them one by one",
                      RuntimeWarning, stacklevel=2)
        for c in configs:
            _train_one(c, out, device=dev, overwrite=overwrite, **kw)
        return
    for c, model, hist in zip(configs, trained, hists, strict=True):
        rec = results_record(model, c0.task, hist, c, dev, ensemble_size=len(configs),
                             command=f"hoplib.grids ensemble of {len(configs)}")
        write_run(out / run_name(c), model, rec)


def result_paths(out: Path, configs: list[RunConfig] | None) -> list[Path]:
    """The results.json of ``configs`` under ``out`` (default: every run folder's that exists)."""
    if configs is not None:
        return [out / run_name(c) / "results.json" for c in configs]
    return sorted(out.glob("*/results.json"))


def collect(out: str | Path, configs: list[RunConfig] | None = None) -> list[dict[str, Any]]:
    """Tidy table of every complete run under ``out`` (or of ``configs`` only): one row per (run, k, metric);
    a results.json that is not a run record, or whose fields have the wrong types (a ``depth`` that is not an
    integer, an error that is not a number in [0, 1]: :func:`~hoplib.results.check_fields`), raises
    ``ValueError`` naming the file."""
    table = []
    for path in result_paths(Path(out), configs):
        if path.exists() and (rec := read_record(path)).get("complete"):
            check_fields(rec, str(path))
            try:
                table += run_rows(path.parent.name, rec)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise ValueError(f"{path}: malformed run record ({exc!r})") from exc
    return table


# --------------------------------------------------------------------------- stored sweeps
def run_rows(run: str, rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tidy rows (:func:`hoplib.report.records_from_table`'s input) of one complete run record: one per (k,
    metric)."""
    c = rec["config"]
    labels = {"run": run, "depth": c["depth"], "d_model": c["d_model"], "heads": c["heads"],
              "n_train": c.get("n_train"), "seed": c.get("seed", 0), "steps": c["steps"]}
    return [{**labels, "k": int(k), "metric": metric, "error": float(e)}
            for metric, key in (("paper", "per_k_error"), ("pooled", "per_k_error_pooled"))
            for k, e in rec[key].items()]


@dataclass(frozen=True)
class StoredSweep:
    """The finished runs of a stored training sweep ``results/training/<name>/`` (``missing``: runs not stored)."""

    name: str
    runs: tuple[Stored, ...]
    missing: tuple[str, ...] = ()

    @property
    def configs(self) -> list[dict[str, Any]]:
        return [s.record["config"] for s in self.runs]

    @property
    def task(self) -> HopTask:
        return RunConfig.from_dict(self.configs[0]).task

    def table(self) -> list[dict[str, Any]]:
        """One tidy row per (run, k, metric) (:func:`run_rows`)."""
        return [r for s in self.runs for r in run_rows(s.path.parent.name, s.record)]

    def records(self, n_train: int | None | str = None, metric: str = "paper") -> list[ErrorRecord]:
        """The errors of one training-set size (None: fresh samples) in one metric, as records."""
        return [r for r in report.records_from_table(self.table(), n_train=n_train) if r.metric == metric]

    def wall_time_s(self) -> float:
        return float(sum(s.record["provenance"].get("wall_time_s", 0.0) for s in self.runs))

    def provenance_html(self, summary: str = "Provenance") -> str:
        """One collapsed ``<details>`` block: the sweep's folder and one provenance line per run."""
        lines = "".join(f"<li><code>{html.escape(s.path.parent.name)}</code>: {html.escape(s.origin)}</li>"
                        for s in self.runs)
        gone = f"<p>not stored yet: {html.escape(', '.join(self.missing))}</p>" if self.missing else ""
        return (f"<details><summary>{html.escape(summary)}: {len(self.runs)} stored runs in "
                f"<code>results/training/{html.escape(self.name)}/</code></summary><ul>{lines}</ul>{gone}</details>")


def reference_groups(folder: str, label: str = "transformer") -> tuple[dict[str, list[ErrorRecord]], StoredSweep]:
    """The training chapter's stored transformers in ``results/training/<folder>/`` (fresh samples) as
    :func:`hoplib.report.reach_table` groups, one per seed (``"<label>, seed <s>"``), and those runs."""
    runs = load_stored_sweep({v: k for k, v in STORED_AS.items()}.get(folder, folder))
    return {f"{label}, seed {seed}": [replace(r, family=label) for r in recs]
            for seed, recs in report.records_by_seed(runs.records()).items()}, runs


AUTHORS_FILE = "training/authors-errors.json"
"""The authors' published errors: their repository's ``local/errors.json`` (pooled metric), copied unchanged."""


def load_stored_sweep(name: str) -> StoredSweep:
    """Every run of the named grid stored under ``results/training/<folder>/`` (:func:`stored_folder`; missing
    runs are listed)."""
    runs, missing, folder = [], [], stored_folder(name)
    for c in grid(name).configs():
        stored = load_stored(f"training/{folder}/{run_name(c)}/results.json", required=False)
        if stored is None or not stored.record.get("complete"):
            missing.append(run_name(c))
        else:
            runs.append(stored)
    if not runs:
        raise ValueError(f"no finished run of the {name!r} sweep is stored under results/training/{folder}/")
    return StoredSweep(folder, tuple(runs), tuple(missing))


def published(heads: int = 4, n_train: int | None = None) -> list[ErrorRecord]:
    """The authors' published errors (pooled metric): m = 128 (``heads=4``) or 256 (``8``), one n_train."""
    return report.authors_records(load_stored(AUTHORS_FILE).record, heads=heads, n_train=n_train)


def crossings(table: dict[int, dict[int, float]]) -> dict[int, float]:
    """{depth: k where the error crosses THRESHOLD} of an error table, uncensored depths only."""
    out = {d: report.crossing_k(row) for d, row in table.items()}
    return {d: k for d, (k, censored) in out.items() if not censored}


def growth_points(name: str = "depth"):
    """``(kstar, refs)`` for :func:`hoplib.report.plot_growth`: each stored run's crossing (a DataFrame by depth
    and seed) and the published and released models' crossings (pooled metric, fresh samples, m = 128)."""
    import pandas as pd

    from hoplib import released

    rows = []
    for s in load_stored_sweep(name).runs:
        c = s.record["config"]
        k, censored = report.crossing_k({int(k): e for k, e in s.record["per_k_error"].items()})
        rows.append({"depth": c["depth"], "seed": c["seed"], "k*": k, "censored": censored})
    rel = {released.info(n).depth: {int(k): e for k, e in s.data["errors"]["pooled"].items()}
           for n, s in released.load_stored_results().items() if released.info(n).n_train is None}
    refs = {"published (N = 100, m = 128)": crossings(report.error_table(published(heads=4), metric="pooled")),
            "released, dropout off": crossings(rel)}
    return pd.DataFrame(rows).set_index(["depth", "seed"]).sort_index(), refs
