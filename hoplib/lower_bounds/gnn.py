"""Message-passing GNNs versus transformers on graph connectivity (Theorem 5.1 and Corollaries 3.3 / 3.5 of
the paper), on the two-component instances of :mod:`hoplib.lower_bounds.graphs`.

**The GNN** (:class:`MessagePassingGNN`): node features (the one-hot marks of ``s`` and ``t``, optionally
``n_random`` random normal features per node that make nodes distinguishable beyond 1-WL symmetry) are embedded
to width ``m``; each of the ``L`` layers computes, at every node ``v``,
``h_v <- [h_v +] MLP([h_v, AGG_{u ~ v} h_u])`` with ``AGG`` a sum, mean or max over the edges (``index_add_`` /
``scatter_reduce``, no graph library); the answer is read at ``t``.

**Locality** (:func:`perturb_outside_ball`, :func:`ball`): the output at ``v`` after ``L`` layers depends only
on the features of nodes within distance ``L`` of ``v`` and on the edges at nodes within distance ``L - 1``.
Even with unique node identifiers, a GNN read at ``t`` with ``L < D`` therefore sees the same ``L``-ball
distribution on connected and disconnected instances (the mark of ``s`` sits at distance ``D``), so its
accuracy is at most ``max(p, 1 - p)`` (:func:`gnn_accuracy_bound`): **depth L >= D**, linear in the diameter.
(With a global pooling readout the same argument gives ``L >= D/2``: no ball of radius below ``D/2`` holds both
marks.)

**The exact GNN** (:func:`exact_reachability_gnn`): width 1, ``h_v <- min(1, K (h_v + AGG h_u))`` starting
from the mark of ``s``, so ``h_t = 1`` after ``L`` layers iff ``dist(s, t) <= L``: it solves the task with
exactly ``L = D`` layers and is at chance with ``L = D - 1``.

**Transformer side** (Corollary 3.3: depth ``O(log D)``): :func:`doubling_connectivity` squares the
reachability relation, ``R <- R o R`` (one attention layer per squaring in which ``v`` attends to every ``u``
with ``R(v, u)`` and ORs their rows; width ``N``, far above the ``N^eps`` of Corollary 3.3), and needs
``ceil(log2 D)`` squarings; :func:`mpc_connectivity_rounds` runs the MPC components protocol of
:mod:`hoplib.mpc.protocols` (hooking and pointer jumping, sublinear memory), whose measured rounds give a
transformer of depth ``rounds + 1`` by Theorem 3.1.

**Theorem 5.1** (Loukas 2020, Cor. 4.2): for *some* worst-case graph with ``N`` edges, a message-passing GNN of
width ``m`` and depth ``L`` deciding whether a subgraph is connected needs ``L sqrt(m) = Omega~(N^{1/4})``.
:func:`loukas_depth_scale` draws ``N^{1/4} / sqrt(m)`` (constants and logarithms dropped) as a scale only.

**Learned experiment** (:func:`train_gnn`, :func:`train_transformer`, :func:`depth_sweep`): GNNs and
:class:`hoplib.models.GPT` transformers on the serialised edge list, trained per (family, D, depth).

**The edge-set transformer** (:class:`EdgeSetTransformer`, :func:`train_edge_transformer`): the input of
Corollary 3.3 as the paper writes it, one token per edge, ``E[u] + E[v]`` (plus a mark on the edges at ``s``),
no positions and unmasked (:class:`BidirectionalAttention`) attention, the book's GPT blocks. It labels every
edge by whether it lies in ``s``'s component (dense targets: the component labelling of Corollary 3.3), and the
connectivity answer is its label at ``t``'s edge. Unlike the causal model on the token list above, it learns.
With ``pairs=True`` it also labels every pair of edges, same component or not (:func:`same_component`, a
bilinear read-out): the whole component relation. In the book's stored runs it learns longer paths that way
than with the edge labels alone, at equal steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.device import autocast, get_device
from hoplib._book.validate import check_choice, check_int
from hoplib.lower_bounds.graphs import (
    FAMILIES,
    GraphBatch,
    bfs_distances,
    min_diameter,
    node_features,
    sample_graphs,
    serialise,
    vocab_size,
)
from hoplib.models import GPT, AttentionSpec, CausalSelfAttention, GPTConfig, register_attention
from hoplib.train import TrainConfig, optimise

AGGREGATIONS = ("sum", "mean", "max")
_EVAL_SEED_BASE = 2**40  # training batches use seeds below 2**40, evaluation batches above


# --------------------------------------------------------------------------- the model
def _flat_edges(edges: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Directed (src, dst) index pairs, both orientations, over the B*N nodes of a batch."""
    b = edges.shape[0]
    flat = (edges + (torch.arange(b, device=edges.device) * n)[:, None, None]).reshape(-1, 2)
    return torch.cat([flat[:, 0], flat[:, 1]]), torch.cat([flat[:, 1], flat[:, 0]])


