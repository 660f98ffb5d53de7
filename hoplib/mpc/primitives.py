"""MPC building blocks in O(1/delta) rounds each: sample sort, tree prefix scan, lookups and reduce-by-key.

These are the standard constant-round MPC primitives (Goodrich, Sitchinava & Zhang 2011; Andoni et al. 2018)
that the protocols of Section 3 (and Corollary 3.3's connectivity) are built on, written for
:class:`hoplib.mpc.simulator.MPCSimulator`:

* :func:`sample_sort` sorts a table by its first column: at each level every bucket of machines samples its
  records, its leader picks splitters and estimates the sub-buckets' sizes, an f-ary tree broadcasts them, and
  records move to sub-buckets (dealt round-robin over the sub-bucket's machines). With b = Theta(s) buckets
  per level there are log_b q = O(1/delta) levels of O(1/delta) rounds each; a last step
  (:func:`rebalance`, built on :func:`prefix_counts`) spreads the sorted records evenly. The splitters come
  from samples, so bucket loads drift from level to level; the protocols state the memory this needs.
* :func:`forward_fill` gives every record of a sorted table the last earlier record (in global order) that
  carries a flag: a prefix scan up and down an f-ary tree over the machines, 2 log_f q rounds.
* :func:`lookup` and :func:`reduce_min` are sorting plus a forward fill, so hot keys (many requests for one
  key) never overload a machine.

Every round is a vectorised local step over all machines that only ever combines a machine's own records.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hoplib.mpc.simulator import Message, MPCSimulator, RoundContext, Table

INT_MAX = np.iinfo(np.int64).max
_EMPTY = np.zeros(0, dtype=np.int64)


# --------------------------------------------------------------------------- helpers
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
    return Table(_EMPTY, np.zeros((0, width), dtype=dtype))


def _msg(src, dest, data) -> Message:
    return Message(src, dest, data)


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


# --------------------------------------------------------------------------- global record counts
def prefix_counts(sim: MPCSimulator, name: str, out_name: str = "_pc", *, fanout: int | None = None) -> None:
    """Every machine learns ``[records of table name on earlier machines, total records]`` (table ``out_name``,
    one row per machine): sums go up an f-ary tree over the machines (in machine order) and the prefixes come
    back down, 2 * ceil(log_f q) rounds. :func:`rebalance` uses it to give every record its global rank.
    """
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
        return mem, {f"_pu{level}": _msg(src, _host(level, nodes // f, f, q), np.column_stack([nodes, sums]))}

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
        return mem, {f"_pd{level - 1}": _msg(m, dest, np.column_stack([child, pre[m] + excl, tot[m]]))}

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


# --------------------------------------------------------------------------- sample sort
def _sample_rate(estimate: np.ndarray, r: np.ndarray, b: int, lam: int) -> np.ndarray:
    """Sampling probability for a bucket of r machines that holds about ``estimate`` records: lam samples
    per sub-bucket on average (all records once the bucket holds fewer than lam * min(b, r))."""
    return np.minimum(1.0, lam * np.minimum(b, r) / np.maximum(estimate, 1.0))


def _sample(t: Table, lo: np.ndarray, hi: np.ndarray, estimate: np.ndarray, b: int, lam: int, salt: int) -> Message:
    """Each record of ``t`` goes, with the probability of its bucket [lo, hi), to the bucket's leader lo."""
    p = _sample_rate(estimate, hi - lo, b, lam)
    u = (mix_hash(t.data[:, 0], salt) >> np.uint64(11)).astype(np.float64) / 2.0**53
    pick = (u < p) & (hi - lo > 1)
    return _msg(t.machine[pick], lo[pick], t.data[pick, :1])


