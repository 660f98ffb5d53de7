"""MPC protocols for hop_k (Definition 4.1) and connectivity (Corollary 3.3, Conjecture 2.4).

:func:`hop_protocol`: find^1 by sorting and a prefix scan, then pointer doubling, 2 rounds per bit of k.
:func:`connected_components_protocol`: FastSV hooking and pointer jumping (Shiloach & Vishkin 1982; Zhang,
Azad & Hu 2020), with measured, not proved, iteration counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hoplib.mpc.primitives import _empty, forward_fill, local_sort, lookup, prefix_counts, reduce_min, sample_sort
from hoplib.mpc.simulator import Message, MPCNotConvergedError, MPCSimulator, MPCStats, RoundContext, Table

WORDS_PER_POSITION = 32  # a position's state, two requests and two replies (16 words), doubled for the sort


def hop_min_memory(n: int) -> int:
    """The least memory :func:`hop_protocol` accepts for n symbols: max(32, ceil(log2 n)^2) words. Each sort
    level leaves a load error of order 1/sqrt(s), and the errors add up over the levels; the bound sits above
    the least memory that met the limits on every seed tried (n up to 65,536)."""
    return max(32, math.ceil(math.log2(n)) ** 2)


def hop_protocol(x, k: int, memory: int, *, audit: bool = False, seed: int = 0,
                 simulator: Callable[..., MPCSimulator] = MPCSimulator
                 ) -> tuple[np.ndarray, MPCStats]:
    """hop_k of ``x`` (as :func:`hoplib.tasks.hop`) with ``memory`` words per
    machine: (answer, stats). ``simulator(q, s, audit=...)`` builds the
    machines (or Theorem 3.1's transformer)."""
    x = np.asarray(x)
    n = len(x)
    ok = np.issubdtype(x.dtype, np.integer) and k >= 0
    if not ok or x.min() < 0 or x.max() >= 2**62 // n:
        raise ValueError("x must hold integer symbols in [0, 2**62 / N) "
                         "and k must be >= 0")
    if memory < hop_min_memory(n):
        raise ValueError("memory must be at least hop_min_memory(N) = "
                         f"{hop_min_memory(n)} words")
    c = memory // WORDS_PER_POSITION  # positions per machine
    sim = simulator(-(-n // c), memory, audit=audit)
    pos = np.arange(n)
    sim.load("x", pos // c, np.column_stack([pos, x]))
    find1_rounds(sim, n, c, seed)  # "st": rows [i, x_i, P = find^1(i), R = i]
    sim.phase("pointer doubling")
    bits = k.bit_length()
    for j in range(bits):  # before step j: P = find^(2^j), R = find^(k mod 2^j)
        pointer_doubling(sim, c, use_bit=bool(k >> j & 1), square=j + 1 < bits)
    sim.phase("read symbols and output")
    output_rounds(sim, c, memory // 2)
    out = sim.table("out")
    answer = np.full(n, -1, dtype=np.int64)
    answer[out.data[:, 0]] = out.data[:, 1]
    return answer, sim.stats


def _row_of(st: Table, pos: np.ndarray) -> np.ndarray:
    """Row of ``st`` holding each position in ``pos`` (every position is held once)."""
    order = np.argsort(st.data[:, 0])
    return order[np.searchsorted(st.data[order, 0], pos)]


def ask_owners(sim: MPCSimulator, c: int, asks: list[tuple[int, int]], col: int) -> None:
    """2 rounds: for each (tag, pointer column) of ``asks``, position i asks the owner of position
    ``st[i, pointer column]`` (unless -1) for its column ``col``; rows [i, tag, value] arrive in ``_ans``."""
    def ask(ctx: RoundContext, mem: dict[str, Table]):
        st = mem["st"]
        d, one = st.data, np.ones(len(st), np.int64)
        req = np.concatenate([np.c_[d[:, ptr], d[:, 0], tag * one, st.machine] for tag, ptr in asks])
        req = req[req[:, 0] >= 0]  # -1: no such position
        return mem, {"_req": Message(req[:, 3], req[:, 0] // c, req[:, :3])}

    def answer(ctx: RoundContext, mem: dict[str, Table]):  # [target, asker, tag] -> [asker, tag, value]
        mem = dict(mem)
        st, req = mem["st"], mem.pop("_req", _empty(3))
        value = st.data[_row_of(st, req.data[:, 0]), col]
        return mem, {"_ans": Message(req.machine, req.data[:, 1] // c, np.c_[req.data[:, 1:], value])}

    sim.round(ask)
    sim.round(answer)


def pointer_doubling(sim: MPCSimulator, c: int, use_bit: bool,
                     square: bool) -> None:
    """One doubling step, 2 rounds. Position i holds P = find^(2^j)(i) and R;
    it asks the owner of P for P(P) (squaring) and, if bit j of k is set, the
    owner of R for P(R). As find is one-to-one, no entry is asked for twice,
    so no machine receives more than it holds."""
    wanted = [(tag, col) for tag, col, on in ((0, 2, square), (1, 3, use_bit))
              if on]  # (tag, column): P, R
    ask_owners(sim, c, wanted, col=2)  # [i, tag, P(P(i)) or P(R(i))]

    def update(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        st, ans = mem["st"], mem.pop("_ans", _empty(3))
        d = st.data.copy()
        for tag, col in wanted:  # a position that got no answer gets -1
            got = ans.data[ans.data[:, 1] == tag]
            d[:, col] = -1
            d[_row_of(st, got[:, 0]), col] = got[:, 2]
        mem["st"] = Table(st.machine, d)
        return mem

    sim.defer(update)


def find1_rounds(sim: MPCSimulator, n: int, c: int, seed: int) -> None:
    """find^1: sort the keys x_i N + i, give each key its predecessor in sorted order (a forward fill) and
    send it home; leaves table ``st`` with rows [i, x_i, P = find^1(i), R = i]."""
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
        ptr = np.where(has & (prev // n == key // n), prev % n + 1, -1)  # same symbol just before
        p = key % n
        return mem, {"ptr": Message(t.machine, p // c, np.column_stack([p, ptr]))}

    def init_state(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        x_t, p_t = local_sort(mem.pop("x")), local_sort(mem.pop("ptr"))
        mem["st"] = Table(x_t.machine, np.column_stack([x_t.data, p_t.data[:, 1], x_t.data[:, 0]]))
        return mem

    sim.round(send_home)
    sim.defer(init_state)


def output_rounds(sim: MPCSimulator, c: int, out_per_machine: int) -> None:
    """Read x at R, then compact the answers onto the first machines: 3 rounds."""
    ask_owners(sim, c, [(0, 3)], col=1)

    def output(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        st, ans = mem.pop("st"), mem.pop("_ans", _empty(3))
        value = np.full(len(st), -1, dtype=np.int64)
        value[_row_of(st, ans.data[:, 0])] = ans.data[:, 2]
        p = st.data[:, 0]
        return mem, {"out": Message(st.machine, p // out_per_machine, np.c_[p, value])}

    sim.round(output)


SORT_LOAD = 96  # the widest sorted table (11 words a record) fills ~1/8 of memory: buckets are balanced to ~3x


def components_min_memory(num_vertices: int, num_edges: int) -> int:
    """The least memory :func:`connected_components_protocol` accepts: max(128, ceil(log2(n + 2E))^2) words
    (its lookups sort n + 2E records, see :func:`hop_min_memory`; 128 words fit its widest records)."""
    return max(128, math.ceil(math.log2(num_vertices + 2 * num_edges)) ** 2)


def connected_components_protocol(edges, num_vertices: int, memory: int, *, audit: bool = False,
                                  max_iterations: int = 200, strict: bool = True, seed: int = 0
                                  ) -> tuple[np.ndarray, MPCStats]:
    """Connected components of ``edges`` (E, 2) over vertices 0..n-1: (labels, stats), ``labels[v]`` the
    smallest vertex of v's component. Each FastSV iteration (``stats.phases['iterations']``) ends with a
    count of the changed parents that every machine learns. Unfinished after ``max_iterations``: ``strict``
    raises :class:`MPCNotConvergedError` (with labels and stats), else ``stats.converged = False``."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    n, m = num_vertices, len(e)
    if m and (e.min() < 0 or e.max() >= n):
        raise ValueError(f"edges must name vertices in [0, {n - 1}], got range [{e.min()}, {e.max()}]")
    if memory < components_min_memory(n, m):
        raise ValueError(f"memory must be at least components_min_memory = {components_min_memory(n, m)} "
                         f"words for n = {n}, E = {m}")
    q = max(1, -(-(n + 2 * m) * SORT_LOAD // memory))
    if n * n * q * memory >= 2**62:  # the sort keys would overflow
        raise ValueError(f"num_vertices = {n} is too large for 64-bit sort keys at memory {memory}")
    cv, ce = -(-n // q), max(1, -(-m // q))
    sim = MPCSimulator(q, memory, audit=audit)
    v = np.arange(n, dtype=np.int64)
    sim.load("par", v // cv, np.column_stack([v, v]))
    if m:
        sim.load("edge", np.arange(m) // ce, e)
    iterations, converged = 0, False
    while iterations < max_iterations and not converged:
        _fastsv_iteration(sim, n, m, cv, ce, seed + 3 * iterations)
        iterations += 1
        sim.phase("global OR")
        prefix_counts(sim, "_chg", "_nchg", fanout=max(2, memory // 4))  # [changed before, changed in all]
        sim.finish()
        converged = not np.any(sim.table("_nchg").data[:, 1])
        sim.defer(lambda ctx, mem: {k: t for k, t in mem.items() if k not in ("_nchg", "_chg")})
    sim.phase(None)
    sim.stats.phases["iterations"] = iterations
    sim.stats.converged = converged
    par = sim.table("par")
    labels = np.empty(n, dtype=np.int64)
    labels[par.data[:, 0]] = par.data[:, 1]
    if strict and not converged:
        raise MPCNotConvergedError(f"the components protocol did not converge in max_iterations = "
                                   f"{max_iterations} iterations; raise max_iterations, or pass "
                                   f"strict=False to get the unfinished labels", labels, sim.stats)
    return labels, sim.stats


def _fastsv_iteration(sim: MPCSimulator, n: int, m: int, cv: int, ce: int, seed: int) -> None:
    """One FastSV iteration: grandparents by a lookup, each edge endpoint's (parent, grandparent) by a lookup,
    then hooking and shortcutting as one min-reduction per vertex; leaves ``par`` updated and ``_chg`` (the
    vertices whose parent changed)."""
    def ask_gp(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        par = mem["par"]
        req = np.column_stack([par.data[:, 1], par.machine, par.data[:, 0]])
        return {**mem, "_rq": Table(par.machine, req)}

    sim.defer(ask_gp)
    sim.phase("lookup: grandparents")
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
    sim.phase("lookup: endpoints")
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
    sim.phase("min: hook and shortcut")
    reduce_min(sim, "_hk", "_new", n_values=n, n_records=4 * m + 2 * n, seed=seed + 2)

    def apply(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        old, new = local_sort(mem.pop("_old")), local_sort(mem.pop("_new"))
        changed = old.data[:, 1] != new.data[:, 1]
        mem["par"] = Table(old.machine, np.column_stack([old.data[:, 0], new.data[:, 1]]))
        mem["_chg"] = Table(old.machine[changed], old.data[changed, :1])
        return mem

    sim.defer(apply)
