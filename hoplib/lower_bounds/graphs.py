"""Connectivity instances of diameter D (Theorem 5.1, Corollaries 3.3 and 3.5), batched, and their tokens. An
instance is two components of one family (path, cycle or tree), each of diameter exactly D; s is an end of the
first, t the other end of the same component (connected) or an end of the second, so both classes have the same
graph. Names, edge order and orientation are random."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hoplib.device import get_device

FAMILIES = ("path", "cycle", "tree")


def min_diameter(family: str) -> int:
    """Smallest diameter the family supports."""
    return 1 if family == "path" else 2


@dataclass
class GraphBatch:
    """B instances: ``edges`` (B, E, 2) node names in ``[0, num_nodes)``, query nodes ``s`` and ``t`` (B,),
    labels ``y`` (B,), 1 where s and t are connected."""

    edges: torch.Tensor
    s: torch.Tensor
    t: torch.Tensor
    y: torch.Tensor
    num_nodes: int

    @property
    def batch_size(self) -> int:
        return self.edges.shape[0]

    @property
    def num_edges(self) -> int:
        return self.edges.shape[1]

    @property
    def device(self) -> torch.device:
        return self.edges.device


def _component_edges(family: str, d: int, b: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """(b, E_c, 2) edges of one component on nodes 0..c-1 with ends 0 and d."""
    if family == "path":
        a = torch.arange(d, device=device)
        return torch.stack([a, a + 1], 1).expand(b, d, 2).clone()
    if family == "cycle":
        a = torch.arange(2 * d, device=device)
        return torch.stack([a, (a + 1) % (2 * d)], 1).expand(b, 2 * d, 2).clone()
    # tree: spine 0..d; node j > d hangs below a random earlier node p with depth(p) + 1 <= min(i, d - i),
    # i the spine node p hangs from, depth its distance to the spine (the diameter stays d)
    c, rows = 2 * d, torch.arange(b, device=device)
    spine = torch.arange(d + 1, device=device)
    depth = torch.zeros(b, c, dtype=torch.long, device=device)
    room = torch.zeros(b, c, dtype=torch.long, device=device)
    room[:, : d + 1] = torch.minimum(spine, d - spine)
    parents = []
    for j in range(d + 1, c):
        allowed = (room[:, :j] - depth[:, :j]) >= 1  # hanging below p keeps every far end within d
        p = torch.multinomial(allowed.float(), 1, generator=gen).squeeze(1)
        depth[:, j] = depth[rows, p] + 1
        room[:, j] = room[rows, p]
        parents.append(p)
    spine_edges = torch.stack([spine[:-1], spine[1:]], 1).expand(b, d, 2)
    if not parents:
        return spine_edges.clone()
    par = torch.stack(parents, 1)
    kids = torch.arange(d + 1, c, device=device).expand(b, -1)
    return torch.cat([spine_edges, torch.stack([par, kids], 2)], 1)


def sample_graphs(family: str, diameter: int, batch_size: int, *, seed: int = 0, device: str | torch.device = "cpu",
                  p_connected: float = 0.5) -> GraphBatch:
    """``batch_size`` instances (module docstring) from ``seed``, each connected with probability ``p_connected``."""
    if family not in FAMILIES or diameter < min_diameter(family):  # else: a graph of another diameter
        raise ValueError(f"no {family!r} instances of diameter {diameter}; families {FAMILIES}")
    d, b, dev = diameter, batch_size, get_device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    c = d + 1 if family == "path" else 2 * d  # nodes of one component
    n = 2 * c
    comp = _component_edges(family, d, b, gen, dev)
    comp2 = _component_edges(family, d, b, gen, dev) + c
    edges = torch.cat([comp, comp2], 1)
    y = (torch.rand(b, generator=gen, device=dev) < p_connected).long()
    s = torch.zeros(b, dtype=torch.long, device=dev)
    t = torch.where(y == 1, torch.full_like(s, d), torch.full_like(s, c + d))
    # random names, edge order and orientation
    perm = torch.argsort(torch.rand(b, n, generator=gen, device=dev), dim=1)
    edges = torch.gather(perm, 1, edges.reshape(b, -1)).reshape(b, -1, 2)
    s, t = perm.gather(1, s[:, None]).squeeze(1), perm.gather(1, t[:, None]).squeeze(1)
    order = torch.argsort(torch.rand(b, edges.shape[1], generator=gen, device=dev), dim=1)
    edges = edges.gather(1, order[:, :, None].expand(-1, -1, 2))
    flip = torch.rand(b, edges.shape[1], generator=gen, device=dev) < 0.5
    edges = torch.where(flip[:, :, None], edges.flip(2), edges)
    return GraphBatch(edges, s, t, y, n)


def node_features(batch: GraphBatch, n_random: int = 0, *, seed: int = 0) -> torch.Tensor:
    """Input features (B, N, 2 + n_random): one-hot marks of s and t, then ``n_random`` standard normal features
    per node, which make nodes distinguishable (beyond 1-WL symmetry)."""
    b, n = batch.batch_size, batch.num_nodes
    x = torch.zeros(b, n, 2 + n_random, device=batch.device)
    rows = torch.arange(b, device=batch.device)
    x[rows, batch.s, 0] = 1.0
    x[rows, batch.t, 1] = 1.0
    if n_random:
        gen = torch.Generator(device=batch.device).manual_seed(seed)
        x[:, :, 2:] = torch.randn(b, n, n_random, generator=gen, device=batch.device)
    return x


def check_nodes(name: str, ids: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``ids``, or a ValueError if one lies outside [0, num_nodes) (indexing would wrap or fail)."""
    if ids.numel() and not bool(((ids >= 0) & (ids < num_nodes)).all()):
        raise ValueError(f"{name} must be node ids in [0, {num_nodes}), got {int(ids.min())}..{int(ids.max())}")
    return ids