def _choose_splitters(smp: Table, leaders: np.ndarray, lo: np.ndarray, hi: np.ndarray, k_all: np.ndarray,
                      bounds: np.ndarray, estimate: np.ndarray, b: int, lam: int) -> np.ndarray:
    """Per leader, a row of b-1 splitters and b record-count estimates, one per sub-bucket.

    Sub-bucket j gets the share of the leader's sorted samples ``smp`` that its machines have of the bucket.
    Its size is estimated from the samples that fall in it (divided by the sampling rate), so that the next
    level samples at a rate set by the sub-bucket's real size: a bucket that drew more records than its share
    still sends its leader about lam samples per sub-bucket.
    """
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
    """Destinations in [plo, phi): each machine deals its records for one sub-bucket round-robin over the
    sub-bucket's machines from a pseudo-random first one, so it sends no machine more than its share + 1."""
    group = m * b + part
    order = np.argsort(group, kind="stable")
    g = group[order]
    rank = np.empty(len(m), np.int64)
    rank[order] = np.arange(len(m)) - np.searchsorted(g, g, side="left")
    width = np.maximum(phi - plo, 1)
    first = (mix_hash(group, salt) % width.astype(np.uint64)).astype(np.int64)
    return plo + (first + rank) % width


def sample_sort(sim: MPCSimulator, name: str, n_total: int, *, lam: int = 16, seed: int = 0) -> None:
    """Sort table ``name`` by column 0 (keys should be distinct): afterwards machine m's keys all lie below
    machine m+1's, and no machine holds more than ceil(T / q) of the T records. Each level, the leader of every
    bucket of machines picks splitters from samples and broadcasts them, with its estimates of the
    sub-buckets' sizes, down an f-ary tree; then the records move to their sub-buckets; finally
    :func:`rebalance` evens the loads. Rounds: 1 + sum over levels of (broadcast depth + 1), plus
    2 ceil(log_f q) + 1 for the rebalancing: O(1/delta^2), a constant for fixed delta. ``n_total`` (public) is
    the number of records. The loads in between are balanced only up to the sampling errors, which add up
    over the levels: callers size the memory for that (see :func:`hoplib.mpc.protocols.hop_min_memory`).
    """
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
    """Spread a table sorted across machines (machine m's keys below machine m+1's) evenly, keeping the order:
    with :func:`prefix_counts` every record learns its global rank r and moves to machine floor(r q / T), so
    that no machine holds more than ceil(T / q) of the T records. 2 ceil(log_f q) + 1 rounds."""
    prefix_counts(sim, name, "_pc")

    def move(ctx: RoundContext, mem: dict[str, Table]):
        mem = dict(mem)
        t, pc = local_sort(mem.pop(name)), mem.pop("_pc")
        offset, total = np.zeros(sim.q, np.int64), np.zeros(sim.q, np.int64)
        offset[pc.machine], total[pc.machine] = pc.data[:, 0], pc.data[:, 1]
        m = t.machine
        rank = offset[m] + np.arange(len(t)) - np.searchsorted(m, m, side="left")
        dest = rank * sim.q // np.maximum(total[m], 1)
        return mem, {name: _msg(m, dest, t.data)}

    sim.round(move)


def _sort_level(sim: MPCSimulator, name: str, level: int, lo: np.ndarray, hi: np.ndarray, nxt, *, b: int, f: int,
                lam: int, seed: int) -> None:
    """One level of :func:`sample_sort`: splitters and size estimates down each bucket's f-ary heap of
    machines (its depth in rounds), then one round that moves the records and samples for the next level."""
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
        return mem, {"_spl": _msg(np.repeat(senders, f)[ok.ravel()], (lo[senders][:, None] + child)[ok], data)}

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
        out = {name: _msg(m, dest, t.data)}
        if nxt is not None:
            est = rows[m, b - 1 + part].astype(np.float64)
            out["_smp"] = _sample(Table(m, t.data), nxt[0][dest], nxt[1][dest], est, b, lam,
                                    2 * level + 2 + seed * 7919)
        return mem, out

    sim.round(route)


# --------------------------------------------------------------------------- forward fill (prefix scan)
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


