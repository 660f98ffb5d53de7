"""The measurements and figures of the MPC chapter (Sections 2-3 of the paper): round counts of the
protocols, routing widths of Lemma 3.2, and rounds of Theorem 3.4's simulation of a layer."""

from __future__ import annotations

import math
import time

import matplotlib.pyplot as plt
import numpy as np

from hoplib._book.validate import check_int
from hoplib.mpc.layer_sim import AttentionLayer, layer_as_mpc
from hoplib.mpc.protocols import connected_components_protocol, cycles_instance, hop_protocol
from hoplib.mpc.routing import RoutingLayer, lemma_slots, minimal_slots, practical_slots
from hoplib.tasks import hop


def _bar(items, progress: bool, desc: str):
    """A tqdm.auto progress bar when asked for (imported lazily: it warns in kernels without ipywidgets)."""
    if not progress:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


def memory_for(n: int, delta: float, floor: int, coef: float = 1.0) -> int:
    """Local memory s = max(floor, ceil(coef * n ** delta)) words."""
    return max(int(floor), int(math.ceil(coef * n**delta)))


def _label(coef: float, delta: float) -> str:
    return f"s = max(128, {coef:g} N^{delta:g})" if coef != 1 else f"s = max(128, N^{delta:g})"


def hop_rounds_vs_k(n: int, ks: list[int], memories: list[tuple[float, float]], *, seed: int = 0,
                    progress: bool = False) -> list[dict]:
    """Rounds of :func:`hop_protocol` against k at sequence length n, for memories s = max(128, c n^delta),
    one per pair (c, delta) of ``memories``."""
    x = np.random.default_rng(seed).integers(0, 4, check_int("n", n, low=2))
    rows = []
    for coef, delta in memories:
        s = memory_for(n, delta, 128, coef)
        for k in _bar(ks, progress, _label(coef, delta)):
            ans, st = hop_protocol(x, k, s, seed=seed)
            rows.append({"n": n, "k": k, "label": _label(coef, delta), "memory": s, "rounds": st.rounds,
                         "doubling_rounds": st.phases.get("pointer doubling", 0), "machines": st.num_machines,
                         "max_memory": st.max_memory, "correct": bool(np.array_equal(ans, hop(x, k)))})
    return rows


def hop_rounds_vs_n(ns: list[int], k: int, memories: list[tuple[float, float]], *, seed: int = 0,
                    progress: bool = False) -> list[dict]:
    """Rounds of :func:`hop_protocol` against n at fixed k, for s = max(128, c n^delta), with wall times."""
    rng = np.random.default_rng(seed)
    rows = []
    for coef, delta in memories:
        for n in _bar(ns, progress, f"delta={delta}"):
            x = rng.integers(0, 4, n)
            s = memory_for(n, delta, 128, coef)
            t0 = time.perf_counter()
            ans, st = hop_protocol(x, k, s, seed=seed)
            rows.append({"n": n, "k": k, "label": _label(coef, delta), "memory": s, "rounds": st.rounds,
                         "find1_rounds": st.phases.get("find1: sort", 0) + st.phases.get("find1: scan", 0),
                         "machines": st.num_machines, "max_memory": st.max_memory,
                         "seconds": time.perf_counter() - t0, "correct": bool(np.array_equal(ans, hop(x, k)))})
    return rows


def cycles_rounds(ns: list[int], memories: list[int], *, seed: int = 0, progress: bool = False) -> list[dict]:
    """Conjecture 2.4's instances: rounds and iterations of the components protocol, one vs two cycles."""
    rows = []
    for s in memories:
        for n in _bar(ns, progress, f"s={s}"):
            for two in (False, True):
                labels, st = connected_components_protocol(cycles_instance(n, two, seed), n, s, seed=seed)
                rows.append({"n": n, "two_cycles": two, "memory": s, "rounds": st.rounds,
                             "iterations": st.phases["iterations"], "machines": st.num_machines,
                             "components": int(len(np.unique(labels))), "max_memory": st.max_memory})
    return rows


def routing_widths(configs: list[tuple[int, int]], beta: int = 1, *, trials: int = 3, seed: int = 0,
                   device: str = "cpu") -> list[dict]:
    """For each (N, s): the slots one random full routing needed, the default of :class:`RoutingLayer`, and
    Fact B.2's worst-case slots; with the widths m = d + 1 + m' (4 + 4 beta) they give."""
    rows = []
    for n, s in configs:
        need = minimal_slots(n, s, beta, trials=trials, seed=seed, device=device)
        layer = RoutingLayer(n, s, beta, device=device)
        per_slot = layer.packet_width
        rows.append({"N": n, "s": s, "beta": beta, "slots_needed": need,
                     "slots_default": practical_slots(s * s, n * s), "slots_lemma": lemma_slots(s, n),
                     "width_needed": layer.d + 1 + need * per_slot, "width_default": layer.width,
                     "width_lemma": layer.d + 1 + lemma_slots(s, n) * per_slot,
                     "s4_beta_logN": s**4 * beta * math.log(n)})
    return rows


