"""Constant-round MPC building blocks (Goodrich, Sitchinava & Zhang 2011; Andoni et al. 2018), O(1/delta)
rounds each for s = N^delta: :func:`sample_sort`, prefix scans over the machines (:func:`prefix_counts`,
:func:`forward_fill`), and :func:`lookup` and :func:`reduce_min`, which sort requests with the data so that a hot
key never floods a machine. Every step is vectorised over the machines and only combines a machine's records.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import numpy as np

from hoplib.mpc.simulator import Message, MPCSimulator, RoundContext, Table

INT_MAX = np.iinfo(np.int64).max


def mix_hash(keys: np.ndarray, salt: int) -> np.ndarray:
    """A splitmix64 hash of int64 keys (deterministic pseudo-randomness shared by all machines)."""
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (salt + 1)) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def tree_depth(n: int, f: int) -> int:
    """Smallest D >= 0 with f**D >= n."""
    return next(d for d in itertools.count() if f**d >= n)


def _empty(width: int, dtype: type = np.int64) -> Table:
    return Table(np.zeros(0, np.int64), np.zeros((0, width), dtype))


def local_sort(t: Table, col: int = 0) -> Table:
    """Sort a table's records by (machine, column ``col``): each machine sorts its own records."""
    order = np.lexsort((t.data[:, col], t.machine))
    return Table(t.machine[order], t.data[order])