@dataclass(frozen=True)
class _FillPlan:
    """Public parameters of one :func:`forward_fill`: the table, its flag column, q machines, fan-out f of
    the scan tree and the record width w."""

    name: str
    flag_col: int | None
    q: int
    f: int
    w: int

    def flags(self, t: Table) -> np.ndarray:
        """Which records of ``t`` count as flagged (all of them when ``flag_col`` is None)."""
        return np.ones(len(t), bool) if self.flag_col is None else t.data[:, self.flag_col] != 0

    def hosted(self, level: int, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(node index, host machine) of the level's nodes hosted by the active machines."""
        j = np.arange(-(-self.q // self.f**level))
        h = _host(level, j, self.f, self.q)
        keep = np.isin(h, active)
        return j[keep], h[keep]

    def prefix(self, pre: Table) -> tuple[np.ndarray, np.ndarray]:
        """Per machine, (has, value) of the rows ``[node, has, value...]`` a node got from its parent."""
        pre_has = np.zeros(self.q, bool)
        pre_val = np.zeros((self.q, self.w), dtype=np.int64)
        pre_has[pre.machine] = pre.data[:, 1] != 0
        pre_val[pre.machine] = pre.data[:, 2:]
        return pre_has, pre_val


def _by_child(ch: Table) -> Table:
    """Rows ``[parent, child slot, ...]`` sorted by (host machine, child slot)."""
    order = np.lexsort((ch.data[:, 1], ch.machine))
    return Table(ch.machine[order], ch.data[order])


def _fill_up(ctx: RoundContext, mem: dict[str, Table], level: int, plan: _FillPlan):
    """Way up of the :func:`forward_fill` scan: level-(level-1) nodes send their aggregate (last flagged
    record) to their parent; at level 1 every machine first sorts its records and aggregates them."""
    q, f = plan.q, plan.f
    mem = dict(mem)
    if level == 1:
        t = local_sort(mem[plan.name])
        mem[plan.name] = t
        has, last = _last_flagged(t.machine, t.data, plan.flags(t), q)
        nodes = ctx.active
        src, n_has, n_last = nodes, has[nodes], last[nodes]
    else:
        ch = _by_child(mem.get(f"_up{level - 1}", _empty(plan.w + 3)))
        has, last = _last_flagged(ch.machine, ch.data[:, 3:], ch.data[:, 2] != 0, q)
        nodes, src = plan.hosted(level - 1, ctx.active)
        n_has, n_last = has[src], last[src]
    dest = _host(level, nodes // f, f, q)
    data = np.column_stack([nodes // f, nodes % f, n_has.astype(np.int64), n_last])
    return mem, {f"_up{level}": _msg(src, dest, data)}


def _fill_down(ctx: RoundContext, mem: dict[str, Table], level: int, plan: _FillPlan):
    """Way down of the :func:`forward_fill` scan: level-``level`` nodes send each child the last flagged
    record before the child's span (from an earlier sibling, else from the node's own prefix)."""
    q, f = plan.q, plan.f
    mem = dict(mem)
    ch = _by_child(mem.pop(f"_up{level}", _empty(plan.w + 3)))
    pre_has, pre_val = plan.prefix(mem.pop(f"_dn{level}", _empty(plan.w + 2)))  # none at the root
    m = ch.machine
    n = len(m)
    idx = np.where(ch.data[:, 2] != 0, np.arange(n), -1)
    run = np.maximum.accumulate(idx) if n else idx
    prev = np.r_[-1, run[:-1]] if n else run
    first = np.r_[True, m[1:] != m[:-1]] if n else np.zeros(0, bool)
    seg_start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else m
    prev = np.where(prev >= seg_start, prev, -1)
    out_has = np.where(prev >= 0, True, pre_has[m])
    out_val = np.where((prev >= 0)[:, None], ch.data[np.maximum(prev, 0), 3:], pre_val[m])
    child = ch.data[:, 0] * f + ch.data[:, 1]
    dest = _host(level - 1, child, f, q) if level > 1 else child
    data = np.column_stack([child, out_has.astype(np.int64), out_val])
    return mem, {f"_dn{level - 1}": _msg(m, dest, data)}


def _fill_finish_single(ctx: RoundContext, mem: dict[str, Table], plan: _FillPlan) -> dict[str, Table]:
    """The deferred local step of :func:`forward_fill` on a single machine (no scan tree)."""
    mem = dict(mem)
    t = local_sort(mem[plan.name])
    mem[plan.name] = _fill_local(t, plan.flags(t), np.zeros(plan.q, bool), np.zeros((plan.q, plan.w), np.int64))
    return mem


def _fill_finish(ctx: RoundContext, mem: dict[str, Table], plan: _FillPlan) -> dict[str, Table]:
    """The deferred local step of :func:`forward_fill`: each machine attaches to its records the last earlier
    flagged record, from its own records or else from the prefix the scan brought it."""
    mem = dict(mem)
    pre_has, pre_val = plan.prefix(mem.pop("_dn0", _empty(plan.w + 2)))
    t = mem[plan.name]
    mem[plan.name] = _fill_local(t, plan.flags(t), pre_has, pre_val)
    return mem


def forward_fill(sim: MPCSimulator, name: str, flag_col: int | None = None, *, fanout: int | None = None) -> None:
    """After this, table ``name`` (sorted by (machine, column 0), as :func:`sample_sort` leaves it) has
    1 + w more columns: a validity bit and the last earlier record (global order) whose column ``flag_col`` is
    nonzero (any record if ``flag_col`` is None). 2 * ceil(log_f q) rounds plus a deferred local step.
    """
    q, s = sim.q, sim.s
    w = sim.table(name).width
    f = fanout or max(2, s // (4 * (w + 3)))
    depth = tree_depth(q, f)
    plan = _FillPlan(name, flag_col, q, f, w)
    if depth == 0:  # a single machine: nothing to communicate
        sim.defer(lambda ctx, mem: _fill_finish_single(ctx, mem, plan))
        return
    for level in range(1, depth + 1):
        sim.round(lambda ctx, mem, level=level: _fill_up(ctx, mem, level, plan))
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: _fill_down(ctx, mem, level, plan))
    sim.defer(lambda ctx, mem: _fill_finish(ctx, mem, plan))


def _fill_local(t: Table, flag: np.ndarray, pre_has: np.ndarray, pre_val: np.ndarray) -> Table:
    """Within each machine (records sorted), attach the last earlier flagged record, else the machine prefix."""
    m = t.machine
    n = len(m)
    if n == 0:
        return Table(m, np.zeros((0, 2 * t.width + 1), dtype=t.data.dtype))
    idx = np.where(flag, np.arange(n), -1)
    run = np.maximum.accumulate(idx)
    prev = np.r_[-1, run[:-1]]
    first = np.r_[True, m[1:] != m[:-1]]
    seg_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    prev = np.where(prev >= seg_start, prev, -1)
    has = np.where(prev >= 0, True, pre_has[m])
    val = np.where((prev >= 0)[:, None], t.data[np.maximum(prev, 0)], pre_val[m])
    return Table(m, np.column_stack([t.data, has.astype(np.int64), val]))


# --------------------------------------------------------------------------- lookups and reductions
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
        return mem, {out_name: _msg(t.machine[req], d[req, 3], data)}

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
    """Rows ``[target, value, dest_machine]`` of ``msg_name`` (values in [0, n_values)): for each target, one
    row ``[target, min value]`` is delivered to its ``dest_machine`` in table ``out_name``. Consumes the input;
    ``n_records`` (public) is the number of rows.
    """
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
        return mem, {out_name: _msg(t.machine[first], d[first, 3], d[first, 1:3])}

    sim.round(answer)


def global_or(sim: MPCSimulator, name: str, col: int) -> None:
    """Every machine learns whether any record of table ``name`` has column ``col`` nonzero: an OR up an
    f-ary tree to machine 0 and a broadcast back down, 2 * ceil(log_f q) rounds. Result: table ``_or`` (one
    word) on every machine.
    """
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
        return mem, {f"_or{level}": _msg(senders, (node // f) * f**level, flag[senders].astype(np.int64))}

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
        return mem, {"_ordn": _msg(src, child[ok], val[src].astype(np.int64))}

    if depth == 0:
        sim.defer(lambda ctx, mem: {**mem, "_or": Table(ctx.active, np.any(
            mem.get(name, _empty(col + 1)).data[:, col] != 0) * np.ones(len(ctx.active), np.int64))})
        return
    for level in range(1, depth + 1):
        sim.round(lambda ctx, mem, level=level: up(ctx, mem, level))
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: down(ctx, mem, level))
    sim.defer(lambda ctx, mem: {**{k: v for k, v in mem.items() if k != "_ordn"}, "_or": mem["_ordn"]})
