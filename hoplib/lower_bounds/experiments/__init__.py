"""The measurements, tables, figures and profiles of the four lower-bound chapters (Section 5 and Appendix E of
the paper): one module per chapter, each with its ``PROFILES`` (the settings of the ``quick``, ``cpu`` and
``paper`` profiles, defined here once and passed to :func:`hoplib._book.notebook.start`):

* :mod:`.rnn`: multi-layer RNNs and pointer chasing (Corollary 5.2, Propositions E.3 and E.4);
* :mod:`.efficient_attention`: kernel (Performer) and Longformer attention (Corollaries 5.3 and 5.4);
* :mod:`.chain_of_thought`: one layer with a chain of thought (Definition 5.5, Corollary 5.6);
* :mod:`.gnn`: message-passing GNNs against transformers on connectivity (Theorem 5.1, Corollaries 3.3, 3.5);
* :mod:`.closing`: the table that sets all of them side by side.

This module holds what they share: reading a stored run's settings, checking them against a profile, turning
sweep rows into :class:`hoplib.report.ErrorRecord`, printing small tables, and the reach of a depth sweep
(the largest k solved at each depth) against the training chapter's transformers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hoplib._book.tables import Table, html_table
from hoplib.report import ErrorRecord, error_table, smallest_depth

THRESHOLD = 0.1  # "solved": test error at most this, in the reach of a depth sweep


def part_settings(parameters: Mapping[str, Any], part: str | None = None) -> dict[str, Any]:
    """The settings of one chapter inside a stored run's ``parameters``.

    Runs of the former combined chapter stored each part's settings under a key (``"eff"``, ``"cot"``,
    ``"gnn"``); runs of a chapter of its own store them at the top level. ``part`` names the key to look for.
    """
    if not isinstance(parameters, Mapping):
        raise TypeError(f"parameters must be a dict, got {type(parameters).__name__}")
    if part is not None and isinstance(parameters.get(part), Mapping):
        return dict(parameters[part])
    return dict(parameters)


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively (JSON stores both as lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def settings_mismatch(parameters: Mapping[str, Any], profile: Mapping[str, Any], keys: Iterable[str],
                      part: str | None = None) -> dict[str, tuple[Any, Any]]:
    """``{key: (stored, profile)}`` for each of ``keys`` whose stored value differs from the profile's."""
    stored = part_settings(parameters, part)
    out = {}
    for key in keys:
        if key not in profile:
            raise ValueError(f"key {key!r} is not a setting of the profile (settings: {sorted(profile)})")
        if _plain(stored.get(key)) != _plain(profile[key]):
            out[key] = (stored.get(key), profile[key])
    return out


def check_stored_settings(parameters: Mapping[str, Any], profile: Mapping[str, Any], keys: Iterable[str],
                          part: str | None = None) -> None:
    """Raise ``ValueError`` naming every setting in which a stored run differs from ``profile``: a chapter
    that shows a stored run as "the ``cpu`` profile" must show a run made with that profile's settings."""
    diff = settings_mismatch(parameters, profile, keys, part)
    if diff:
        raise ValueError("the stored run was made with other settings than the profile: "
                         + ", ".join(f"{k}: stored {a!r}, profile {b!r}" for k, (a, b) in diff.items()))


def error_records(rows: Iterable[Mapping[str, Any] | ErrorRecord], *, run: str = "") -> list[ErrorRecord]:
    """Sweep rows (dicts with ``kind``, ``depth``, ``k``, ``error`` and optionally ``d_model``) as
    :class:`~hoplib.report.ErrorRecord` with family = kind and width = d_model; records pass through."""
    out = []
    for row in rows:
        if isinstance(row, ErrorRecord):
            out.append(row)
            continue
        if not isinstance(row, Mapping):
            raise TypeError(f"rows must be dicts or ErrorRecord, got {type(row).__name__}")
        missing = [key for key in ("kind", "depth", "k", "error") if key not in row]
        if missing:
            raise ValueError(f"a sweep row lacks the keys {missing}: {dict(row)}")
        out.append(ErrorRecord(str(row["kind"]), int(row["depth"]), int(row["k"]), float(row["error"]),
                               row.get("d_model"), "paper", run))
    return out