def adjacency(edges: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """(B, N, N) boolean adjacency matrices of the undirected graphs ``edges`` (B, E, 2)."""
    b, n = check_nodes("edges", edges, num_nodes).shape[0], num_nodes
    adj = torch.zeros(b, n, n, dtype=torch.bool, device=edges.device)
    rows = torch.arange(b, device=edges.device)[:, None]
    adj[rows, edges[..., 0], edges[..., 1]] = True
    adj[rows, edges[..., 1], edges[..., 0]] = True
    return adj


def bfs_distances(edges: torch.Tensor, num_nodes: int, sources: torch.Tensor) -> torch.Tensor:
    """Hop distances (B, N) from ``sources`` (B,) in the graphs ``edges`` (B, E, 2); -1 if unreachable."""
    adj = adjacency(edges, num_nodes).float()
    dist = torch.full((edges.shape[0], num_nodes), -1, dtype=torch.long, device=edges.device)
    frontier = F.one_hot(check_nodes("sources", sources.to(edges.device).long(), num_nodes), num_nodes).bool()
    for step in range(num_nodes):
        dist[frontier] = step
        frontier = (torch.bmm(frontier.float().unsqueeze(1), adj).squeeze(1) > 0) & (dist < 0)
        if not bool(frontier.any()):
            break
    return dist


def serialise(batch: GraphBatch, n_ids: int | None = None, *,
              marks: bool = False) -> torch.Tensor:
    """Token ids (B, 3E + 4): QRY s t (SEP u v)*E END, node names as tokens
    0..n_ids-1, then SEP, QRY and END. With ``marks`` every occurrence of s and t
    carries its mark, v + n_ids for s and v + 2 n_ids for t (what the GNN gets as
    node features)."""
    n_ids = batch.num_nodes if n_ids is None else n_ids
    if n_ids < batch.num_nodes:  # names would collide with SEP, QRY, END
        raise ValueError(f"n_ids must be at least num_nodes = {batch.num_nodes}")
    edges, s, t = batch.edges, batch.s, batch.t
    if marks:
        is_s, is_t = edges == s[:, None, None], edges == t[:, None, None]
        edges = edges + n_ids * (is_s.long() + 2 * is_t.long())
        s, t = s + n_ids, t + 2 * n_ids
    sep = (3 if marks else 1) * n_ids  # QRY is sep + 1, END sep + 2
    body = torch.cat([torch.full_like(edges[:, :, :1], sep), edges], 2)
    head = torch.stack([torch.full_like(s, sep + 1), s, t], 1)
    end = torch.full_like(s[:, None], sep + 2)
    return torch.cat([head, body.flatten(1), end], 1)


def vocab_size(n_ids: int, *, marks: bool = False) -> int:
    """Vocabulary size of :func:`serialise` with ``n_ids`` node names (node tokens, SEP, QRY, END)."""
    return (3 if marks else 1) * n_ids + 3