def aggregate(h: torch.Tensor, edges: torch.Tensor, how: str = "sum") -> torch.Tensor:
    """``AGG_{u ~ v} h_u`` for every node v: h (B, N, m), edges (B, E, 2) undirected; sum, mean or max (nodes
    without neighbours get 0)."""
    check_choice("how", how, AGGREGATIONS)
    if h.dim() != 3 or edges.dim() != 3 or edges.shape[2] != 2 or edges.shape[0] != h.shape[0]:
        raise ValueError(f"h must be (B, N, m) and edges (B, E, 2), got {tuple(h.shape)}, {tuple(edges.shape)}")
    b, n, m = h.shape
    src, dst = _flat_edges(edges, n)
    msgs = h.reshape(b * n, m)[src]
    if how == "max":
        out = torch.zeros(b * n, m, dtype=h.dtype, device=h.device)
        out = out.scatter_reduce(0, dst[:, None].expand(-1, m), msgs, "amax", include_self=False)
    else:
        out = torch.zeros(b * n, m, dtype=h.dtype, device=h.device).index_add_(0, dst, msgs)
        if how == "mean":
            deg = torch.zeros(b * n, dtype=h.dtype, device=h.device).index_add_(
                0, dst, torch.ones_like(dst, dtype=h.dtype))
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
        a = aggregate(h, edges, self.aggregation)
        out = self.fc2(F.relu(self.fc1(torch.cat([h, a], -1))))
        return h + out if self.residual else out


class MessagePassingGNN(nn.Module):
    """Message-passing GNN of width ``m = width`` and depth ``L = depth`` (the model of Theorem 5.1).

    ``forward(x, edges, read=None)``: x (B, N, in_features) node features, edges (B, E, 2); returns logits
    (B, N, n_out) at every node, or (B, n_out) at the nodes ``read`` (B,). Only edges carry information
    between nodes, so the output at v depends on v's L-hop ball only.
    """

    def __init__(self, in_features: int, width: int, depth: int, *, aggregation: str = "sum",
                 hidden: int | None = None, residual: bool = True, n_out: int = 2):
        super().__init__()
        self.in_features = check_int("in_features", in_features, low=1)
        self.width = check_int("width", width, low=1)
        self.depth = check_int("depth", depth, low=0)
        self.aggregation = check_choice("aggregation", aggregation, AGGREGATIONS)
        hidden = 2 * width if hidden is None else check_int("hidden", hidden, low=1)
        self.embed = nn.Linear(in_features, width)
        self.layers = nn.ModuleList(GNNLayer(width, hidden, aggregation, residual) for _ in range(depth))
        self.head = nn.Linear(width, check_int("n_out", n_out, low=1))

    def forward(self, x: torch.Tensor, edges: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() != 3 or x.shape[2] != self.in_features:
            raise ValueError(f"x must have shape (B, N, {self.in_features}), got {tuple(x.shape)}")
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, edges)
        out = self.head(h)
        if read is None:
            return out
        return out[torch.arange(out.shape[0], device=out.device), read]


def exact_reachability_gnn(depth: int, aggregation: str = "max", *, in_features: int = 2,
                           max_degree: int = 64) -> MessagePassingGNN:
    """A hand-set :class:`MessagePassingGNN` of width 1 computing reachability from the marked node ``s``:
    ``h_v <- min(1, K (h_v + AGG h_u))`` with ``K = 1`` (sum, max) or ``K = max_degree`` (mean), so after L
    layers ``h_v = 1`` iff ``dist(s, v) <= L``; it answers "connected" at t iff ``h_t > 1/2``. Feature 0 must be
    the mark of s (as in :func:`hoplib.lower_bounds.graphs.node_features`); other features are ignored."""
    aggregation = check_choice("aggregation", aggregation, AGGREGATIONS)
    k = float(check_int("max_degree", max_degree, low=1)) if aggregation == "mean" else 1.0
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
    radius = check_int("radius", radius, low=0)
    d = bfs_distances(batch.edges, batch.num_nodes, centre)
    return (d >= 0) & (d <= radius)


