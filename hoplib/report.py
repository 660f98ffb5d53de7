"""The book's one depth report: test error against the number of hops k, per model family, depth and width.

:class:`ErrorRecord` is one point; :func:`error_table` makes ``{depth: {k: error}}``; :func:`largest_solved`
says how far each depth reaches and :func:`smallest_depth` gives the empirical depth L*(k) that the paper
compares with ⌊log₂ k⌋ + 2 (Theorem 4.2), both at the book's one threshold :data:`THRESHOLD`.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hoplib.tasks import HopTask

THRESHOLD = 0.1
"""A hop count k counts as solved by a model when its test error at k is at most this (every chapter)."""

METRICS = ("paper", "pooled")
"""The two error metrics of :mod:`hoplib.evaluate`: the paper's per-sample average, the authors' pooled one."""

AUTHORS_WIDTH = {4: 128, 8: 256}
"""The authors' models: H = 4 heads means width m = 128, H = 8 means m = 256 (their "width4"/"width8")."""


@dataclass(frozen=True)
class ErrorRecord:
    """One point of "test error against k": ``family`` at ``depth`` (and ``width``) on hop_k, in ``metric``
    (``"paper"`` or ``"pooled"``); ``run`` says where the number came from."""

    family: str
    depth: int
    k: int
    error: float
    width: int | None = None
    metric: str = "paper"
    run: str = ""

    def __post_init__(self) -> None:  # a NaN or a mislabelled metric would be averaged in silently
        if not 0.0 <= float(self.error) <= 1.0 or self.metric not in METRICS:
            raise ValueError(f"error must be in [0, 1] and metric one of {METRICS}, got {self}")
        object.__setattr__(self, "error", float(self.error))


def records_from_table(table: Iterable[Mapping[str, Any]], *, family: str = "transformer",
                       n_train: int | None | str = "any") -> list[ErrorRecord]:
    """Records from a sweep's tidy rows (``depth``, ``d_model``, ``k``, ``metric``, ``error``, ``run``,
    ``n_train``), keeping one training-set size (``None``: fresh samples; ``"any"``: all)."""
    return [ErrorRecord(family, row["depth"], row["k"], row["error"], row.get("d_model"),
                        row.get("metric", "paper"), str(row.get("run", "")))
            for row in table if n_train == "any" or row.get("n_train") == n_train]


def authors_records(data: Mapping[str, Any], *, heads: int = 4, n_train: int | None = None) -> list[ErrorRecord]:
    """The published errors (the authors' ``errors.json``, pooled metric) of one width and training-set size.

    ``data`` is that file's ``{"((L, H, n_train), k)": error}`` map, or the book's copy which wraps it under
    ``"errors"``; ``n_train=None`` selects the fresh-sample runs (stored as -1)."""
    raw = data["errors"] if isinstance(data.get("errors"), Mapping) else data
    want_n = -1 if n_train is None else n_train
    out = [ErrorRecord("transformer", depth, k, val, AUTHORS_WIDTH[heads], "pooled", "authors")
           for key, val in raw.items() for (depth, h, n), k in [ast.literal_eval(key)] if (h, n) == (heads, want_n)]
    if not out:
        raise ValueError(f"no published errors for heads={heads}, n_train={n_train}")
    return sorted(out, key=lambda r: (r.depth, r.k))


def chance_error(task: HopTask, metric: str = "paper") -> float:
    """Error of the best predictor that ignores its input, in either metric: 1 - 1/|Σ| (3/4 for the paper's 4
    letters), as the task and hop_k are invariant under permutations of the alphabet."""
    return 1.0 - 1.0 / task.alphabet_size


def error_table(records: Iterable[ErrorRecord], *, family: str | None = None, width: int | None = None,
                metric: str = "paper") -> dict[int, dict[int, float]]:
    """``{depth: {k: error}}`` of the selected records, averaged where several share (depth, k) (seeds).
    ``ValueError`` if the selection mixes families or widths: that average would be no model's error."""
    recs = [r for r in records if (family is None or r.family == family) and (width is None or r.width == width)
            and (metric is None or r.metric == metric)]
    for field in ("family", "width"):
        if len(values := {getattr(r, field) for r in recs}) > 1:
            raise ValueError(f"records mix several values of {field} {sorted(values, key=str)}; pass {field}=...")
    acc: dict[int, dict[int, list[float]]] = {}
    for r in recs:
        acc.setdefault(r.depth, {}).setdefault(r.k, []).append(r.error)
    return {d: {k: sum(v) / len(v) for k, v in sorted(ks.items())} for d, ks in sorted(acc.items())}