def _split(lo: np.ndarray, hi: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ranges [lo, hi) into k = min(b, hi - lo) near-equal parts; returns (k, bounds (n, b+1))."""
    r = hi - lo
    k = np.minimum(b, r)
    j = np.arange(b + 1)
    bounds = lo[:, None] + (r[:, None] * np.minimum(j[None, :], k[:, None])) // np.maximum(k, 1)[:, None]
    return k, bounds


@functools.lru_cache(maxsize=64)
def sort_levels(q: int, b: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The machine ranges (lo, hi) of every machine at each level of :func:`sample_sort` (public)."""
    lo = np.zeros(q, dtype=np.int64)
    hi = np.full(q, q, dtype=np.int64)
    levels = []
    m = np.arange(q)
    while np.any(hi - lo > 1):
        levels.append((lo.copy(), hi.copy()))
        k, bounds = _split(lo, hi, b)
        part = (bounds[:, 1:b] <= m[:, None]).sum(axis=1)
        lo, hi = bounds[m, part], bounds[m, part + 1]
    return tuple(levels)


def _host(level: int, j: np.ndarray, f: int, q: int) -> np.ndarray:
    """Machine hosting node j of level ``level`` of a scan tree: the first machine of its span, shifted
    by the level so that one machine does not host a node of every level."""
    first = np.asarray(j, dtype=np.int64) * f**level
    return np.where(first + level < q, first + level, first)


def _combine(op: str, m: np.ndarray, rows: np.ndarray, q: int) -> np.ndarray:
    """Per machine (q, w), its rows (sorted by machine ``m``) combined: their sum (``op`` "sum"), or the last
    row whose first word ("has") is nonzero ("last"; zeros if none)."""
    out = np.zeros((q, rows.shape[1]), rows.dtype)
    if op == "sum":
        np.add.at(out, m, rows)
    else:
        idx = np.flatnonzero(rows[:, 0] != 0)
        idx = idx[np.r_[m[idx][1:] != m[idx][:-1], True]] if len(idx) else idx
        out[m[idx]] = rows[idx]
    return out


def _before(op: str, m: np.ndarray, rows: np.ndarray, pre: np.ndarray) -> np.ndarray:
    """For rows sorted by machine ``m``: each row's machine prefix ``pre`` (q, w) combined with the machine's
    earlier rows, as in :func:`_combine`."""
    start = np.searchsorted(m, m, side="left")
    if op == "sum":
        cs = np.cumsum(rows, axis=0)
        return pre[m] + cs - rows - (cs[start] - rows[start])
    prev = np.maximum.accumulate(np.r_[-1, np.where(rows[:, 0] != 0, np.arange(len(m)), -1)])[:-1]
    return np.where((prev >= start)[:, None], rows[np.maximum(prev, 0)], pre[m])


def _scan(sim: MPCSimulator, leaf: Callable[[dict[str, Table]], np.ndarray], op: str, w: int, f: int,
          out_name: str) -> None:
    """An exclusive scan over the machines in order: machine i gets table ``out_name`` holding the machine
    rows ``leaf(mem)`` (q, w) of machines < i combined by ``op`` (then, for "sum", the total). Sums go up
    an f-ary tree and prefixes come down: 2 ceil(log_f q) rounds, the last step local."""
    q, depth = sim.q, tree_depth(sim.q, f)
    down_w = 1 + (2 * w if op == "sum" else w)

    def up(ctx: RoundContext, mem: dict[str, Table], level: int):
        if level == 1:
            nodes = src = ctx.active
            rows = leaf(mem)[src]
        else:  # hosts of level-1 nodes combine their children (and keep them for the way down)
            ch = local_sort(mem.get(f"_up{level - 1}", _empty(1 + w)))
            j = np.arange(-(-q // f ** (level - 1)))
            h = _host(level - 1, j, f, q)
            nodes, src = j[np.isin(h, ctx.active)], h[np.isin(h, ctx.active)]
            rows = _combine(op, ch.machine, ch.data[:, 1:], q)[src]
        return mem, {f"_up{level}": Message(src, _host(level, nodes // f, f, q), np.column_stack([nodes, rows]))}

    def down(ctx: RoundContext, mem: dict[str, Table], level: int):
        mem = dict(mem)
        ch = local_sort(mem.pop(f"_up{level}", _empty(1 + w)))  # rows [child, child's rows], by child
        m, child, rows = ch.machine, ch.data[:, 0], ch.data[:, 1:]
        pre = np.zeros((q, down_w - 1), np.int64)
        if level == depth:  # the root: the total is its children's
            pre[:, w:] = _combine(op, m, rows, q)[:, : down_w - 1 - w]
        else:
            got = mem.pop(f"_dn{level}", _empty(down_w))
            pre[got.machine] = got.data[:, 1:]
        dest = _host(level - 1, child, f, q) if level > 1 else child
        data = np.column_stack([child, _before(op, m, rows, pre[:, :w]), pre[m, w:]])
        return mem, {f"_dn{level - 1}": Message(m, dest, data)}

    for level in range(1, depth + 1):
        sim.round(lambda ctx, mem, level=level: up(ctx, mem, level))
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: down(ctx, mem, level))

    def finish(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        if depth:
            got = mem.pop("_dn0")
            mem[out_name] = Table(got.machine, got.data[:, 1:])
        else:  # one machine: nothing before it, and its own rows are the total
            own = leaf(mem)[ctx.active]
            mem[out_name] = Table(ctx.active, np.column_stack([0 * own] + ([own] if op == "sum" else [])))
        return mem

    sim.defer(finish)


def prefix_counts(sim: MPCSimulator, name: str, out_name: str = "_pc", *, fanout: int | None = None) -> None:
    """Every machine learns [records of ``name`` on earlier machines, total] (table ``out_name``), in
    2 ceil(log_f q) rounds."""
    def counts(mem: dict[str, Table]) -> np.ndarray:
        return np.bincount(mem.get(name, _empty(1)).machine, minlength=sim.q)[:, None]

    _scan(sim, counts, "sum", 1, fanout or max(2, sim.s // 8), out_name)


def forward_fill(sim: MPCSimulator, name: str, flag_col: int | None = None, *, fanout: int | None = None) -> None:
    """Table ``name`` (sorted by (machine, column 0), as :func:`sample_sort` leaves it) gets 1 + w more
    columns: a validity bit and the last earlier record in global order whose column ``flag_col`` is nonzero
    (any record if None). 2 ceil(log_f q) rounds, then a local step."""
    w = sim.table(name).width

    def rows(t: Table) -> np.ndarray:  # [flag, record]
        flag = np.ones(len(t), bool) if flag_col is None else t.data[:, flag_col] != 0
        return np.column_stack([flag.astype(np.int64), t.data])

    def leaf(mem: dict[str, Table]) -> np.ndarray:
        t = local_sort(mem[name])
        return _combine("last", t.machine, rows(t), sim.q)

    def finish(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        got, t = mem.pop("_ff"), local_sort(mem[name])
        pre = np.zeros((sim.q, got.width), np.int64)
        pre[got.machine] = got.data
        mem[name] = Table(t.machine, np.column_stack([t.data, _before("last", t.machine, rows(t), pre)]))
        return mem

    _scan(sim, leaf, "last", w + 1, fanout or max(2, sim.s // (4 * (w + 3))), "_ff")
    sim.defer(finish)


def _sort_key(t: Table, major: np.ndarray, q: int, s: int) -> tuple[Table, np.ndarray]:
    """``t`` grouped by machine, and distinct sort keys ordered by ``major``: major q s + machine s + index."""
    order = np.argsort(t.machine, kind="stable")
    m = t.machine[order]
    local = np.arange(len(m)) - np.searchsorted(m, m, side="left")
    return Table(m, t.data[order]), major[order] * (q * s) + m * s + local


def _sample_rate(estimate: np.ndarray, r: np.ndarray, b: int, lam: int) -> np.ndarray:
    """Sampling probability for a bucket of r machines holding about ``estimate`` records: lam samples per
    sub-bucket."""
    return np.minimum(1.0, lam * np.minimum(b, r) / np.maximum(estimate, 1.0))


def _sample(t: Table, lo: np.ndarray, hi: np.ndarray, estimate: np.ndarray, b: int, lam: int, salt: int) -> Message:
    """Each record of ``t`` goes, with the probability of its bucket [lo, hi), to the bucket's leader lo."""
    p = _sample_rate(estimate, hi - lo, b, lam)
    u = (mix_hash(t.data[:, 0], salt) >> np.uint64(11)).astype(np.float64) / 2.0**53
    pick = (u < p) & (hi - lo > 1)
    return Message(t.machine[pick], lo[pick], t.data[pick, :1])


def _choose_splitters(smp: Table, leaders: np.ndarray, lo: np.ndarray, hi: np.ndarray, k_all: np.ndarray,
                      bounds: np.ndarray, estimate: np.ndarray, b: int, lam: int) -> np.ndarray:
    """Per leader, b-1 splitters (sub-bucket j gets its machines' share of the sorted samples) and b size
    estimates (samples in it over the sampling rate, so the next level samples at its real size's rate)."""
    starts = np.searchsorted(smp.machine, leaders, side="left")
    cnt = np.searchsorted(smp.machine, leaders, side="right") - starts
    k = k_all[leaders]
    frac = (bounds[leaders, 1:b] - lo[leaders, None]) / np.maximum(hi - lo, 1)[leaders, None]
    idx = (frac * cnt[:, None]).astype(np.int64)  # samples below splitter j
    keys = smp.data[np.clip(starts[:, None] + idx, 0, max(len(smp) - 1, 0)), 0] if len(smp) else idx
    valid = np.arange(1, b)[None, :] < k[:, None]
    splitters = np.where(valid & (idx < cnt[:, None]), keys, INT_MAX)
    edges = np.column_stack([np.zeros(len(leaders), np.int64), np.where(valid, idx, cnt[:, None]), cnt])
    p = _sample_rate(estimate[leaders], hi[leaders] - lo[leaders], b, lam)[:, None]
    got = np.diff(edges, axis=1)  # samples per sub-bucket: its size times p (exactly its size when p = 1)
    share = np.diff(bounds[leaders], axis=1)[:, :b] / np.maximum(hi - lo, 1)[leaders, None] * estimate[leaders, None]
    guess = np.maximum((got + 1) / p, share / 2)  # few samples: never guess below half the machines' share
    sizes = np.where(p >= 1.0, got, np.ceil(guess)).astype(np.int64)
    return np.column_stack([splitters, sizes]).astype(np.int64)


def _spread(m: np.ndarray, part: np.ndarray, salt: int, plo: np.ndarray, phi: np.ndarray, b: int) -> np.ndarray:
    """Destinations in [plo, phi): each machine deals its records round-robin over the sub-bucket's machines
    from a pseudo-random first one."""
    group = m * b + part
    order = np.argsort(group, kind="stable")
    g = group[order]
    rank = np.empty(len(m), np.int64)
    rank[order] = np.arange(len(m)) - np.searchsorted(g, g, side="left")
    width = np.maximum(phi - plo, 1)
    first = (mix_hash(group, salt) % width.astype(np.uint64)).astype(np.int64)
    return plo + (first + rank) % width


SCAN_SPLITTERS = 32  # up to this many splitters per machine, comparing with each beats a binary search


def _count_at_most(spl: np.ndarray, m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per record (machine m, value v): how many of the splitters spl[m] (a (q, w) array) are <= v, without an
    (n, w) array: up to ``SCAN_SPLITTERS`` splitters by comparing with each in turn, beyond by binary search
    over keys (machine, rank among all splitter values)."""
    if spl.shape[1] <= SCAN_SPLITTERS:
        count = np.zeros(len(v), np.int64)
        for col in spl.T:
            count += col[m] <= v
        return count
    u = np.unique(spl)

    def key(mach: np.ndarray, x: np.ndarray) -> np.ndarray:
        return mach * (len(u) + 1) + np.searchsorted(u, x, side="right")

    flat = np.sort(key(np.arange(len(spl))[:, None], spl), axis=None)
    return np.searchsorted(flat, key(m, v), side="right") - m * spl.shape[1]


def sample_sort(sim: MPCSimulator, name: str, n_total: int, *, lam: int = 16, seed: int = 0) -> None:
    """Sort table ``name`` by its (distinct) column 0 across the machines, at most ceil(T / q) of the T =
    ``n_total`` records each. Per level, each bucket's leader sends splitters from samples down an f-ary tree
    and the records move; sampling errors add up over the levels (see ``protocols.hop_min_memory``)."""
    q, s = sim.q, sim.s
    b = max(2, min(s // (8 * lam), 256))  # buckets per level: lam samples for each fit
    f = max(2, s // (4 * (b - 1)))  # the fan-out of the splitters' broadcast
    lam = max(1, s // (4 * b))  # samples fill a quarter of a leader's memory
    levels = sort_levels(q, b)
    if not levels:
        return

    def first_sample(ctx: RoundContext, mem: dict[str, Table]):
        t = mem[name]
        lo, hi = levels[0][0][t.machine], levels[0][1][t.machine]
        est = Table(ctx.active, np.full(len(ctx.active), n_total, np.int64))
        return {**mem, "_est": est}, {"_smp": _sample(t, lo, hi, np.full(len(t), float(n_total)), b, lam,
                                                     seed * 7919)}

    sim.round(first_sample)
    for level, (lo, hi) in enumerate(levels):
        nxt = levels[level + 1] if level + 1 < len(levels) else None
        _sort_level(sim, name, level, lo, hi, nxt, b=b, f=f, lam=lam, seed=seed)
    sim.defer(lambda ctx, mem: {k: v for k, v in mem.items() if k != "_est"})
    rebalance(sim, name)


def rebalance(sim: MPCSimulator, name: str) -> None:
    """Spread a table sorted across machines evenly, keeping the order: with :func:`prefix_counts` each record
    learns its rank r and moves to machine floor(r q / T). 2 ceil(log_f q) + 1 rounds."""
    prefix_counts(sim, name, "_pc")

    def move(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        t, pc = local_sort(mem.pop(name)), mem.pop("_pc")
        offset, total = np.zeros(sim.q, np.int64), np.zeros(sim.q, np.int64)
        offset[pc.machine], total[pc.machine] = pc.data[:, 0], pc.data[:, 1]
        m = t.machine
        rank = offset[m] + np.arange(len(t)) - np.searchsorted(m, m, side="left")
        dest = rank * sim.q // np.maximum(total[m], 1)
        return mem, {name: Message(m, dest, t.data)}

    sim.round(move)


def _sort_level(sim: MPCSimulator, name: str, level: int, lo: np.ndarray, hi: np.ndarray, nxt, *, b: int, f: int,
                lam: int, seed: int) -> None:
    """One level of :func:`sample_sort`: splitters down each bucket's f-ary heap, then one round that moves
    the records and samples for the next level."""
    q = sim.q
    k_all, bounds_all = _split(lo, hi, b)
    offset = np.arange(q) - lo  # in the bucket's f-ary heap: root 0, the children of o are o f + 1 .. o f + f
    depth = np.searchsorted(np.cumsum([f**d for d in range(tree_depth(q, f) + 1)]), offset, side="right")

    def broadcast(ctx: RoundContext, mem: dict[str, Table], t_round: int):
        mem = dict(mem)
        if t_round == 0:  # leaders turn their samples into splitters and size estimates
            smp = local_sort(mem.pop("_smp", _empty(1)))
            est = np.zeros(q)
            est[mem["_est"].machine] = mem["_est"].data[:, 0]
            act = ctx.active
            leaders = np.union1d(np.unique(smp.machine), act[(offset[act] == 0) & (hi[act] - lo[act] > 1)])
            rows = _choose_splitters(smp, leaders, lo, hi, k_all, bounds_all, est, b, lam)
            mem["_spl"] = Table(leaders, rows)
        spl = mem.get("_spl", _empty(2 * b - 1))
        now = depth[spl.machine] == t_round
        senders, rows = spl.machine[now], spl.data[now]
        child = offset[senders][:, None] * f + 1 + np.arange(f)[None, :]
        ok = child < (hi[senders] - lo[senders])[:, None]
        data = np.repeat(rows, f, axis=0)[ok.ravel()]
        return mem, {"_spl": Message(np.repeat(senders, f)[ok.ravel()], (lo[senders][:, None] + child)[ok], data)}

    for t_round in range(max(int(depth.max()), 1)):
        sim.round(lambda ctx, mem, t_round=t_round: broadcast(ctx, mem, t_round))

    def route(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        t, spl, old = mem.pop(name), mem.pop("_spl", _empty(2 * b - 1)), mem.pop("_est")
        rows = np.zeros((q, 2 * b - 1), np.int64)
        rows[:, : b - 1] = INT_MAX
        rows[spl.machine] = spl.data
        m = t.machine
        part = np.minimum(_count_at_most(rows[:, : b - 1], m, t.data[:, 0]), np.maximum(k_all[m] - 1, 0))
        plo, phi = bounds_all[m, part], bounds_all[m, part + 1]
        dest = np.where(hi[m] - lo[m] > 1, _spread(m, part, 1000 + level + seed * 7919, plo, phi, b), m)
        act = old.machine  # each machine keeps the size estimate of its own next bucket
        own = np.minimum((bounds_all[act, 1:b] <= act[:, None]).sum(axis=1), np.maximum(k_all[act] - 1, 0))
        mem["_est"] = Table(act, np.where(hi[act] - lo[act] > 1, rows[act, b - 1 + own], old.data[:, 0]))
        out = {name: Message(m, dest, t.data)}
        if nxt is not None:
            est = rows[m, b - 1 + part].astype(np.float64)
            out["_smp"] = _sample(Table(m, t.data), nxt[0][dest], nxt[1][dest], est, b, lam,
                                    2 * level + 2 + seed * 7919)
        return mem, out

    sim.round(route)


def lookup(sim: MPCSimulator, data_name: str, req_name: str, out_name: str, *, value_width: int,
           n_records: int, seed: int = 0) -> None:
    """For each request row ``[key, reply_machine, tag]`` of ``req_name`` (consumed), deliver
    ``[tag, found, values...]`` to ``reply_machine`` in table ``out_name``, where ``data_name`` holds rows
    ``[key, values...]`` (distinct keys, ``value_width`` values, -1 where not found). ``n_records`` (data rows
    plus requests) is public. Sorting the requests with the data keeps hot keys safe."""
    q, s = sim.q, sim.s
    a = value_width
    width = 3 + max(a, 2)

    def tagged(t: Table, is_data: int) -> Table:  # [sort key, is_data, key, payload]: data before requests
        t, key = _sort_key(t, t.data[:, 0] * 2 + (1 - is_data), q, s)
        body = np.zeros((len(t), width), dtype=np.int64)
        body[:, 0], body[:, 1], body[:, 2] = key, is_data, t.data[:, 0]
        body[:, 3:2 + t.width] = t.data[:, 1:]
        return Table(t.machine, body)

    def build(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        rows = [tagged(mem[data_name], 1), tagged(mem.pop(req_name, _empty(3)), 0)]
        mem["_lk"] = Table(np.concatenate([x.machine for x in rows]), np.concatenate([x.data for x in rows]))
        return mem

    sim.defer(build)
    sample_sort(sim, "_lk", n_total=n_records, seed=seed)
    forward_fill(sim, "_lk", flag_col=1)

    def answer(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        t = mem.pop("_lk")
        d = t.data
        req = d[:, 1] == 0
        prev = d[:, width + 1:]
        found = (d[:, width] != 0) & (prev[:, 2] == d[:, 2])
        vals = np.where(found[:, None], prev[:, 3:3 + a], -1)
        data = np.column_stack([d[req, 4], found[req].astype(np.int64), vals[req]])
        return mem, {out_name: Message(t.machine[req], d[req, 3], data)}

    sim.round(answer)


def reduce_min(sim: MPCSimulator, msg_name: str, out_name: str, n_values: int, *, n_records: int,
               seed: int = 0) -> None:
    """For the rows [target, value in [0, n_values), dest machine] of ``msg_name`` (consumed; ``n_records``
    of them), deliver one row [target, min value] per target to its dest machine, in table ``out_name``."""
    def build(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        t = mem.pop(msg_name, _empty(3))
        t, key = _sort_key(t, t.data[:, 0] * n_values + t.data[:, 1], sim.q, sim.s)
        mem["_rd"] = Table(t.machine, np.column_stack([key, t.data]))
        return mem

    sim.defer(build)
    sample_sort(sim, "_rd", n_total=n_records, seed=seed)
    forward_fill(sim, "_rd", flag_col=None)

    def answer(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        t = mem.pop("_rd")
        d = t.data
        first = (d[:, 4] == 0) | (d[:, 6] != d[:, 1])
        return mem, {out_name: Message(t.machine[first], d[first, 3], d[first, 1:3])}

    sim.round(answer)
