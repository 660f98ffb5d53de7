"""The measurements and figures of the MPC chapter (Sections 2-3 of the paper): round counts of the
protocols for hop_k and connectivity, routing widths of Lemma 3.2, a protocol run as a transformer
(Theorem 3.1) and rounds of Theorem 3.4's simulation of a layer.

Every run is in the model's own regime: an input of ``input_words`` words and a local memory of
``memory = ceil(input_words ** delta)`` words for a stated ``delta < 1``, so that no machine can hold the
input (with s >= input size, zero rounds would suffice and Conjecture 2.4 and Theorem 3.1 say nothing).
Every record carries ``input_words``, ``memory`` and ``delta``; :func:`mpc_record` refuses
``memory >= input_words``. :data:`PROFILES` holds the chapter's settings.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

from hoplib._book.validate import check_int
from hoplib.mpc.layer_sim import AttentionLayer, layer_as_mpc
from hoplib.mpc.protocols import (
    components_min_memory,
    connected_components_protocol,
    cycles_instance,
    hop_min_memory,
    hop_protocol,
)
from hoplib.mpc.routing import RoutingLayer, lemma_slots, minimal_slots, practical_slots
from hoplib.tasks import hop

KS_QUICK = [1, 2, 4, 8, 16, 32, 64, 128, 256]
PROFILES = {
    "quick": {"grid_ns": [4096, 16384, 65536], "deltas": ["1/2", "2/3", "3/4"], "grid_k": 16,
              "k_n": 65536, "k_deltas": ["1/2", "3/4"], "ks": KS_QUICK, "speed_n": 100_000, "speed_delta": "1/2",
              "cycle_ns": [512, 2048], "cycle_deltas": ["2/3", "3/4"],
              "routing": [(32, 2), (32, 4), (128, 2), (128, 4)],
              "layer_ns": [256, 512], "layer_memories": [64, 128], "tf_n": 128},
    "paper": {"grid_ns": [4096, 16384, 65536, 262144, 1048576], "deltas": ["1/2", "2/3", "3/4"], "grid_k": 16,
              "k_n": 262144, "k_deltas": ["1/2", "2/3", "3/4"], "ks": [*KS_QUICK, 1024, 4096],
              "speed_n": 1_000_000, "speed_delta": "1/2", "cycle_ns": [512, 2048, 8192, 32768],
              "cycle_deltas": ["2/3", "3/4"],
              "routing": [(32, 2), (32, 4), (128, 2), (128, 4), (128, 8), (512, 4)],
              "layer_ns": [256, 512, 1024], "layer_memories": [64, 128, 256], "tf_n": 512},
}
"""Settings of the MPC chapter's profiles: ``quick`` (about a minute on a CPU) and ``paper``."""

PAPER_FILES = ("hop_grid", "hop_rounds", "simulator_speed", "cycles_rounds", "routing_widths", "transformer_demo",
               "layer_rounds")
"""The results files a run of the chapter's paper profile stores under ``results/mpc/paper/``."""


def _bar(items, progress: bool, desc: str):
    """A tqdm.auto progress bar when asked for (imported lazily: it warns in kernels without ipywidgets)."""
    if not progress:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


def parse_delta(delta: str | float | Fraction) -> float:
    """``"2/3"`` (or a number) as a float in (0, 1)."""
    try:
        value = float(Fraction(delta)) if isinstance(delta, str) else float(delta)
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        raise ValueError(f"delta must be a number or a fraction like '2/3', got {delta!r}") from exc
    if not 0 < value < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return value


def memory_for(input_words: int, delta: str | float) -> int:
    """Local memory s = ceil(input_words ** delta) words (rounding guards against 4096^(2/3) = 255.99...)."""
    n = check_int("input_words", input_words, low=2)
    return int(math.ceil(n ** parse_delta(delta) - 1e-9))


def mpc_record(input_words: int, memory: int, delta: str | float, **fields) -> dict:
    """A results record with the regime fields first; raises ValueError unless memory < input_words."""
    input_words, memory = check_int("input_words", input_words, low=2), check_int("memory", memory, low=1)
    if memory >= input_words:
        raise ValueError(f"memory = {memory} words is not below the input size {input_words}: one machine could "
                         f"hold the whole input and zero rounds would suffice")
    label = delta if isinstance(delta, str) else f"{delta:.3f}"
    return {"input_words": input_words, "memory": memory, "delta": parse_delta(delta), "delta_label": label,
            **fields}