def records_by_seed(records: Iterable[ErrorRecord]) -> dict[int, list[ErrorRecord]]:
    """Records split by the training seed at the end of their run name (``L3_m64_H4_ninf_s1`` -> 1)."""
    out: dict[int, list[ErrorRecord]] = {}
    for r in records:
        out.setdefault(int(r.run.rpartition("_s")[2]), []).append(r)
    return dict(sorted(out.items()))


def depth_floor(k: int) -> int:
    """⌊log₂ k⌋ + 2, the depth Theorem 4.2 states for hop_k (k >= 1; 0 for k = 0, the identity)."""
    return 0 if k == 0 else k.bit_length() + 1


def depth_ceil(k: int) -> int:
    """⌈log₂ k⌉ + 2 (k >= 1; 0 for k = 0): the depth when each layer after the first two makes one lookup and
    so at most doubles the reach (the book's construction); equal to :func:`depth_floor` at powers of two."""
    return 0 if k == 0 else (k - 1).bit_length() + 2


Records = Iterable[ErrorRecord] | Mapping[int, Mapping[int, float]]
"""Records, or an error table ``{depth: {k: error}}`` (:func:`largest_solved`, :func:`smallest_depth`)."""


def _as_table(records: Any, **select: Any) -> dict[int, dict[int, float]]:
    return {d: dict(row) for d, row in records.items()} if isinstance(records, Mapping) else error_table(
        records, **select)


def largest_solved(records: Records, *, threshold: float = THRESHOLD,
                   **select: Any) -> dict[int, int]:
    """For each depth, the largest K with error at most ``threshold`` at every
    k = 1..K (0 when k = 1 fails; a missing k fails). ``records``: records (``family``,
    ``width``, ``metric`` select, as in :func:`error_table`) or a table {depth: {k: error}}.
    """
    out = {}
    for d, row in _as_table(records, **select).items():
        out[d] = 0
        while row.get(out[d] + 1, math.inf) <= threshold:
            out[d] += 1
    return out


def crossing_k(errors: Mapping[int, float],
               threshold: float = THRESHOLD) -> tuple[float, bool]:
    """The k where the error first rises above ``threshold``, interpolated
    linearly between the k before (k = 0 counts as error 0) and that k; with
    ``True`` when it never does (then the largest k: a lower bound; a missing k
    ends the known range). A NaN or infinite error is a ValueError (it would
    give a crossing of NaN)."""
    if bad := [(k, e) for k, e in errors.items() if not math.isfinite(e)]:
        k, e = bad[0]
        raise ValueError(f"crossing_k: the error at k = {k} is {e}, not finite")
    prev_k, prev_e = 0, 0.0
    while (k := prev_k + 1) in errors:
        e = errors[k]
        if e > threshold:
            return prev_k + (threshold - prev_e) / (e - prev_e), False
        prev_k, prev_e = k, e
    return float(prev_k), True


def smallest_depth(records: Records, *,
                   threshold: float = THRESHOLD, **select: Any) -> dict[int, int | None]:
    """Empirical L*(k): for each k, the smallest depth whose error at k is at most ``threshold`` (None if no
    depth does; a depth missing for some k counts as failing). Arguments as for :func:`largest_solved`."""
    table = _as_table(records, **select)
    ks = sorted({k for row in table.values() for k in row})
    return {k: next((d for d in sorted(table) if table[d].get(k, math.inf) <= threshold), None) for k in ks}


# --------------------------------------------------------------------------- figures
def _metric_of(recs: list[ErrorRecord], metric: str | None) -> str:
    found = {r.metric for r in recs}
    if metric is None and len(found) > 1:
        raise ValueError(f"records mix the metrics {sorted(found)}; pass metric=...")
    return metric or (found.pop() if found else "paper")


