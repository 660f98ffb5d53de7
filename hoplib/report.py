"""The book's one depth report: test error against the number of hops k, per model family, depth and width.

Every chapter that trains models on hop_k (Section 4.2 and Appendix G of the paper; the recurrent, graph and
efficient-attention models of the lower-bound chapters) reports the same thing: for each depth L and hop count
k, the test error of :mod:`hoplib.evaluate`. This module holds that report once:

* :class:`ErrorRecord`, one point "error of (family, depth, width) at k", and constructors for it
  (:func:`records_from_errors` from a ``{k: error}`` map, :func:`records_from_table` from a sweep's tidy table,
  :func:`authors_records` from the authors' published ``errors.json``);
* :func:`chance_error`, the error of a predictor that ignores its input, computed from the task;
* :func:`error_table` (``{depth: {k: error}}``, averaged over repeated records such as seeds),
  :func:`smallest_depth`, the empirical depth threshold L*(k) that the paper compares with ⌊log₂ k⌋ + 2
  (Theorem 4.2) and, under Conjecture 2.4 and the width condition mH = O(k^{1-ε}), with Ω(log k)
  (Corollary 4.3), and :func:`largest_solved`, how far each depth reaches;
* three figures: :func:`plot_error_vs_k` (the paper's Figure 2), :func:`plot_error_vs_k_groups` (Figures 9
  and 16-19: several widths or training-set sizes at once) and :func:`plot_error_heatmap` (Figure 8).

This is a core module: it imports only the task (:mod:`hoplib.tasks`) and the book's plumbing.
"""

from __future__ import annotations

import ast
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hoplib._book.validate import check_choice, check_int
from hoplib.tasks import HopTask

METRICS = ("paper", "pooled")
"""The two error metrics of :mod:`hoplib.evaluate`: the paper's per-sample average, the authors' pooled one."""

AUTHORS_WIDTH = {4: 128, 8: 256}
"""The authors' models: H = 4 heads means width m = 128, H = 8 means m = 256 (their "width4"/"width8")."""


@dataclass(frozen=True)
class ErrorRecord:
    """One point of "test error against k for one model": ``family`` at ``depth`` (and ``width``) on hop_k.

    ``metric`` is ``"paper"`` or ``"pooled"`` (:mod:`hoplib.evaluate`); ``run`` says where the number came from
    (a run folder, a file). Validated on construction: a ``TypeError`` or ``ValueError`` names the field.
    """

    family: str
    depth: int
    k: int
    error: float
    width: int | None = None
    metric: str = "paper"
    run: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.family, str) or not self.family:
            raise TypeError(f"family must be a non-empty string, got {self.family!r}")
        object.__setattr__(self, "depth", check_int("depth", self.depth, low=0))
        object.__setattr__(self, "k", check_int("k", self.k, low=0))
        if self.width is not None:
            object.__setattr__(self, "width", check_int("width", self.width, low=1))
        if isinstance(self.error, bool) or not isinstance(self.error, numbers.Real):
            raise TypeError(f"error must be a number, got {type(self.error).__name__}")
        if not 0.0 <= float(self.error) <= 1.0:  # also rejects NaN
            raise ValueError(f"error must be in [0, 1], got {self.error!r}")
        object.__setattr__(self, "error", float(self.error))
        check_choice("metric", self.metric, METRICS)
        if not isinstance(self.run, str):
            raise TypeError(f"run must be a string, got {type(self.run).__name__}")


def records_from_errors(per_k: Mapping[Any, float], *, family: str, depth: int, width: int | None = None,
                        metric: str = "paper", run: str = "") -> list[ErrorRecord]:
    """Records from a ``{k: error}`` map (keys int or str, as in a ``results.json``), sorted by k."""
    if not isinstance(per_k, Mapping):
        raise TypeError(f"per_k must be a dict from k to error, got {type(per_k).__name__}")
    out = []
    for k, e in per_k.items():
        try:
            kk = int(k)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"per_k keys must be hop counts (int or digit strings), got {k!r}") from exc
        out.append(ErrorRecord(family, depth, kk, e, width, metric, run))
    return sorted(out, key=lambda r: r.k)


