"""Constant-round MPC building blocks (Goodrich, Sitchinava & Zhang 2011; Andoni et al. 2018), O(1/delta)
rounds each for s = N^delta: :func:`sample_sort` (splitters from samples, broadcast down f-ary trees, then
:func:`rebalance`), :func:`forward_fill` (a prefix scan up and down a tree over the machines), and
:func:`lookup` and :func:`reduce_min`, which sort requests with the data so that a hot key never floods a
machine. Every step is vectorised over the machines and only combines a machine's own records.
"""

from __future__ import annotations

import functools

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
    d, span = 0, 1
    while span < n:
        span *= f
        d += 1
    return d


def _empty(width: int, dtype=np.int64) -> Table:
    return Table(np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=dtype))


def local_sort(t: Table, col: int = 0) -> Table:
    """Sort a table's records by (machine, column ``col``): each machine sorts its own records."""
    order = np.lexsort((t.data[:, col], t.machine))
    return Table(t.machine[order], t.data[order])


def _heap_depth(offset: np.ndarray, f: int) -> np.ndarray:
    """Depth of each offset in an f-ary heap (root 0, children of o are o*f+1 .. o*f+f)."""
    depth = np.zeros_like(offset)
    o = offset.copy()
    while np.any(o > 0):
        pos = o > 0
        o[pos] = (o[pos] - 1) // f
        depth[pos] += 1
    return depth


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
    for pair in levels:
        for arr in pair:
            arr.setflags(write=False)
    return tuple(levels)


