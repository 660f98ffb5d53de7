"""Computations and figures of the chapter "Logarithmic depth suffices" (``chapters/construction.md``).

The chapter runs Theorem 4.2 of Sanford, Hsu & Telgarsky (arXiv v1) with Lemmas D.1, D.2 and A.2: it checks
the two primitives, the whole hand-built model, the depth formulas, the search over pointer programs and the
precision study. Its cells only call the functions below, assert and glue; :data:`PROFILES` holds the
settings of its ``quick`` and ``paper`` profiles (passed to :func:`hoplib._book.notebook.start`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from hoplib._book.device import get_device
from hoplib._book.tables import Table
from hoplib._book.validate import check_int
from hoplib.construction.depth import depth_ceil, depth_floor
from hoplib.construction.layout import SUBSPACE_DOC
from hoplib.construction.model import HopTransformer, count_errors, hop_transformer
from hoplib.construction.plotting import describe_residuals
from hoplib.construction.temperature import lemma_a2_inverse_temperature
from hoplib.construction.v1 import lemma_d2_v1_find
from hoplib.tasks import HopTask, find

__all__ = ["PROFILES", "LookupDemo", "depth_table", "errors_with_repeats", "exactness_table", "lookup_demo",
           "model_widths", "no_repeat_letters", "plot_depth", "plot_lookup_scores", "plot_precision",
           "precision_summary", "precision_table", "residual_table", "search_table", "subspace_table",
           "v1_find_errors"]

PROFILES = {
    "quick": {"n_exact": 200, "n_multi": 50, "precision_ns": [16, 32, 64, 128], "precision_letters": 1024,
              "search_layers": 3},
    "paper": {"n_exact": 10_000, "n_multi": 1000, "precision_ns": [16, 32, 64, 128, 256, 512, 1024],
              "precision_letters": 8192, "search_layers": 3},
}
"""Settings of the chapter's profiles: sequences for the exactness check and the multi-task error, lengths
and letters of the live precision study, depth of the live pointer-program search."""

RESIDUAL_COLUMNS = ("layer", "prev_letter", "ptr", "ptr_letter", "acc", "acc_letter")


def no_repeat_letters(n_seq: int, n: int, seed: int, alphabet_size: int = 4,
                      device: str | torch.device = "cpu") -> torch.Tensor:
    """``n_seq`` no-repeat letter sequences of length ``n`` (the experiments' data), from a seeded generator."""
    dev = get_device(device)
    gen = torch.Generator(device=dev).manual_seed(check_int("seed", seed, low=0))
    return HopTask(seq_len=check_int("n", n, low=2) + 2, alphabet_size=alphabet_size).letters(n_seq, gen, dev)


# --------------------------------------------------------------------------- the two primitives
@dataclass(frozen=True)
class LookupDemo:
    """Layer 1's lookUp (Lemma D.1) on one sequence: ``scores`` are the margin-normalised scores of query
    ``query`` (a letter index) against keys -1 (the start token) .. ``query``; ``prev_letters`` is what layer 1
    wrote at letters 1..N-1, decoded."""

    x: torch.Tensor
    query: int
    scores: np.ndarray
    prev_letters: torch.Tensor

    @property
    def best_key(self) -> int:
        """The key with the top score, as a letter index (-1 = start token)."""
        return int(np.argmax(self.scores)) - 1

    @property
    def margin(self) -> float:
        """Top score minus the second one (1 by construction)."""
        top2 = np.sort(self.scores)[-2:]
        return float(top2[1] - top2[0])


def lookup_demo(n: int = 24, query: int = 15, seed: int = 0) -> LookupDemo:
    """Run layer 1 of ``hop_transformer(1, n, 4)`` on one no-repeat sequence and read its scores."""
    n = check_int("n", n, low=2)
    query = check_int("query", query, low=0, high=n - 1)
    model = hop_transformer(1, n, 4)
    x = no_repeat_letters(1, n, seed)
    tr = model.trace(x)
    h0 = tr.residuals[0][0]
    q, k = h0 @ model.heads[0].wq, h0 @ model.heads[0].wk  # margin-normalised: multiply by c for the softmax
    scores = (q[query + 1] @ k[: query + 2].T).numpy()  # internal position query + 1, keys 0..query+1 (causal)
    prev = model.decode(tr.residuals[1][0, 2:])["prev_letter"]
    return LookupDemo(x[0], query, scores, prev)


def plot_lookup_scores(demo: LookupDemo):  # noqa: ANN201 - matplotlib Figure
    """The scores of :func:`lookup_demo` minus their maximum, against the key."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.2))
    ax.plot(range(-1, demo.query + 1), demo.scores - demo.scores.max(), "o-", ms=3)
    ax.set_xlabel("key (letter index, -1 = start token)")
    ax.set_ylabel("score - max")
    ax.set_title(f"layer 1 (lookUp at i-1), query i = {demo.query}: the best key wins by exactly 1", fontsize=9)
    fig.tight_layout()
    return fig


def v1_find_errors(x: torch.Tensor) -> dict[str, float]:
    """How often Lemma D.2 as written in v1 returns a wrong find¹ on letters ``x`` (B, N): the fraction of
    wrong ``positions`` and of ``sequences`` with at least one."""
    wrong = lemma_d2_v1_find(x) != find(x)
    return {"positions": float(wrong.float().mean()), "sequences": float(wrong.any(dim=1).float().mean())}


# --------------------------------------------------------------------------- the whole model
def subspace_table(model: HopTransformer) -> Table:
    """One row per named residual subspace: name, coordinates, what it holds (text or HTML, :class:`Table`)."""
    return Table(["subspace", "coordinates", "holds"],
                 [[name, f"[{sl.start}:{sl.stop}]", SUBSPACE_DOC[name]] for name, sl in model.subspaces.items()])


def model_widths(ks: Iterable[int], ns: Iterable[int], alphabets: Iterable[int]) -> set[int]:
    """The set of widths ``d_model`` of hop_transformer(k, n, a) over every combination."""
    return {hop_transformer(k, n, a).d_model for k in ks for n in ns for a in alphabets}


def residual_table(model: HopTransformer, x: torch.Tensor, position: int) -> Table:
    """:func:`describe_residuals` as a :class:`Table`, one row per layer."""
    rows = describe_residuals(model, x, position)
    return Table(list(RESIDUAL_COLUMNS), [[str(row[c]) for c in RESIDUAL_COLUMNS] for row in rows])


def exactness_table(ks: Iterable[int], n: int, n_seq: int, seed: int = 0, alphabet_size: int = 4,
                    device: str | torch.device = "cpu") -> list[dict[str, int]]:
    """For each k: depth of hop_transformer(k, n), both depth formulas, and its wrong positions on ``n_seq``
    fresh no-repeat sequences."""
    dev = get_device(device)
    x = no_repeat_letters(n_seq, n, seed, alphabet_size, dev)
    rows = []
    for k in ks:
        model = hop_transformer(k, n, alphabet_size).to(dev)
        rows.append({"k": k, "n_layers": model.n_layers, "floor": depth_floor(k), "ceil": depth_ceil(k),
                     "wrong": count_errors(model, x)})
    return rows


def errors_with_repeats(ks: Iterable[int], n: int, alphabet_size: int, n_seq: int, seed: int = 0,
                        device: str | torch.device = "cpu") -> int:
    """Wrong positions of hop_transformer(k, n, alphabet_size), summed over ``ks``, on uniform letters
    (with repeats)."""
    dev = get_device(device)
    gen = torch.Generator(device=dev).manual_seed(check_int("seed", seed, low=0))
    x = torch.randint(0, alphabet_size, (check_int("n_seq", n_seq, low=1), n), generator=gen, device=dev)
    return sum(count_errors(hop_transformer(k, n, alphabet_size).to(dev), x) for k in ks)


# --------------------------------------------------------------------------- depth
def depth_table(rows: list[dict[str, int]]) -> Table:
    """The rows of :func:`exactness_table` as a :class:`Table`: k, the paper's depth, ours, the model's."""
    return Table(["k", "paper: ⌊log₂k⌋+2", "ours: ⌈log₂k⌉+2", "our model"],
                 [[str(r["k"]), str(r["floor"]), str(r["ceil"]), str(r["n_layers"])] for r in rows])


def plot_depth(max_k: int = 64):  # noqa: ANN201 - matplotlib Figure
    """Both depth formulas against k = 1..max_k, on a log axis."""
    import matplotlib.pyplot as plt

    ks = np.arange(1, check_int("max_k", max_k, low=2) + 1)
    fig, ax = plt.subplots(figsize=(6, 2.8))
    ax.step(ks, [depth_floor(int(k)) for k in ks], where="post", label="paper: ⌊log₂ k⌋ + 2")
    ax.step(ks, [depth_ceil(int(k)) for k in ks], where="post", ls="--", label="this construction: ⌈log₂ k⌉ + 2")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("layers")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def search_table(found: dict, n_programs: dict) -> Table:
    """One row per depth of a pointer-program search (live: int keys and sets; stored: str keys and lists)."""
    return Table(["depth", "programs tried", "hop_k computed for k in"],
                 [[str(depth), f"{n_programs[depth]:,}", str(sorted(found[depth]) or "none")]
                  for depth in sorted(found, key=int)])


# --------------------------------------------------------------------------- precision (Lemma A.2)
def precision_table(records: list[dict]) -> Table:
    """One row per record of :func:`~hoplib.construction.precision.precision_study` (``-``: no exact c)."""
    return Table(["N", "dtype", "smallest exact c", "ln(N+1)", "Lemma A.2 c"],
                 [[str(r["n"]), r["dtype"], "-" if r["c_min"] is None else f"{r['c_min']:.2f}", f"{r['ln_n']:.2f}",
                   f"{r['c_lemma_a2']:.1f}"] for r in records])


def plot_precision(live: list[dict], stored: list[dict], hi: float):  # noqa: ANN201 - matplotlib Figure
    """Smallest exact c against N, per dtype (stored points win over live ones at the same N), crosses where
    no c up to ``hi`` is exact, Lemma A.2's values and ln(N+1)."""
    import matplotlib.pyplot as plt

    merged = list({(r["n"], r["dtype"]): r for r in live + stored}.values())
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for dt, mk, cross in (("float32", "o", "red"), ("float64", "s", "black")):
        pts = sorted((r["n"], r["c_min"]) for r in merged if r["dtype"] == dt and r["c_min"] is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], mk, ls="-", ms=4, label=f"smallest exact c, {dt}")
        bad = sorted(r["n"] for r in stored if r["dtype"] == dt and r["c_min"] is None)
        if bad:
            ax.plot(bad, [1] * len(bad), "x", ms=9, color=cross, label=f"{dt}: no c up to {hi:g} is exact")
    ns = np.array(sorted({r["n"] for r in merged}))
    for dt, ls in (("float32", ":"), ("float64", "-.")):
        ax.plot(ns, [lemma_a2_inverse_temperature(int(n), getattr(torch, dt)) for n in ns], ls=ls, color="gray",
                label=f"Lemma A.2 value, {dt}")
    ax.plot(ns, np.log(ns + 1), color="k", lw=0.8, label="ln(N+1)")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="sequence length N", ylabel="inverse temperature c")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def precision_summary(stored: list[dict]) -> dict[str, object]:
    """Short values for the prose about a precision study: the largest N (``n_top``), the largest N at which
    float32 is still exact (``n_ok``) and its c there in float32 / float64 (``c32``, ``c64``, rounded to 0.1),
    Lemma A.2's float32 value there (``c_lemma32``) and the float32 errors at it (``errors_at_lemma32``),
    the N at which float32 / float64 first fail (``n_fail32`` / ``n_fail64``; None if never)."""
    by = {(r["n"], r["dtype"]): r for r in stored}
    ok32 = [n for (n, dt), r in by.items() if dt == "float32" and r["c_min"] is not None]
    if not ok32:
        raise ValueError("stored must hold at least one float32 record with a finite c_min")
    n_ok = max(ok32)
    fails = {dt: sorted(n for (n, d), r in by.items() if d == dt and r["c_min"] is None)
             for dt in ("float32", "float64")}
    return {"n_top": max(n for n, _ in by), "n_ok": n_ok, "c32": round(by[(n_ok, "float32")]["c_min"], 1),
            "c64": round(by[(n_ok, "float64")]["c_min"], 1),
            "c_lemma32": round(by[(n_ok, "float32")]["c_lemma_a2"], 1),
            "errors_at_lemma32": by[(n_ok, "float32")]["errors_at_lemma_a2"],
            "n_fail32": fails["float32"][0] if fails["float32"] else None,
            "n_fail64": fails["float64"][0] if fails["float64"] else None}