def plot_error_vs_k(records: Iterable[ErrorRecord], ax=None, *, family: str | None = None,
                    width: int | None = None, **kw: Any):
    """Test error against k, one curve per depth (the paper's Figure 2 with ``logx=True, min_k=1``); options as
    for :func:`plot_error_vs_k_groups`. Returns the axes."""
    return plot_error_vs_k_groups({"": records}, ax, family=family, width=width, **kw)


DEPTH_STYLES = ("-", "--", ":", "-.")
"""Line styles of the depths (shallowest first) when colours show groups."""


def plot_error_vs_k_groups(groups: Mapping[str, Iterable[ErrorRecord]], ax=None, *,
                           depths: Iterable[int] | None = None, chance: float | None = None, title: str = "",
                           metric: str | None = None, logx: bool = False, min_k: int = 0,
                           colours: Mapping[str, Any] | None = None, legend: bool = True, **select: Any):
    """Error against k for several settings at once (Figures 9 and 16-19 of the paper): one colour per group
    (a width or a training-set size; ``colours`` fixes them, e.g. the same across panels), one line style per
    depth (:data:`DEPTH_STYLES`); one group gets a colour per depth. ``chance`` draws a dotted line; ``legend``
    False leaves the legend to the caller. Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullFormatter

    tables = {label: error_table(recs, metric=_metric_of(recs, metric), **select)
              for label, recs in ((label, list(recs)) for label, recs in groups.items())}
    all_depths = sorted({d for t in tables.values() for d in t if depths is None or d in set(depths)})
    ax = ax or plt.gca()
    for i, (label, table) in enumerate(tables.items()):
        for j, d in enumerate(all_depths):
            if d not in table:
                continue
            if len(tables) == 1:  # one colour per depth
                colour, ls = plt.get_cmap("viridis")(0.9 * j / max(1, len(all_depths) - 1)), "-"
            else:  # one colour per group, one line style per depth
                colour = (colours[label] if colours else
                          plt.get_cmap("plasma")(0.85 * i / max(1, len(tables) - 1)))
                ls = DEPTH_STYLES[j % len(DEPTH_STYLES)]
            ks = [k for k in table[d] if k >= min_k]
            ax.plot(ks, [table[d][k] for k in ks], marker="o", ms=4, ls=ls, color=colour,
                    label=f"{label}, L = {d}" if label else f"L = {d}")
    ks = sorted({k for t in tables.values() for d in all_depths for k in t.get(d, {}) if k >= min_k})
    labelled = [k for k in ks if k > 0 and k & (k - 1) == 0] if logx and len(ks) > 8 else ks
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xticks(labelled, [str(k) for k in labelled])
    ax.xaxis.set_minor_locator(FixedLocator([k for k in ks if k not in labelled]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if chance is not None:
        ax.axhline(chance, color="0.45", lw=1, ls=":", label="chance")
    ax.set(xlabel="k (hops)", ylabel="test error", ylim=(-0.02, max(1.0, (chance or 0) + 0.08)), title=title)
    if legend:
        ax.legend(ncol=2 if len(ax.get_lines()) > 7 else 1)
    return ax


# ------------------------------------------------------ stored depth sweeps of the lower-bound chapters
def error_records(rows: Iterable[Mapping[str, Any]], *, run: str = "") -> list[ErrorRecord]:
    """Sweep rows (``kind``, ``depth``, ``k``, ``error``, optionally ``d_model``) as records."""
    return [ErrorRecord(str(r["kind"]), int(r["depth"]), int(r["k"]), float(r["error"]), r.get("d_model"),
                        "paper", run) for r in rows]


def reach_table(groups: Mapping[str, Sequence[ErrorRecord]], threshold: float = THRESHOLD
                ) -> dict[str, dict[int, int]]:
    """``{label: {depth: K}}``: for each group (one family, one run per depth), the largest K such that the
    model of that depth has error at most ``threshold`` at every k = 1..K (0: not even k = 1)."""
    return {label: largest_solved(list(recs), threshold=threshold) for label, recs in groups.items()}


def plot_growth(kstar: Any, refs: Mapping[str, Mapping[int, float]], ax=None, *,
                threshold: float = THRESHOLD):
    """The k where the error crosses ``threshold`` against depth, log scale: ``kstar`` (a DataFrame indexed by
    (depth, seed) with ``k*``, ``censored`` and optionally ``2.5%``/``97.5%`` bootstrap bounds) one dot a seed,
    ``refs`` one line each ({depth: k*}), and the largest k the depth formulas of Theorem 4.2 allow."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6.4, 4.2))[1]
    L = np.arange(2, 7)
    _formula_lines(ax, L)
    censored_named = False
    for i, (_, g) in enumerate(kstar.reset_index().groupby("seed")):
        g = g.set_index("depth")
        bars = [g["k*"] - g["2.5%"], g["97.5%"] - g["k*"]] if "2.5%" in g else None
        ax.errorbar(g.index + 0.06 * (i - 1), g["k*"], yerr=bars, fmt="o", ms=4, color="C0",
                    label=None if i else "ours, N = 64 (each seed)")
        if g.censored.any():  # k* only a lower bound: drawn, and named in the legend, only where it happens
            ax.plot(g.index[g.censored], g["k*"][g.censored], "^", color="C0", ms=8,
                    label=None if censored_named else "still below it at the largest k")
            censored_named = True
    for i, (label, row) in enumerate(refs.items()):  # colours no trained family uses (FAMILY_STYLE)
        ax.plot(list(row), list(row.values()), "sD"[i % 2] + "-", color=("0.15", "C6")[i % 2], label=label)
    ax.set(xlabel="depth L", ylabel=f"k where the error crosses {threshold}", xticks=L)
    _log2_k_axis(ax)
    return ax.figure


