"""The training chapter's experiments (Section 4.2 and Appendix G of the paper): its profiles, the stored
sweeps and the authors' published errors as :class:`hoplib.report.ErrorRecord` lists, and the tables and
figures the chapter reads from them.

Stored results are read only through :func:`hoplib._book.results.load_stored`: a sweep ``name`` lives under
``results/training/<name>/`` with one folder per run (:func:`hoplib.training.sweep.run_name`) holding
``results.json`` (errors, configuration, provenance) and ``model.pt``; the authors' errors are
``results/training/authors-errors.json`` (their ``local/errors.json``, pooled metric).
"""

from __future__ import annotations

import dataclasses
import html
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hoplib import models, report
from hoplib._book.results import Stored, load_stored, results_dir
from hoplib._book.timing import Job
from hoplib._book.validate import check_int
from hoplib.report import ErrorRecord
from hoplib.tasks import HopTask
from hoplib.train import RunConfig
from hoplib.training import sweep

PROFILES: dict[str, dict[str, Any]] = {
    name: {"grid": name, "threshold": 0.05, "n_align": 10, "min_lift": 0.1} for name in ("quick", "medium", "paper")
}
"""The chapter's profiles: ``grid`` names the sweep trained live in the section "Rerun it yourself"
(:func:`hoplib.training.sweep.grid`); ``threshold`` is the error under which a k counts as solved;
``n_align`` the samples per k of the attention analysis and ``min_lift`` how far a head's alignment score must
clear its noise floor (:mod:`hoplib.training.heads`). Stored runs are shown in every profile."""

MAIN_SWEEP = "medium"
"""The stored sweep behind the chapter's main figure: N = 64, k <= 8, m = 64, H = 4, depths 2-5."""

ALIGN_RUN = "L5_m64_H4_ninf_s0"
"""The stored model (of :data:`MAIN_SWEEP`) whose heads the chapter reads: the deepest one."""

PAPER_TASK = HopTask(seq_len=100, alphabet_size=4, max_hops=16)
"""The task of the paper's experiments (paper-spec section 7)."""

TABLE3 = {(128, 4): [413_440, 611_712, 809_984, 1_008_256, 1_206_528],
          (256, 8): [1_613_312, 2_403_072, 3_192_832, 3_982_592, 4_772_352]}
"""The paper's Table 3: parameter counts of the authors' models for L = 2..6, per (m, H)."""

AUTHORS_FILE = "training/authors-errors.json"


def jobs(profile: str) -> list[Job]:
    """The training work of the live sweep of a profile (its grid), for :mod:`hoplib._book.timing`."""
    from hoplib.training.flops import matmul_parameters

    return [Job(matmul_parameters(config.model_config()), config.train.batch_size * config.task.length,
                config.train.steps) for config in sweep.grid(PROFILES[profile]["grid"]).configs()]


def parameter_counts(depths: range = range(2, 7)) -> dict[tuple[int, int], list[int]]:
    """Parameters of :func:`hoplib.models.authors_gpt` on the paper's task, per (m, H) of Table 3 and depth."""
    return {(m, h): [models.count_parameters(models.authors_gpt(PAPER_TASK, depth=d, d_model=m, heads=h))
                     for d in depths] for (m, h) in TABLE3}


def recipe_lines() -> list[str]:
    """A text table of the named sweep grids (:data:`hoplib.training.sweep.GRIDS`): depths, widths (m, H),
    training-set sizes, sequence length N, largest k, steps, learning rate, warmup, output head and dropout."""
    lines = [f"{'grid':>6}  {'depths':<10} {'(m, H)':<22} {'n_train':<16} {'N':>3} {'k<=':>3} {'steps':>7} "
             f"{'lr':>6} {'warmup':>6}  head, dropout"]
    for name, grid in sweep.GRIDS.items():
        c = grid.configs()[0].to_dict()
        depths = ",".join(map(str, grid.depths))
        widths = " ".join(f"({m},{h})" for m, h in grid.widths)
        ns = ",".join("fresh" if n is None else str(n) for n in grid.n_trains)
        lines.append(f"{name:>6}  {depths:<10} {widths:<22} {ns:<16} {c['seq_len']:>3} {c['max_hops']:>3} "
                     f"{c['steps']:>7} {c['lr']:>6g} {c['warmup_steps']:>6}  {c['head']}, {c['dropout']}")
    return lines


