"""Message-passing GNNs against transformers on graph connectivity (Theorem 5.1, Corollaries 3.3 and 3.5 of the
paper), on the instances of :mod:`hoplib.lower_bounds.graphs`: the GNN and its locality, the exact GNN and
pointer doubling, training GNNs and transformers, and the edge-set transformer of Corollary 3.3's input; the
chapter ``chapters/gnn.md`` shows and runs them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.device import autocast, get_device
from hoplib.lower_bounds.graphs import GraphBatch, bfs_distances, node_features, sample_graphs, serialise, vocab_size
from hoplib.models import GPT, AttentionSpec, CausalSelfAttention, GPTConfig, register_attention
from hoplib.train import TrainConfig, optimise

AGGREGATIONS = ("sum", "mean", "max")
_EVAL_SEED_BASE = 2**40  # training batches use seeds below 2**40, evaluation batches above


# --------------------------------------------------------------------------- message passing
def aggregate(h: torch.Tensor, edges: torch.Tensor, how: str = "sum") -> torch.Tensor:
    """``AGG_{u ~ v} h_u`` at every node v: h (B, N, m), undirected edges (B, E, 2); sum, mean or max (0 at
    nodes without neighbours)."""
    b, n, m = h.shape
    flat = (edges + (torch.arange(b, device=edges.device) * n)[:, None, None]).reshape(-1, 2)
    src, dst = torch.cat([flat[:, 0], flat[:, 1]]), torch.cat([flat[:, 1], flat[:, 0]])
    msgs = h.reshape(b * n, m)[src]
    out = torch.zeros(b * n, m, dtype=h.dtype, device=h.device)
    if how == "max":
        out = out.scatter_reduce(0, dst[:, None].expand(-1, m), msgs, "amax", include_self=False)
    else:
        out = out.index_add_(0, dst, msgs)
        if how == "mean":
            deg = torch.zeros(b * n, dtype=h.dtype, device=h.device).index_add_(0, dst, torch.ones_like(msgs[:, 0]))
            out = out / deg.clamp(min=1)[:, None]
    return out.view(b, n, m)


class GNNLayer(nn.Module):
    """One message-passing layer: ``h <- [h +] fc2(relu(fc1([h, AGG h])))``."""

    def __init__(self, width: int, hidden: int, aggregation: str, residual: bool):
        super().__init__()
        self.fc1 = nn.Linear(2 * width, hidden)
        self.fc2 = nn.Linear(hidden, width)
        self.aggregation, self.residual = aggregation, residual

    def forward(self, h: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        out = self.fc2(F.relu(self.fc1(torch.cat([h, aggregate(h, edges, self.aggregation)], -1))))
        return h + out if self.residual else out


class MessagePassingGNN(nn.Module):
    """Width ``m``, depth ``L`` (the model of Theorem 5.1). ``forward(x (B, N, in_features), edges, read)``:
    logits (B, N, n_out) at every node, or (B, n_out) at the nodes ``read`` (B,)."""

    def __init__(self, in_features: int, width: int, depth: int, *, aggregation: str = "sum",
                 hidden: int | None = None, residual: bool = True, n_out: int = 2):
        super().__init__()
        if aggregation not in AGGREGATIONS:  # anything else would silently sum
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        self.embed = nn.Linear(in_features, width)
        self.layers = nn.ModuleList(GNNLayer(width, hidden or 2 * width, aggregation, residual)
                                    for _ in range(depth))
        self.head = nn.Linear(width, n_out)

    def forward(self, x: torch.Tensor, edges: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, edges)
        out = self.head(h)
        return out if read is None else out[torch.arange(out.shape[0], device=out.device), read]


def exact_reachability_gnn(depth: int, aggregation: str = "max", *, in_features: int = 2,
                           max_degree: int = 64) -> MessagePassingGNN:
    """Width 1: ``h_v <- min(1, K (h_v + AGG h_u))`` from the mark of ``s`` (feature 0), ``K = max_degree`` for
    the mean and 1 otherwise, so after L layers ``h_v = 1`` iff ``dist(s, v) <= L``; "connected" iff
    ``h_t > 1/2``."""
    k = float(max_degree) if aggregation == "mean" else 1.0
    model = MessagePassingGNN(in_features, 1, depth, aggregation=aggregation, hidden=2, residual=False)
    with torch.no_grad():
        model.embed.weight.zero_()
        model.embed.weight[0, 0] = 1.0
        model.embed.bias.zero_()
        for layer in model.layers:  # relu(K z) - relu(K z - 1) = min(1, K z) for z >= 0
            layer.fc1.weight.copy_(torch.full((2, 2), k))
            layer.fc1.bias.copy_(torch.tensor([0.0, -1.0]))
            layer.fc2.weight.copy_(torch.tensor([[1.0, -1.0]]))
            layer.fc2.bias.zero_()
        model.head.weight.copy_(torch.tensor([[-1.0], [1.0]]))
        model.head.bias.copy_(torch.tensor([0.5, -0.5]))
    return model


# --------------------------------------------------------------------------- locality
def ball(batch: GraphBatch, centre: torch.Tensor, radius: int) -> torch.Tensor:
    """Boolean mask (B, N) of the nodes within ``radius`` hops of ``centre`` (B,)."""
    d = bfs_distances(batch.edges, batch.num_nodes, centre)
    return (d >= 0) & (d <= radius)


def perturb_outside_ball(batch: GraphBatch, x: torch.Tensor, centre: torch.Tensor, radius: int, *,
                         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(edges', x')``: nodes farther than ``radius`` from ``centre`` get fresh normal features, and edges
    between two such nodes become random edges between such nodes; edges at nodes within ``radius`` stay."""
    gen = torch.Generator(device=batch.device).manual_seed(seed)
    inside = ball(batch, centre, radius)
    far = ~inside
    x2 = torch.where(far[:, :, None], torch.randn(x.shape, generator=gen, device=x.device), x)
    edges = batch.edges.clone()
    rows = torch.arange(batch.batch_size, device=batch.device)[:, None]
    both_far = far[rows, edges[:, :, 0]] & far[rows, edges[:, :, 1]]
    keys = torch.rand(batch.batch_size, batch.num_nodes, generator=gen, device=batch.device) + inside.float() * 2
    n_far = far.sum(1)
    for j in range(2):
        pick = torch.randint(0, 2**31 - 1, edges.shape[:2], generator=gen, device=batch.device)
        new = torch.argsort(keys, dim=1).gather(1, pick % n_far.clamp(min=1)[:, None])  # far nodes come first
        edges[:, :, j] = torch.where(both_far, new, edges[:, :, j])
    return edges, x2