def sort_parameters(memory: int, lam: int = 16) -> tuple[int, int]:
    """Branching b (buckets per level, so that lam samples per bucket fit) and broadcast fan-out f."""
    b = max(2, min(memory // (8 * lam), 256))
    f = max(2, memory // (4 * max(b - 1, 1)))
    return b, f


def prefix_counts(sim: MPCSimulator, name: str, out_name: str = "_pc", *, fanout: int | None = None) -> None:
    """Every machine learns [records of ``name`` on earlier machines, total] (table ``out_name``): sums up an
    f-ary tree over the machines, prefixes back down, 2 ceil(log_f q) rounds."""
    q, s = sim.q, sim.s
    f = fanout or max(2, s // 8)
    depth = tree_depth(q, f)

    def counts(mem: dict[str, Table]) -> np.ndarray:
        t = mem.get(name)
        return np.bincount(t.machine, minlength=q)[:q] if t is not None and len(t) else np.zeros(q, np.int64)

    if depth == 0:  # one machine: its own count is the total
        sim.defer(lambda ctx, mem: {**mem, out_name: Table(ctx.active, np.column_stack(
            [np.zeros(len(ctx.active), np.int64), counts(mem)[ctx.active]]))})
        return

    def up(ctx: RoundContext, mem: dict[str, Table], level: int):
        if level == 1:
            nodes = src = ctx.active
            sums = counts(mem)[nodes]
        else:  # hosts of level-1 nodes add up their children's sums (and keep them for the way down)
            ch = mem.get(f"_pu{level - 1}", _empty(2))
            tot = np.zeros(q, np.int64)
            np.add.at(tot, ch.machine, ch.data[:, 1])
            j = np.arange(-(-q // f ** (level - 1)))
            h = _host(level - 1, j, f, q)
            keep = np.isin(h, ctx.active)
            nodes, src = j[keep], h[keep]
            sums = tot[src]
        return mem, {f"_pu{level}": Message(src, _host(level, nodes // f, f, q), np.column_stack([nodes, sums]))}

    def down(ctx: RoundContext, mem: dict[str, Table], level: int):
        mem = dict(mem)
        ch = local_sort(mem.pop(f"_pu{level}", _empty(2)))  # rows [child, child's sum], by host and child
        m, child, cnt = ch.machine, ch.data[:, 0], ch.data[:, 1]
        pre, tot = np.zeros(q, np.int64), np.zeros(q, np.int64)
        if level == depth:  # the root: the total is the sum of its children
            np.add.at(tot, m, cnt)
        else:
            pd = mem.pop(f"_pd{level}", _empty(3))  # rows [node, prefix, total] from the parent
            pre[pd.machine], tot[pd.machine] = pd.data[:, 1], pd.data[:, 2]
        csum = np.cumsum(cnt)
        start = np.searchsorted(m, m, side="left")
        excl = csum - cnt - (csum[start] - cnt[start]) if len(m) else csum
        dest = _host(level - 1, child, f, q) if level > 1 else child
        return mem, {f"_pd{level - 1}": Message(m, dest, np.column_stack([child, pre[m] + excl, tot[m]]))}

    for level in range(1, depth + 1):
        sim.round(lambda ctx, mem, level=level: up(ctx, mem, level))
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: down(ctx, mem, level))

    def finish(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        pd = mem.pop("_pd0", _empty(3))
        mem[out_name] = Table(pd.machine, pd.data[:, 1:])
        return mem

    sim.defer(finish)


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


def sample_sort(sim: MPCSimulator, name: str, n_total: int, *, lam: int = 16, seed: int = 0) -> None:
    """Sort table ``name`` by its (distinct) column 0 across the machines, at most ceil(T / q) of the
    T = ``n_total`` records each. Per level, every bucket's leader picks splitters from samples and sends them
    with size estimates down an f-ary tree, then the records move; :func:`rebalance` evens the loads. The
    loads in between are balanced up to sampling errors that add up over the levels, which callers size the
    memory for (:func:`hoplib.mpc.protocols.hop_min_memory`)."""
    q, s = sim.q, sim.s
    b, f = sort_parameters(s, lam)
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
    offset = np.arange(q) - lo
    depth = _heap_depth(offset, f)

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
        part = np.minimum((rows[m, : b - 1] <= t.data[:, :1]).sum(axis=1), np.maximum(k_all[m] - 1, 0))
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


def _last_flagged(machine: np.ndarray, data: np.ndarray, flag: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Per machine: (has a flagged record, the last flagged record) of records sorted by machine."""
    has = np.zeros(q, dtype=bool)
    last = np.zeros((q, data.shape[1]), dtype=data.dtype)
    idx = np.flatnonzero(flag)
    if len(idx):
        mm = machine[idx]
        # last flagged index per machine: the final occurrence of each machine id in idx
        final = np.flatnonzero(np.r_[mm[1:] != mm[:-1], True])
        has[mm[final]] = True
        last[mm[final]] = data[idx[final]]
    return has, last


def _host(level: int, j: np.ndarray, f: int, q: int) -> np.ndarray:
    """Machine hosting node j of level ``level`` of the scan tree: the first machine of its span, shifted
    by the level so that one machine does not host a node of every level."""
    first = np.asarray(j, dtype=np.int64) * f**level
    return np.where(first + level < q, first + level, first)


def _by_child(ch: Table) -> Table:
    """Rows ``[parent, child slot, ...]`` sorted by (host machine, child slot)."""
    order = np.lexsort((ch.data[:, 1], ch.machine))
    return Table(ch.machine[order], ch.data[order])


def _prev_flagged(m: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """For rows sorted by machine ``m``: the index of the last earlier flagged row of the same machine, or -1."""
    n = len(m)
    if n == 0:
        return np.zeros(0, np.int64)
    idx = np.where(flag, np.arange(n), -1)
    prev = np.r_[-1, np.maximum.accumulate(idx)[:-1]]
    seg_start = np.maximum.accumulate(np.where(np.r_[True, m[1:] != m[:-1]], np.arange(n), 0))
    return np.where(prev >= seg_start, prev, -1)


def _with_prefix(data, m, prev, pre_has, pre_val) -> tuple[np.ndarray, np.ndarray]:
    """(has, value): the row ``prev`` where there is one, else the machine's prefix from the scan."""
    has = np.where(prev >= 0, True, pre_has[m])
    return has, np.where((prev >= 0)[:, None], data[np.maximum(prev, 0)], pre_val[m])


def forward_fill(sim: MPCSimulator, name: str, flag_col: int | None = None, *, fanout: int | None = None) -> None:
    """Table ``name`` (sorted by (machine, column 0), as :func:`sample_sort` leaves it) gets 1 + w more
    columns: a validity bit and the last earlier record in global order whose column ``flag_col`` is nonzero
    (any record if None). A scan up and down an f-ary tree, 2 ceil(log_f q) rounds, then a local step."""
    q, w = sim.q, sim.table(name).width
    f = fanout or max(2, sim.s // (4 * (w + 3)))

    def flags(t: Table) -> np.ndarray:
        return np.ones(len(t), bool) if flag_col is None else t.data[:, flag_col] != 0

    def prefix(pre: Table) -> tuple[np.ndarray, np.ndarray]:  # per machine, what its node got from above
        has, val = np.zeros(q, bool), np.zeros((q, w), dtype=np.int64)
        has[pre.machine], val[pre.machine] = pre.data[:, 1] != 0, pre.data[:, 2:]
        return has, val

    def up(ctx: RoundContext, mem: dict[str, Table], level: int):  # nodes send their last flagged record
        mem = dict(mem)
        if level == 1:
            t = mem[name] = local_sort(mem[name])
            has, last = _last_flagged(t.machine, t.data, flags(t), q)
            nodes = src = ctx.active
        else:
            ch = _by_child(mem.get(f"_up{level - 1}", _empty(w + 3)))
            has, last = _last_flagged(ch.machine, ch.data[:, 3:], ch.data[:, 2] != 0, q)
            j = np.arange(-(-q // f ** (level - 1)))
            h = _host(level - 1, j, f, q)
            nodes, src = j[np.isin(h, ctx.active)], h[np.isin(h, ctx.active)]
        data = np.column_stack([nodes // f, nodes % f, has[src].astype(np.int64), last[src]])
        return mem, {f"_up{level}": Message(src, _host(level, nodes // f, f, q), data)}

    def down(ctx: RoundContext, mem: dict[str, Table], level: int):  # each child gets the record before it
        mem = dict(mem)
        ch = _by_child(mem.pop(f"_up{level}", _empty(w + 3)))
        pre_has, pre_val = prefix(mem.pop(f"_dn{level}", _empty(w + 2)))  # none at the root
        m = ch.machine
        has, val = _with_prefix(ch.data[:, 3:], m, _prev_flagged(m, ch.data[:, 2] != 0), pre_has, pre_val)
        child = ch.data[:, 0] * f + ch.data[:, 1]
        dest = _host(level - 1, child, f, q) if level > 1 else child
        return mem, {f"_dn{level - 1}": Message(m, dest, np.column_stack([child, has.astype(np.int64), val]))}

    def finish(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        pre_has, pre_val = prefix(mem.pop("_dn0", _empty(w + 2)))
        t = local_sort(mem[name])
        has, val = _with_prefix(t.data, t.machine, _prev_flagged(t.machine, flags(t)), pre_has, pre_val)
        mem[name] = Table(t.machine, np.column_stack([t.data, has.astype(np.int64), val]))
        return mem

    depth = tree_depth(q, f)
    for level in range(1, depth + 1):
        sim.round(lambda ctx, mem, level=level: up(ctx, mem, level))
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: down(ctx, mem, level))
    sim.defer(finish)


def lookup(sim: MPCSimulator, data_name: str, req_name: str, out_name: str, *, value_width: int,
           n_records: int, seed: int = 0) -> None:
    """For each request row ``[key, reply_machine, tag]`` of ``req_name``, deliver ``[tag, found, values...]``
    to ``reply_machine`` in table ``out_name``, where ``data_name`` holds rows ``[key, values...]`` (distinct
    keys, ``value_width`` values each, -1 where not found). ``n_records`` (data rows plus requests) is public and
    sets the sampling rate of the sort. The request table is consumed and the data table kept. Sorting
    the requests with the data makes hot keys (many requests for one key) safe.
    """
    q, s = sim.q, sim.s
    a = value_width
    width = 3 + max(a, 2)

    def build(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        d, r = mem[data_name], mem.pop(req_name, _empty(3))
        rows = [_tagged(d, 1, width, q * s, s), _tagged(r, 0, width, q * s, s)]
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
        has = d[:, width] != 0
        prev = d[:, width + 1:]
        found = has & (prev[:, 2] == d[:, 2])
        vals = np.where(found[:, None], prev[:, 3:3 + a], -1)
        data = np.column_stack([d[req, 4], found[req].astype(np.int64), vals[req]])
        return mem, {out_name: Message(t.machine[req], d[req, 3], data)}

    sim.round(answer)


def _tagged(t: Table, is_data: int, width: int, stride: int, s: int) -> Table:
    """Rows ``[sort key, is_data, key, payload...]``; data sorts just before the requests for its key."""
    order = np.argsort(t.machine, kind="stable")
    t = Table(t.machine[order], t.data[order])
    n = len(t)
    local_idx = np.arange(n) - np.searchsorted(t.machine, t.machine, side="left")
    key = t.data[:, 0]
    body = np.zeros((n, width), dtype=np.int64)
    body[:, 0] = (key * 2 + (1 - is_data)) * stride + t.machine * s + local_idx
    body[:, 1], body[:, 2] = is_data, key
    body[:, 3:3 + t.width - 1] = t.data[:, 1:]
    return Table(t.machine, body)


def reduce_min(sim: MPCSimulator, msg_name: str, out_name: str, n_values: int, *, n_records: int,
               seed: int = 0) -> None:
    """For the rows [target, value in [0, n_values), dest machine] of ``msg_name`` (consumed; ``n_records``
    of them), deliver one row [target, min value] per target to its dest machine, in table ``out_name``."""
    q, s = sim.q, sim.s

    def build(ctx: RoundContext, mem: dict[str, Table]) -> dict[str, Table]:
        mem = dict(mem)
        t = mem.pop(msg_name, _empty(3))
        order = np.argsort(t.machine, kind="stable")
        t = Table(t.machine[order], t.data[order])
        local_idx = np.arange(len(t)) - np.searchsorted(t.machine, t.machine, side="left")
        sk = (t.data[:, 0] * n_values + t.data[:, 1]) * (q * s) + t.machine * s + local_idx
        mem["_rd"] = Table(t.machine, np.column_stack([sk, t.data]))
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


def global_or(sim: MPCSimulator, name: str, col: int) -> None:
    """Every machine learns (table ``_or``) whether any record of ``name`` has column ``col`` nonzero: an OR
    up an f-ary tree to machine 0 and back down, 2 ceil(log_f q) rounds."""
    q, s = sim.q, sim.s
    f = max(2, s // 4)
    depth = tree_depth(q, f)

    def up(ctx: RoundContext, mem: dict[str, Table], level: int):
        mem = dict(mem)
        if level == 1:
            t = mem.get(name, _empty(col + 1))
            flag = np.zeros(q, bool)
            np.logical_or.at(flag, t.machine, t.data[:, col] != 0)
            senders = ctx.active
        else:
            ch = mem.pop(f"_or{level - 1}", _empty(1))
            flag = np.zeros(q, bool)
            np.logical_or.at(flag, ch.machine, ch.data[:, 0] != 0)
            senders = ctx.active[ctx.active % f ** (level - 1) == 0]
        node = senders // f ** (level - 1)
        return mem, {f"_or{level}": Message(senders, (node // f) * f**level, flag[senders].astype(np.int64))}

    def down(ctx: RoundContext, mem: dict[str, Table], level: int):
        mem = dict(mem)
        if level == depth:
            ch = mem.pop(f"_or{depth}", _empty(1))
            val = np.zeros(q, bool)
            np.logical_or.at(val, ch.machine, ch.data[:, 0] != 0)
        else:
            t = mem.pop("_ordn", _empty(1))
            val = np.zeros(q, bool)
            val[t.machine] = t.data[:, 0] != 0
        hosts = ctx.active[ctx.active % f**level == 0]
        child = hosts[:, None] + np.arange(f)[None, :] * f ** (level - 1)
        ok = child < q
        src = np.repeat(hosts, f)[ok.ravel()]
        return mem, {"_ordn": Message(src, child[ok], val[src].astype(np.int64))}

    if depth == 0:
        sim.defer(lambda ctx, mem: {**mem, "_or": Table(ctx.active, np.any(
            mem.get(name, _empty(col + 1)).data[:, col] != 0) * np.ones(len(ctx.active), np.int64))})
        return
    for level in range(1, depth + 1):
        sim.round(lambda ctx, mem, level=level: up(ctx, mem, level))
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: down(ctx, mem, level))
    sim.defer(lambda ctx, mem: {**{k: v for k, v in mem.items() if k != "_ordn"}, "_or": mem["_ordn"]})
