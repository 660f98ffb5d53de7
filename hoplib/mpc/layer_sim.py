"""Theorem 3.4 (MPC simulates transformers): one attention layer run as an MPC protocol with tree aggregation.

Machines (paper-spec section 5): M token machines, M^2 inner-product machines (i, i'), and for each token a
query tree and a key/value tree of branching b = floor(s / (4 m H)) and depth D = ceil(log_b M), whose
leaves are the inner-product machines and whose roots are the token machines.

* Round 1: input token i goes to token machine i.
* Rounds 2 .. D+1: token machine i computes Q_i, K_i, V_i (all heads; token-wise maps) and pushes Q_i down
  its query tree and (K_i, V_i) down its key/value tree, so machine (i, i') ends up with q_i, k_i', v_i'.
* Rounds D+2 .. 2D+1: machine (i, i') forms the score q_i . k_i' (masked entries drop out) and the partial
  softmax sums travel up i's query tree, combined as log Z = logsumexp_c(log Z_c) and
  S = sum_c exp(log Z_c - log Z) S_c (the paper's Z = sum Z_c, S = sum (Z_c / Z) S_c in log space).
* Round 2D+2: token machine i adds the residual, applies the token-wise output map psi, and sends its output
  row to the first machines (compaction), s/(m+1) rows each.

That is 2D + 2 rounds, within the 2D + 3 of the theorem (our stage 1 and compaction need no extra round).
The direct forward pass uses ``torch.nn.functional.scaled_dot_product_attention`` in float64; the two agree
to about 1e-12, and :data:`TOLERANCE` is the bound the tests assert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from hoplib._book.validate import check_int
from hoplib.mpc.primitives import tree_depth
from hoplib.mpc.simulator import Message, MPCSimulator, MPCStats, RoundContext, Table

TOLERANCE = 1e-9
"""Largest absolute difference allowed between the MPC run and the direct float64 forward pass."""


@dataclass
class AttentionLayer:
    """One transformer layer of the paper's model (Section 1): X + sum_h softmax(Q_h K_h^T + Lambda) V_h,
    followed by a token-wise output MLP psi(z) = z + W_2 relu(W_1 z). Weights are float64 numpy arrays."""

    wq: np.ndarray  # (H, m, m)
    wk: np.ndarray
    wv: np.ndarray
    w1: np.ndarray  # (m, m)
    w2: np.ndarray
    causal: bool = False

    @classmethod
    def random(cls, width: int, heads: int, *, causal: bool = False, seed: int = 0) -> AttentionLayer:
        width = check_int("width", width, low=1)
        heads = check_int("heads", heads, low=1)
        rng = np.random.default_rng(check_int("seed", seed, low=0))
        g = lambda *shape: rng.normal(0, 1 / math.sqrt(width), shape)  # noqa: E731
        return cls(g(heads, width, width), g(heads, width, width), g(heads, width, width), g(width, width),
                   g(width, width), causal)

    @property
    def width(self) -> int:
        return self.wq.shape[1]

    @property
    def heads(self) -> int:
        return self.wq.shape[0]

    # token-wise maps, applied to rows (n, m) -> (n, H, m)
    def qkv(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.einsum("nm,hmk->nhk", x, self.wq), np.einsum("nm,hmk->nhk", x, self.wk),
                np.einsum("nm,hmk->nhk", x, self.wv))

    def psi(self, z: np.ndarray) -> np.ndarray:
        return z + np.maximum(z @ self.w1, 0) @ self.w2

    def forward(self, x: np.ndarray | torch.Tensor) -> np.ndarray:
        """The direct forward pass (float64, scaled_dot_product_attention)."""
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        q = torch.einsum("nm,hmk->hnk", xt, torch.as_tensor(self.wq))
        k = torch.einsum("nm,hmk->hnk", xt, torch.as_tensor(self.wk))
        v = torch.einsum("nm,hmk->hnk", xt, torch.as_tensor(self.wv))
        att = F.scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0, is_causal=self.causal)[0]
        z = xt + att.sum(0)
        return self.psi(z.numpy())


class _Layout:
    """Public map between machine ids and roles: token machines, inner-product machines, tree nodes."""

    def __init__(self, n: int, b: int):
        self.n, self.b = n, b
        self.depth = max(1, tree_depth(n, b))
        self.counts = [-(-n // b**lvl) for lvl in range(self.depth + 1)]  # nodes per level of one tree
        self.inner = [0] + list(np.cumsum(self.counts[1:self.depth]))  # offsets of levels 1..D-1
        self.per_tree = int(sum(self.counts[1:self.depth]))
        self.base = n + n * n
        self.num_machines = self.base + 2 * n * self.per_tree

    def node(self, tree: int, tok: np.ndarray, level: int, j: np.ndarray) -> np.ndarray:
        """Machine of node (level, j) of token tok's query (tree 0) or key/value (tree 1) tree."""
        tok, j = np.asarray(tok), np.asarray(j)
        if level == self.depth:
            return tok.copy()
        if level == 0:  # a leaf is an inner-product machine (i, i')
            return self.n + (tok * self.n + j if tree == 0 else j * self.n + tok)
        return self.base + (tree * self.n + tok) * self.per_tree + self.inner[level - 1] + j

    def children(self, level: int, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(parent index, child index) pairs of the existing children of nodes j at ``level``."""
        c = j[:, None] * self.b + np.arange(self.b)[None, :]
        ok = c < self.counts[level - 1]
        return np.broadcast_to(np.arange(len(j))[:, None], c.shape)[ok], c[ok]


@dataclass
class _Plan:
    """Public facts every machine knows in the protocol of :func:`layer_as_mpc` (Theorem 3.4): the layer,
    the sizes, the machine layout and every tree machine's role (token, node index)."""

    layer: AttentionLayer
    lay: _Layout
    n: int
    m: int
    h: int
    b: int
    per_in: int
    rtok: np.ndarray
    ridx: np.ndarray


def _roles(lay: _Layout) -> tuple[np.ndarray, np.ndarray]:
    """Public role of every internal tree machine: (token of its tree, index of its node in the level)."""
    n = lay.n
    rtok = np.zeros(lay.num_machines, np.int64)
    ridx = np.zeros(lay.num_machines, np.int64)
    for tree in (0, 1):
        for level in range(1, lay.depth):
            tt, jj = np.meshgrid(np.arange(n), np.arange(lay.counts[level]), indexing="ij")
            ids = lay.node(tree, tt.ravel(), level, jj.ravel())
            rtok[ids], ridx[ids] = tt.ravel(), jj.ravel()
    return rtok, ridx


def _stage1(ctx: RoundContext, mem: dict[str, Table]):
    """Round 1 of Theorem 3.4: input token i goes to token machine i."""
    t = mem["in"]
    return {}, {"x": Message(t.machine, t.data[:, 0].astype(np.int64), t.data)}


def _push(ctx: RoundContext, mem: dict[str, Table], level: int, plan: _Plan):
    """Rounds 2 .. D+1 of Theorem 3.4: nodes at ``level`` send their payload to their children (level - 1);
    at the top level the token machines first compute Q, K, V (token-wise) and start both trees."""
    lay, n_hm, m = plan.lay, plan.h * plan.m, plan.m
    mem = dict(mem)
    out = {}
    for tree, name in ((0, "_q"), (1, "_kv")):
        if level == lay.depth:
            xt = mem.get("x", Table(np.zeros(0, np.int64), np.zeros((0, m + 1))))
            q, k, v = plan.layer.qkv(xt.data[:, 1:])
            toks = xt.data[:, 0].astype(np.int64)
            payload = q.reshape(len(toks), n_hm) if tree == 0 else np.column_stack(
                [k.reshape(len(toks), n_hm), v.reshape(len(toks), n_hm)])
            src_tok, src_j = toks, np.zeros(len(toks), np.int64)
            src_m = xt.machine
        else:
            t = mem.pop(name, Table(np.zeros(0, np.int64), np.zeros((0, 1))))
            payload, src_m = t.data, t.machine
            src_tok, src_j = plan.rtok[src_m], plan.ridx[src_m]
        pi, ci = lay.children(level, src_j)
        dest = lay.node(tree, src_tok[pi], level - 1, ci)
        out[name] = Message(src_m[pi], dest, payload[pi])
    return mem, out


def _leaf_scores(mem: dict[str, Table], plan: _Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round D+2 of Theorem 3.4, at the leaves: machine (i, i') forms the scores q_i . k_i' per head (masked
    entries become -inf); returns (machines, scores, values v_i')."""
    n, m, h = plan.n, plan.m, plan.h
    qt = mem.get("_q", Table(np.zeros(0, np.int64), np.zeros((0, h * m))))
    kvt = mem.get("_kv", Table(np.zeros(0, np.int64), np.zeros((0, 2 * h * m))))
    order_q, order_kv = np.argsort(qt.machine), np.argsort(kvt.machine)
    mach = qt.machine[order_q]
    if not np.array_equal(mach, kvt.machine[order_kv]):
        raise RuntimeError("an inner-product machine lacks its query or its key/value")
    q = qt.data[order_q].reshape(-1, h, m)
    kv = kvt.data[order_kv].reshape(-1, 2, h, m)
    score = np.einsum("nhk,nhk->nh", q, kv[:, 0])
    i, i2 = (mach - n) // n, (mach - n) % n
    if plan.layer.causal:
        score = np.where((i2 > i)[:, None], -np.inf, score)
    return mach, score, kv[:, 1]


def _up(ctx: RoundContext, mem: dict[str, Table], level: int, plan: _Plan):
    """Rounds D+2 .. 2D+1 of Theorem 3.4: nodes at ``level`` send (log Z, S) per head to their parent in
    the query tree (the leaves form them from their scores, inner nodes combine their children's)."""
    n, m, h = plan.n, plan.m, plan.h
    mem = dict(mem)
    empty = {"_up": Message(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, h * (m + 1))))}
    if level == 0:
        if "_q" not in mem:
            return mem, empty
        mach, logz, s = _leaf_scores(mem, plan)
        mem.pop("_q", None)
        mem.pop("_kv", None)
        i, j = (mach - n) // n, (mach - n) % n
    else:
        t = mem.pop("_up", None)
        if t is None or len(t) == 0:
            return mem, empty
        mach, logz, s = _combine(t, h, m)
        i, j = plan.rtok[mach], plan.ridx[mach]
    dest = plan.lay.node(0, i, level + 1, j // plan.b)
    return mem, {"_up": Message(mach, dest, np.column_stack([logz, s.reshape(len(mach), h * m)]))}


def _finish(ctx: RoundContext, mem: dict[str, Table], plan: _Plan):
    """Round 2D+2 of Theorem 3.4: token machine i adds the residual, applies psi and sends its output row to
    the first machines (compaction)."""
    m, h = plan.m, plan.h
    mem = dict(mem)
    xt = mem.pop("x", Table(np.zeros(0, np.int64), np.zeros((0, m + 1))))
    upt = mem.pop("_up", Table(np.zeros(0, np.int64), np.zeros((0, h * (m + 1)))))
    mach, _, s = _combine(upt, h, m)
    ox = np.argsort(xt.machine)
    order = np.argsort(mach)
    z = xt.data[ox, 1:] + s[order].sum(axis=1)
    y = plan.layer.psi(z)
    toks = xt.data[ox, 0].astype(np.int64)
    return mem, {"out": Message(xt.machine[ox], toks // plan.per_in, np.column_stack([toks, y]))}


def layer_as_mpc(layer: AttentionLayer, x: np.ndarray, memory: int, *, audit: bool = False
                 ) -> tuple[np.ndarray, MPCStats, dict]:
    """Run ``layer`` on ``x`` (N, m) as an MPC protocol with ``memory`` words per machine (Theorem 3.4).

    Returns ``(output, stats, info)`` where ``info`` has the branching b, the depth D and the machine count.
    ``memory`` must allow b = floor(s / (4 m H)) >= 2.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != layer.width:
        raise ValueError(f"x must have shape (N, {layer.width}), got {x.shape}")
    n, m, h = x.shape[0], layer.width, layer.heads
    memory = check_int("memory", memory, low=8 * m * h)
    b = memory // (4 * m * h)
    lay = _Layout(n, b)
    depth = lay.depth
    sim = MPCSimulator(lay.num_machines, memory, audit=audit, float_tol=1e-12)
    per_in = memory // (m + 1)
    tok = np.arange(n)
    sim.load("in", tok // per_in, np.column_stack([tok, x]))
    plan = _Plan(layer, lay, n, m, h, b, per_in, *_roles(lay))

    sim.phase("stage 1: tokens to token machines")
    sim.round(_stage1)
    sim.phase("stage 2: Q, K, V down the trees")
    for level in range(depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: _push(ctx, mem, level, plan))
    sim.phase("stage 3: softmax sums up the query trees")
    for level in range(0, depth):
        sim.round(lambda ctx, mem, level=level: _up(ctx, mem, level, plan))
    sim.phase("stage 4: residual, psi and compaction")
    sim.round(lambda ctx, mem: _finish(ctx, mem, plan))
    out = sim.table("out")
    y = np.empty((n, m))
    y[out.data[:, 0].astype(np.int64)] = out.data[:, 1:]
    return y, sim.stats, {"branching": b, "depth": depth, "num_machines": lay.num_machines}


def _combine(t: Table, h: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per machine: combine rows (log Z_c, S_c) into (log Z, S) with S = sum_c exp(log Z_c - log Z) S_c."""
    order = np.argsort(t.machine, kind="stable")
    mach_all = t.machine[order]
    d = t.data[order]
    logz_c, s_c = d[:, :h], d[:, h:].reshape(-1, h, m)
    mach, start = np.unique(mach_all, return_index=True)
    if len(mach) == 0:
        return mach, np.zeros((0, h)), np.zeros((0, h, m))
    mx = np.maximum.reduceat(logz_c, start, axis=0)
    mx_rows = np.repeat(mx, np.diff(np.r_[start, len(mach_all)]), axis=0)
    safe = np.where(np.isfinite(mx_rows), mx_rows, 0.0)
    wgt = np.exp(logz_c - safe)
    tot = np.add.reduceat(wgt, start, axis=0)
    logz = np.where(tot > 0, np.log(np.where(tot > 0, tot, 1.0)) + np.where(np.isfinite(mx), mx, 0.0), -np.inf)
    s = np.add.reduceat(wgt[:, :, None] * s_c, start, axis=0) / np.where(tot > 0, tot, 1.0)[:, :, None]
    return mach, logz, s