# --------------------------------------------------------------------------- stored sweeps
@dataclass(frozen=True)
class StoredSweep:
    """The finished runs of a stored sweep ``results/training/<name>/``, with their tidy rows."""

    name: str
    runs: tuple[Stored, ...]
    missing: tuple[str, ...]

    @property
    def configs(self) -> list[dict[str, Any]]:
        return [s.record["config"] for s in self.runs]

    @property
    def task(self) -> HopTask:
        """The task of the sweep's runs (they share it)."""
        return RunConfig.from_dict(self.configs[0]).task

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One row per (run, k, metric), as :func:`hoplib.training.sweep.collect` makes them."""
        out = []
        for s in self.runs:
            c = s.record["config"]
            labels = {"run": s.path.parent.name, "depth": c["depth"], "d_model": c["d_model"],
                      "heads": c["heads"], "n_train": c["n_train"], "seed": c["seed"]}
            for metric, key in (("paper", "per_k_error"), ("pooled", "per_k_error_pooled")):
                out += [{**labels, "k": int(k), "metric": metric, "error": e} for k, e in s.record[key].items()]
        return out

    def records(self, n_train: int | None | str = None, metric: str = "paper") -> list[ErrorRecord]:
        """The sweep's errors in one metric as records, for one training-set size (None: fresh samples)."""
        return [r for r in report.records_from_table(self.rows, n_train=n_train) if r.metric == metric]

    def final_loss(self) -> dict[tuple[int, int | None, int], float]:
        """``{(d_model, n_train, depth): final training loss}``."""
        return {(c["d_model"], c["n_train"], c["depth"]): s.record["final_loss"]
                for s, c in zip(self.runs, self.configs, strict=True)}

    def wall_time_s(self) -> float:
        """Training time of all stored runs together, in seconds (from their provenance)."""
        return float(sum(s.record["provenance"].get("wall_time_s", 0.0) for s in self.runs))

    def final_loss_lines(self) -> list[str]:
        """The final training loss of every run, one line each (width, training-set size, depth)."""
        return [f"final training loss, m = {m}, n_train = {'fresh' if n is None else n}, L = {d}: {v:.4f}"
                for (m, n, d), v in sorted(self.final_loss().items(), key=lambda kv: (kv[0][0], kv[0][1] or 10**9,
                                                                                      kv[0][2]))]

    def provenance_html(self) -> str:
        """One collapsed ``<details>`` block: the sweep's folder and one provenance line per run."""
        lines = "".join(f"<li><code>{html.escape(s.path.parent.name)}</code>: {html.escape(s.origin)}</li>"
                        for s in self.runs)
        gone = f"<p>not stored yet: {html.escape(', '.join(self.missing))}</p>" if self.missing else ""
        return (f"<details><summary>Provenance: {len(self.runs)} stored runs in "
                f"<code>results/training/{html.escape(self.name)}/</code></summary><ul>{lines}</ul>{gone}</details>")


def load_stored_sweep(name: str) -> StoredSweep:
    """Every run of the named grid stored under ``results/training/<name>/`` (missing runs are listed)."""
    runs, missing = [], []
    for c in sweep.grid(name).configs():
        run = sweep.run_name(c)
        stored = load_stored(f"training/{name}/{run}/results.json", required=False)
        if stored is None or not stored.record.get("complete"):
            missing.append(run)
        else:
            runs.append(stored)
    if not runs:
        raise ValueError(f"no finished run of the {name!r} sweep is stored under results/training/{name}/")
    return StoredSweep(name, tuple(runs), tuple(missing))


def load_stored_model(name: str, run: str, device: str | torch.device = "cpu"):
    """``(model, record)`` of a stored run ``results/training/<name>/<run>/`` (weights from ``model.pt``)."""
    load_stored(f"training/{name}/{run}/results.json")  # a clear error if the run is not stored
    return sweep.load_run(results_dir() / "training" / name / run, device=device)


def published(heads: int = 4, n_train: int | None = None) -> list[ErrorRecord]:
    """The authors' published errors (pooled metric) for one row set: m = 128 (``heads=4``) or 256 (``8``)."""
    return report.authors_records(load_stored(AUTHORS_FILE).record, heads=heads, n_train=n_train)


def published_provenance_html() -> str:
    """The collapsed provenance of the authors' errors (their repository, file and commit)."""
    return load_stored(AUTHORS_FILE).provenance_html("Source of the published errors")


def grid_task(name: str) -> HopTask:
    """The task of the named grid's runs (they share it)."""
    return sweep.grid(name).configs()[0].task


def live_sweep(grid: str, *, seed: int, device: str | torch.device, out_dir: str | Path | None = None,
               progress: bool = False) -> list[ErrorRecord]:
    """Train the named grid now with one seed, in ``out_dir/runs`` or a temporary folder; return its records
    (fresh samples, paper metric). Finished runs in ``out_dir`` are skipped and interrupted ones resumed."""
    g = dataclasses.replace(sweep.grid(grid), seeds=(check_int("seed", seed, low=0),))
    where = Path(out_dir) / "runs" if out_dir else Path(tempfile.mkdtemp(prefix="hoplib-training-"))
    table = sweep.run_sweep(g, where, device=device, progress=progress)
    return [r for r in report.records_from_table(table, n_train=None) if r.metric == "paper"]