# --------------------------------------------------------------------------- hop_k
def hop_round_grid(ns: list[int], deltas: list[str], k: int, *, seed: int = 0, progress: bool = False) -> list[dict]:
    """Rounds of :func:`hop_protocol` on N random symbols at s = N^delta, for every (N, delta) whose memory is
    at least :func:`hop_min_memory` (N) (the others are left out)."""
    rows = []
    for n in _bar(ns, progress, "N"):
        x = np.random.default_rng(seed + n).integers(0, 4, check_int("n", n, low=2))
        for delta in deltas:
            s = memory_for(n, delta)
            if s < hop_min_memory(n):
                continue
            t0 = time.perf_counter()
            ans, st = hop_protocol(x, k, s, seed=seed)
            rows.append(mpc_record(n, s, delta, n=n, k=k, rounds=st.rounds, machines=st.num_machines,
                                   find1_rounds=st.phases.get("find1: sort", 0) + st.phases.get("find1: scan", 0),
                                   doubling_rounds=st.phases.get("pointer doubling", 0), max_memory=st.max_memory,
                                   seconds=time.perf_counter() - t0, correct=bool(np.array_equal(ans, hop(x, k)))))
    return rows


def hop_rounds_vs_k(n: int, ks: list[int], deltas: list[str], *, seed: int = 0, progress: bool = False) -> list[dict]:
    """Rounds of :func:`hop_protocol` against k on N random symbols, s = N^delta for each delta."""
    x = np.random.default_rng(seed).integers(0, 4, check_int("n", n, low=2))
    rows = []
    for delta in deltas:
        s = memory_for(n, delta)
        for k in _bar(ks, progress, f"delta={delta}"):
            ans, st = hop_protocol(x, k, s, seed=seed)
            rows.append(mpc_record(n, s, delta, n=n, k=k, rounds=st.rounds, machines=st.num_machines,
                                   doubling_rounds=st.phases.get("pointer doubling", 0), max_memory=st.max_memory,
                                   correct=bool(np.array_equal(ans, hop(x, k)))))
    return rows


def simulator_speed(n: int, k: int, delta: str, *, seed: int = 0) -> dict:
    """Wall time of :func:`hop_protocol` on n words at s = n^delta (the simulator's speed)."""
    x = np.random.default_rng(seed).integers(0, 4, check_int("n", n, low=2))
    s = memory_for(n, delta)
    t0 = time.perf_counter()
    ans, st = hop_protocol(x, k, s, seed=seed)
    return mpc_record(n, s, delta, n=n, k=k, rounds=st.rounds, machines=st.num_machines,
                      seconds=time.perf_counter() - t0, words_moved=st.total_words,
                      correct=bool(np.array_equal(ans, hop(x, k))))


# --------------------------------------------------------------------------- connectivity
def cycles_rounds(ns: list[int], deltas: list[str], *, seed: int = 0, progress: bool = False) -> list[dict]:
    """Conjecture 2.4's instances (one cycle or two on n vertices): rounds and iterations of the components
    protocol. The input is the edge list, 2 words per edge (the paper's N = 2|E| = 2n), and s = (2n)^delta;
    pairs below :func:`components_min_memory` are left out."""
    rows = []
    for n in _bar(ns, progress, "n"):
        for delta in deltas:
            s = memory_for(2 * n, delta)
            if s < components_min_memory(n, n):
                continue
            for two in (False, True):
                labels, st = connected_components_protocol(cycles_instance(n, two, seed), n, s, seed=seed)
                rows.append(mpc_record(2 * n, s, delta, n=n, two_cycles=two, rounds=st.rounds,
                                       iterations=st.phases["iterations"], converged=st.converged,
                                       machines=st.num_machines, components=int(len(np.unique(labels))),
                                       max_memory=st.max_memory))
    return rows


def rounds_per_iteration(rows: list[dict]) -> pd.DataFrame:
    """Rounds per FastSV iteration of each connectivity run: (n, s, delta, iterations, rounds, ratio)."""
    df = pd.DataFrame(rows)
    df["rounds per iteration"] = df["rounds"] / df["iterations"]
    df["instance"] = np.where(df["two_cycles"], "two cycles", "one cycle")
    df = df.rename(columns={"memory": "s", "delta_label": "δ"})
    return df[["n", "s", "δ", "instance", "iterations", "rounds", "rounds per iteration"]]


def styled(df: pd.DataFrame, *, index: bool = True) -> Styler:
    """A table for the book: HTML with full cell texts, thousands separators, whole numbers (a Styler)."""
    style = df.style.format(precision=0, thousands=",")
    return style if index else style.hide(axis="index")


