"""Graph families with a controllable diameter for the connectivity separation (Theorem 5.1 and
Corollaries 3.3 / 3.5 of the paper), batched on the device, and their serialisation as token sequences.

**Instances.** Every instance is a graph on ``N`` nodes made of **two components of one family**, each of
diameter exactly ``D`` and each with two designated *ends* at distance ``D``:

* ``"path"``: a path on ``D + 1`` nodes (ends: its endpoints), ``N = 2(D + 1)``, ``2D`` edges;
* ``"cycle"``: a cycle on ``2D`` nodes (ends: two antipodal nodes), ``N = 4D``, ``4D`` edges (``D >= 2``);
* ``"tree"``: a random tree of diameter exactly ``D`` on ``2D`` nodes: a spine of ``D + 1`` nodes (ends: the
  spine's endpoints) and ``D - 1`` further nodes, each hung below a random earlier node as long as the diameter
  stays ``D`` (``D >= 2``), ``N = 4D``, ``4D - 2`` edges.

The query is a pair ``(s, t)``: ``s`` is an end of the first component; ``t`` is the other end of the same
component (label 1, *connected*, ``dist(s, t) = D``) or an end of the second component (label 0). The two
classes therefore have **the same graph** (same node and edge counts, same degrees); only the place of ``t``
differs. Nodes are then renamed by a uniformly random permutation of ``0..N-1`` (random node labels), the edge
order is shuffled and each edge is written in a random orientation.

This design makes the locality argument exact: for ``L < D`` the ``L``-hop ball around ``t`` (with the mark of
``s`` outside it) has the same distribution in both classes, so any depth-``L`` message-passing GNN read at
``t`` is at chance (see :mod:`hoplib.lower_bounds.gnn`).

**Serialisation** (:func:`serialise`): the token sequence of one instance is ::

    QRY s t  SEP u_1 v_1  SEP u_2 v_2  ...  SEP u_E v_E  END

with node tokens ``0..n_ids-1`` (the node's name), ``SEP = n_ids``, ``QRY = n_ids + 1``, ``END = n_ids + 2``,
so the vocabulary has ``n_ids + 3`` tokens and the length is ``3E + 4``. The query comes first so that a causal
transformer's every position can see it; the answer (0 = not connected, 1 = connected) is read at ``END``.
With ``marks=True`` each occurrence of ``s`` and ``t`` (in the query and in the edges) is written as a marked
token, ``v + n_ids`` for ``s`` and ``v + 2 n_ids`` for ``t`` (vocabulary ``3 n_ids + 3``): the transformer then
gets what the GNN gets as node features, the marks, without having to match names first.
The paper's serialisation (Section 2) is the bare edge list (``2|E|`` vertex tokens); the separators and the
query only add ``O(|E|)`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hoplib._book.device import get_device
from hoplib._book.validate import check_choice, check_int

FAMILIES = ("path", "cycle", "tree")


def component_size(family: str, diameter: int) -> int:
    """Nodes of one component of ``family`` with diameter ``diameter`` (see the module docstring)."""
    check_choice("family", family, FAMILIES)
    d = check_int("diameter", diameter, low=min_diameter(family))
    return d + 1 if family == "path" else 2 * d


def min_diameter(family: str) -> int:
    """Smallest diameter the family supports: 1 for paths, 2 for cycles and trees."""
    check_choice("family", family, FAMILIES)
    return 1 if family == "path" else 2


@dataclass
class GraphBatch:
    """A batch of B connectivity instances of one family and diameter, all on one device.

    ``edges``: (B, E, 2) int64 node names in ``[0, num_nodes)``; ``s``, ``t``: (B,) query nodes; ``y``: (B,)
    int64 labels (1 = s and t connected); ``dist``: (B,) ``dist(s, t)`` (``D`` when connected, -1 otherwise).
    """

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

    def to_networkx(self, i: int):
        """Instance ``i`` as a ``networkx.Graph`` (for checks; networkx is imported lazily)."""
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(range(self.num_nodes))
        g.add_edges_from(self.edges[i].cpu().tolist())
        return g


def _component_edges(family: str, d: int, b: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """(b, E_c, 2) edges of one component on nodes 0..c-1 with ends 0 and d."""
    if family == "path":
        a = torch.arange(d, device=device)
        return torch.stack([a, a + 1], 1).expand(b, d, 2).clone()
    if family == "cycle":
        a = torch.arange(2 * d, device=device)
        return torch.stack([a, (a + 1) % (2 * d)], 1).expand(b, 2 * d, 2).clone()
    # tree: spine 0..d; node j > d hangs below a random earlier node p with depth(p) + 1 <= min(i, d - i),
    # where i is p's spine anchor and depth its distance to the spine (this keeps the diameter at d).
    c = 2 * d
    spine = torch.arange(d + 1, device=device)
    anchor = torch.zeros(b, c, dtype=torch.long, device=device)
    depth = torch.zeros(b, c, dtype=torch.long, device=device)
    anchor[:, : d + 1] = spine
    room = torch.zeros(b, c, dtype=torch.long, device=device)
    room[:, : d + 1] = torch.minimum(spine, d - spine)
    parents = []
    for j in range(d + 1, c):
        allowed = (room[:, :j] - depth[:, :j]) >= 1  # hanging below p keeps every far end within d
        p = torch.multinomial(allowed.float(), 1, generator=gen).squeeze(1)
        rows = torch.arange(b, device=device)
        anchor[:, j] = anchor[rows, p]
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
    """Sample ``batch_size`` connectivity instances (two components of ``family``, each of diameter
    ``diameter``; see the module docstring), generated on ``device`` with a local generator seeded by ``seed``.
    Each instance is connected (``y = 1``) with probability ``p_connected``."""
    check_choice("family", family, FAMILIES)
    d = check_int("diameter", diameter, low=min_diameter(family), high=4096)
    b = check_int("batch_size", batch_size, low=1)
    seed = check_int("seed", seed, low=0, high=2**63 - 1)
    if isinstance(p_connected, bool) or not isinstance(p_connected, (int, float)) or not 0 <= p_connected <= 1:
        raise ValueError(f"p_connected must be a number in [0, 1], got {p_connected!r}")
    dev = get_device(device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    c = component_size(family, d)
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
    n_random = check_int("n_random", n_random, low=0)
    b, n = batch.batch_size, batch.num_nodes
    x = torch.zeros(b, n, 2 + n_random, device=batch.device)
    rows = torch.arange(b, device=batch.device)
    x[rows, batch.s, 0] = 1.0
    x[rows, batch.t, 1] = 1.0
    if n_random:
        gen = torch.Generator(device=batch.device)
        gen.manual_seed(check_int("seed", seed, low=0, high=2**63 - 1))
        x[:, :, 2:] = torch.randn(b, n, n_random, generator=gen, device=batch.device)
    return x


def bfs_distances(edges: torch.Tensor, num_nodes: int, sources: torch.Tensor) -> torch.Tensor:
    """Hop distances (B, N) from ``sources`` (B,) in the undirected graphs ``edges`` (B, E, 2); -1 if
    unreachable. Frontier expansion with ``index_add_``, at most N steps, all on the edges' device."""
    if not isinstance(edges, torch.Tensor) or edges.dim() != 3 or edges.shape[2] != 2:
        raise ValueError(f"edges must be a tensor of shape (B, E, 2), got {getattr(edges, 'shape', type(edges))}")
    n = check_int("num_nodes", num_nodes, low=1)
    b = edges.shape[0]
    dev = edges.device
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
    """Token ids (B, 3E + 4) of ``batch`` in the format ``QRY s t (SEP u v)*E END`` (module docstring).

    ``n_ids`` (default ``batch.num_nodes``) is the number of node names; it must be at least ``num_nodes``,
    and a larger value lets one vocabulary serve several graph sizes. With ``marks=True`` every occurrence of
    s and t carries its mark in the token, ``v + n_ids * (1 if v == s, 2 if v == t, else 0)``, as the GNN's
    input features do (node tokens then fill ``0..3 n_ids - 1``)."""
    n_ids = batch.num_nodes if n_ids is None else check_int("n_ids", n_ids, low=batch.num_nodes)
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
    return (3 if marks else 1) * check_int("n_ids", n_ids, low=1) + 3


def parse_serialised(ids: torch.Tensor, n_ids: int, *, marks: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`serialise`: ``(edges (B, E, 2), s (B,), t (B,))`` from token ids (B, 3E + 4)."""
    n_ids = check_int("n_ids", n_ids, low=1)
    n_node_tokens = 3 * n_ids if marks else n_ids
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or (ids.shape[1] - 4) % 3:
        raise ValueError(f"ids must be a (B, 3E + 4) tensor from serialise, got {getattr(ids, 'shape', None)}")
    if not (bool((ids[:, 0] == n_node_tokens + 1).all()) and bool((ids[:, -1] == n_node_tokens + 2).all())):
        raise ValueError("ids must start with QRY and end with END (see serialise)")
    body = ids[:, 3:-1].reshape(ids.shape[0], -1, 3)
    if not bool((body[:, :, 0] == n_node_tokens).all()):
        raise ValueError("every edge must be preceded by SEP (see serialise)")
    return body[:, :, 1:] % n_ids, ids[:, 1] % n_ids, ids[:, 2] % n_ids


__all__ = ["FAMILIES", "GraphBatch", "bfs_distances", "component_size", "min_diameter", "node_features",
           "parse_serialised", "sample_graphs", "serialise", "vocab_size"]