# --------------------------------------------------------------------------- depth thresholds
def depth_formulas(k: int) -> tuple[int, int]:
    """``(⌊log₂ k⌋ + 2, ⌈log₂ k⌉ + 2)`` for k >= 1: :func:`hoplib.report.depth_floor` (Theorem 4.2 as the paper
    states it) and :func:`hoplib.report.depth_ceil` (one lookup per layer); equal at powers of two."""
    k = check_int("k", k, low=1)
    return report.depth_floor(k), report.depth_ceil(k)


def formula_agreement(star: dict[int, int | None]) -> dict[str, list[int]]:
    """Sort the hop counts k >= 1 of an empirical threshold L*(k) (:func:`hoplib.report.smallest_depth`) by
    which depth formula they equal: ``"both"`` (k a power of two), ``"floor"`` only, ``"ceil"`` only,
    ``"neither"``, or ``"not_reached"`` (no depth reached the threshold)."""
    out: dict[str, list[int]] = {"both": [], "floor": [], "ceil": [], "neither": [], "not_reached": []}
    for k, d in sorted(star.items()):
        if k < 1:
            continue
        lo, hi = depth_formulas(k)
        key = ("not_reached" if d is None else "both" if d == lo == hi else "floor" if d == lo
               else "ceil" if d == hi else "neither")
        out[key].append(k)
    return out


def k_list(ks: list[int]) -> str:
    """Hop counts as a short range list: ``[6, 7, 9, 10, 11]`` -> ``"6, 7, 9-11"`` (``"none"`` if empty)."""
    if not ks:
        return "none"
    parts, start = [], ks[0]
    for a, b in zip(ks, [*ks[1:], None], strict=True):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}, {a}" if a == start + 1 else f"{start}-{a}")
            start = b
    return ", ".join(parts)


def threshold_lines(star_ours: dict[int, int | None], star_pub: dict[int, int | None], deepest_pub: int) -> list[str]:
    """The table of L*(k) for our runs and the published ones beside both depth formulas."""
    lines = [f"{'k':>3} {'L* ours':>8} {'L* published':>13} {'floor(log2 k)+2':>16} {'ceil(log2 k)+2':>15}"]
    for k in sorted((set(star_ours) | set(star_pub)) - {0}):
        ours = "n/a" if k not in star_ours else "-" if star_ours[k] is None else str(star_ours[k])
        pub = "n/a" if k not in star_pub else f">{deepest_pub}" if star_pub[k] is None else str(star_pub[k])
        lo, hi = depth_formulas(k)
        lines.append(f"{k:>3} {ours:>8} {pub:>13} {lo:>16} {hi:>15}")
    return lines


def error_lines(records: list[ErrorRecord], metric: str = "paper") -> list[str]:
    """The ``{depth: {k: error}}`` table of ``records`` as text, one line per depth."""
    table = report.error_table(records, metric=metric)
    return [f"L = {d}: " + "  ".join(f"{e:.3f}" for e in row.values()) for d, row in table.items()]


# --------------------------------------------------------------------------- width and sample size
def records_by_seed(records: list[ErrorRecord]) -> dict[int, list[ErrorRecord]]:
    """A sweep's records split by the training seed in their run name (``L3_m64_H4_ninf_s1`` -> 1)."""
    out: dict[int, list[ErrorRecord]] = {}
    for r in records:
        head, sep, seed = r.run.rpartition("_s")
        if not sep or not seed.isdigit():
            raise ValueError(f"record of run {r.run!r} has no seed suffix _s<seed>")
        out.setdefault(int(seed), []).append(r)
    return dict(sorted(out.items()))


def reach_by_seed(records: list[ErrorRecord], threshold: float = 0.05) -> dict[int, dict[int, int]]:
    """``{seed: {depth: largest K solved}}`` (:func:`hoplib.report.largest_solved`, each seed on its own)."""
    return {seed: report.largest_solved(rs, threshold=threshold) for seed, rs in records_by_seed(records).items()}


def mean_error(records: list[ErrorRecord], depth: int, *, min_k: int = 1, metric: str = "paper") -> float:
    """Mean error of one depth over the hop counts k >= ``min_k`` (k = 0, copying the input, is solved by all)."""
    row = report.error_table(records, metric=metric).get(check_int("depth", depth, low=0), {})
    errs = [e for k, e in row.items() if k >= min_k]
    if not errs:
        raise ValueError(f"no errors at depth {depth} for k >= {min_k}")
    return sum(errs) / len(errs)