FAMILY_STYLE = {"transformer": ("C0", "o"), "gru": ("C1", "s"), "lstm": ("C2", "D"), "mamba": ("C3", "^"),
                "performer": ("C4", "v"), "longformer": ("C5", "P")}
"""Colour and marker of each trained family, the same in every figure that compares them."""


def _formula_lines(ax, L: np.ndarray) -> None:
    """The largest k at depths ``L`` (grey): by Theorem 4.2's formula as the paper states it, ⌊log₂k⌋+2 layers,
    and by the book's construction, one lookup a layer, ⌈log₂k⌉+2 (the chapter on the construction)."""
    ax.plot(L, 2.0 ** (L - 1) - 1, "--", color="0.55", label="⌊log₂k⌋+2 ≤ L (Theorem 4.2 as stated)")
    ax.plot(L, 2.0 ** (L - 2), ":", color="0.55", label="⌈log₂k⌉+2 ≤ L (the book's construction)")


def plot_families(crossings: Any, ax=None, *, threshold: float = THRESHOLD, formulas: bool = False):
    """The k where the error crosses ``threshold`` against depth, one line per family (the mean over seeds, a
    bar from the lowest to the highest seed): ``crossings`` as made by
    :func:`hoplib.lower_bounds.families.family_crossings`. Families with one seed are drawn dashed; the legend
    gives each family's seeds and, where ``crossings`` has an ``lr`` column, its learning rate (runs of one
    family at other rates reach other k); ``formulas``: with the grey lines of :func:`plot_growth`."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6.4, 4.2))[1]
    depths = np.array(sorted(crossings["depth"].unique()))
    if formulas:
        _formula_lines(ax, depths)
    for family, g in crossings.groupby("family", sort=False):
        by = g.groupby("depth")["k*"]
        mean, low, high = by.mean(), by.min(), by.max()
        colour, marker = FAMILY_STYLE.get(family, ("0.3", "o"))
        seeds = g["seed"].nunique()
        rates = g["lr"].dropna().unique() if "lr" in g else []
        rate = f", lr {rates[0]:g}" if len(rates) == 1 else ""
        ax.errorbar(mean.index, mean, yerr=[mean - low, high - mean], color=colour, marker=marker, ms=5,
                    capsize=3, ls="-" if seeds > 1 else "--",
                    label=f"{family} ({seeds} seed{'s' if seeds > 1 else ''}{rate})")
    ax.set(xlabel="depth L", ylabel=f"k where the error crosses {threshold}", xticks=depths)
    _log2_k_axis(ax)
    return ax.figure


def _log2_k_axis(ax) -> None:
    """k on a log₂ scale with plain tick labels (1, 2, 4, ...), the legend under the axes, off the data."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_yscale("log", base=2)
    low, high = ax.get_ylim()
    ax.yaxis.set_major_locator(FixedLocator([2.0 ** e for e in range(-2, 6) if low <= 2.0 ** e <= high]))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_locator(NullLocator())
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)