def records_from_table(table: Iterable[Mapping[str, Any]], *, family: str = "transformer",
                       n_train: int | None | str = "any") -> list[ErrorRecord]:
    """Records from a sweep's tidy table (rows with ``depth``, ``d_model``, ``k``, ``metric``, ``error``,
    optionally ``run`` and ``n_train``), keeping the rows of one training-set size (``None``: fresh samples;
    ``"any"``: all). Width is ``d_model``."""
    if n_train != "any" and n_train is not None:
        check_int("n_train", n_train, low=1)
    out = []
    for row in table:
        if not isinstance(row, Mapping):
            raise TypeError(f"table rows must be dicts, got {type(row).__name__}")
        if n_train != "any" and row.get("n_train") != n_train:
            continue
        out.append(ErrorRecord(family, row["depth"], row["k"], row["error"], row.get("d_model"),
                               row.get("metric", "paper"), str(row.get("run", ""))))
    return out


def authors_records(data: Mapping[str, Any], *, heads: int = 4, n_train: int | None = None) -> list[ErrorRecord]:
    """The published errors (the authors' ``errors.json``, pooled metric) of one row set, as records.

    ``data`` is that file's content, either the bare ``{"((L, H, n_train), k)": error}`` map or the book's copy
    (``results/training/authors-errors.json``), which wraps it under ``"errors"``. ``n_train=None`` selects
    the fresh-sample runs (stored as -1). Width is 128 for ``heads=4`` and 256 for ``heads=8``.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be the dict read from errors.json, got {type(data).__name__}")
    heads = check_int("heads", heads, low=1)
    if heads not in AUTHORS_WIDTH:
        raise ValueError(f"heads must be one of {sorted(AUTHORS_WIDTH)} (the authors' two widths), got {heads}")
    raw = data["errors"] if isinstance(data.get("errors"), Mapping) else data
    want_n = -1 if n_train is None else check_int("n_train", n_train, low=1)
    out = []
    for key, val in raw.items():
        try:
            (depth, h, n), k = ast.literal_eval(key)
        except (ValueError, SyntaxError, TypeError) as exc:
            raise ValueError(f"errors.json keys look like '((L, H, n_train), k)', got {key!r}") from exc
        if h == heads and n == want_n:
            out.append(ErrorRecord("transformer", depth, k, val, AUTHORS_WIDTH[heads], "pooled", "authors"))
    if not out:
        raise ValueError(f"no published errors for heads={heads}, n_train={n_train}")
    return sorted(out, key=lambda r: (r.depth, r.k))


def chance_error(task: HopTask, metric: str = "paper") -> float:
    """Error of the best predictor that ignores its input: 1 - 1/|Σ|, for either metric.

    The task's letter strings (no immediate repeats, the first letter uniform) are invariant under any
    permutation of the alphabet, and so is hop_k; hence every letter is equally likely as a target, in every
    position and in every sample's share of positions. A constant (or uniformly random) guess is then right on
    a fraction 1/|Σ| of letter targets under both the paper's per-sample average and the pooled count, and no
    input-free guess does better. For the paper's alphabet of 4 letters this is the chance level 3/4 of its
    figures.
    """
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    check_choice("metric", metric, METRICS)
    return 1.0 - 1.0 / task.alphabet_size


def _select(records: Iterable[ErrorRecord], family: str | None, width: int | None,
            metric: str | None) -> list[ErrorRecord]:
    recs = list(records)
    for r in recs:
        if not isinstance(r, ErrorRecord):
            raise TypeError(f"records must be ErrorRecord objects, got {type(r).__name__}")
    if metric is not None:
        check_choice("metric", metric, METRICS)
    return [r for r in recs if (family is None or r.family == family) and (width is None or r.width == width)
            and (metric is None or r.metric == metric)]


def error_table(records: Iterable[ErrorRecord], *, family: str | None = None, width: int | None = None,
                metric: str = "paper") -> dict[int, dict[int, float]]:
    """``{depth: {k: error}}`` of the selected records, averaged where several share (depth, k) (seeds).

    Raises ``ValueError`` if the selection mixes families or widths (pass ``family``/``width`` to choose one):
    an average over different models would be no model's error.
    """
    recs = _select(records, family, width, metric)
    for field in ("family", "width"):
        values = {getattr(r, field) for r in recs}
        if len(values) > 1:
            raise ValueError(f"records mix several values of {field} {sorted(values, key=str)}; pass {field}=...")
    acc: dict[int, dict[int, list[float]]] = {}
    for r in recs:
        acc.setdefault(r.depth, {}).setdefault(r.k, []).append(r.error)
    return {d: {k: sum(v) / len(v) for k, v in sorted(ks.items())} for d, ks in sorted(acc.items())}


def depth_floor(k: int) -> int:
    """The depth Theorem 4.2 states for hop_k: ⌊log₂ k⌋ + 2 for k >= 1 (0 for k = 0, where hop_0 is the identity)."""
    k = check_int("k", k, low=0)
    return 0 if k == 0 else k.bit_length() + 1


def depth_ceil(k: int) -> int:
    """⌈log₂ k⌉ + 2 for k >= 1 (0 for k = 0): the depth when each layer after the first two makes one lookup and
    so at most doubles the reach (the book's construction); equal to :func:`depth_floor` at powers of two."""
    k = check_int("k", k, low=0)
    return 0 if k == 0 else (k - 1).bit_length() + 2


def smallest_depth(records: Iterable[ErrorRecord], *, threshold: float = 0.05, family: str | None = None,
                   width: int | None = None, metric: str = "paper") -> dict[int, int | None]:
    """Empirical L*(k): for each k, the smallest depth whose error at k is at most ``threshold`` (None if none).

    The paper reads its Figure 2 against Theorem 4.2 (depth ⌊log₂ k⌋ + 2 suffices) and Corollary 4.3 (depth
    Ω(log k) is needed, assuming Conjecture 2.4 and mH = O(k^{1-ε})); a depth missing from the records for
    some k counts as not reaching the threshold.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    table = error_table(records, family=family, width=width, metric=metric)
    ks = sorted({k for row in table.values() for k in row})
    return {k: next((d for d in sorted(table) if k in table[d] and table[d][k] <= threshold), None) for k in ks}


def largest_solved(records: Iterable[ErrorRecord], *, threshold: float = 0.05, family: str | None = None,
                   width: int | None = None, metric: str = "paper") -> dict[int, int]:
    """For each depth, the largest K such that the error is at most ``threshold`` for every k = 1..K that
    was evaluated (0 when k = 1 already fails): how far a depth reaches before its first failure."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
    out = {}
    for d, row in error_table(records, family=family, width=width, metric=metric).items():
        reach = 0
        for k in sorted(k for k in row if k >= 1):
            if row[k] > threshold:
                break
            reach = k
        out[d] = reach
    return out


# --------------------------------------------------------------------------- figures
_FONT = {"label": 11, "tick": 10, "title": 11, "legend": 10, "cell": 9}


def _metric_of(recs: list[ErrorRecord], metric: str | None) -> str:
    if metric is not None:
        return check_choice("metric", metric, METRICS)
    found = {r.metric for r in recs}
    if len(found) > 1:
        raise ValueError(f"records mix the metrics {sorted(found)}; pass metric=...")
    return found.pop() if found else "paper"


def _k_axis(ax, ks: list[int], logx: bool) -> None:
    """Integer ticks at the plotted hop counts; on a log-2 axis with many k, labels at powers of two only."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    labelled = ks
    if logx:
        ax.set_xscale("log", base=2)
        if len(ks) > 8:
            labelled = [k for k in ks if k > 0 and k & (k - 1) == 0]
    ax.set_xticks(labelled, [str(k) for k in labelled], fontsize=_FONT["tick"])
    ax.xaxis.set_minor_locator(FixedLocator([k for k in ks if k not in labelled]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="y", labelsize=_FONT["tick"])
    ax.set_xlabel("k (hops)", fontsize=_FONT["label"])
    ax.set_ylabel("test error", fontsize=_FONT["label"])


def _finish(ax, chance: float | None, title: str, ymax: float = 1.0) -> None:
    if chance is not None:
        if isinstance(chance, bool) or not isinstance(chance, numbers.Real) or not 0 <= chance <= 1:
            raise ValueError(f"chance must be a number in [0, 1] or None, got {chance!r}")
        ax.axhline(chance, color="0.45", lw=1, ls=":", label="chance")
        ymax = max(ymax, chance + 0.08)
    ax.set_ylim(-0.02, ymax)
    if title:
        ax.set_title(title, fontsize=_FONT["title"])


def _check_title(title: object) -> str:
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")
    return title


def plot_error_vs_k(records: Iterable[ErrorRecord], ax=None, *, family: str | None = None,
                    width: int | None = None, chance: float | None = None, title: str = "",
                    metric: str | None = None, logx: bool = False, min_k: int = 0):
    """Test error against k, one curve per depth (Figure 2 of the paper with ``logx=True, min_k=1``).

    ``chance`` (e.g. :func:`chance_error` of the task) draws a dotted line; ``metric=None`` takes the records'
    only metric. Returns the axes.
    """
    import matplotlib.pyplot as plt

    _check_title(title)
    min_k = check_int("min_k", min_k, low=0)
    recs = _select(records, family, width, None)
    table = error_table(recs, metric=_metric_of(recs, metric))
    if not table:
        raise ValueError("no records to plot (check family, width and metric)")
    ax = ax or plt.gca()
    cmap = plt.get_cmap("viridis")
    depths = sorted(table)
    for i, d in enumerate(depths):
        ks = [k for k in table[d] if k >= min_k]
        ax.plot(ks, [table[d][k] for k in ks], "o-", ms=4, color=cmap(0.9 * i / max(1, len(depths) - 1)),
                label=f"L = {d}")
    _k_axis(ax, sorted({k for row in table.values() for k in row if k >= min_k}), logx)
    _finish(ax, chance, title)
    ax.legend(fontsize=_FONT["legend"])
    return ax


def plot_error_vs_k_groups(groups: Mapping[str, Iterable[ErrorRecord]], ax=None, *,
                           depths: Iterable[int] | None = None, chance: float | None = None, title: str = "",
                           metric: str | None = None, logx: bool = False, min_k: int = 0):
    """Error against k for several settings at once (the width and sample-size figures of Appendix G.3 and
    G.5, Figures 9 and 16-19): one colour per group (the keys of ``groups``, e.g. a width or a training-set
    size, each a list of records of one model family and width), one line style per depth."""
    import matplotlib.pyplot as plt

    _check_title(title)
    min_k = check_int("min_k", min_k, low=0)
    if not isinstance(groups, Mapping) or not groups:
        raise ValueError("groups must be a non-empty dict from a label to a list of ErrorRecord")
    tables = {}
    for label, recs in groups.items():
        recs = _select(recs, None, None, None)
        tables[label] = error_table(recs, metric=_metric_of(recs, metric))
    keep = None if depths is None else {check_int("depths[i]", d, low=0) for d in depths}
    all_depths = sorted({d for t in tables.values() for d in t if keep is None or d in keep})
    ax = ax or plt.gca()
    colours, styles = plt.get_cmap("plasma"), ["-", "--", ":", "-."]
    for i, (label, table) in enumerate(tables.items()):
        colour = colours(0.85 * i / max(1, len(tables) - 1))
        for j, d in enumerate(all_depths):
            if d in table:
                ks = [k for k in table[d] if k >= min_k]
                ax.plot(ks, [table[d][k] for k in ks], marker="o", ms=4, ls=styles[j % len(styles)],
                        color=colour, label=f"{label}, L = {d}")
    ks = sorted({k for t in tables.values() for d in all_depths for k in t.get(d, {}) if k >= min_k})
    _k_axis(ax, ks, logx)
    _finish(ax, chance, title)
    ax.legend(fontsize=_FONT["legend"], ncol=2 if len(ax.get_lines()) > 7 else 1)
    return ax


def plot_error_heatmap(records: Iterable[ErrorRecord], ax=None, *, family: str | None = None,
                       width: int | None = None, title: str = "", metric: str | None = None):
    """Depth x k heatmap of the errors with the values written in (Figure 8 of the paper); rows are depths
    (1-based, as the paper counts layers), columns the hop counts. Returns the axes."""
    import matplotlib.pyplot as plt

    _check_title(title)
    recs = _select(records, family, width, None)
    table = error_table(recs, metric=_metric_of(recs, metric))
    if not table:
        raise ValueError("no records to plot (check family, width and metric)")
    ax = ax or plt.gca()
    depths = sorted(table)
    ks = sorted({k for row in table.values() for k in row})
    grid = [[table[d].get(k, math.nan) for k in ks] for d in depths]
    ax.imshow(grid, cmap="magma_r", vmin=0, vmax=0.8, aspect="auto", origin="lower")
    ax.set_xticks(range(len(ks)), [str(k) for k in ks], fontsize=_FONT["tick"])
    ax.set_yticks(range(len(depths)), [str(d) for d in depths], fontsize=_FONT["tick"])
    small = _FONT["cell"] if len(ks) > 10 else _FONT["cell"] + 1
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}".lstrip("0") if v < 1 else "1", ha="center", va="center", fontsize=small,
                        color="white" if v > 0.4 else "black")
    ax.set_xlabel("k (hops)", fontsize=_FONT["label"])
    ax.set_ylabel("depth L", fontsize=_FONT["label"])
    if title:
        ax.set_title(title, fontsize=_FONT["title"])
    return ax