def width_and_sample_groups(small: StoredSweep) -> tuple[dict[str, list[ErrorRecord]], dict[str, list[ErrorRecord]]]:
    """The ``small`` sweep split two ways (Appendix G.3 and G.5): by width with fresh samples, and by
    training-set size at the largest width (fewest samples first, fresh last). Labels ``"m = 16"``, ``"n = 250"``,
    ``"fresh"``."""
    widths = sorted({c["d_model"] for c in small.configs})
    by_width = {f"m = {m}": [r for r in small.records(None) if r.width == m] for m in widths}
    wide = widths[-1]
    ns = sorted({c["n_train"] for c in small.configs if c["d_model"] == wide}, key=lambda n: (n is None, n or 0))
    by_n = {("fresh" if n is None else f"n = {n}"): [r for r in small.records(n) if r.width == wide] for n in ns}
    return by_width, by_n


def mean_table(groups: dict[str, list[ErrorRecord]], depths: list[int]) -> dict[str, dict[int, float]]:
    """``{label: {depth: mean error over k >= 1}}`` for each group of :func:`width_and_sample_groups`."""
    return {label: {d: mean_error(recs, d) for d in depths} for label, recs in groups.items()}


def passes(n_train: int, steps: int, batch_size: int) -> float:
    """How often each training sample is seen: the authors cycle only whole batches of the fixed set."""
    n_train, batch_size = check_int("n_train", n_train, low=1), check_int("batch_size", batch_size, low=1)
    used = n_train // batch_size * batch_size
    if used == 0:
        raise ValueError(f"n_train = {n_train} holds no whole batch of {batch_size}")
    return check_int("steps", steps, low=0) * batch_size / used


# --------------------------------------------------------------------------- figures
def plot_depth_pair(left: list[ErrorRecord], right: list[ErrorRecord], *, titles: tuple[str, str],
                    chances: tuple[float, float]):
    """Error against k, one curve per depth: ``left`` on a linear k axis, ``right`` (the published errors,
    k from 1 to 16) on a log axis as in the paper's Figure 2; side by side, sized for the page. Returns the
    figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    report.plot_error_vs_k(left, axes[0], chance=chances[0], title=titles[0], min_k=1)
    report.plot_error_vs_k(right, axes[1], chance=chances[1], title=titles[1], logx=True, min_k=1)
    fig.tight_layout()
    return fig


def plot_heatmap_pair(top: list[ErrorRecord], bottom: list[ErrorRecord], *, titles: tuple[str, str]):
    """Depth x k heatmaps, one above the other so that the written-in errors stay legible (the paper's
    Figure 8 below). Returns the figure."""
    import matplotlib.pyplot as plt

    rows = [len({r.depth for r in recs}) for recs in (top, bottom)]
    fig, axes = plt.subplots(2, 1, figsize=(8, 1.2 + 0.45 * sum(rows) + 1.2),
                             gridspec_kw={"height_ratios": [max(1, n) for n in rows]})
    report.plot_error_heatmap(top, axes[0], title=titles[0])
    report.plot_error_heatmap(bottom, axes[1], title=titles[1])
    fig.tight_layout()
    return fig


def plot_width_samples(ours: tuple[dict, dict], theirs: tuple[dict, dict], *, titles: list[str],
                       chances: tuple[float, float]):
    """Width (top) and training-set size (bottom): ``ours`` (the small sweep's two groupings, left) beside
    ``theirs`` (the published ones, right, depths 2-4, log k axis), sized for the page. Returns the figure."""
    import matplotlib.pyplot as plt

    if len(titles) != 4:
        raise ValueError("titles must hold four strings: ours by width, theirs by width, ours by n, theirs by n")
    fig, axes = plt.subplots(2, 2, figsize=(9.5, 8.5))
    for row in range(2):
        report.plot_error_vs_k_groups(ours[row], axes[row, 0], chance=chances[0], title=titles[2 * row],
                                      min_k=1)
        report.plot_error_vs_k_groups(theirs[row], axes[row, 1], depths=(2, 3, 4), chance=chances[1],
                                      title=titles[2 * row + 1], logx=True, min_k=1)
    fig.tight_layout()
    return fig


def gpu_bench_names() -> list[str]:
    """Names (for :func:`hoplib._book.results.load_stored`) of the stored GPU benchmarks of the paper grid,
    ``results/training/bench_gpu_cuda*.json`` (written by ``benchmarks/bench_gpu.py``); empty if none."""
    folder = results_dir() / "training"
    return [f"training/{p.name}" for p in sorted(folder.glob("bench_gpu_cuda*.json"))]