def perturb_outside_ball(batch: GraphBatch, x: torch.Tensor, centre: torch.Tensor, radius: int, *,
                         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Change everything a depth-``radius`` GNN read at ``centre`` cannot see: returns ``(edges', x')`` where
    the features of every node farther than ``radius`` are redrawn (standard normal, marks included) and every
    edge whose endpoints are both farther than ``radius`` is replaced by a random edge between such nodes.
    The edges at nodes within ``radius`` (in particular the whole ``radius``-ball) are kept, in place."""
    radius = check_int("radius", radius, low=0)
    gen = torch.Generator(device=batch.device)
    gen.manual_seed(check_int("seed", seed, low=0, high=2**63 - 1))
    inside = ball(batch, centre, radius)
    far = ~inside
    x2 = torch.where(far[:, :, None], torch.randn(x.shape, generator=gen, device=x.device), x)
    edges = batch.edges.clone()
    rows = torch.arange(batch.batch_size, device=batch.device)[:, None]
    both_far = far[rows, edges[:, :, 0]] & far[rows, edges[:, :, 1]]
    # random far nodes: sample by ranking random keys among far nodes
    keys = torch.rand(batch.batch_size, batch.num_nodes, generator=gen, device=batch.device) + inside.float() * 2
    n_far = far.sum(1)
    for j in range(2):
        pick = torch.randint(0, 2**31 - 1, edges.shape[:2], generator=gen, device=batch.device)
        pick = pick % n_far.clamp(min=1)[:, None]
        order = torch.argsort(keys, dim=1)  # far nodes first
        new = order.gather(1, pick)
        edges[:, :, j] = torch.where(both_far, new, edges[:, :, j])
    return edges, x2


def move_source_to_other_component(batch: GraphBatch) -> GraphBatch:
    """The pairing behind the locality bound: each instance with its ``s`` moved to the smallest-named node
    of a component not containing ``t`` (so every instance becomes disconnected, ``y = 0``). When
    ``dist(s, t) > L`` in the original, t's L-ball is unchanged, so a depth-L GNN read at t answers both alike."""
    d = bfs_distances(batch.edges, batch.num_nodes, batch.t)
    other = d < 0
    if not bool(other.any(1).all()):
        raise ValueError("every instance needs a component without t")
    idx = torch.arange(batch.num_nodes, device=batch.device).expand_as(d)
    s2 = torch.where(other, idx, batch.num_nodes).min(1).values
    return GraphBatch(batch.edges, s2, batch.t, torch.zeros_like(batch.y), batch.num_nodes, batch.family,
                      batch.diameter)


def gnn_accuracy_bound(diameter: int, depth: int, p_connected: float = 0.5) -> float:
    """Largest accuracy of any depth-``depth`` message-passing GNN read at t on :func:`hoplib.lower_bounds.graphs.
    sample_graphs` instances of diameter ``diameter``: ``max(p, 1 - p)`` if ``depth < diameter`` (the t-ball has
    the same distribution in both classes), else 1 (reached by :func:`exact_reachability_gnn`)."""
    d = check_int("diameter", diameter, low=1)
    depth = check_int("depth", depth, low=0)
    return 1.0 if depth >= d else max(p_connected, 1 - p_connected)


# --------------------------------------------------------------------------- log-depth side
def doubling_connectivity(edges: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, int]:
    """Reachability by repeated squaring, ``R_0 = I + A``, ``R_{j+1} = R_j R_j`` (boolean): returns the final
    (B, N, N) relation (``R[b, u, v]``: u and v connected) and the number of squarings that changed it, which is
    ``ceil(log2 D)`` for components of diameter ``D`` (one attention layer each; Corollary 3.3's log depth)."""
    if not isinstance(edges, torch.Tensor) or edges.dim() != 3 or edges.shape[2] != 2:
        raise ValueError(f"edges must be a tensor of shape (B, E, 2), got {getattr(edges, 'shape', type(edges))}")
    n = check_int("num_nodes", num_nodes, low=1, high=4096)
    b = edges.shape[0]
    r = torch.eye(n, dtype=torch.bool, device=edges.device).expand(b, n, n).clone()
    rows = torch.arange(b, device=edges.device)[:, None]
    r[rows, edges[:, :, 0], edges[:, :, 1]] = True
    r[rows, edges[:, :, 1], edges[:, :, 0]] = True
    rounds = 0
    while True:
        f = r.float()
        new = torch.bmm(f, f) > 0
        if torch.equal(new, r):
            return r, rounds
        r, rounds = new, rounds + 1


def doubling_rounds_vs_diameter(family: str, diameters: list[int], *, batch_size: int = 8, seed: int = 0,
                                device: str | torch.device = "cpu") -> list[dict]:
    """Squarings of :func:`doubling_connectivity` on instances of each diameter, checked against the labels."""
    rows = []
    for d in diameters:
        g = sample_graphs(family, d, batch_size, seed=seed + d, device=device)
        r, rounds = doubling_connectivity(g.edges, g.num_nodes)
        ok = bool((r[torch.arange(g.batch_size), g.s, g.t].long() == g.y).all())
        rows.append({"family": family, "D": d, "N": g.num_nodes, "edges": g.num_edges, "squarings": rounds,
                     "layers": rounds + 1, "log2_D": math.log2(d), "correct": ok})
    return rows


def mpc_connectivity_rounds(family: str, diameters: list[int], memory: int = 256, *, seed: int = 0) -> list[dict]:
    """Run :func:`hoplib.mpc.protocols.connected_components_protocol` on one instance per diameter; record its
    hook-and-jump iterations, MPC rounds and Theorem 3.1's transformer depth ``rounds + 1``, and whether its
    labels put s and t together exactly when they are connected."""
    from hoplib.mpc.protocols import connected_components_protocol

    rows = []
    for d in diameters:
        g = sample_graphs(family, d, 1, seed=seed + d)
        labels, st = connected_components_protocol(g.edges[0].numpy(), g.num_nodes, memory, seed=seed)
        same = bool(labels[int(g.s[0])] == labels[int(g.t[0])])
        rows.append({"family": family, "D": d, "N": g.num_nodes, "edges": g.num_edges, "memory": memory,
                     "iterations": st.phases["iterations"], "rounds": st.rounds, "layers": st.rounds + 1,
                     "correct": same == bool(g.y[0]) and len(set(labels.tolist())) == 2})
    return rows


def exact_gnn_depth_vs_diameter(family: str, diameters: list[int], *, batch_size: int = 64, seed: int = 0,
                                device: str | torch.device = "cpu") -> list[dict]:
    """For each D, the accuracy of :func:`exact_reachability_gnn` at depths D - 1 and D, and the smallest depth
    at which it is exact (searched from 0 upward)."""
    dev = get_device(device)
    rows = []
    for d in diameters:
        g = sample_graphs(family, d, batch_size, seed=seed + d, device=dev)
        x = node_features(g)
        acc = {}
        for depth in range(0, d + 1):
            model = exact_reachability_gnn(depth).to(dev)
            with torch.no_grad():
                acc[depth] = float((model(x, g.edges, g.t).argmax(-1) == g.y).float().mean())
        smallest = min(k for k, v in acc.items() if v == 1.0)
        rows.append({"family": family, "D": d, "N": g.num_nodes, "edges": g.num_edges, "smallest_exact_depth":
                     smallest, "acc_at_D": acc[d], "acc_at_D_minus_1": acc[d - 1]})
    return rows


def loukas_depth_scale(n_edges: float, width: float) -> float:
    """Theorem 5.1's scale ``N^{1/4} / sqrt(m)`` (Loukas 2020, Cor. 4.2, constants and logs dropped): the
    depth below which *some* worst-case graph with N edges defeats every width-m message-passing GNN. A scale
    to draw, not a bound for the graphs here."""
    if n_edges <= 0 or width <= 0:
        raise ValueError(f"n_edges and width must be > 0, got {n_edges}, {width}")
    return float(n_edges) ** 0.25 / math.sqrt(width)


# --------------------------------------------------------------------------- training
def _check_train(family: str, diameter: int, depth: int, eval_size: int) -> None:
    check_choice("family", family, FAMILIES)
    check_int("diameter", diameter, low=min_diameter(family))
    check_int("depth", depth, low=0)
    check_int("eval_size", eval_size, low=1)


def _fit_and_score(model: nn.Module, loss_and_acc: Callable[..., tuple[torch.Tensor, torch.Tensor]],
                   config: TrainConfig, device: torch.device, eval_size: int) -> dict[str, float]:
    """Train with the book's one loop (:func:`hoplib.train.optimise`; the batch of step t is drawn with seed
    ``config.seed * 2**24 + t``, below the evaluation seeds), then score ``eval_size`` held-out instances in eval
    mode. Returns the record fields shared by every trained family: accuracy, final loss, seconds."""
    t0 = time.perf_counter()
    hist = optimise(model, lambda step: loss_and_acc(config.seed * 2**24 + step)[0], config, device=device,
                    progress=False, desc="graphs")
    model.eval()
    with torch.no_grad(), autocast(device):
        _, acc = loss_and_acc(_EVAL_SEED_BASE + config.seed, eval_size)
    return {"accuracy": float(acc), "final_loss": float(np.mean(hist["loss"][-20:])),
            "seconds": time.perf_counter() - t0}


def _config(steps: int, batch_size: int, lr: float, seed: int, weight_decay: float) -> TrainConfig:
    """AdamW with linear warmup over the first tenth of the steps, then linear decay to 0."""
    steps = check_int("steps", steps, low=1)
    return TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=max(1, steps // 10),
                       weight_decay=weight_decay, seed=seed)


def train_gnn(family: str, diameter: int, depth: int, *, width: int = 32, aggregation: str = "sum",
              n_random: int = 4, steps: int = 300, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
              eval_size: int = 512, device: str | torch.device = "cpu") -> dict:
    """Train a :class:`MessagePassingGNN` (read at t) on fresh instances every step; return its test accuracy
    on ``eval_size`` held-out instances with the training curve's last losses.

    Training is :func:`hoplib.train.optimise` (AdamW without weight decay, warmup over the first tenth of the
    steps, linear decay to 0), evaluation on instances drawn with seeds disjoint from training's."""
    _check_train(family, diameter, depth, eval_size)
    config = _config(steps, batch_size, lr, seed, weight_decay=0.0)
    dev = get_device(device)
    torch.manual_seed(seed)
    model = MessagePassingGNN(2 + n_random, width, depth, aggregation=aggregation).to(dev)

    def loss_and_acc(data_seed: int, size: int = batch_size):
        g = sample_graphs(family, diameter, size, seed=data_seed, device=dev)
        logits = model(node_features(g, n_random, seed=data_seed), g.edges, g.t).float()
        return F.cross_entropy(logits, g.y), (logits.argmax(-1) == g.y).float().mean()

    scored = _fit_and_score(model, loss_and_acc, config, dev, eval_size)
    return {"model": "gnn", "family": family, "D": diameter, "depth": depth, "width": width,
            "aggregation": aggregation, "n_random": n_random, "steps": steps, **scored}


def train_transformer(family: str, diameter: int, depth: int, *, d_model: int = 64, heads: int = 4,
                      steps: int = 300, batch_size: int = 64, lr: float = 1e-3, seed: int = 0, eval_size: int = 512,
                      weight_decay: float = 0.01, marks: bool = False, device: str | torch.device = "cpu") -> dict:
    """Train a :class:`hoplib.models.GPT` of depth ``depth`` on the serialised instances
    (:func:`hoplib.lower_bounds.graphs.serialise`; loss and answer at the final END token, 2 classes); return its test
    accuracy on ``eval_size`` held-out instances. ``marks=True`` writes the marks of s and t into every
    occurrence of their tokens (the information the GNN gets as node features)."""
    _check_train(family, diameter, depth, eval_size)
    check_int("depth", depth, low=1)
    config = _config(steps, batch_size, lr, seed, weight_decay=weight_decay)
    dev = get_device(device)
    torch.manual_seed(seed)
    probe = sample_graphs(family, diameter, 1)
    n_ids, length = probe.num_nodes, 3 * probe.num_edges + 4
    cfg = GPTConfig(vocab_size=vocab_size(n_ids, marks=marks), n_positions=length, depth=depth, d_model=d_model,
                    heads=heads, n_classes=2)
    model = GPT(cfg).to(dev)

    def loss_and_acc(data_seed: int, size: int = batch_size):
        g = sample_graphs(family, diameter, size, seed=data_seed, device=dev)
        logits = model(serialise(g, n_ids, marks=marks))[:, -1].float()
        return F.cross_entropy(logits, g.y), (logits.argmax(-1) == g.y).float().mean()

    scored = _fit_and_score(model, loss_and_acc, config, dev, eval_size)
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
    """A transformer on the edge set (Corollary 3.3's input): token ``i`` is edge ``(u_i, v_i)``, embedded as
    ``E[u_i] + E[v_i] + E[mark_i]`` (``mark_i``: the edge touches ``s``), with no positions, followed by the
    book's GPT blocks with :class:`BidirectionalAttention`, a final LayerNorm and 2 logits per edge.

    ``forward(edges (B, E, 2), s (B,))`` returns logits (B, E, 2): is edge i in ``s``'s component? With
    ``pairs=True`` the model also has a bilinear read-out of the final residual stream,
    :meth:`same_component_logits` (B, E, E): are edges i and j in the same component?"""

    def __init__(self, n_ids: int, depth: int, *, d_model: int = 64, heads: int = 4, pairs: bool = False):
        super().__init__()
        self.n_ids = check_int("n_ids", n_ids, low=2)
        cfg = GPTConfig(vocab_size=self.n_ids + 2, n_positions=1, depth=depth, d_model=d_model, heads=heads,
                        n_classes=2, attention=BidirectionalAttention())
        self.gpt = GPT(cfg)  # its token embedding, blocks, final LayerNorm and unembedding (wpe is unused)
        if not isinstance(pairs, bool):
            raise TypeError(f"pairs must be a bool, got {pairs!r}")
        self.pair = nn.Linear(d_model, d_model, bias=False) if pairs else None

    def hidden(self, edges: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """(B, E, d_model): the final LayerNorm's output at every edge token."""
        if edges.dim() != 3 or edges.shape[2] != 2 or s.shape != edges.shape[:1]:
            raise ValueError(f"edges must be (B, E, 2) and s (B,), got {tuple(edges.shape)}, {tuple(s.shape)}")
        if int(edges.min()) < 0 or int(edges.max()) >= self.n_ids:
            raise ValueError(f"node names must lie in [0, {self.n_ids})")
        mark = (edges == s[:, None, None]).any(2).long() + self.n_ids
        x = self.gpt.wte(edges).sum(2) + self.gpt.wte(mark)
        for block in self.gpt.blocks:
            x, _ = block(x)
        return self.gpt.ln_f(x)

    def forward(self, edges: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.gpt.unembed(self.hidden(edges, s))

    def same_component_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, E, E) logits ``h_i^T W h_j / sqrt(d)`` from :meth:`hidden`'s output ``h`` (needs ``pairs=True``)."""
        if self.pair is None:
            raise ValueError("this model was built without the pair read-out (pairs=False)")
        return self.pair(h) @ h.transpose(1, 2) / math.sqrt(h.shape[-1])


def edge_labels(batch: GraphBatch) -> torch.Tensor:
    """(B, E) int64: 1 where the edge lies in ``s``'s component (the component labelling of Corollary 3.3)."""
    reach = bfs_distances(batch.edges, batch.num_nodes, batch.s) >= 0
    return reach.gather(1, batch.edges[:, :, 0]).long()


def same_component(batch: GraphBatch) -> torch.Tensor:
    """(B, E, E) float: 1 where edges i and j lie in the same component (the instances have two components)."""
    lab = edge_labels(batch)
    return (lab[:, :, None] == lab[:, None, :]).float()


def train_edge_transformer(family: str, diameter: int, depth: int, *, d_model: int = 64, heads: int = 4,
                           steps: int = 2000, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                           pairs: bool = False, eval_size: int = 512, device: str | torch.device = "cpu") -> dict:
    """Train an :class:`EdgeSetTransformer` of depth ``depth`` to label every edge of fresh instances by
    :func:`edge_labels` (cross-entropy averaged over the edges) and, with ``pairs``, also every pair of edges by
    :func:`same_component` (binary cross-entropy of :meth:`EdgeSetTransformer.same_component_logits`: the
    whole component labelling of Corollary 3.3). Returns the connectivity accuracy (the label of ``t``'s edge
    against ``y``) and the edge accuracy on ``eval_size`` held-out instances."""
    _check_train(family, diameter, depth, eval_size)
    config = _config(steps, batch_size, lr, seed, weight_decay=0.01)
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
        answer = pred.gather(1, at_t[:, None]).squeeze(1)
        return loss, (answer == g.y).float().mean()

    scored = _fit_and_score(model, loss_and_acc, config, dev, eval_size)
    return {"model": "edge-transformer", "family": family, "D": diameter, "depth": depth, "width": d_model,
            "heads": heads, "steps": steps, "target": "edges+pairs" if pairs else "edges",
            "edge_accuracy": edge_acc[-1], **scored}


def depth_sweep(family: str, diameters: list[int], gnn_depths: list[int] | str, tf_depths: list[int], *,
                tf_diameters: list[int] | None = None, gnn: dict | None = None, transformer: dict | None = None,
                seed: int = 0, device: str | torch.device = "cpu", progress: bool = False) -> list[dict]:
    """Train one GNN per (D, depth) for D in ``diameters`` and one transformer per (D, depth) for D in
    ``tf_diameters`` (default: ``diameters``) on ``family``; ``gnn_depths="around"`` means depths D - 1, D, D + 1
    for each D (where the locality bound switches). ``gnn`` and ``transformer`` hold keyword arguments for
    :func:`train_gnn` / :func:`train_transformer`. Diameters below the family's minimum are skipped."""
    check_choice("family", family, FAMILIES)
    if isinstance(gnn_depths, str) and gnn_depths != "around":
        raise ValueError(f"gnn_depths must be a list of depths or 'around', got {gnn_depths!r}")
    low = min_diameter(family)
    jobs = []
    for d in diameters:
        if d < low:
            continue
        gd = [x for x in (d - 1, d, d + 1) if x >= 0] if gnn_depths == "around" else list(gnn_depths)
        jobs += [("gnn", d, k) for k in gd]
    for d in diameters if tf_diameters is None else tf_diameters:
        if d >= low:
            jobs += [("transformer", d, k) for k in tf_depths]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc=f"{family} sweep")
    rows = []
    for kind, d, k in jobs:
        if kind == "gnn":
            rows.append(train_gnn(family, d, k, seed=seed, device=device, **(gnn or {})))
        else:
            rows.append(train_transformer(family, d, k, seed=seed, device=device, **(transformer or {})))
    return rows


def smallest_depth(rows: list[dict], model: str, diameter: int, threshold: float, family: str | None = None
                   ) -> int | None:
    """Smallest trained depth of ``model`` whose accuracy reaches ``threshold`` at diameter D (None if none)."""
    ok = [r["depth"] for r in rows if r["model"] == model and r["D"] == diameter and r["accuracy"] >= threshold
          and (family is None or r["family"] == family)]
    return min(ok) if ok else None


# --------------------------------------------------------------------------- figures
def plot_depth_vs_diameter(exact_rows: list[dict], doubling_rows: list[dict], mpc_rows: list[dict],
                           width: int = 1):
    """Left: depth needed against D: exact GNN (measured smallest depth), pointer doubling (squarings + 1),
    log2 D, and Theorem 5.1's scale N^{1/4}/sqrt(m). Right: the MPC protocol's iterations and Theorem 3.1's
    layers (rounds + 1)."""
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 6.2))
    ax = axes[0]
    for fam in dict.fromkeys(r["family"] for r in exact_rows):
        sel = [r for r in exact_rows if r["family"] == fam]
        ax.plot([r["D"] for r in sel], [r["smallest_exact_depth"] for r in sel], "o-", label=f"exact GNN, {fam}")
        sel = [r for r in doubling_rows if r["family"] == fam]
        ax.plot([r["D"] for r in sel], [r["layers"] for r in sel], "s--", label=f"doubling (squarings + 1), {fam}")
        sel = [r for r in exact_rows if r["family"] == fam]
        ax.plot([r["D"] for r in sel], [loukas_depth_scale(r["edges"], width) for r in sel], ":",
                label=f"N^(1/4)/sqrt(m), m = {width}, {fam}")
    ds = sorted({r["D"] for r in exact_rows})
    ax.plot(ds, [math.log2(d) for d in ds], "k-.", label="log2 D")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("diameter D")
    ax.set_ylabel("layers")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)  # below the data
    ax = axes[1]
    for fam in dict.fromkeys(r["family"] for r in mpc_rows):
        sel = [r for r in mpc_rows if r["family"] == fam]
        ax.plot([r["D"] for r in sel], [r["iterations"] for r in sel], "o-", label=f"hook + jump iterations, {fam}")
    ds = sorted({r["D"] for r in mpc_rows})
    ax.plot(ds, [math.log2(d) for d in ds], "k-.", label="log2 D")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("diameter D")
    ax.set_ylabel("iterations")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    for fam in dict.fromkeys(r["family"] for r in mpc_rows):
        sel = [r for r in mpc_rows if r["family"] == fam]
        ax2.plot([r["D"] for r in sel], [r["layers"] for r in sel], "x:", color="grey")
    ax2.set_ylabel("Theorem 3.1 layers = rounds + 1 (grey)")
    ax2.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    return fig


