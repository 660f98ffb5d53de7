"""MPC protocols agree with direct computations: hop_k with hoplib.tasks.hop, components with networkx (on the
one-or-two-cycles instances of chapters/mpc.md, its cells tagged ``cycles-code``)."""

import math
import tracemalloc

import networkx as nx
import numpy as np
import pytest
from _chapters import tagged_cells
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.mpc import MPCLimitError, MPCNotConvergedError, MPCSimulator, primitives
from hoplib.mpc.primitives import forward_fill, lookup, prefix_counts, reduce_min, sample_sort
from hoplib.mpc.protocols import (
    components_min_memory,
    connected_components_protocol,
    hop_min_memory,
    hop_protocol,
)
from hoplib.tasks import hop

cycles_instance = tagged_cells("mpc", "cycles-code")["cycles_instance"]  # Conjecture 2.4's, chapters/mpc.md's


def _nx_labels(edges, n):
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(np.asarray(edges).tolist())
    ref = np.empty(n, dtype=np.int64)
    for comp in nx.connected_components(g):
        ref[list(comp)] = min(comp)
    return ref


def test_sample_sort_then_forward_fill_sorts_and_links_predecessors_with_audit():
    rng = np.random.default_rng(1)
    keys = rng.permutation(10_000)[:300]
    sim = MPCSimulator(30, 96, audit=True)
    sim.load("t", np.arange(300) % 30, keys[:, None])
    sample_sort(sim, "t", 300)
    forward_fill(sim, "t")
    sim.finish()
    t = sim.table("t")
    order = np.lexsort((t.data[:, 0], t.machine))
    d = t.data[order]
    assert np.all(np.diff(d[:, 0]) > 0)  # globally sorted by (machine, key)
    assert d[0, 1] == 0 and np.all(d[1:, 1] == 1) and np.all(d[1:, 2] == d[:-1, 0])


def test_lookup_with_a_hot_key_stays_within_memory():
    q, s = 60, 128
    sim = MPCSimulator(q, s, audit=True)
    sim.load("d", np.arange(10) % q, np.column_stack([np.arange(10), np.arange(10) * 7]))
    req = np.zeros((200, 3), np.int64)  # 200 requests for key 3: no single machine could answer them all
    req[:, 0], req[:, 1], req[:, 2] = 3, np.arange(200) % q, np.arange(200)
    sim.load("r", req[:, 1], req)
    lookup(sim, "d", "r", "out", value_width=1, n_records=210)
    out = sim.table("out")
    assert sorted(out.data[:, 0].tolist()) == list(range(200))
    assert np.all(out.data[:, 1] == 1) and np.all(out.data[:, 2] == 21)
    assert np.all(out.machine == out.data[:, 0] % q)


def test_reduce_min_delivers_one_minimum_per_target():
    rng = np.random.default_rng(2)
    q, s = 16, 128
    tgt, val = rng.integers(0, 5, 150), rng.integers(0, 50, 150)
    sim = MPCSimulator(q, s, audit=True)
    sim.load("m", np.arange(150) % q, np.column_stack([tgt, val, tgt % q]))
    reduce_min(sim, "m", "out", n_values=50, n_records=150)
    out = sim.table("out")
    got = {int(a): int(b) for a, b in out.data}
    assert got == {t: int(val[tgt == t].min()) for t in np.unique(tgt)}
    assert np.all(out.machine == out.data[:, 0] % q)


@pytest.mark.parametrize("k", [0, 1, 2, 5, 8])
def test_hop_protocol_matches_hop_with_audit(k):
    x = np.random.default_rng(k).integers(0, 3, 120)
    answer, stats = hop_protocol(x, k, 64, audit=True)
    np.testing.assert_array_equal(answer, hop(x, k))
    assert stats.max_memory <= 64


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=300), st.integers(0, 40), st.sampled_from([0, 19, 175]))
def test_hop_protocol_matches_hop_on_random_sequences(xs, k, extra):
    x = np.array(xs, dtype=np.int64)
    memory = hop_min_memory(len(x)) + extra
    answer, stats = hop_protocol(x, k, memory)
    np.testing.assert_array_equal(answer, hop(x, k))
    assert stats.max_memory <= memory


