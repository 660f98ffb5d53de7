"""Tests for hoplib.construction.pointer_programs: exhaustive searches over lookUp / lastOccurrence programs."""

from __future__ import annotations

import numpy as np

from hoplib.construction.pointer_programs import _Machine, probe_sequences, search_programs
from hoplib.tasks import find, find_k


def test_machine_induction_head_is_find():
    x = probe_sequences(20, 30, 3, seed=4)
    m = _Machine(x, 3)
    induction = m.last_occurrence(m.pos.copy(), np.maximum(m.pos - 1, 0))
    assert np.array_equal(induction[:, 1:] - 1, find(x))
    assert np.array_equal(m.compose(induction, induction)[:, 1:] - 1, find_k(x, 2))


def test_probe_sequences_mix_no_repeat_and_repeats():
    x = probe_sequences(10, 40, 4, seed=0)
    assert x.shape == (10, 40) and x.min() >= 0 and x.max() <= 3
    assert not (x[:5, 1:] == x[:5, :-1]).any()
    assert (x[5:, 1:] == x[5:, :-1]).any()


def test_semantic_search_depth_3_reaches_hop_1_and_2_but_not_3():
    res = search_programs(3, ks=range(1, 6), n_seq=24, n=20)
    assert res.found[1] == set()
    assert res.found[2] == {1}
    assert res.found[3] == {1, 2}
    assert res.n_programs[3] > res.n_programs[2] > 0
    witness = res.witnesses[(3, 2)]
    assert witness[0] == "lookUp at t-1" and witness[-1].startswith("answer")