def families(records: Iterable[ErrorRecord], order: Sequence[str] = ()) -> list[str]:
    """The model families present in ``records``, those of ``order`` first, in that order."""
    present = list(dict.fromkeys(r.family for r in records))
    return [f for f in order if f in present] + [f for f in present if f not in order]


def best_error(records: Iterable[ErrorRecord], family: str, k: int) -> float:
    """The lowest error at hop count ``k`` over every depth and width of ``family``."""
    errors = [r.error for r in records if r.family == family and r.k == k]
    if not errors:
        raise ValueError(f"no record with family={family!r} and k={k}")
    return min(errors)


def depth_needed(records: Sequence[ErrorRecord], family: str, threshold: float) -> dict[int, int | None]:
    """``{k: smallest depth whose error at k is at most threshold}`` for one family (None if no depth did).

    With several widths, a depth counts when any width reaches the threshold there."""
    widths = sorted({r.width for r in records if r.family == family}, key=lambda w: -1 if w is None else w)
    if not widths:
        raise ValueError(f"no record with family={family!r}")
    per_width = [smallest_depth(records, threshold=threshold, family=family, width=w) for w in widths]
    ks = sorted({k for table in per_width for k in table})
    return {k: min((t[k] for t in per_width if t.get(k) is not None), default=None) for k in ks}


def solved_up_to(records: Sequence[ErrorRecord], family: str, depth: int, threshold: float) -> int:
    """Largest K such that the (family, depth) model has error at most ``threshold`` at every k = 1..K."""
    errs = {r.k: r.error for r in records if r.family == family and r.depth == depth}
    if not errs:
        raise ValueError(f"no records for family={family!r}, depth={depth}")
    best = 0
    for k in sorted(kk for kk in errs if kk >= 1):
        if errs[k] > threshold:
            break
        best = k
    return best


def text_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, *,
               digits: int = 3) -> Table:
    """A :class:`Table` of ``rows`` (floats with ``digits`` significant digits, ``-`` for None): fixed-width
    text when printed, an HTML table when displayed in a notebook."""
    if not rows:
        raise ValueError("rows must be a non-empty list of dicts")
    cols = list(columns) if columns is not None else list(rows[0])

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float) and not math.isnan(v):
            return f"{v:.{digits}g}"
        if isinstance(v, (list, tuple)):
            return "(" + ", ".join(cell(x) for x in v) + ")"
        return str(v)

    return Table(cols, [[cell(row.get(c)) for c in cols] for row in rows])


def error_text(records: Sequence[ErrorRecord], order: Sequence[str] = ()) -> Table:
    """Error per k, one line per (family, width, depth), as text."""
    rows = []
    for fam in families(records, order):
        for width in sorted({r.width for r in records if r.family == fam}, key=lambda w: -1 if w is None else w):
            for depth, per_k in error_table(records, family=fam, width=width).items():
                rows.append({"model": f"{fam} L={depth}" + ("" if width is None else f" m={width}"),
                             **{f"k={k}": f"{e:.3f}" for k, e in per_k.items()}})
    return text_table(rows)


def depth_text(records: Sequence[ErrorRecord], threshold: float, order: Sequence[str] = ()) -> Table:
    """For each family and k, the smallest depth with error at most ``threshold`` (``>L``: no depth tried)."""
    rows = []
    for fam in families(records, order):
        top = max(r.depth for r in records if r.family == fam)
        need = depth_needed(records, fam, threshold)
        rows.append({"model": fam, **{f"k={k}": (str(d) if d is not None else f">{top}") for k, d in need.items()}})
    return text_table(rows)