def test_hop_protocol_doubling_rounds_are_two_per_bit_of_k():
    x = np.random.default_rng(0).integers(0, 4, 500)
    for k in (1, 2, 3, 16, 31, 100):
        _, stats = hop_protocol(x, k, 128)
        assert stats.phases["pointer doubling"] == 2 * k.bit_length()


def test_hop_min_memory_grows_like_log_squared():
    assert [hop_min_memory(n) for n in (1, 2, 32, 33, 500, 2000, 4096, 65536)] == [32, 32, 32, 36, 81, 121, 144, 256]


@pytest.mark.parametrize("n", [500, 2000, 4096])
def test_hop_protocol_meets_its_limits_at_its_stated_minimum_memory(n):
    memory = hop_min_memory(n)  # the old protocol promised 32 words and failed here for 1 to 5 of 5 seeds
    for seed in range(5):
        x = np.random.default_rng(seed).integers(0, (4, 2, 26, n, 4)[seed], n)
        answer, stats = hop_protocol(x, 6, memory, seed=seed)
        np.testing.assert_array_equal(answer, hop(x, 6))
        assert stats.max_memory <= memory  # the simulator also enforced the send and receive limits


@pytest.mark.parametrize("n", [500, 2000, 4096])
def test_hop_protocol_rejects_memory_below_its_stated_minimum(n):
    with pytest.raises(ValueError, match=f"at least hop_min_memory\\(N\\).* = {hop_min_memory(n)} words"):
        hop_protocol(np.zeros(n, np.int64), 1, hop_min_memory(n) - 1)


def test_hop_protocol_rejects_inputs_that_would_give_a_wrong_answer():
    for x, k in ((np.array([-1, 2]), 1), (np.array([0.5, 2.0]), 1), (np.array([2**61, 2]), 1), (np.zeros(10), -1)):
        with pytest.raises(ValueError, match="x must hold integer symbols"):
            hop_protocol(x, k, 64)


def test_connected_components_protocol_matches_networkx_with_audit():
    rng = np.random.default_rng(3)
    n = 24
    edges = rng.integers(0, n, (16, 2))
    labels, stats = connected_components_protocol(edges, n, 256, audit=True)
    np.testing.assert_array_equal(labels, _nx_labels(edges, n))
    assert stats.max_memory <= 256


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_connected_components_protocol_matches_networkx_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    edges = rng.integers(0, n, (int(rng.integers(0, n)), 2))
    labels, _ = connected_components_protocol(edges, n, 256)
    np.testing.assert_array_equal(labels, _nx_labels(edges, n))


def test_connected_components_protocol_handles_a_star_whose_centre_is_hot():
    n = 300  # every edge touches vertex 0: unsorted lookups would flood its machine
    edges = np.column_stack([np.zeros(n - 1, np.int64), np.arange(1, n)])
    labels, stats = connected_components_protocol(edges, n, 256)
    assert np.all(labels == 0) and stats.max_memory <= 256


@pytest.mark.parametrize("n", [64, 512])
def test_one_cycle_versus_two_cycles_is_decided(n):
    one, _ = connected_components_protocol(cycles_instance(n, False, 5), n, 256)
    two, _ = connected_components_protocol(cycles_instance(n, True, 5), n, 256)
    assert len(np.unique(one)) == 1 and len(np.unique(two)) == 2


def test_components_protocol_reports_convergence_and_raises_when_cut_short():
    edges = cycles_instance(64, False, 1)
    labels, stats = connected_components_protocol(edges, 64, 256)
    assert stats.converged is True and len(np.unique(labels)) == 1
    with pytest.raises(MPCNotConvergedError, match="did not converge in max_iterations = 1") as info:
        connected_components_protocol(edges, 64, 256, max_iterations=1)
    assert info.value.stats.converged is False and len(np.unique(info.value.labels)) > 1
    unfinished, stats = connected_components_protocol(edges, 64, 256, max_iterations=1, strict=False)
    assert stats.converged is False and len(np.unique(unfinished)) > 1
    labels, stats = connected_components_protocol(edges, 64, 256, max_iterations=stats.phases["iterations"] + 20)
    assert stats.converged is True