# --------------------------------------------------------------------------- Lemma 3.2, Theorems 3.1 and 3.4
def routing_widths(configs: list[tuple[int, int]], beta: int = 1, *, trials: int = 3, seed: int = 0,
                   device: str = "cpu") -> list[dict]:
    """For each (N tokens, s >= 2 messages per token): the slots one random full routing needed, the default of
    :class:`RoutingLayer`, and Fact B.2's worst-case slots, with the widths m = d + 1 + m' (4 + 4 beta)."""
    rows = []
    for n, s in configs:
        need = minimal_slots(n, s, beta, trials=trials, seed=seed, device=device)
        layer = RoutingLayer(n, s, beta, device=device)
        per_slot = layer.packet_width
        rows.append(mpc_record(n, s, math.log(s) / math.log(n), N=n, s=s, beta=beta,
                               slots_needed=need, slots_default=practical_slots(s * s, n * s),
                               slots_lemma=lemma_slots(s, n), width_needed=layer.d + 1 + need * per_slot,
                               width_default=layer.width, width_lemma=layer.d + 1 + lemma_slots(s, n) * per_slot))
    return rows


def transformer_demo(n: int, k: int = 3, *, seed: int = 0, device: str = "cpu") -> dict:
    """Theorem 3.1 on hop_k: run :func:`hop_protocol` (N random symbols, s = :func:`hop_min_memory` (N) < N)
    as a transformer, one routing layer per round, and compare with the simulator and with hoplib.tasks.hop.
    Records the widest layer as fitted to this input and the input-independent width of Lemma 3.2."""
    from hoplib.mpc.transformer_sim import hop_as_transformer

    x = np.random.default_rng(seed).integers(0, 3, check_int("n", n, low=64))
    s = hop_min_memory(n)
    answer_tf, tf = hop_as_transformer(x, k, s, device=device, seed=seed)
    answer_sim, st = hop_protocol(x, k, s, seed=seed)
    widest = max(tf.layer_log, key=lambda e: e.get("width", 0))
    return mpc_record(n, s, math.log(s) / math.log(n), n=n, k=k, rounds=st.rounds, layers=tf.layers,
                      equal_to_simulator=bool(np.array_equal(answer_tf, answer_sim)),
                      correct=bool(np.array_equal(answer_tf, hop(x, k))),
                      all_exact=all(e["exact"] for e in tf.layer_log), widest_messages=widest["messages"],
                      widest_b=widest["b"], widest_slots=widest["slots"], widest_width=widest["width"],
                      input_independent_width=widest["input_independent_width"])


def layer_rounds_vs_n(ns: list[int], memories: list[int], *, width: int = 4, heads: int = 2, seed: int = 0
                      ) -> list[dict]:
    """Theorem 3.4: rounds, depth D, machines and the largest error of one layer run as an MPC protocol. The
    input is N tokens of ``width`` words; delta = log s / log(N * width)."""
    rows = []
    for s in memories:
        for n in ns:
            layer = AttentionLayer.random(width, heads, causal=True, seed=seed)
            x = np.random.default_rng(seed + n).normal(size=(n, width))
            y, st, info = layer_as_mpc(layer, x, s)
            rows.append(mpc_record(n * width, s, math.log(s) / math.log(n * width), N=n, branching=info["branching"],
                                   depth=info["depth"], rounds=st.rounds, machines=info["num_machines"],
                                   max_memory=st.max_memory, max_error=float(np.abs(y - layer.forward(x)).max())))
    return rows


# --------------------------------------------------------------------------- tables
_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def sci(x: float) -> str:
    """``x`` in scientific notation for prose: 1.1 × 10¹⁰."""
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"x must be a positive finite number, got {x!r}")
    exponent = math.floor(math.log10(x))
    mantissa = x / 10**exponent
    if round(mantissa, 1) >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.1f} × 10{str(exponent).translate(_SUPERSCRIPTS)}"


def grid_table(rows: list[dict], ns: list[int], deltas: list[str]) -> Styler:
    """Rounds of the hop_k grid: one row per N, one column per delta ("s = ..., R rounds"; "below minimum"
    where N^delta is under :func:`hop_min_memory`)."""
    got = {(r["n"], r["delta_label"]): r for r in rows}
    table = {}
    for n in ns:
        table[f"{n:,}"] = {f"δ = {d}": (f"s = {got[n, d]['memory']:,}: {got[n, d]['rounds']} rounds"
                                        if (n, d) in got else f"s = {memory_for(n, d):,} < minimum "
                                        f"{hop_min_memory(n)}") for d in deltas}
    df = pd.DataFrame.from_dict(table, orient="index")
    df.index.name = "N (words)"
    return styled(df)


def routing_table(rows: list[dict]) -> Styler:
    """The routing widths as a table (plain-text headers)."""
    df = pd.DataFrame(rows)[["N", "s", "slots_needed", "slots_default", "slots_lemma", "width_needed",
                             "width_lemma"]]
    return styled(df.rename(columns={"slots_needed": "slots needed", "slots_default": "default slots",
                                     "slots_lemma": "Fact B.2 slots", "width_needed": "width needed",
                                     "width_lemma": "width (Fact B.2)"}).set_index(["N", "s"]))