def plot_families(records: Sequence[ErrorRecord], order: Sequence[str] = (), *, title: str = "",
                  chance: float | None = None):
    """Error against k, one panel per model family (its widest models, if several widths were trained) and
    one curve per depth (via :func:`hoplib.report.plot_error_vs_k`); returns the figure."""
    import matplotlib.pyplot as plt

    from hoplib.report import plot_error_vs_k

    shown = families(records, order)
    if not shown:
        raise ValueError("records must be a non-empty list of ErrorRecord")
    cols = len(shown) if len(shown) <= 3 else 2  # at most about 9 inches wide: legible at the page's width
    rows = -(-len(shown) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.9 * rows), sharey=True, squeeze=False)
    for ax, fam in zip(axes.flat, shown, strict=False):
        sel = [r for r in records if r.family == fam]
        width = max((r.width for r in sel if r.width is not None), default=None)
        plot_error_vs_k([r for r in sel if r.width == width], ax, chance=chance, title=fam)
    for i, ax in enumerate(axes.flat):
        ax.set_visible(i < len(shown))
        if i % cols:
            ax.set_ylabel("")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_groups(groups: Mapping[str, Sequence[ErrorRecord]], depths: Sequence[int], *,
                threshold: float = THRESHOLD, title: str = ""):
    """Error against k, one panel per depth in ``depths`` and one curve per group of records (one family,
    one run per depth, as for :func:`reach_table`), with the ``threshold`` line; returns the figure. For
    comparing models that differ in one setting at the same depths."""
    import matplotlib.pyplot as plt

    from hoplib.plots import integer_ticks

    if not groups or not depths:
        raise ValueError("groups and depths must be non-empty")
    fig, axes = plt.subplots(1, len(depths), figsize=(3.6 * len(depths) + 1.0, 3.1), sharey=True, squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, depth in zip(axes[0], depths, strict=True):
        for i, (label, recs) in enumerate(groups.items()):
            pts = sorted((r.k, r.error) for r in recs if r.depth == depth and r.k >= 1)
            if not pts:
                raise ValueError(f"group {label!r} has no records at depth {depth}")
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3.5, ls=styles[i % 4], color=f"C{i}", label=label)
        ax.axhline(threshold, color="0.5", lw=1, ls=":")
        ax.set(xlabel="k (hops)", title=f"depth L = {depth}", ylim=(-0.02, 1.0))
        integer_ticks(ax, "x")
    axes[0][0].set_ylabel("test error")
    axes[0][-1].legend(loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def settings_text(settings: Mapping[str, Any]) -> str:
    """A stored depth sweep's settings in words, for a chapter's prose, e.g. ``"width 64, depths 1 to 4,
    N = 32, k ≤ 4, 4,000 steps, learning rates 0.001 and 0.003"``."""
    missing = [key for key in ("widths", "depths", "seq_len", "max_hops", "steps", "lrs") if key not in settings]
    if missing:
        raise ValueError(f"settings lack {missing}")
    rates = " and ".join(f"{lr:g}" for lr in settings["lrs"])
    widths = " and ".join(str(w) for w in settings["widths"])
    return (f"width {widths}, depths {min(settings['depths'])} to {max(settings['depths'])}, "
            f"N = {settings['seq_len']}, k ≤ {settings['max_hops']}, {settings['steps']:,} steps, "
            f"learning rate{'s' if len(settings['lrs']) > 1 else ''} {rates}")


def reference_groups(grid: str, label: str = "transformer") -> tuple[dict[str, list[ErrorRecord]], Any]:
    """The training chapter's stored transformers of grid ``grid`` (:data:`hoplib.training.sweep.GRIDS`) as
    :func:`reach_table` groups, one per seed, labelled ``"<label>, seed <s>"``; also returns the stored sweep
    (its runs' provenance and configurations)."""
    from hoplib.training import experiments as tex

    stored = tex.load_stored_sweep(grid)
    by_seed = tex.records_by_seed(stored.records())
    return {f"{label}, seed {s}": recs for s, recs in by_seed.items()}, stored


def reach_text(reach: Mapping[str, Mapping[int, int]]) -> Table:
    """A :func:`reach_table` as a table: one row per group, one column per depth."""
    return text_table([{"model": label, **{f"L={d}": K for d, K in row.items()}} for label, row in reach.items()])


def reach_table(groups: Mapping[str, Sequence[ErrorRecord]], threshold: float = THRESHOLD
                ) -> dict[str, dict[int, int]]:
    """``{label: {depth: K}}``: for each group of records (one family, one run per depth), the largest K such
    that the model of that depth has error at most ``threshold`` at every k = 1..K (0: not even k = 1)."""
    out: dict[str, dict[int, int]] = {}
    for label, recs in groups.items():
        fams = {r.family for r in recs}
        if len(fams) != 1:
            raise ValueError(f"group {label!r} must hold one family, got {sorted(fams)}")
        fam = fams.pop()
        out[label] = {d: solved_up_to(recs, fam, d, threshold) for d in sorted({r.depth for r in recs})}
    return out


def reach_summary(reach: Mapping[str, Mapping[int, int]], low: int = 3, high: int = 5, *,
                  reference: str = "transformer") -> dict[str, Any]:
    """What a chapter asserts of a :func:`reach_table` with reference groups (labels starting with
    ``reference``, the training chapter's softmax transformers, one per seed) and compared groups: ``tf`` the
    reference's best reach over seeds at depths ``low`` and ``high``; ``tf_doubles``, it at least doubles from
    ``low`` to ``high`` (Theorem 4.2's doubling); per compared group, ``steps`` the largest gain in reach from
    one depth to the next, and ``behind_at_high``, its reach at ``high`` is below every reference seed's."""
    tfs = {label: row for label, row in reach.items() if label.startswith(reference)}
    rec = {label: row for label, row in reach.items() if label not in tfs}
    if not tfs or not rec:
        raise ValueError(f"reach must hold {reference} groups and other groups")
    tf = {d: max(row[d] for row in tfs.values()) for d in (low, high)}
    worst_high = min(row[high] for row in tfs.values())
    return {"tf": tf, "tf_doubles": tf[high] >= 2 * tf[low],
            "steps": {label: max(row[d + 1] - row[d] for d in list(row)[:-1]) for label, row in rec.items()},
            "behind_at_high": {label: row[high] < worst_high for label, row in rec.items()}}


def plot_reach(reach: Mapping[str, Mapping[int, int]], *, max_hops: int, threshold: float = THRESHOLD,
               title: str = ""):
    """The largest solved k against depth for each group of :func:`reach_table`, with the two exact
    constructions for reference: one hop per layer (K = L, the depth-L ``hop_rnn``; Corollary 5.2's regime)
    and pointer doubling (K = 2^(L-2), Theorem 4.2's ceil(log2 k) + 2 layers). Returns the figure."""
    import matplotlib.pyplot as plt

    if not reach:
        raise ValueError("reach must hold at least one group")
    depths = sorted({d for row in reach.values() for d in row})
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    grid = np.arange(1, max(depths) + 1)
    ax.plot(grid, grid, color="0.6", ls="--", lw=1, label="one hop per layer: K = L")
    doubling = grid[grid >= 2]
    ax.plot(doubling, 2.0 ** (doubling - 2), color="0.6", ls=":", lw=1.4, label="doubling: K = $2^{L-2}$")
    markers = "osD^v<>"
    for i, (label, row) in enumerate(reach.items()):
        ax.plot(list(row), list(row.values()), marker=markers[i % len(markers)], lw=1.6, label=label)
    ax.set_xlabel("depth L")
    ax.set_ylabel(f"largest K solved\n(error ≤ {threshold} at k = 1..K)")
    ax.set_ylim(-0.3, max_hops + 0.5)
    ax.set_xticks(grid)
    ax.legend(fontsize=9, loc="upper left")
    if title:
        ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig


__all__ = ["THRESHOLD", "Table", "best_error", "check_stored_settings", "depth_needed", "depth_text", "error_records",
           "error_text", "families", "html_table", "part_settings", "plot_families", "plot_groups", "plot_reach",
           "reach_summary", "reach_table", "reach_text", "reference_groups", "settings_mismatch", "settings_text",
           "solved_up_to", "text_table"]
