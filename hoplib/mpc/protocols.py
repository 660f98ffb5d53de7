"""MPC protocols for hop_k (Definition 4.1) and graph connectivity (Corollary 3.3, Conjecture 2.4).

:func:`hop_protocol` computes find^1 by sorting the pairs (symbol, position) and a prefix scan (each position
learns the previous occurrence of its symbol), O(1/delta) rounds for fixed delta, and then find^k by pointer
doubling: 2 rounds per bit of k, since find is injective (no machine is ever asked twice for one entry).

:func:`connected_components_protocol` runs FastSV-style label propagation with hooking and pointer jumping
(Shiloach & Vishkin 1982; Zhang, Azad & Hu 2020): each iteration is a few lookups and min-reductions, each
O(1/delta) rounds thanks to sorting, and the number of iterations grows like log n (measured, not proved:
the worst-case O(log n) bound belongs to the Shiloach-Vishkin variant and to Coy & Czumaj 2022).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hoplib._book.validate import check_int, check_int_array
from hoplib.mpc.primitives import (
    _empty,
    _msg,
    forward_fill,
    global_or,
    local_sort,
    lookup,
    reduce_min,
    sample_sort,
)
from hoplib.mpc.simulator import MPCNotConvergedError, MPCSimulator, MPCStats, RoundContext, Table

WORDS_PER_POSITION = 32
"""Local memory per position: its state, two requests and two replies (16 words), doubled as slack for the
sample sort, whose buckets are balanced only up to a factor that grows with the number of sorting levels."""


def hop_min_memory(n: int) -> int:
    """The least memory (words per machine) :func:`hop_protocol` accepts for a sequence of ``n`` symbols:
    max(32, ceil(log2 n)^2).

    The sample sort behind find^1 picks each level's splitters from about s/4 samples, so each of its about
    log2(n) levels leaves a relative load error of order 1/sqrt(s); the errors add up along the levels and
    the largest over the machines must stay within the slack of :data:`WORDS_PER_POSITION`. That needs s to
    grow like log^2 n. The bound sits above the smallest memory at which the protocol met its limits on every
    seed we tried (n from 2 to 65,536, often by a factor of 1.5 to 2), and the tests check it at several n and
    seeds. For any fixed delta > 0, n^delta exceeds it once n is large enough, so the protocol is a
    (gamma, delta)-MPC protocol.
    """
    n = check_int("n", n, low=1)
    return max(32, math.ceil(math.log2(n)) ** 2)


def _to_numpy_1d(name: str, x) -> np.ndarray:
    check_int_array(name, x)
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one sequence), got shape {arr.shape}")
    return arr.astype(np.int64)


def hop_protocol(x, k: int, memory: int, *, audit: bool = False, seed: int = 0,
                 simulator: Callable[..., MPCSimulator] = MPCSimulator) -> tuple[np.ndarray, MPCStats]:
    """hop_k of the sequence ``x`` (Definition 4.1, same convention as :func:`hoplib.tasks.hop`) as an MPC
    protocol with ``memory`` words per machine. Returns ``(answer, stats)``; ``answer`` is an int64 array.

    ``x``: 1-D array of nonnegative integer symbols. ``memory`` must be at least :func:`hop_min_memory`
    (N) words, max(32, ceil(log2 N)^2). Rounds: a sample sort and a tree scan for find^1 (O(1/delta)), 2 per
    bit of k for pointer doubling, 2 to read the symbols and 1 to compact the output onto the first machines.
    ``simulator`` builds the machine model from ``(q, memory, audit=...)``: :class:`MPCSimulator`, or the
    transformer of Theorem 3.1 (:class:`hoplib.mpc.transformer_sim.TransformerMPC`).
    """
    xs = _to_numpy_1d("x", x)
    k = check_int("k", k, low=0)
    n = len(xs)
    if n == 0:
        raise ValueError("x must have at least one position")
    memory = check_int("memory", memory)
    if memory < hop_min_memory(n):
        raise ValueError(f"memory must be at least hop_min_memory(N) = max(32, ceil(log2 N)^2) = "
                         f"{hop_min_memory(n)} words for N = {n}, got {memory}")
    if xs.min() < 0 or int(xs.max()) >= 2**62 // max(n, 1):
        raise ValueError(f"x must hold symbols in [0, 2**62 / N), got range [{xs.min()}, {xs.max()}]")
    c = memory // WORDS_PER_POSITION
    sim = simulator(-(-n // c), memory, audit=audit)
    pos = np.arange(n, dtype=np.int64)
    sim.load("x", pos // c, np.column_stack([pos, xs]))
    _find1_rounds(sim, n, c, seed)
    sim.phase("pointer doubling")
    bits = k.bit_length()
    for j in range(bits):
        _doubling_rounds(sim, c, bool((k >> j) & 1), j + 1 < bits)
    sim.phase("read symbols and output")
    _output_rounds(sim, c, memory // 2)
    out = sim.table("out")
    answer = np.full(n, -1, dtype=np.int64)
    answer[out.data[:, 0]] = out.data[:, 1]
    return answer, sim.stats


def _find1_rounds(sim: MPCSimulator, n: int, c: int, seed: int) -> None:
    """find^1: sort the keys symbol * n + position, then each key learns its predecessor in sorted order (a
    forward fill) and tells its position's machine; leaves table ``st`` = [pos, x, P, R] with P = find^1 and
    R = the position itself (find^0)."""
    def build(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        t = mem["x"]
        return {**mem, "_srt": Table(t.machine, (t.data[:, 1] * n + t.data[:, 0])[:, None])}

    sim.phase("find1: sort")
    sim.defer(build)
    sample_sort(sim, "_srt", n_total=n, seed=seed)
    sim.phase("find1: scan")
    forward_fill(sim, "_srt")

    def send_home(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        t = mem.pop("_srt")
        key, has, prev = t.data[:, 0], t.data[:, 1] != 0, t.data[:, 2]
        same = has & (prev // n == key // n)
        ptr = np.where(same, prev % n + 1, -1)
        p = key % n
        return mem, {"ptr": _msg(t.machine, p // c, np.column_stack([p, ptr]))}

    sim.round(send_home)

    def init_state(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        x_t, p_t = local_sort(mem.pop("x")), local_sort(mem.pop("ptr"))
        mem["st"] = Table(x_t.machine, np.column_stack([x_t.data, p_t.data[:, 1], x_t.data[:, 0]]))
        return mem

    sim.defer(init_state)


def _output_rounds(sim: MPCSimulator, c: int, out_per_machine: int) -> None:
    """Read x at R (ask, answer), then compact the answers onto the first machines: 3 rounds."""
    def ask_symbol(ctx: RoundContext, mem: dict[str, Table]):
        st = mem["st"]
        r = st.data[:, 3]
        ok = r >= 0
        return mem, {"_req": _msg(st.machine[ok], r[ok] // c, np.column_stack([r[ok], st.data[ok, 0]]))}

    def give_symbol(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        st, req = mem["st"], mem.pop("_req", _empty(2))
        order = np.argsort(st.data[:, 0])
        idx = np.searchsorted(st.data[order, 0], req.data[:, 0]) if len(req) else np.zeros(0, np.int64)
        ans = st.data[order, 1][idx] if len(req) else np.zeros(0, np.int64)
        return mem, {"_ans": _msg(req.machine, req.data[:, 1] // c, np.column_stack([req.data[:, 1], ans]))}

    def output(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        st, ans = mem.pop("st"), mem.pop("_ans", _empty(2))
        value_arr = np.full(len(st), -1, dtype=np.int64)
        if len(ans):
            order = np.argsort(ans.data[:, 0])
            sorted_pos = ans.data[order, 0]
            idx_c = np.minimum(np.searchsorted(sorted_pos, st.data[:, 0]), len(sorted_pos) - 1)
            hit = sorted_pos[idx_c] == st.data[:, 0]
            value_arr = np.where(hit, ans.data[order, 1][idx_c], -1)
        p = st.data[:, 0]
        return mem, {"out": _msg(st.machine, p // out_per_machine, np.column_stack([p, value_arr]))}

    sim.round(ask_symbol)
    sim.round(give_symbol)
    sim.round(output)


def _doubling_rounds(sim: MPCSimulator, c: int, use_bit: bool, square: bool) -> None:
    """One step of pointer doubling in 2 rounds: ask the owners of P(i) and R(i), then they answer."""

    def ask(ctx: RoundContext, mem: dict[str, Table]):
        st = mem["st"]
        pos, p, r = st.data[:, 0], st.data[:, 2], st.data[:, 3]
        rows, srcs = [], []
        for which, tgt, active in ((0, p, square), (1, r, use_bit)):
            if not active:
                continue
            ok = tgt >= 0
            rows.append(np.column_stack([tgt[ok], pos[ok], np.full(ok.sum(), which)]))
            srcs.append(st.machine[ok])
        data = np.concatenate(rows) if rows else np.zeros((0, 3), np.int64)
        src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
        return mem, {"_req": _msg(src, data[:, 0] // c, data)}

    def reply(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        st, req = mem["st"], mem.pop("_req", _empty(3))
        order = np.argsort(st.data[:, 0])
        spos = st.data[order, 0]
        idx = np.searchsorted(spos, req.data[:, 0]) if len(req) else np.zeros(0, np.int64)
        val = st.data[order, 2][idx] if len(req) else np.zeros(0, np.int64)
        data = np.column_stack([req.data[:, 1], req.data[:, 2], val])
        return mem, {"_rep": _msg(req.machine, req.data[:, 1] // c, data)}

    def update(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        st, rep = mem["st"], mem.pop("_rep", _empty(3))
        d = st.data.copy()
        order = np.argsort(d[:, 0])
        for which, col, active in ((0, 2, square), (1, 3, use_bit)):
            if not active:
                continue
            sel = rep.data[:, 1] == which
            idx = order[np.searchsorted(d[order, 0], rep.data[sel, 0])]
            new = np.full(len(d), -1, dtype=np.int64)
            new[idx] = rep.data[sel, 2]
            d[:, col] = new  # entries that asked nothing had -1 already and stay -1
        mem["st"] = Table(st.machine, d)
        return mem

    sim.round(ask)
    sim.round(reply)
    sim.defer(update)


SORT_LOAD = 96
"""Machines are sized so that the widest sorted table (11 words a record) fills about an eighth of memory:
sample sort balances its buckets only up to a factor of about 3."""


def components_min_memory(num_vertices: int, num_edges: int) -> int:
    """The least memory :func:`connected_components_protocol` accepts: max(128, ceil(log2(n + 2E))^2) words.

    Its lookups and minima sort n + 2E records, so the sample sort needs s to grow like log^2 of that, as
    for :func:`hop_min_memory`; 128 words is the floor its record widths need."""
    total = check_int("num_vertices", num_vertices, low=1) + 2 * check_int("num_edges", num_edges, low=0)
    return max(128, math.ceil(math.log2(total)) ** 2)


def _check_edges(edges, num_vertices: int) -> np.ndarray:
    check_int_array("edges", edges, min_ndim=2)
    e = edges.detach().cpu().numpy() if hasattr(edges, "detach") else np.asarray(edges)
    if e.ndim != 2 or e.shape[1] != 2:
        raise ValueError(f"edges must have shape (E, 2), got {e.shape}")
    e = e.astype(np.int64)
    if len(e) and (e.min() < 0 or e.max() >= num_vertices):
        raise ValueError(f"edges must name vertices in [0, {num_vertices - 1}], got range [{e.min()}, {e.max()}]")
    return e


def connected_components_protocol(edges, num_vertices: int, memory: int, *, audit: bool = False,
                                  max_iterations: int = 200, strict: bool = True, seed: int = 0,
                                  simulator: Callable[..., MPCSimulator] = MPCSimulator
                                  ) -> tuple[np.ndarray, MPCStats]:
    """Connected components as an MPC protocol (the problem behind Corollary 3.3 and Conjecture 2.4).

    ``edges``: integer array (E, 2) of undirected edges over vertices ``0..num_vertices-1``; ``memory`` at
    least :func:`components_min_memory` words. Returns
    ``(labels, stats)``: ``labels[v]`` is the smallest vertex of v's component. ``stats.phases['iterations']``
    counts the FastSV iterations (hooking + pointer jumping), each a fixed number of O(1/delta)-round
    lookups and min-reductions plus a global OR that tells every machine whether anything changed. The
    protocol has converged when an iteration changes nothing (``stats.converged``); if ``max_iterations``
    pass first, the labels may be unfinished: with ``strict`` (default) that raises
    :class:`~hoplib.mpc.simulator.MPCNotConvergedError` (which carries the labels and stats), otherwise the
    labels are returned with ``stats.converged = False``.
    """
    num_vertices = check_int("num_vertices", num_vertices, low=1, high=2**20)
    memory = check_int("memory", memory)
    max_iterations = check_int("max_iterations", max_iterations, low=1)
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be a bool, got {type(strict).__name__}")
    e = _check_edges(edges, num_vertices)
    n, m = num_vertices, len(e)
    if memory < components_min_memory(n, m):
        raise ValueError(f"memory must be at least components_min_memory = max(128, ceil(log2(n + 2E))^2) = "
                         f"{components_min_memory(n, m)} words for n = {n}, E = {m}, got {memory}")
    q = max(1, -(-(n + 2 * m) * SORT_LOAD // memory))
    if n * n * q * memory >= 2**62:
        raise ValueError(f"num_vertices = {n} is too large for 64-bit sort keys at memory {memory} "
                         f"(need num_vertices^2 * machines * memory < 2^62)")
    cv, ce = -(-n // q), max(1, -(-m // q))
    sim = simulator(q, memory, audit=audit)
    v = np.arange(n, dtype=np.int64)
    sim.load("par", v // cv, np.column_stack([v, v]))
    if m:
        sim.load("edge", np.arange(m) // ce, e)
    iterations, converged = 0, False
    while iterations < max_iterations and not converged:
        _fastsv_iteration(sim, n, m, cv, ce, seed + 3 * iterations)
        iterations += 1
        global_or(sim, "_chg", 0)
        sim.finish()
        converged = not np.any(sim.table("_or").data[:, 0])
        sim.defer(lambda ctx, mem: {k: t for k, t in mem.items() if k not in ("_or", "_chg")})
    sim.stats.phases["iterations"] = iterations
    sim.stats.converged = converged
    par = sim.table("par")
    labels = np.empty(n, dtype=np.int64)
    labels[par.data[:, 0]] = par.data[:, 1]
    if strict and not converged:
        raise MPCNotConvergedError(f"the components protocol did not converge in max_iterations = "
                                   f"{max_iterations} iterations (labels still changed in the last one); "
                                   f"raise max_iterations, or pass strict=False to get the unfinished labels",
                                   labels, sim.stats)
    return labels, sim.stats


def _fastsv_iteration(sim: MPCSimulator, n: int, m: int, cv: int, ce: int, seed: int) -> None:
    """One FastSV iteration: grandparents by a lookup, each edge endpoint's (parent, grandparent) by a lookup,
    then hooking and shortcutting as one min-reduction per vertex; leaves ``par`` updated and ``_chg`` (one
    flag per vertex: did its parent change?)."""
    def ask_gp(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        par = mem["par"]
        req = np.column_stack([par.data[:, 1], par.machine, par.data[:, 0]])
        return {**mem, "_rq": Table(par.machine, req)}

    sim.defer(ask_gp)
    lookup(sim, "par", "_rq", "_gp", value_width=1, n_records=2 * n, seed=seed)

    def ask_edges(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        par, gp = mem["par"], mem.pop("_gp")
        o1, o2 = np.lexsort((par.data[:, 0], par.machine)), np.lexsort((gp.data[:, 0], gp.machine))
        mem["pg"] = Table(par.machine[o1], np.column_stack([par.data[o1], gp.data[o2, 2]]))
        ed = mem.get("edge", _empty(2))
        eid = ed.machine * ce + (np.arange(len(ed)) - np.searchsorted(ed.machine, ed.machine, side="left"))
        req = np.concatenate([np.column_stack([ed.data[:, 0], ed.machine, 2 * eid]),
                              np.column_stack([ed.data[:, 1], ed.machine, 2 * eid + 1])])
        mem["_rq"] = Table(np.concatenate([ed.machine, ed.machine]), req)
        return mem

    sim.defer(ask_edges)
    lookup(sim, "pg", "_rq", "_ep", value_width=2, n_records=n + 2 * m, seed=seed + 1)

    def hook(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        ep = local_sort(mem.pop("_ep", _empty(4)))
        a, b = ep.data[0::2], ep.data[1::2]  # endpoints u and v of each edge, side by side
        em = ep.machine[0::2]
        pg = mem.pop("pg")
        ed = mem.get("edge", _empty(2))
        u, v = ed.data[:, 0], ed.data[:, 1]  # same order as the replies: by machine, then edge id
        msgs = [np.column_stack([a[:, 2], b[:, 3]]), np.column_stack([b[:, 2], a[:, 3]]),
                np.column_stack([u, b[:, 3]]), np.column_stack([v, a[:, 3]]), pg.data[:, [0, 2]], pg.data[:, [0, 1]]]
        data = np.concatenate(msgs)
        mem["_hk"] = Table(np.concatenate([em, em, em, em, pg.machine, pg.machine]),
                           np.column_stack([data, data[:, 0] // cv]))
        mem["_old"] = Table(pg.machine, pg.data[:, :2])
        return mem

    sim.defer(hook)
    reduce_min(sim, "_hk", "_new", n_values=n, n_records=4 * m + 2 * n, seed=seed + 2)

    def apply(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        old, new = local_sort(mem.pop("_old")), local_sort(mem.pop("_new"))
        changed = (old.data[:, 1] != new.data[:, 1]).astype(np.int64)
        mem["par"] = Table(old.machine, np.column_stack([old.data[:, 0], new.data[:, 1]]))
        mem["_chg"] = Table(old.machine, changed[:, None])
        return mem

    sim.defer(apply)


def cycles_instance(num_vertices: int, two_cycles: bool, seed: int = 0) -> np.ndarray:
    """Conjecture 2.4's instances: one cycle on ``num_vertices`` vertices, or two disjoint cycles on half of
    them each, with vertex names shuffled (so that no protocol can read the answer off the names).
    Returns an int64 array of edges (E, 2), E = num_vertices."""
    n = check_int("num_vertices", num_vertices, low=6)
    if n % 2:
        raise ValueError(f"num_vertices must be even (two cycles of n/2), got {n}")
    perm = np.random.default_rng(check_int("seed", seed, low=0)).permutation(n)
    sizes = [n // 2, n // 2] if two_cycles else [n]
    edges, start = [], 0
    for size in sizes:
        ring = np.arange(start, start + size)
        edges.append(np.column_stack([ring, np.roll(ring, -1)]))
        start += size
    return perm[np.concatenate(edges)].astype(np.int64)
