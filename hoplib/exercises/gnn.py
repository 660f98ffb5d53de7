"""Checkers for the exercises of the GNN chapter: one reachability layer, and the squarings of doubling."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from hoplib.exercises import CheckResult, check_function, to_list
from hoplib.lower_bounds.gnn import doubling_connectivity, exact_reachability_gnn
from hoplib.lower_bounds.graphs import FAMILIES, sample_graphs


def _reach_layer(h: np.ndarray, edges: np.ndarray) -> torch.Tensor:
    model = exact_reachability_gnn(1, "max")
    x = torch.zeros(1, len(h), 2)
    x[0, :, 0] = torch.as_tensor(h, dtype=torch.float32)
    with torch.no_grad():
        return model.layers[0](model.embed(x), torch.as_tensor(edges)[None])[0, :, 0]


def check_reach_layer(user_layer: Callable[[np.ndarray, np.ndarray], object]) -> CheckResult:
    """Check ``user_layer(h, edges)``: one layer of the reachability GNN, ``h'_v = 1`` if ``h_v = 1`` or some
    neighbour u of v (an edge (u, v) or (v, u) in ``edges``, shape (E, 2)) has ``h_u = 1``, else 0. ``h`` is a
    0/1 integer array over the nodes; the answer is compared as a list of ints."""
    cases = []
    rng = np.random.default_rng(0)
    for i, family in enumerate(FAMILIES * 2):
        g = sample_graphs(family, 3 + i % 3, 1, seed=i)
        h = np.zeros(g.num_nodes, dtype=np.int64)
        h[rng.choice(g.num_nodes, size=1 + i % 3, replace=False)] = 1
        cases.append((h, g.edges[0].numpy()))
    cases.append((np.array([0, 0, 1], dtype=np.int64), np.zeros((0, 2), dtype=np.int64)))  # no edges at all
    return check_function(lambda h, edges: user_layer(h.copy(), edges.copy()), _reach_layer, cases,
                          name="your layer", describe="h, edges", answer=lambda out: [round(v) for v in to_list(out)])


def check_squarings(user_count: Callable[[str, int], int]) -> CheckResult:
    """Check ``user_count(family, D)``: the squarings of ``R = I + A`` that change R, as measured by
    :func:`hoplib.lower_bounds.gnn.doubling_connectivity`."""

    def measured(family: str, diameter: int) -> int:
        g = sample_graphs(family, diameter, 2, seed=diameter)
        return doubling_connectivity(g.edges, g.num_nodes)[1]

    cases = [("path", d) for d in (1, 2, 3, 4, 7, 8, 9, 33)] + [("cycle", d) for d in (2, 5, 16)] + [
        ("tree", d) for d in (2, 6, 17)]
    return check_function(user_count, measured, cases, name="your count", describe="family, D")
