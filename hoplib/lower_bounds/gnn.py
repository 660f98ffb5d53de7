"""Message-passing GNNs against transformers on graph connectivity (Theorem 5.1, Corollaries 3.3 and 3.5) on the
instances of :mod:`hoplib.lower_bounds.graphs`: the GNN, the exact GNN and pointer doubling (the chapter's
exercises check answers against them), the MPC components protocol, training GNNs and transformers, and the
edge-set transformer of Corollary 3.3's input (the chapter ``gnn.md`` runs the locality checks)."""

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

from hoplib.device import autocast, get_device
from hoplib.lower_bounds import graphs
from hoplib.models import GPT, AttentionSpec, CausalSelfAttention, GPTConfig, register_attention
from hoplib.train import Progress, TrainConfig, optimise

AGGREGATIONS = ("sum", "mean", "max")
_EVAL_SEED_BASE = 2**40  # training batches use seeds below 2**40, evaluation batches above


# --------------------------------------------------------------------------- message passing
def aggregate(h: torch.Tensor, edges: torch.Tensor,
              how: str = "sum") -> torch.Tensor:
    """AGG_{u ~ v} h_u at every node v: h (B, N, m), undirected edges (B, E, 2);
    sum, mean or max (0 at nodes without neighbours)."""
    b, n, m = h.shape
    graphs.check_nodes("edges", edges, n)  # else ids wrap into other graphs
    offset = (torch.arange(b, device=edges.device) * n)[:, None, None]
    flat = (edges + offset).reshape(-1, 2)  # node ids in the whole batch
    src = torch.cat([flat[:, 0], flat[:, 1]])  # both directions
    dst = torch.cat([flat[:, 1], flat[:, 0]])
    msgs = h.reshape(b * n, m)[src]
    out = h.new_zeros(b * n, m)
    if how == "max":
        idx = dst[:, None].expand(-1, m)
        out = out.scatter_reduce(0, idx, msgs, "amax", include_self=False)
    else:
        out = out.index_add_(0, dst, msgs)
    if how == "mean":
        out = out / torch.bincount(dst, minlength=b * n).clamp(min=1)[:, None]
    return out.view(b, n, m)


class GNNLayer(nn.Module):
    """One message-passing layer: h <- [h +] fc2(relu(fc1([h, AGG h])))."""

    def __init__(self, width: int, hidden: int, aggregation: str, residual: bool):
        super().__init__()
        self.fc1 = nn.Linear(2 * width, hidden)
        self.fc2 = nn.Linear(hidden, width)
        self.aggregation, self.residual = aggregation, residual

    def forward(self, h: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        agg = aggregate(h, edges, self.aggregation)
        out = self.fc2(F.relu(self.fc1(torch.cat([h, agg], -1))))
        return h + out if self.residual else out


class MessagePassingGNN(nn.Module):
    """Width ``m``, depth ``L`` (the model of Theorem 5.1). ``forward(x (B, N, in_features), edges, read)``:
    two logits at every node (B, N, 2), or at the nodes ``read`` (B,) only (B, 2)."""

    def __init__(self, in_features: int, width: int, depth: int, *, aggregation: str = "sum",
                 hidden: int | None = None, residual: bool = True):
        super().__init__()
        if aggregation not in AGGREGATIONS:  # anything else would silently sum
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        self.embed = nn.Linear(in_features, width)
        self.layers = nn.ModuleList(GNNLayer(width, hidden or 2 * width, aggregation, residual)
                                    for _ in range(depth))
        self.head = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor, edges: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, edges)
        out = self.head(h)
        return out if read is None else out[torch.arange(out.shape[0], device=out.device), read]