def move_source_to_other_component(batch: GraphBatch) -> GraphBatch:
    """Each instance with ``s`` moved to the smallest-named node of the component without ``t`` (y = 0)."""
    other = bfs_distances(batch.edges, batch.num_nodes, batch.t) < 0
    idx = torch.arange(batch.num_nodes, device=batch.device).expand_as(other)
    s2 = torch.where(other, idx, batch.num_nodes).min(1).values
    return GraphBatch(batch.edges, s2, batch.t, torch.zeros_like(batch.y), batch.num_nodes, batch.family,
                      batch.diameter)


# --------------------------------------------------------------------------- log-depth side
def doubling_connectivity(edges: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, int]:
    """Reachability by squaring, ``R_0 = I + A``, ``R_{j+1} = R_j R_j`` (boolean), until it stops changing:
    the final (B, N, N) relation and the number of squarings that changed it."""
    b, n = edges.shape[0], num_nodes
    r = torch.eye(n, dtype=torch.bool, device=edges.device).expand(b, n, n).clone()
    rows = torch.arange(b, device=edges.device)[:, None]
    r[rows, edges[:, :, 0], edges[:, :, 1]] = True
    r[rows, edges[:, :, 1], edges[:, :, 0]] = True
    squarings = 0
    while True:
        new = torch.bmm(r.float(), r.float()) > 0
        if torch.equal(new, r):
            return r, squarings
        r, squarings = new, squarings + 1


# --------------------------------------------------------------------------- training
def _fit_and_score(model: nn.Module, loss_and_acc: Callable[..., tuple[torch.Tensor, torch.Tensor]], *,
                   steps: int, batch_size: int, lr: float, seed: int, weight_decay: float,
                   device: torch.device, eval_size: int) -> dict[str, float]:
    """Train with :func:`hoplib.train.optimise` (warmup over a tenth of the steps; step t's batch has seed
    ``seed * 2**24 + t``), then score ``eval_size`` held-out instances."""
    t0 = time.perf_counter()
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=max(1, steps // 10),
                         weight_decay=weight_decay, seed=seed)
    hist = optimise(model, lambda step: loss_and_acc(seed * 2**24 + step)[0], config, device=device,
                    progress=False, desc="graphs")
    model.eval()
    with torch.no_grad(), autocast(device):
        _, acc = loss_and_acc(_EVAL_SEED_BASE + seed, eval_size)
    return {"accuracy": float(acc), "final_loss": float(np.mean(hist["loss"][-20:])),
            "seconds": time.perf_counter() - t0}


