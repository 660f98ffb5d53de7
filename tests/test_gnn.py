"""Tests for hoplib.lower_bounds.graphs (instances, serialisation), hoplib.lower_bounds.gnn (message passing,
training) and the exact GNN and the doubling of chapters/gnn.md (its cells tagged ``reach-code``, run here on
their own, as is its inverse of serialise, tagged ``serialise-code``); the chapter asserts locality."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from _chapters import tagged_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds.gnn import (
    AGGREGATIONS,
    MessagePassingGNN,
    aggregate,
    depths_needed,
    train_gnn,
    train_transformer,
)
from hoplib.lower_bounds.graphs import (
    FAMILIES,
    bfs_distances,
    min_diameter,
    node_features,
    sample_graphs,
    serialise,
    vocab_size,
)

ROOT = Path(__file__).resolve().parent.parent
_CELLS = tagged_cells("gnn", "reach-code")  # the names the chapter's reach-code cells define
parse_serialised = tagged_cells("gnn", "serialise-code")["parse_serialised"]  # the chapter's inverse of serialise
exact_reachability_gnn, doubling_connectivity = _CELLS["exact_reachability_gnn"], _CELLS["doubling_connectivity"]


def _nx(g, i: int) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(range(g.num_nodes))
    graph.add_edges_from(g.edges[i].tolist())
    return graph


family_and_d = st.sampled_from(FAMILIES).flatmap(lambda f: st.tuples(st.just(f), st.integers(min_diameter(f), 9)))


# --------------------------------------------------------------------------- instances
@settings(max_examples=25, deadline=None)
@given(fd=family_and_d, seed=st.integers(0, 10_000))
def test_instances_are_two_components_of_diameter_d_with_labels_matching_networkx(fd, seed):
    family, d = fd
    g = sample_graphs(family, d, 6, seed=seed)
    assert g.num_nodes == 2 * (d + 1 if family == "path" else 2 * d)
    for i in range(g.batch_size):
        graph = _nx(g, i)
        comps = list(nx.connected_components(graph))
        assert len(comps) == 2
        assert all(nx.diameter(graph.subgraph(c)) == d for c in comps)
        if family == "tree":
            assert nx.is_forest(graph)
        if family == "cycle":
            assert all(deg == 2 for _, deg in graph.degree())
        s, t = int(g.s[i]), int(g.t[i])
        assert nx.has_path(graph, s, t) == bool(g.y[i])
        if g.y[i]:
            assert nx.shortest_path_length(graph, s, t) == d


def test_both_classes_have_the_same_degree_sequence():
    for family in FAMILIES:
        g = sample_graphs(family, 5, 200, seed=1)
        degs = {tuple(sorted(d for _, d in _nx(g, i).degree())) for i in range(g.batch_size)
                if family != "tree"}
        assert len(degs) <= 1  # paths and cycles: one shape for both labels
        assert 0.35 < g.y.float().mean() < 0.65


def test_sample_graphs_is_reproducible_and_validates():
    a, b = sample_graphs("tree", 4, 8, seed=3), sample_graphs("tree", 4, 8, seed=3)
    assert torch.equal(a.edges, b.edges) and torch.equal(a.t, b.t)
    assert not torch.equal(a.edges, sample_graphs("tree", 4, 8, seed=4).edges)
    with pytest.raises(ValueError, match="famil"):
        sample_graphs("star", 4, 8)
    with pytest.raises(ValueError, match="diameter"):
        sample_graphs("cycle", 1, 8)


def test_bfs_distances_match_networkx():
    g = sample_graphs("tree", 6, 10, seed=5)
    d = bfs_distances(g.edges, g.num_nodes, g.t)
    for i in range(g.batch_size):
        ref = nx.single_source_shortest_path_length(_nx(g, i), int(g.t[i]))
        assert d[i].tolist() == [ref.get(v, -1) for v in range(g.num_nodes)]


def test_serialise_format_and_round_trip():
    g = sample_graphs("cycle", 3, 4, seed=0)
    ids = serialise(g, n_ids=30)
    n = 30
    assert ids.shape == (4, 3 * g.num_edges + 4)
    assert bool((ids[:, 0] == n + 1).all()) and bool((ids[:, -1] == n + 2).all())
    assert bool((ids[:, 3:-1:3] == n).all())
    assert int(ids.max()) < vocab_size(n)
    edges, s, t = parse_serialised(ids, n)
    assert torch.equal(edges, g.edges) and torch.equal(s, g.s) and torch.equal(t, g.t)
    with pytest.raises(ValueError, match="n_ids"):
        serialise(g, n_ids=3)


def test_serialise_with_marks_marks_every_occurrence_of_s_and_t():
    g = sample_graphs("path", 4, 6, seed=1)
    n = g.num_nodes
    ids = serialise(g, marks=True)
    assert int(ids.max()) < vocab_size(n, marks=True) and vocab_size(n, marks=True) == 3 * n + 3
    edges, s, t = parse_serialised(ids, n)
    assert torch.equal(edges, g.edges) and torch.equal(s, g.s) and torch.equal(t, g.t)
    node_tokens = ids[:, 3:-1].reshape(6, -1, 3)[:, :, 1:]
    assert torch.equal(node_tokens // n == 1, g.edges == g.s[:, None, None])
    assert torch.equal(node_tokens // n == 2, g.edges == g.t[:, None, None])


def test_node_features_marks_s_and_t():
    g = sample_graphs("path", 3, 5, seed=2)
    x = node_features(g, 3, seed=1)
    assert x.shape == (5, g.num_nodes, 5)
    assert torch.equal(x[:, :, 0].argmax(1), g.s) and torch.equal(x[:, :, 1].argmax(1), g.t)
    assert x[:, :, :2].sum().item() == 10


# --------------------------------------------------------------------------- the GNN
def test_aggregate_matches_a_loop_over_neighbours():
    g = sample_graphs("tree", 4, 3, seed=0)
    h = torch.randn(3, g.num_nodes, 5, dtype=torch.float64)
    for how in AGGREGATIONS:
        out = aggregate(h, g.edges, how)
        for i in range(3):
            graph = _nx(g, i)
            for v in range(g.num_nodes):
                nb = torch.stack([h[i, u] for u in graph.neighbors(v)])
                ref = {"sum": nb.sum(0), "mean": nb.mean(0), "max": nb.max(0).values}[how]
                assert torch.allclose(out[i, v], ref)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_exact_gnn_needs_exactly_d_layers(family, aggregation):
    for d in (2, 3, 6):
        g = sample_graphs(family, d, 128, seed=d)
        x = node_features(g)
        with torch.no_grad():
            pred_d = exact_reachability_gnn(d, aggregation)(x, g.edges, g.t).argmax(-1)
            pred_short = exact_reachability_gnn(d - 1, aggregation)(x, g.edges, g.t).argmax(-1)
        assert torch.equal(pred_d, g.y)
        assert bool((pred_short == 0).all())  # every connected instance is missed
        acc_short = float((pred_short == g.y).float().mean())
        assert acc_short <= 0.5 + 0.15  # chance, max(p, 1 - p), up to sampling noise
        hv = exact_reachability_gnn(d, aggregation)
        with torch.no_grad():
            h = hv.embed(x)
            for layer in hv.layers:
                h = layer(h, g.edges)
        dist = bfs_distances(g.edges, g.num_nodes, g.s)
        assert torch.equal(h[:, :, 0] > 0.5, (dist >= 0) & (dist <= d))


def test_model_refuses_an_unknown_aggregation():
    with pytest.raises(ValueError, match="aggregation"):
        MessagePassingGNN(2, 4, 1, aggregation="min")


# --------------------------------------------------------------------------- the log-depth side
def test_doubling_needs_ceil_log2_d_squarings_and_is_correct():
    for family in FAMILIES:
        ds = [2, 3, 4, 5, 8, 9, 16] if family != "path" else [1, 2, 3, 4, 5, 8, 9, 16]
        for d in ds:
            g = sample_graphs(family, d, 4, seed=d)
            r, squarings = doubling_connectivity(g.edges, g.num_nodes)
            assert torch.equal(r[torch.arange(4), g.s, g.t].long(), g.y)
            assert squarings == math.ceil(math.log2(d))


def test_doubling_relation_is_networkx_components():
    g = sample_graphs("tree", 5, 3, seed=9)
    r, _ = doubling_connectivity(g.edges, g.num_nodes)
    for i in range(3):
        comp = {v: j for j, c in enumerate(nx.connected_components(_nx(g, i))) for v in c}
        ref = np.array([[comp[u] == comp[v] for v in range(g.num_nodes)] for u in range(g.num_nodes)])
        assert np.array_equal(r[i].numpy(), ref)


def test_mpc_protocol_labels_components_in_few_iterations():
    from hoplib.mpc.protocols import connected_components_protocol

    for d in (2, 8, 32):
        g = sample_graphs("path", d, 1, seed=d)
        labels, stats = connected_components_protocol(g.edges[0].numpy(), g.num_nodes, 256)
        assert (labels[int(g.s[0])] == labels[int(g.t[0])]) == bool(g.y[0])
        assert len(set(labels.tolist())) == 2
    assert stats.phases["iterations"] < 32  # far fewer than D: hooking and jumping shortcut the path


# --------------------------------------------------------------------------- training (small)
def test_train_gnn_learns_d2_with_enough_depth_and_not_without():
    deep = train_gnn("path", 2, 2, n_random=0, steps=150, width=16, eval_size=256)
    shallow = train_gnn("path", 2, 1, n_random=0, steps=150, width=16, eval_size=256)
    assert deep["accuracy"] > 0.95
    assert shallow["accuracy"] < 0.62  # chance by locality (0.5 +- sampling noise)


def test_gnn_and_transformer_training_use_the_shared_loop_and_report_divergence():
    from hoplib.train import DivergedError

    with pytest.raises(DivergedError, match="diverged"):
        train_gnn("path", 2, 2, n_random=0, steps=20, width=8, eval_size=16, lr=1e30)
    with pytest.raises(DivergedError, match="diverged"):
        train_transformer("path", 2, 1, steps=20, d_model=8, heads=2, eval_size=16, lr=1e30)
    a = train_gnn("cycle", 3, 2, steps=5, width=4, eval_size=32, seed=1)
    b = train_gnn("cycle", 3, 2, steps=5, width=4, eval_size=32, seed=1)
    assert (a["accuracy"], a["final_loss"]) == (b["accuracy"], b["final_loss"])


def test_train_transformer_runs_and_reports():
    r = train_transformer("path", 2, 1, steps=5, d_model=16, heads=2, eval_size=64)
    assert 0.0 <= r["accuracy"] <= 1.0 and r["model"] == "transformer"


def test_depths_needed_reads_the_smallest_solving_depth():
    accs = {2: [1.0, 1.0, 1.0], 4: [0.5, 0.95, 1.0], 8: [0.5, 0.5, 0.5]}
    rows = [{"D": d, "depth": i + 1, "accuracy": a} for d, acc in accs.items() for i, a in enumerate(acc)]
    assert depths_needed(rows, 0.9) == {2: 1, 4: 2, 8: None}


# --------------------------------------------------------------------------- the edge-set transformer
def test_edge_labels_mark_exactly_the_edges_of_the_source_component():
    from hoplib.lower_bounds.gnn import edge_labels

    g = sample_graphs("tree", 4, 8, seed=3)
    labels = edge_labels(g)
    for i in range(g.batch_size):
        comp = nx.node_connected_component(_nx(g, i), int(g.s[i]))
        want = [int(int(u) in comp) for u, _ in g.edges[i].tolist()]
        assert labels[i].tolist() == want and sum(want) == g.num_edges // 2


def test_edge_set_transformer_is_equivariant_to_the_order_and_orientation_of_edges():
    from hoplib.lower_bounds.gnn import EdgeSetTransformer

    torch.manual_seed(0)
    g = sample_graphs("cycle", 3, 4, seed=1)
    model = EdgeSetTransformer(g.num_nodes, 2, d_model=16, heads=2).eval()
    out = model(g.edges, g.s)
    perm = torch.randperm(g.num_edges)
    shuffled = g.edges[:, perm].flip(2)  # another order, every edge written the other way round
    assert out.shape == (4, g.num_edges, 2)
    assert torch.allclose(model(shuffled, g.s), out[:, perm], atol=1e-5)
    with pytest.raises(ValueError, match="node names"):
        model(g.edges + g.num_nodes, g.s)


def test_unmasked_attention_lets_the_first_token_see_the_last():
    from hoplib.lower_bounds.gnn import EdgeSetTransformer

    torch.manual_seed(0)
    g = sample_graphs("path", 3, 2, seed=0)
    model = EdgeSetTransformer(g.num_nodes, 1, d_model=16, heads=2).eval()
    changed = g.edges.clone()
    changed[:, -1] = changed[:, -1].flip(1).roll(1, 0)  # a different last edge
    assert not torch.allclose(model(g.edges, g.s)[:, 0], model(changed, g.s)[:, 0])


@pytest.mark.parametrize("pairs", [False, True])
def test_train_edge_transformer_learns_diameter_two_paths_at_depth_one(pairs):
    from hoplib.lower_bounds.gnn import train_edge_transformer

    r = train_edge_transformer("path", 2, 1, steps=400, d_model=32, heads=2, lr=3e-3, eval_size=256, pairs=pairs)
    assert r["model"] == "edge-transformer" and r["accuracy"] >= 0.9 and r["edge_accuracy"] >= 0.9
    assert r["target"] == ("edges+pairs" if pairs else "edges")


def test_edge_jobs_in_two_worker_processes_give_the_records_of_one_thread_in_process():
    # the chapter trains its live models with map_points(gnn.edge_job, ..., workers=2)
    from hoplib.lower_bounds.gnn import edge_job
    from hoplib.sweep import map_points

    points = [{"family": "path", "diameter": 2, "depth": depth, "steps": 6, "d_model": 16, "heads": 2,
               "eval_size": 32, "pairs": depth == 2, "seed": 3} for depth in (1, 2, 1)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [edge_job(i, p) for i, p in enumerate(points)]
    finally:
        torch.set_num_threads(threads)
    workers = map_points(edge_job, points, workers=2)
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in workers] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in alone]


def test_same_component_is_the_equivalence_relation_of_the_two_components():
    from hoplib.lower_bounds.gnn import EdgeSetTransformer, edge_labels, same_component

    g = sample_graphs("tree", 3, 4, seed=2)
    same, lab = same_component(g), edge_labels(g)
    assert same.shape == (4, g.num_edges, g.num_edges) and torch.equal(same, same.transpose(1, 2))
    assert bool((same.diagonal(dim1=1, dim2=2) == 1).all())
    assert int(same.sum()) == 4 * 2 * (g.num_edges // 2) ** 2  # two components of equal size
    i, j = int(lab[0].argmax()), int(lab[0].argmin())  # an edge in s's component, one outside it
    assert same[0, i, j] == 0
    torch.manual_seed(0)
    model = EdgeSetTransformer(g.num_nodes, 1, d_model=16, heads=2, pairs=True).eval()
    h = model.hidden(g.edges, g.s)
    assert model.same_component_logits(h).shape == same.shape
    assert torch.allclose(model.gpt.unembed(h), model(g.edges, g.s))


# --------------------------------------------------------------------------- scripts/run_gnn.py
def _run_gnn():
    spec = importlib.util.spec_from_file_location("run_gnn", ROOT / "scripts" / "run_gnn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["edge_sweep", "pair_sweep"])
def test_stored_sweeps_were_made_with_the_scripts_cpu_settings(name):
    params = json.loads((ROOT / "results" / "gnn" / "cpu" / f"{name}.json").read_text())["parameters"]
    part = name.split("_")[0]
    assert {k: v for k, v in params.items() if k not in ("chapter", "part", "profile", "device", "seed")} \
        == _run_gnn().settings("cpu", part)


def test_run_gnn_control_run_names_its_steps_and_subset_and_refuses_bad_arguments(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    from cli import run_cli

    main = _run_gnn().main
    path = main(["--out", str(tmp_path), "--profile", "quick", "--diameters", "2", "--depths", "1",
                 "--steps", "3"])
    assert path.name == "edge_sweep_steps3.json"
    stored = json.loads(path.read_text())
    assert (stored["parameters"]["edge_ds"], stored["parameters"]["edge_depths"]) == ([2], [1])
    assert [(r["D"], r["depth"], r["steps"]) for r in stored["data"]] == [(2, 1, 3)]
    deeper = main(["--out", str(tmp_path), "--profile", "quick", "--part", "pair", "--diameters", "2",
                   "--depths", "4", "1", "--steps", "2"])  # a depth beyond the profile's: named in the file
    assert deeper.name == "pair_sweep_steps2_depths1-4.json"
    assert json.loads(deeper.read_text())["data"][0]["target"] == "edges+pairs"
    assert run_cli(main, ["--out", str(tmp_path), "--profile", "quick", "--diameters", "2", "--depths", "1",
                          "--steps", "3"]) == 2
    assert "exists" in capsys.readouterr().err
    assert run_cli(main, ["--out", str(tmp_path), "--profile", "quick", "--diameters", "3"]) == 2
    assert "not in the profile" in capsys.readouterr().err


def test_mpc_components_keeps_memory_below_the_input_and_skips_below_the_protocols_floor():
    from hoplib.lower_bounds.gnn import mpc_components

    row = mpc_components("path", 256, "3/4")
    assert row["memory"] == math.ceil(row["N"] ** 0.75) < row["N"] and row["N"] == 4 * 256
    assert row["correct"] and row["max_memory"] <= row["memory"] and row["rounds"] > row["iterations"]
    assert mpc_components("path", 256, "1/2") is None  # 32 words: below max(128, ...)


def test_stored_mpc_sweep_was_made_with_the_scripts_cpu_settings():
    params = json.loads((ROOT / "results" / "gnn" / "cpu" / "mpc_sweep.json").read_text())["parameters"]
    assert {k.removeprefix("mpc_"): params[k] for k in params if k.startswith("mpc_")} \
        == _run_gnn().MPC_PROFILES["cpu"]


def test_run_gnn_mpc_part_refuses_the_training_options(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    from cli import run_cli

    assert run_cli(_run_gnn().main, ["--out", str(tmp_path), "--part", "mpc", "--steps", "3"]) == 2
    assert "takes none of" in capsys.readouterr().err