def layer_rounds_vs_n(ns: list[int], memories: list[int], *, width: int = 4, heads: int = 2, seed: int = 0
                      ) -> list[dict]:
    """Theorem 3.4: rounds, depth D, machines and the largest error of one layer run as an MPC protocol."""
    rows = []
    for s in memories:
        for n in ns:
            layer = AttentionLayer.random(width, heads, causal=True, seed=seed)
            x = np.random.default_rng(seed + n).normal(size=(n, width))
            y, st, info = layer_as_mpc(layer, x, s)
            rows.append({"N": n, "memory": s, "branching": info["branching"], "depth": info["depth"],
                         "rounds": st.rounds, "machines": info["num_machines"], "max_memory": st.max_memory,
                         "max_error": float(np.abs(y - layer.forward(x)).max())})
    return rows


def simulator_speed(n: int, k: int, memory: int, *, seed: int = 0, repeats: int = 1) -> dict:
    """Wall time of :func:`hop_protocol` on n words (the simulator's speed)."""
    x = np.random.default_rng(seed).integers(0, 4, n)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ans, st = hop_protocol(x, k, memory, seed=seed)
        times.append(time.perf_counter() - t0)
    return {"n": n, "k": k, "memory": memory, "rounds": st.rounds, "machines": st.num_machines,
            "seconds": min(times), "words_moved": st.total_words, "correct": bool(np.array_equal(ans, hop(x, k)))}


# --------------------------------------------------------------------------- figures
def plot_hop_rounds(by_k: list[dict], by_n: list[dict]):
    """Two panels: rounds against k (log scale) and against n, one line per memory exponent."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for label in dict.fromkeys(r["label"] for r in by_k):
        rows = [r for r in by_k if r["label"] == label]
        axes[0].plot([r["k"] for r in rows], [r["rounds"] for r in rows], "o-", label=label)
        axes[0].plot([r["k"] for r in rows], [r["doubling_rounds"] for r in rows], "x--", color="grey")
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("k")
    axes[0].set_ylabel("rounds")
    axes[0].set_title(f"hop_k, N = {by_k[0]['n']} (dashed: pointer doubling alone)", fontsize=10)
    for label in dict.fromkeys(r["label"] for r in by_n):
        rows = [r for r in by_n if r["label"] == label]
        axes[1].plot([r["n"] for r in rows], [r["rounds"] for r in rows], "o-", label=label)
        axes[1].plot([r["n"] for r in rows], [r["find1_rounds"] for r in rows], "x--", color="grey")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("N")
    axes[1].set_title(f"hop_k, k = {by_n[0]['k']} (dashed: find¹ by sorting and a scan)", fontsize=10)
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_cycles(rows: list[dict]):
    """Rounds and iterations of the components protocol on one cycle vs two cycles, against n."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for s in sorted({r["memory"] for r in rows}):
        for two, style in ((False, "o-"), (True, "s--")):
            sel = [r for r in rows if r["memory"] == s and r["two_cycles"] == two]
            label = f"s = {s}, {'two cycles' if two else 'one cycle'}"
            axes[0].plot([r["n"] for r in sel], [r["rounds"] for r in sel], style, label=label)
            axes[1].plot([r["n"] for r in sel], [r["iterations"] for r in sel], style, label=label)
    ns = sorted({r["n"] for r in rows})
    axes[1].plot(ns, [math.log2(n) for n in ns], ":", color="black", label="log2 n")
    for ax, what in zip(axes, ("MPC rounds", "hook + jump iterations"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (vertices)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_routing_widths(rows: list[dict]):
    """Slots m' needed by random routings, the layer's default and Fact B.2's worst case, against s."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for n in sorted({r["N"] for r in rows}):
        sel = [r for r in rows if r["N"] == n]
        s = [r["s"] for r in sel]
        ax.plot(s, [r["slots_needed"] for r in sel], "o-", label=f"needed, N = {n}")
        ax.plot(s, [r["slots_default"] for r in sel], "s--", label=f"default e(s²+1)ln(Ns/0.001), N = {n}")
        ax.plot(s, [r["slots_lemma"] for r in sel], "^:", label=f"Fact B.2: 12 s⁴ ln N², N = {n}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("s (messages per token)")
    ax.set_ylabel("slots m'")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_layer_rounds(rows: list[dict]):
    """Rounds of one layer as an MPC protocol against N, one line per branching factor, with 2D + 3."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for s in sorted({r["memory"] for r in rows}):
        sel = [r for r in rows if r["memory"] == s]
        b = sel[0]["branching"]
        ax.plot([r["N"] for r in sel], [r["rounds"] for r in sel], "o-", label=f"measured, b = {b} (s = {s})")
        ax.plot([r["N"] for r in sel], [2 * r["depth"] + 3 for r in sel], ":", label=f"2D + 3, b = {b}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (tokens)")
    ax.set_ylabel("rounds per layer")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
