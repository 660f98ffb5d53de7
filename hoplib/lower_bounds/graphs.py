"""Connectivity instances with a controlled diameter (Theorem 5.1, Corollaries 3.3 and 3.5 of the paper),
batched on the device, and their serialisation as tokens. An instance is two components of one family (path,
cycle or tree), each of diameter exactly D; s is an end of the first, t the other end of the same component
(connected) or an end of the second, so both classes have the same graph. Names, edge order and orientation
are random.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hoplib._book.device import get_device

FAMILIES = ("path", "cycle", "tree")


def min_diameter(family: str) -> int:
    """Smallest diameter the family supports: 1 for paths, 2 for cycles and trees."""
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
    family: str
    diameter: int

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
    # where i is the spine node p hangs from and depth its distance to the spine (the diameter stays d).
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
    """``batch_size`` instances (module docstring) drawn on ``device`` by a generator seeded with ``seed``;
    each is connected with probability ``p_connected``."""
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
    return GraphBatch(edges, s, t, y, n, family, d)


def node_features(batch: GraphBatch, n_random: int = 0, *, seed: int = 0) -> torch.Tensor:
    """Input features (B, N, 2 + n_random): one-hot marks of s and t, then ``n_random`` standard normal
    features per node (fresh for every instance), which make nodes distinguishable (beyond 1-WL symmetry)."""
    b, n = batch.batch_size, batch.num_nodes
    x = torch.zeros(b, n, 2 + n_random, device=batch.device)
    rows = torch.arange(b, device=batch.device)
    x[rows, batch.s, 0] = 1.0
    x[rows, batch.t, 1] = 1.0
    if n_random:
        gen = torch.Generator(device=batch.device).manual_seed(seed)
        x[:, :, 2:] = torch.randn(b, n, n_random, generator=gen, device=batch.device)
    return x


def bfs_distances(edges: torch.Tensor, num_nodes: int, sources: torch.Tensor) -> torch.Tensor:
    """Hop distances (B, N) from ``sources`` (B,) in the undirected graphs ``edges`` (B, E, 2); -1 if
    unreachable. Frontier expansion with ``index_add_``, at most N steps, all on the edges' device."""
    n, b, dev = num_nodes, edges.shape[0], edges.device
    flat = (edges + (torch.arange(b, device=dev) * n)[:, None, None]).reshape(-1, 2)
    src = torch.cat([flat[:, 0], flat[:, 1]])
    dst = torch.cat([flat[:, 1], flat[:, 0]])
    dist = torch.full((b * n,), -1, dtype=torch.long, device=dev)
    start = sources.to(dev).long() + torch.arange(b, device=dev) * n
    dist[start] = 0
    frontier = torch.zeros(b * n, dtype=torch.bool, device=dev)
    frontier[start] = True
    for step in range(1, n):
        hit = torch.zeros(b * n, dtype=torch.int32, device=dev).index_add_(0, dst, frontier[src].int()) > 0
        new = hit & (dist < 0)
        if not bool(new.any()):
            break
        dist[new] = step
        frontier = new
    return dist.view(b, n)


def serialise(batch: GraphBatch, n_ids: int | None = None, *, marks: bool = False) -> torch.Tensor:
    """Token ids (B, 3E + 4): ``QRY s t (SEP u v)*E END``, node names as tokens ``0..n_ids-1``, then SEP, QRY
    and END. With ``marks`` every occurrence of s and t carries its mark, ``v + n_ids`` for s and
    ``v + 2 n_ids`` for t (the information the GNN gets as node features)."""
    n_ids = batch.num_nodes if n_ids is None else n_ids
    if n_ids < batch.num_nodes:  # names would collide with SEP, QRY, END
        raise ValueError(f"n_ids must be at least num_nodes = {batch.num_nodes}, got {n_ids}")
    b, e = batch.batch_size, batch.num_edges
    n_node_tokens = 3 * n_ids if marks else n_ids
    sep, qry, end = n_node_tokens, n_node_tokens + 1, n_node_tokens + 2
    dev = batch.device
    edges = batch.edges
    s, t = batch.s, batch.t
    if marks:
        edges = edges + n_ids * ((edges == s[:, None, None]).long() + 2 * (edges == t[:, None, None]).long())
        s, t = s + n_ids, t + 2 * n_ids
    body = torch.cat([torch.full((b, e, 1), sep, dtype=torch.long, device=dev), edges], 2).reshape(b, 3 * e)
    head = torch.stack([torch.full_like(s, qry), s, t], 1)
    return torch.cat([head, body, torch.full((b, 1), end, dtype=torch.long, device=dev)], 1)


def vocab_size(n_ids: int, *, marks: bool = False) -> int:
    """Vocabulary size of :func:`serialise` with ``n_ids`` node names (node tokens, SEP, QRY, END)."""
    return (3 if marks else 1) * n_ids + 3


def parse_serialised(ids: torch.Tensor, n_ids: int, *, marks: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`serialise`: ``(edges (B, E, 2), s (B,), t (B,))`` from token ids (B, 3E + 4)."""
    body = ids[:, 3:-1].reshape(ids.shape[0], -1, 3)
    return body[:, :, 1:] % n_ids, ids[:, 1] % n_ids, ids[:, 2] % n_ids