def train_gnn(family: str, diameter: int, depth: int, *, width: int = 32, aggregation: str = "sum",
              n_random: int = 4, steps: int = 300, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
              eval_size: int = 512, device: str | torch.device = "cpu") -> dict:
    """Train a :class:`MessagePassingGNN` read at t on fresh instances (AdamW, no weight decay); its record."""
    dev = get_device(device)
    torch.manual_seed(seed)
    model = MessagePassingGNN(2 + n_random, width, depth, aggregation=aggregation).to(dev)

    def loss_and_acc(data_seed: int, size: int = batch_size):
        g = sample_graphs(family, diameter, size, seed=data_seed, device=dev)
        logits = model(node_features(g, n_random, seed=data_seed), g.edges, g.t).float()
        return F.cross_entropy(logits, g.y), (logits.argmax(-1) == g.y).float().mean()

    scored = _fit_and_score(model, loss_and_acc, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                            weight_decay=0.0, device=dev, eval_size=eval_size)
    return {"model": "gnn", "family": family, "D": diameter, "depth": depth, "width": width,
            "aggregation": aggregation, "n_random": n_random, "steps": steps, **scored}


def train_transformer(family: str, diameter: int, depth: int, *, d_model: int = 64, heads: int = 4,
                      steps: int = 300, batch_size: int = 64, lr: float = 1e-3, seed: int = 0, eval_size: int = 512,
                      weight_decay: float = 0.01, marks: bool = False, device: str | torch.device = "cpu") -> dict:
    """Train a :class:`hoplib.models.GPT` on the serialised instances (:func:`~hoplib.lower_bounds.graphs.
    serialise`, with the marks of s and t if ``marks``; answer at END); its record."""
    dev = get_device(device)
    torch.manual_seed(seed)
    probe = sample_graphs(family, diameter, 1)
    cfg = GPTConfig(vocab_size=vocab_size(probe.num_nodes, marks=marks), n_positions=3 * probe.num_edges + 4,
                    depth=depth, d_model=d_model, heads=heads, n_classes=2)
    model = GPT(cfg).to(dev)

    def loss_and_acc(data_seed: int, size: int = batch_size):
        g = sample_graphs(family, diameter, size, seed=data_seed, device=dev)
        logits = model(serialise(g, probe.num_nodes, marks=marks))[:, -1].float()
        return F.cross_entropy(logits, g.y), (logits.argmax(-1) == g.y).float().mean()

    scored = _fit_and_score(model, loss_and_acc, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                            weight_decay=weight_decay, device=dev, eval_size=eval_size)
    return {"model": "transformer", "family": family, "D": diameter, "depth": depth, "width": d_model,
            "heads": heads, "marks": marks, "steps": steps, **scored}