def test_prefix_counts_give_every_machine_its_offset_and_the_total_with_audit():
    rng = np.random.default_rng(4)
    q = 23
    machine = np.sort(rng.integers(0, q, 150))
    sim = MPCSimulator(q, 32, audit=True)
    sim.load("t", machine, np.arange(150)[:, None])
    prefix_counts(sim, "t", "pc", fanout=3)
    sim.finish()
    pc = sim.table("pc")
    counts = np.bincount(machine, minlength=q)
    got = pc.data[np.argsort(pc.machine)]
    np.testing.assert_array_equal(got[:, 0], np.cumsum(counts) - counts)
    assert np.all(got[:, 1] == 150)


def test_sample_sort_leaves_every_machine_at_most_its_share_plus_one():
    rng = np.random.default_rng(5)
    n, q = 2000, 125
    sim = MPCSimulator(q, 96)
    sim.load("t", np.arange(n) % q, rng.permutation(10 * n)[:n, None])
    sample_sort(sim, "t", n)
    t = sim.table("t")
    assert np.bincount(t.machine, minlength=q).max() <= -(-n // q)
    order = np.lexsort((t.data[:, 0], t.machine))
    assert np.all(np.diff(t.data[order, 0]) > 0)


def test_a_too_small_memory_for_the_protocol_raises_limit_error():
    sim = MPCSimulator(2, 6)
    with pytest.raises(MPCLimitError):
        sim.load("t", np.zeros(4, np.int64), np.zeros((4, 2), np.int64))


def test_cycles_instance_shapes_and_checks():
    e = cycles_instance(10, True, 0)
    assert e.shape == (10, 2) and len(np.unique(_nx_labels(e, 10))) == 2
    with pytest.raises(ValueError, match="even"):
        cycles_instance(11, False)


@pytest.mark.slow
def test_hop_protocol_on_a_hundred_thousand_words():
    x = np.random.default_rng(7).integers(0, 4, 100_000)
    answer, stats = hop_protocol(x, 37, 1264)
    np.testing.assert_array_equal(answer, hop(x, 37))
    assert stats.max_memory <= 1264 and stats.phases["pointer doubling"] == 2 * (37).bit_length()


@pytest.mark.slow
def test_components_on_larger_cycles_and_random_graphs():
    for two in (False, True):
        labels, stats = connected_components_protocol(cycles_instance(4096, two, 3), 4096, 512)
        assert len(np.unique(labels)) == (2 if two else 1) and stats.max_memory <= 512
    rng = np.random.default_rng(9)
    edges = rng.integers(0, 3000, (2500, 2))
    labels, _ = connected_components_protocol(edges, 3000, 512)
    np.testing.assert_array_equal(labels, _nx_labels(edges, 3000))


def test_connected_components_protocol_rejects_bad_edges():
    with pytest.raises(ValueError, match="edges must name vertices"):
        connected_components_protocol(np.array([[0, 5]]), 5, 128)
    with pytest.raises(ValueError, match="too large"):
        connected_components_protocol(np.zeros((2**19, 2), np.int64), 2**20, components_min_memory(2**20, 2**19))
    with pytest.raises(ValueError, match=r"at least components_min_memory = 169 words for n = 3000, E = 2500"):
        connected_components_protocol(np.zeros((2500, 2), np.int64), 3000, 168)


def _broadcast_count(spl, m, v):  # the plain definition: every record against all its splitters at once
    return (spl[m] <= v[:, None]).sum(axis=1)


def _splitters_with_ties(rng, q, w):  # sorted rows, repeated values, and INT_MAX where a bucket has fewer parts
    spl = np.sort(rng.integers(0, 50, (q, w)), axis=1)
    spl[:, 2 * w // 3:] = np.iinfo(np.int64).max
    return spl


@pytest.mark.parametrize("path", ["scan", "binary search"])
@pytest.mark.parametrize("w", [1, 3, 9, 32, 33, 255])
def test_both_splitter_counts_agree_with_the_broadcast_comparison(monkeypatch, path, w):
    monkeypatch.setattr(primitives, "SCAN_SPLITTERS", 10**9 if path == "scan" else 0)
    rng = np.random.default_rng(w)
    spl = _splitters_with_ties(rng, 40, w)
    m, v = rng.integers(0, 40, 5000), rng.integers(-5, 60, 5000)
    v[:50] = np.iinfo(np.int64).max  # a record equal to the padding counts it too
    np.testing.assert_array_equal(primitives._count_at_most(spl, m, v), _broadcast_count(spl, m, v))
    assert len(primitives._count_at_most(spl, m[:0], v[:0])) == 0


def test_splitter_scan_builds_no_record_by_splitter_array():
    rng = np.random.default_rng(0)
    n, w = 200_000, primitives.SCAN_SPLITTERS
    spl, m, v = _splitters_with_ties(rng, 100, w), rng.integers(0, 100, n), rng.integers(0, 60, n)
    tracemalloc.start()
    try:
        primitives._count_at_most(spl, m, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * w, f"peak {peak / 2**20:.1f} MB; an (n, w) int64 array is {n * w * 8 / 2**20:.0f} MB"


@pytest.mark.parametrize("n, q, s, distinct", [(2000, 125, 96, True), (3000, 50, 640, False),
                                               (100_000, 100, 4096, False), (200_000, 20, 40_000, True)])
def test_sample_sort_routes_the_same_by_scan_binary_search_and_broadcast(monkeypatch, n, q, s, distinct):
    rng = np.random.default_rng(n)  # b = 2, 5, 32, 256 buckets; ties of records with splitters and each other
    keys = rng.permutation(10 * n)[:n] if distinct else rng.integers(0, n // 4, n)
    runs = []
    for scan in (10**9, 0, None):
        monkeypatch.setattr(primitives, "SCAN_SPLITTERS", scan or 0)
        if scan is None:
            monkeypatch.setattr(primitives, "_count_at_most", _broadcast_count)
        sim = MPCSimulator(q, s)
        sim.load("t", np.arange(n) % q, keys[:, None])
        sample_sort(sim, "t", n)
        runs.append((sim.table("t"), sim.stats))
    (first, first_stats) = runs[0]
    for t, stats in runs[1:]:
        np.testing.assert_array_equal(t.machine, first.machine)
        np.testing.assert_array_equal(t.data, first.data)
        assert stats == first_stats
    order = np.lexsort((first.data[:, 0], first.machine))
    np.testing.assert_array_equal(first.data[order, 0], np.sort(keys))


def test_hop_protocol_on_a_million_words_at_delta_three_quarters_stays_under_500_mb():
    n = 1_000_000
    x = np.random.default_rng(3).integers(0, 4, n)
    s = math.ceil(n**0.75)
    tracemalloc.start()
    try:
        answer, stats = hop_protocol(x, 16, s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 500 * 2**20, f"peak {peak / 2**20:.0f} MB"
    np.testing.assert_array_equal(answer, hop(x, 16))
    assert stats.max_memory <= s


def test_components_rounds_are_all_labelled_by_step_with_equal_rounds_per_iteration():
    edges = cycles_instance(128, False, 2)
    _, stats = connected_components_protocol(edges, 128, 256)
    steps = {k: v for k, v in stats.phases.items() if k != "iterations"}
    assert set(steps) == {"lookup: grandparents", "lookup: endpoints", "min: hook and shortcut", "global OR"}
    assert sum(steps.values()) == stats.rounds  # no round outside the four steps
    assert all(v % stats.phases["iterations"] == 0 for v in steps.values())  # the same rounds every iteration