# --------------------------------------------------------------------------- log-depth side
def mpc_components(family: str, diameter: int, delta: str, *,
                   seed: int = 0) -> dict | None:
    """The MPC components protocol on one instance of ``family`` at diameter D,
    with s = ceil((2|E|)^delta) words per machine, below the input's N = 2|E|
    words; None where s is under the protocol's least memory."""
    from fractions import Fraction

    from hoplib.mpc import protocols

    g = graphs.sample_graphs(family, diameter, 1, seed=seed + diameter)
    edges, n = g.edges[0].numpy(), g.num_nodes
    words = 2 * len(edges)
    s = math.ceil(words ** float(Fraction(delta)) - 1e-9)
    if s < protocols.components_min_memory(n, len(edges)):
        return None
    labels, st = protocols.connected_components_protocol(edges, n, s, seed=seed)
    together = labels[int(g.s[0])] == labels[int(g.t[0])]
    right = together == bool(g.y[0]) and len(set(labels.tolist())) == 2
    return {"family": family, "D": diameter, "delta": delta, "N": words,
            "memory": s, "nodes": n, "iterations": st.phases["iterations"],
            "rounds": st.rounds, "max_memory": st.max_memory,
            "correct": bool(right)}


# --------------------------------------------------------------------------- training
def _train(make_model: Callable[[], nn.Module], loss_and_acc: Callable[..., tuple[torch.Tensor, torch.Tensor]],
           record: dict, *, batch_size: int, lr: float, seed: int, weight_decay: float, device: str | torch.device,
           eval_size: int, progress: bool | Progress = False) -> dict:
    """Seed torch, build the model, train it with :func:`hoplib.train.optimise` on ``loss_and_acc(model, batch,
    data_seed) -> (loss, accuracy)`` of fresh instances (``record``'s family, D and steps; warmup a tenth; step t's
    batch has seed ``seed * 2**24 + t``), then score ``eval_size`` held-out ones: ``record`` with the accuracy."""
    t0, dev, steps = time.perf_counter(), get_device(device), record["steps"]
    torch.manual_seed(seed)
    model = make_model().to(dev)

    def batch_loss(data_seed: int, size: int = batch_size) -> tuple[torch.Tensor, torch.Tensor]:
        g = graphs.sample_graphs(record["family"], record["D"], size, seed=data_seed, device=dev)
        return loss_and_acc(model, g, data_seed)

    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=max(1, steps // 10),
                         weight_decay=weight_decay, seed=seed)
    hist = optimise(model, lambda step: batch_loss(seed * 2**24 + step)[0], config, device=dev, progress=progress,
                    desc="graphs")
    model.eval()
    with torch.no_grad(), autocast(dev):
        _, acc = batch_loss(_EVAL_SEED_BASE + seed, eval_size)
    return {**record, "accuracy": float(acc), "final_loss": float(np.mean(hist["loss"][-20:])),
            "seconds": time.perf_counter() - t0}