# --------------------------------------------------------------------------- edge-set transformer
class BidirectionalSelfAttention(CausalSelfAttention):
    """Softmax self-attention without the causal mask: every token sees every token (edges form a set)."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not need_weights:
            drop = self.dropout if self.training else 0.0
            return F.scaled_dot_product_attention(q, k, v, is_causal=False, dropout_p=drop), None
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])).softmax(dim=-1)
        return F.dropout(att, self.dropout, self.training) @ v, att


@register_attention
@dataclass(frozen=True)
class BidirectionalAttention(AttentionSpec):
    """Unmasked softmax attention (the paper's transformers of Section 2 and Corollary 3.3 are unmasked)."""

    name: ClassVar[str] = "bidirectional"

    def build(self, config: GPTConfig) -> BidirectionalSelfAttention:
        return BidirectionalSelfAttention(config)


class EdgeSetTransformer(nn.Module):
    """Token i is edge (u_i, v_i), embedded as ``E[u_i] + E[v_i] + E[mark_i]`` (mark: the edge touches s), no
    positions, then the book's GPT blocks with unmasked attention: logits (B, E, 2), is edge i in s's
    component? With ``pairs``, :meth:`same_component_logits` (B, E, E) reads every pair of edges."""

    def __init__(self, n_ids: int, depth: int, *, d_model: int = 64, heads: int = 4, pairs: bool = False):
        super().__init__()
        self.n_ids = n_ids
        self.gpt = GPT(GPTConfig(vocab_size=n_ids + 2, n_positions=1, depth=depth, d_model=d_model, heads=heads,
                                 n_classes=2, attention=BidirectionalAttention()))  # wpe is unused
        self.pair = nn.Linear(d_model, d_model, bias=False) if pairs else None

    def hidden(self, edges: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """(B, E, d_model): the final LayerNorm's output at every edge token."""
        if int(edges.max()) >= self.n_ids:  # names n_ids, n_ids + 1 would be read as the marks
            raise ValueError(f"node names must lie in [0, {self.n_ids})")
        mark = (edges == s[:, None, None]).any(2).long() + self.n_ids
        x = self.gpt.wte(edges).sum(2) + self.gpt.wte(mark)
        for block in self.gpt.blocks:
            x, _ = block(x)
        return self.gpt.ln_f(x)

    def forward(self, edges: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.gpt.unembed(self.hidden(edges, s))

    def same_component_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, E, E) logits ``h_i^T W h_j / sqrt(d)`` from :meth:`hidden`'s output."""
        return self.pair(h) @ h.transpose(1, 2) / math.sqrt(h.shape[-1])


def edge_labels(batch: GraphBatch) -> torch.Tensor:
    """(B, E) int64: 1 where the edge lies in ``s``'s component (the component labelling of Corollary 3.3)."""
    reach = bfs_distances(batch.edges, batch.num_nodes, batch.s) >= 0
    return reach.gather(1, batch.edges[:, :, 0]).long()


def same_component(batch: GraphBatch) -> torch.Tensor:
    """(B, E, E) float: 1 where edges i and j lie in the same component (the instances have two)."""
    lab = edge_labels(batch)
    return (lab[:, :, None] == lab[:, None, :]).float()


def train_edge_transformer(family: str, diameter: int, depth: int, *, d_model: int = 64, heads: int = 4,
                           steps: int = 2000, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                           pairs: bool = False, eval_size: int = 512, device: str | torch.device = "cpu") -> dict:
    """Train an :class:`EdgeSetTransformer` on :func:`edge_labels` (and, with ``pairs``, on
    :func:`same_component` by binary cross-entropy); its record holds the connectivity accuracy (the label of
    an edge at t against y) and the edge accuracy on ``eval_size`` held-out instances."""
    dev = get_device(device)
    torch.manual_seed(seed)
    model = EdgeSetTransformer(sample_graphs(family, diameter, 1).num_nodes, depth, d_model=d_model,
                               heads=heads, pairs=pairs).to(dev)
    edge_acc: list[float] = []  # filled by the evaluation call only (no device sync per training step)

    def loss_and_acc(data_seed: int, size: int = batch_size):
        g = sample_graphs(family, diameter, size, seed=data_seed, device=dev)
        h = model.hidden(g.edges, g.s)
        logits, target = model.gpt.unembed(h).float(), edge_labels(g)
        loss = F.cross_entropy(logits.reshape(-1, 2), target.reshape(-1))
        if pairs:
            loss = loss + F.binary_cross_entropy_with_logits(model.same_component_logits(h).float(),
                                                             same_component(g))
        pred = logits.argmax(-1)
        at_t = (g.edges == g.t[:, None, None]).any(2).float().argmax(1)  # an edge at t
        if not model.training:
            edge_acc.append(float((pred == target).float().mean()))
        return loss, (pred.gather(1, at_t[:, None]).squeeze(1) == g.y).float().mean()

    scored = _fit_and_score(model, loss_and_acc, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                            weight_decay=0.01, device=dev, eval_size=eval_size)
    return {"model": "edge-transformer", "family": family, "D": diameter, "depth": depth, "width": d_model,
            "heads": heads, "steps": steps, "target": "edges+pairs" if pairs else "edges",
            "edge_accuracy": edge_acc[-1], **scored}


# --------------------------------------------------------------------------- reading sweeps
def depths_needed(rows: list[dict], threshold: float) -> dict[int, int | None]:
    """``{D: smallest trained depth whose accuracy at t reaches threshold}`` (None: no trained depth did), for
    the records of one family."""
    out: dict[int, int | None] = {}
    for r in sorted(rows, key=lambda r: (r["D"], r["depth"])):
        out.setdefault(r["D"], None)
        if out[r["D"]] is None and r["accuracy"] >= threshold:
            out[r["D"]] = r["depth"]
    return out
