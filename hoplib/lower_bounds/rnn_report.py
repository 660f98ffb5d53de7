"""Reports of depth sweeps (``hoplib.lower_bounds.rnn.depth_sweep`` records): figures, tables and depth thresholds.

A record is a dict with at least ``kind``, ``depth``, ``d_model``, ``k``, ``error`` and ``params`` (one per
model and hop count), as the RNN chapter's sweeps of GRU, LSTM, Mamba-style and transformer models write them.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

KINDS = ("gru", "lstm", "mamba", "transformer")
"""The architectures of the RNN chapter's sweeps, in display order."""


def _check_records(recs: Sequence[dict]) -> None:
    if not recs:
        raise ValueError("recs must hold at least one record")
    missing = {"kind", "depth", "d_model", "k", "error"} - set(recs[0])
    if missing:
        raise ValueError(f"recs must have keys kind, depth, d_model, k, error; missing {sorted(missing)}")


def plot_sweep(recs: Sequence[dict], title: str, kinds: Sequence[str] = KINDS) -> Figure:
    """Test error against k, one panel per architecture, one line per (depth, width); chance level dotted."""
    _check_records(recs)
    shown = [k for k in kinds if any(r["kind"] == k for r in recs)]
    widths = sorted({r["d_model"] for r in recs})
    fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 3), sharey=True, squeeze=False)
    for ax, kind in zip(axes[0], shown, strict=True):
        for w, style in zip(widths, ["-", "--", ":"], strict=False):
            depths = sorted({r["depth"] for r in recs if r["kind"] == kind and r["d_model"] == w})
            for d in depths:
                pts = sorted((r["k"], r["error"]) for r in recs
                             if r["kind"] == kind and r["d_model"] == w and r["depth"] == d)
                ax.plot(*zip(*pts, strict=True), style, marker="o", ms=3,
                        color=plt.get_cmap("viridis")(d / (max(depths) + 1)), label=f"L={d}, m={w}")
        ax.set_title(kind, fontsize=10)
        ax.set_xlabel("k")
        ax.axhline(0.75, color="0.7", lw=0.8, ls=":")
    axes[0][0].set_ylabel("test error")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def error_table(recs: Sequence[dict], kinds: Sequence[str] = KINDS) -> str:
    """A text table: one row per (architecture, depth, width) with its parameter count and error per k."""
    _check_records(recs)
    ks = sorted({r["k"] for r in recs})
    lines = [f"{'model':>22} {'params':>8}  " + " ".join(f"k={k:<4}" for k in ks)]
    keys = sorted({(list(kinds).index(r["kind"]), r["kind"], r["d_model"], r["depth"]) for r in recs})
    for _, kind, w, d in keys:
        rows = [r for r in recs if (r["kind"], r["d_model"], r["depth"]) == (kind, w, d)]
        errs = {r["k"]: r["error"] for r in rows}
        lines.append(f"{kind + f' L={d} m={w}':>22} {rows[0].get('params', 0):>8,}  "
                     + " ".join(f"{errs[k]:<6.3f}" for k in ks))
    return "\n".join(lines)


def best_depth_error(recs: Sequence[dict], kind: str, k: int) -> float:
    """The lowest error at hop count ``k`` over every depth and width of architecture ``kind``."""
    _check_records(recs)
    errors = [r["error"] for r in recs if r["kind"] == kind and r["k"] == k]
    if not errors:
        raise ValueError(f"no record with kind={kind!r} and k={k}")
    return min(errors)


def depth_needed(recs: Sequence[dict], threshold: float,
                 kinds: Sequence[str] = KINDS) -> dict[tuple[str, int], int | None]:
    """Smallest depth (any width) whose error at k is <= ``threshold``, per (architecture, k); None if none."""
    _check_records(recs)
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    out: dict[tuple[str, int], int | None] = {}
    for kind in kinds:
        for k in sorted({r["k"] for r in recs}):
            ok = [r["depth"] for r in recs if r["kind"] == kind and r["k"] == k and r["error"] <= threshold]
            out[kind, k] = min(ok) if ok else None
    return out