def train_gnn(family: str, diameter: int, depth: int, *, width: int = 32, aggregation: str = "sum",
              n_random: int = 4, steps: int = 300, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
              eval_size: int = 512, device: str | torch.device = "cpu", progress: bool | Progress = False) -> dict:
    """Train a :class:`MessagePassingGNN` read at t on fresh instances (AdamW, no weight decay); its record."""

    def loss_and_acc(model: nn.Module, g: graphs.GraphBatch, data_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(graphs.node_features(g, n_random, seed=data_seed), g.edges, g.t).float()
        return F.cross_entropy(logits, g.y), (logits.argmax(-1) == g.y).float().mean()

    record = {"model": "gnn", "family": family, "D": diameter, "depth": depth, "width": width,
              "aggregation": aggregation, "n_random": n_random, "steps": steps}
    return _train(lambda: MessagePassingGNN(2 + n_random, width, depth, aggregation=aggregation), loss_and_acc,
                  record, batch_size=batch_size, lr=lr, seed=seed, weight_decay=0.0, device=device, eval_size=eval_size,
                  progress=progress)


def train_transformer(family: str, diameter: int, depth: int, *, d_model: int = 64, heads: int = 4,
                      steps: int = 300, batch_size: int = 64, lr: float = 1e-3, seed: int = 0, eval_size: int = 512,
                      weight_decay: float = 0.01, marks: bool = False, device: str | torch.device = "cpu",
                      progress: bool | Progress = False) -> dict:
    """Train a :class:`hoplib.models.GPT` on the serialised instances (:func:`~hoplib.lower_bounds.graphs.
    serialise`, with the marks of s and t if ``marks``; answer at END); its record."""
    probe = graphs.sample_graphs(family, diameter, 1)
    cfg = GPTConfig(vocab_size=graphs.vocab_size(probe.num_nodes, marks=marks), n_positions=3 * probe.num_edges + 4,
                    depth=depth, d_model=d_model, heads=heads, n_classes=2)

    def loss_and_acc(model: nn.Module, g: graphs.GraphBatch, data_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = graphs.serialise(g, probe.num_nodes, marks=marks)  # in range by construction: no check (a sync)
        logits = model.forward_unchecked(ids)[:, -1].float()
        return F.cross_entropy(logits, g.y), (logits.argmax(-1) == g.y).float().mean()

    record = {"model": "transformer", "family": family, "D": diameter, "depth": depth, "width": d_model,
              "heads": heads, "marks": marks, "steps": steps}
    return _train(lambda: GPT(cfg), loss_and_acc, record, batch_size=batch_size, lr=lr, seed=seed,
                  weight_decay=weight_decay, device=device, eval_size=eval_size, progress=progress)


# --------------------------------------------------------------------------- edge-set transformer
class BidirectionalSelfAttention(CausalSelfAttention):
    """Softmax self-attention without the causal mask: every token sees every token (edges form a set)."""

    causal = False


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
        if int(edges.max()) >= self.n_ids:  # n_ids and n_ids + 1 are the marks
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


def edge_labels(batch: graphs.GraphBatch) -> torch.Tensor:
    """(B, E) int64: 1 where the edge lies in ``s``'s component (the component labelling of Corollary 3.3)."""
    reach = graphs.bfs_distances(batch.edges, batch.num_nodes, batch.s) >= 0
    return reach.gather(1, batch.edges[:, :, 0]).long()


def same_component(batch: graphs.GraphBatch) -> torch.Tensor:
    """(B, E, E) float: 1 where edges i and j lie in the same component (the
    instances have two)."""
    lab = edge_labels(batch)
    return (lab[:, :, None] == lab[:, None, :]).float()


def train_edge_transformer(family: str, diameter: int, depth: int, *, d_model: int = 64, heads: int = 4,
                           steps: int = 2000, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                           pairs: bool = False, eval_size: int = 512, device: str | torch.device = "cpu",
                           progress: bool | Progress = False) -> dict:
    """Train an :class:`EdgeSetTransformer` on :func:`edge_labels` (and, with ``pairs``, on
    :func:`same_component` by binary cross-entropy); its record holds the connectivity accuracy (the label of
    an edge at t against y) and the edge accuracy on ``eval_size`` held-out instances."""
    n_ids = graphs.sample_graphs(family, diameter, 1).num_nodes
    edge_acc: list[float] = []  # filled by the evaluation call only (no device sync per training step)

    def loss_and_acc(model: nn.Module, g: graphs.GraphBatch, data_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
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

    record = {"model": "edge-transformer", "family": family, "D": diameter, "depth": depth, "width": d_model,
              "heads": heads, "steps": steps, "target": "edges+pairs" if pairs else "edges"}
    out = _train(lambda: EdgeSetTransformer(n_ids, depth, d_model=d_model, heads=heads, pairs=pairs), loss_and_acc,
                 record, batch_size=batch_size, lr=lr, seed=seed, weight_decay=0.01, device=device, eval_size=eval_size,
                 progress=progress)
    return {**out, "edge_accuracy": edge_acc[-1]}


def edge_job(index: int, point: dict) -> dict:
    """:func:`train_edge_transformer` on the keyword arguments ``point``: a job of :func:`hoplib.sweep.map_points`
    (each point carries its seed, so its record does not depend on the process that trains it)."""
    return train_edge_transformer(**point)


# --------------------------------------------------------------------------- reading sweeps
def depths_needed(rows: list[dict], threshold: float) -> dict[int, int | None]:
    """``{D: smallest trained depth whose accuracy at t reaches threshold}`` (None: no trained depth did), for
    the records of one family."""
    out: dict[int, int | None] = {}
    for r in sorted(rows, key=lambda r: (r["D"], r["depth"])):
        if out.get(r["D"]) is None:
            out[r["D"]] = r["depth"] if r["accuracy"] >= threshold else None
    return out