def summary_table(grid: list[dict], cycles: list[dict], demo: dict, layers: list[dict]) -> Styler:
    """Measured rounds and depths against the paper's bounds (one row per claim)."""
    h = max(grid, key=lambda r: (r["n"], -r["delta"]))
    c = max((r for r in cycles if not r["two_cycles"]), key=lambda r: (r["n"], -r["delta"]))
    lay = max(layers, key=lambda r: (r["N"], -r["branching"]))
    rows = [
        ("hop_k, MPC rounds", f"N = {h['n']:,}, s = N^({h['delta_label']}), k = {h['k']}",
         f"{h['rounds']} ({h['doubling_rounds']} for pointer doubling)", "O(1/δ) + O(log k)"),
        ("hop_k as a transformer (Thm 3.1)", f"N = {demo['n']}, s = {demo['memory']}, k = {demo['k']}",
         f"{demo['layers']} layers = R + 1", f"R + 1 layers; directly (Thm 4.2): ⌊log₂ k⌋ + 2 = "
         f"{math.floor(math.log2(demo['k'])) + 2} as stated, ⌈log₂ k⌉ + 2 = {math.ceil(math.log2(demo['k'])) + 2} "
         f"with one lookup per layer"),
        ("connectivity, one cycle", f"n = {c['n']:,}, s = (2n)^({c['delta_label']})",
         f"{c['rounds']:,} rounds, {c['iterations']} iterations", "O(log n) rounds; Ω(log n) under Conj. 2.4"),
        ("connectivity as a transformer", "", "R + 1 layers (Thm 3.1)", "O(log D) layers (Cor. 3.3), "
         "Ω(log D) (Cor. 3.5)"),
        ("one layer as MPC (Thm 3.4)", f"N = {lay['N']}, s = {lay['memory']}, b = {lay['branching']}",
         f"{lay['rounds']} rounds (D = {lay['depth']})", f"2D + 3 = {2 * lay['depth'] + 3}"),
    ]
    return styled(pd.DataFrame(rows, columns=["problem", "instance", "measured", "paper's bound"]), index=False)


# --------------------------------------------------------------------------- figures
def plot_hop_rounds(by_k: list[dict], grid: list[dict]):
    """Two panels: rounds against k at fixed N, and against N at fixed k, one line per delta."""
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 3.6))
    for label in dict.fromkeys(r["delta_label"] for r in by_k):
        rows = [r for r in by_k if r["delta_label"] == label]
        axes[0].plot([r["k"] for r in rows], [r["rounds"] for r in rows], "o-", label=f"s = N^{label}")
        axes[0].plot([r["k"] for r in rows], [r["doubling_rounds"] for r in rows], "x--", color="grey")
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("k")
    axes[0].set_title(f"hop_k, N = {by_k[0]['n']:,} (dashed: pointer doubling alone)", fontsize=10)
    for label in dict.fromkeys(r["delta_label"] for r in grid):
        rows = sorted((r for r in grid if r["delta_label"] == label), key=lambda r: r["n"])
        axes[1].plot([r["n"] for r in rows], [r["rounds"] for r in rows], "o-", label=f"s = N^{label}")
        axes[1].plot([r["n"] for r in rows], [r["find1_rounds"] for r in rows], "x--", color="grey")
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("N (words)")
    axes[1].set_title(f"hop_k, k = {grid[0]['k']} (dashed: find¹ by sorting and a scan)", fontsize=10)
    for ax in axes:
        ax.set_ylabel("rounds")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plot_cycles(rows: list[dict]):
    """Rounds and iterations of the components protocol on one cycle vs two cycles, against n."""
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 3.6))
    for label in dict.fromkeys(r["delta_label"] for r in rows):
        for two, style in ((False, "o-"), (True, "s--")):
            sel = sorted((r for r in rows if r["delta_label"] == label and r["two_cycles"] == two),
                         key=lambda r: r["n"])
            name = f"s = (2n)^{label}, {'two cycles' if two else 'one cycle'}"
            axes[0].plot([r["n"] for r in sel], [r["rounds"] for r in sel], style, label=name)
            axes[1].plot([r["n"] for r in sel], [r["iterations"] for r in sel], style, label=name)
    ns = sorted({r["n"] for r in rows})
    axes[1].plot(ns, [math.log2(n) for n in ns], ":", color="black", label="log2 n")
    for ax, what in zip(axes, ("MPC rounds", "hook + jump iterations"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (vertices)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize="small")
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
    ax.legend(fontsize="small")
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
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
