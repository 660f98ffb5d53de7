"""Theorem 3.4 (MPC simulates transformers): one attention layer run as an MPC protocol.

Machines: N token machines, N^2 inner-product machines (i, i'), and per token a query tree and a key/value tree
of branching b = floor(s / (4 m H)) and depth D = ceil(log_b N) from the token machine down to the (i, i').
Q, K, V go down in D rounds, the softmax sums come up in log space in D more; with one round to bring the
tokens in and one to finish, 2D + 2 rounds, within the theorem's 2D + 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from hoplib.mpc.primitives import _empty, tree_depth
from hoplib.mpc.simulator import Message, MPCSimulator, MPCStats, RoundContext, Table

TOLERANCE = 1e-9  # the largest difference allowed between the MPC run and the direct float64 forward pass


@dataclass
class AttentionLayer:
    """One layer of the paper's model: Z = X + sum_h softmax(Q_h K_h^T + Lambda) V_h, then the token-wise
    psi(Z) = Z + W_2 relu(W_1 Z). Weights are float64 arrays, (H, m, m) for W_Q, W_K, W_V."""

    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    causal: bool = False

    @classmethod
    def random(cls, width: int, heads: int, *, causal: bool = False, seed: int = 0) -> AttentionLayer:
        rng = np.random.default_rng(seed)
        g = lambda *shape: rng.normal(0, 1 / math.sqrt(width), shape)  # noqa: E731
        return cls(g(heads, width, width), g(heads, width, width), g(heads, width, width), g(width, width),
                   g(width, width), causal)

    @property
    def width(self) -> int:
        return self.wq.shape[1]

    @property
    def heads(self) -> int:
        return self.wq.shape[0]

    def qkv(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token-wise maps, rows (n, m) -> (n, H, m) each."""
        return tuple(np.einsum("nm,hmk->nhk", x, w) for w in (self.wq, self.wk, self.wv))

    def psi(self, z: np.ndarray) -> np.ndarray:
        return z + np.maximum(z @ self.w1, 0) @ self.w2

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The direct forward pass (float64, scaled_dot_product_attention)."""
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        q, k, v = (torch.einsum("nm,hmk->hnk", xt, torch.as_tensor(w)) for w in (self.wq, self.wk, self.wv))
        att = F.scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0, is_causal=self.causal)[0]
        return self.psi((xt + att.sum(0)).numpy())


class Layout:
    """Public facts of the protocol: the layer, the sizes, and which machine plays which role."""

    def __init__(self, layer: AttentionLayer, n: int, memory: int):
        self.layer, self.n, self.m, self.h = layer, n, layer.width, layer.heads
        self.b = memory // (4 * self.m * self.h)
        self.per_in = memory // (self.m + 1)  # input and output rows per machine
        self.depth = max(1, tree_depth(n, self.b))
        self.counts = [-(-n // self.b**lvl) for lvl in range(self.depth + 1)]  # nodes per level of a tree
        self.inner = [0] + list(np.cumsum(self.counts[1:self.depth]))  # offsets of levels 1..D-1
        self.per_tree = int(sum(self.counts[1:self.depth]))
        self.base = n + n * n
        self.num_machines = self.base + 2 * n * self.per_tree

    def node(self, tree: int, tok: np.ndarray, level: int, j: np.ndarray) -> np.ndarray:
        """Machine of node (level, j) of token tok's query (tree 0) or key/value (tree 1) tree."""
        tok, j = np.asarray(tok), np.asarray(j)
        if level == self.depth:
            return tok.copy()
        if level == 0:  # a leaf is the inner-product machine (i, i')
            return self.n + (tok * self.n + j if tree == 0 else j * self.n + tok)
        return self.base + (tree * self.n + tok) * self.per_tree + self.inner[level - 1] + j

    def owner(self, mach: np.ndarray, level: int) -> tuple[np.ndarray, np.ndarray]:
        """(token, node index) of machines of nodes at ``level``, 0 < level < D, of the trees."""
        rel = mach - self.base
        return (rel // max(self.per_tree, 1)) % self.n, rel % max(self.per_tree, 1) - self.inner[level - 1]

    def children(self, level: int, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(parent index, child index) pairs of the existing children of nodes j at ``level``."""
        c = j[:, None] * self.b + np.arange(self.b)[None, :]
        ok = c < self.counts[level - 1]
        return np.broadcast_to(np.arange(len(j))[:, None], c.shape)[ok], c[ok]


def layer_as_mpc(layer: AttentionLayer, x: np.ndarray, memory: int, *,
                 audit: bool = False) -> tuple[np.ndarray, MPCStats, dict]:
    """Run ``layer`` on ``x`` (N, m) as an MPC protocol with ``memory`` words
    per machine (Theorem 3.4): (output, stats, info), with the branching b,
    depth D and machine count in ``info``."""
    n, mh = len(x), layer.width * layer.heads
    if memory < 8 * mh:
        raise ValueError(f"memory must be at least 8 m H = {8 * mh} words (b >= 2)")
    lay = Layout(layer, n, memory)
    sim = MPCSimulator(lay.num_machines, memory, audit=audit, float_tol=1e-12)
    sim.load("in", np.arange(n) // lay.per_in, np.column_stack([np.arange(n), x]))
    sim.phase("stage 1: tokens to token machines")
    sim.round(to_token_machines)
    sim.phase("stage 2: Q, K, V down the trees")
    for level in range(lay.depth, 0, -1):
        sim.round(lambda ctx, mem, level=level: push_down(mem, level, lay))
    sim.phase("stage 3: softmax sums up the query trees")
    for level in range(0, lay.depth):
        sim.round(lambda ctx, mem, level=level: sums_up(mem, level, lay))
    sim.phase("stage 4: residual, psi and compaction")
    sim.round(lambda ctx, mem: finish(mem, lay))
    out = sim.table("out")
    y = np.empty((n, lay.m))
    y[out.data[:, 0].astype(np.int64)] = out.data[:, 1:]
    info = {"branching": lay.b, "depth": lay.depth,
            "num_machines": lay.num_machines}
    return y, sim.stats, info


def to_token_machines(ctx: RoundContext, mem: dict[str, Table]):
    """Round 1: input token i goes to token machine i."""
    t = mem["in"]
    return {}, {"x": Message(t.machine, t.data[:, 0].astype(np.int64), t.data)}


def push_down(mem: dict[str, Table], level: int, lay: Layout):
    """Rounds 2..D+1: nodes at ``level`` send their payload to their children; at the top the token machines
    first compute Q, K, V (token-wise)."""
    mem, out = dict(mem), {}
    for tree, name in ((0, "_q"), (1, "_kv")):
        if level == lay.depth:
            xt = mem.get("x", _empty(lay.m + 1, float))
            q, k, v = lay.layer.qkv(xt.data[:, 1:])
            toks, hm = xt.data[:, 0].astype(np.int64), lay.h * lay.m
            payload = q.reshape(len(toks), hm) if tree == 0 else np.c_[k.reshape(len(toks), hm),
                                                                       v.reshape(len(toks), hm)]
            src_m, src_tok, src_j = xt.machine, toks, np.zeros(len(toks), np.int64)
        else:
            t = mem.pop(name, _empty(1, float))
            payload, src_m = t.data, t.machine
            src_tok, src_j = lay.owner(src_m, level)
        pi, ci = lay.children(level, src_j)
        out[name] = Message(src_m[pi], lay.node(tree, src_tok[pi], level - 1, ci), payload[pi])
    return mem, out


def sums_up(mem: dict[str, Table], level: int, lay: Layout):
    """Rounds D+2..2D+1: nodes at ``level`` send (log Z, S) per head to their parent in the query tree; the
    leaves (i, i') form them from the score q_i . k_i' (masked entries -inf), inner nodes combine."""
    n, m, h = lay.n, lay.m, lay.h
    mem = dict(mem)
    if level == 0 and "_q" in mem:
        qt, kvt = mem.pop("_q"), mem.pop("_kv", _empty(2 * h * m, float))
        oq, okv = np.argsort(qt.machine), np.argsort(kvt.machine)
        mach = qt.machine[oq]
        if not np.array_equal(mach, kvt.machine[okv]):
            raise RuntimeError("an inner-product machine lacks its query or its key/value")
        kv = kvt.data[okv].reshape(-1, 2, h, m)
        logz, s = np.einsum("nhk,nhk->nh", qt.data[oq].reshape(-1, h, m), kv[:, 0]), kv[:, 1]
        i, j = (mach - n) // n, (mach - n) % n
        if lay.layer.causal:
            logz = np.where((j > i)[:, None], -np.inf, logz)
    else:
        mach, logz, s = combine(mem.pop("_up", _empty(h * (m + 1), float)), h, m)
        i, j = lay.owner(mach, level)
    dest = lay.node(0, i, level + 1, j // lay.b)
    return mem, {"_up": Message(mach, dest, np.column_stack([logz, s.reshape(len(mach), h * m)]))}


def finish(mem: dict[str, Table], lay: Layout):
    """Round 2D+2: token machine i adds the residual, applies psi, sends its row to the first machines."""
    mem = dict(mem)
    xt = mem.pop("x", _empty(lay.m + 1, float))
    mach, _, s = combine(mem.pop("_up", _empty(lay.h * (lay.m + 1), float)), lay.h, lay.m)
    ox = np.argsort(xt.machine)
    y = lay.layer.psi(xt.data[ox, 1:] + s[np.argsort(mach)].sum(axis=1))
    toks = xt.data[ox, 0].astype(np.int64)
    return mem, {"out": Message(xt.machine[ox], toks // lay.per_in, np.column_stack([toks, y]))}


def combine(t: Table, h: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per machine, rows (log Z_c, S_c) -> (log Z, S) with S = sum_c exp(log Z_c - log Z) S_c."""
    order = np.argsort(t.machine, kind="stable")
    mach_all, d = t.machine[order], t.data[order]
    logz_c, s_c = d[:, :h], d[:, h:].reshape(-1, h, m)
    mach, start = np.unique(mach_all, return_index=True)
    if len(mach) == 0:
        return mach, np.zeros((0, h)), np.zeros((0, h, m))
    mx = np.maximum.reduceat(logz_c, start, axis=0)
    mx_rows = np.repeat(mx, np.diff(np.r_[start, len(mach_all)]), axis=0)
    wgt = np.exp(logz_c - np.where(np.isfinite(mx_rows), mx_rows, 0.0))
    tot = np.add.reduceat(wgt, start, axis=0)
    safe = np.where(tot > 0, tot, 1.0)
    logz = np.where(tot > 0, np.log(safe) + np.where(np.isfinite(mx), mx, 0.0), -np.inf)
    return mach, logz, np.add.reduceat(wgt[:, :, None] * s_c, start, axis=0) / safe[:, :, None]