def plot_learned(rows: list[dict], threshold: float):
    """Left: accuracy against depth, one line per (model, family, D). Right: smallest depth reaching
    ``threshold`` against D for each model and family (missing where none did), with the GNN's bound L >= D
    and log2 D + 1."""
    from hoplib.plots import integer_ticks

    fig, axes = plt.subplots(1, 2, figsize=(8.6, 4.8))
    ds = sorted({r["D"] for r in rows})
    fams = list(dict.fromkeys(r["family"] for r in rows))
    cmap = plt.get_cmap("viridis")
    lines = ["-", "--", ":"]
    for fi, fam in enumerate(fams):
        for i, d in enumerate(ds):
            col = cmap(i / max(1, len(ds) - 1))
            for model, marker in (("gnn", "o"), ("transformer", "s")):
                sel = sorted((r for r in rows if r["D"] == d and r["model"] == model and r["family"] == fam),
                             key=lambda r: r["depth"])
                if sel:
                    axes[0].plot([r["depth"] for r in sel], [r["accuracy"] for r in sel], marker=marker,
                                 ls=lines[fi % 3], color=col, label=f"{model}, {fam}, D = {d}")
        for model, marker in (("gnn", "o"), ("transformer", "s")):
            pts = [(d, smallest_depth(rows, model, d, threshold, family=fam)) for d in ds]
            pts = [(d, k) for d, k in pts if k is not None]
            if pts:
                axes[1].plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ls=lines[fi % 3],
                             label=f"{model}, {fam}: smallest depth")
    axes[0].axhline(threshold, color="grey", lw=0.8)
    axes[0].set_xlabel("depth L")
    axes[0].set_ylabel("test accuracy")
    axes[0].set_ylim(0.4, 1.02)
    axes[0].legend(fontsize="small", ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    axes[1].plot(ds, ds, "k:", label="GNN bound L = D")
    axes[1].plot(ds, [math.log2(d) + 1 for d in ds], "k-.", label="log2 D + 1")
    axes[1].set_xlabel("diameter D")
    axes[1].set_ylabel(f"smallest depth with accuracy >= {threshold}")
    axes[1].legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    for ax in axes:
        integer_ticks(ax, "both" if ax is axes[1] else "x")
    fig.tight_layout()
    return fig


__all__ = ["AGGREGATIONS", "GNNLayer", "MessagePassingGNN", "aggregate", "ball", "depth_sweep",
           "doubling_connectivity", "doubling_rounds_vs_diameter", "exact_gnn_depth_vs_diameter",
           "exact_reachability_gnn", "gnn_accuracy_bound", "loukas_depth_scale", "move_source_to_other_component",
           "mpc_connectivity_rounds", "perturb_outside_ball", "plot_depth_vs_diameter", "plot_learned",
           "smallest_depth", "train_gnn", "train_transformer", "BidirectionalAttention", "BidirectionalSelfAttention",
           "EdgeSetTransformer", "edge_labels", "same_component", "train_edge_transformer"]
