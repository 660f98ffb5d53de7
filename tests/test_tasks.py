"""Tests of hoplib.tasks: find/hop against the literal definition, HopTask's layout, input validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.tasks import HopTask, find, find_k, hop, hop_reference, letters_to_str, str_to_letters


def find_reference(seq: list[int]) -> list[int]:
    return [next((j for j in range(i, 0, -1) if seq[j - 1] == seq[i]), -1) for i in range(len(seq))]


@st.composite
def sequences(draw, max_len: int = 300, repeats: bool = True):
    a = draw(st.integers(2, 30))
    n = draw(st.integers(1, max_len))
    if repeats:
        return draw(st.lists(st.integers(0, a - 1), min_size=n, max_size=n))
    first = draw(st.integers(0, a - 1))
    steps = draw(st.lists(st.integers(1, a - 1), min_size=n - 1, max_size=n - 1))
    return list(np.cumsum([first, *steps]) % a)


@settings(max_examples=150, deadline=None)
@given(seq=sequences())
def test_find_matches_definition_with_repeats(seq):
    assert find(np.array(seq)).tolist() == find_reference(seq)


@settings(max_examples=150, deadline=None)
@given(seq=sequences(), k=st.integers(0, 40))
def test_hop_matches_reference_with_repeats(seq, k):
    assert hop(np.array(seq), k).tolist() == hop_reference(seq, k)


@settings(max_examples=100, deadline=None)
@given(seq=sequences(repeats=False), k=st.integers(0, 40))
def test_hop_matches_reference_without_immediate_repeats(seq, k):
    assert hop(torch.tensor(seq), k).tolist() == hop_reference(seq, k)


@settings(max_examples=60, deadline=None)
@given(seq=sequences(max_len=80), k=st.integers(1, 20))
def test_hop_k_is_hop_1_iterated_on_pointers(seq, k):
    x = np.array(seq)
    p = find_k(x, k)
    q = find_k(x, k - 1)
    f = find(x)
    expected = np.where(q >= 0, f[np.clip(q, 0, None)], -1)
    assert p.tolist() == expected.tolist()


def test_paper_example_last_position():
    x = str_to_letters("baebcabebdea")
    assert letters_to_str(hop(x, 1))[-1] == "b"
    assert letters_to_str(hop(x, 2))[-1] == "c"


def test_hop_zero_is_identity_and_keeps_type():
    x = np.array([[3, 1, 3, 2]])
    out = hop(x, 0)
    assert isinstance(out, np.ndarray) and out.tolist() == x.tolist()
    t = torch.tensor([[3, 1, 3, 2]], dtype=torch.int32)
    out_t = hop(t, 0)
    assert isinstance(out_t, torch.Tensor) and out_t.device == t.device and out_t.tolist() == t.tolist()


def test_hop_batched_rows_are_independent():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, size=(4, 3, 50))
    out = hop(x, 3)
    assert out.shape == x.shape
    for idx in np.ndindex(4, 3):
        assert out[idx].tolist() == hop_reference(x[idx].tolist(), 3)


def test_hop_with_per_row_k_matches_scalar_k():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, size=(6, 40))
    ks = np.array([0, 1, 2, 5, 9, 16])
    out = hop(x, ks)
    for row, k in enumerate(ks):
        assert out[row].tolist() == hop(x[row], int(k)).tolist()


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((np.array([1, 2]), -1), ValueError, "k must be in"),
        ((np.array([1, 2]), 1.5), TypeError, "k must be an integer"),
        ((np.array([1, 2]), True), TypeError, "k must be an integer"),
        ((np.array([1.0, 2.0]), 1), TypeError, "x must hold integers"),
        ((torch.tensor([1.0]), 1), TypeError, "x must hold integers"),
        (([1, 2], 1), TypeError, "numpy array or a torch tensor"),
        ((np.array(3), 1), ValueError, "at least 1 dimension"),
        ((np.zeros((2, 3), dtype=int), np.array([1, 2, 3])), ValueError, "shape"),
    ],
)
def test_hop_rejects_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        hop(*args)


def test_find_rejects_float_input():
    with pytest.raises(TypeError, match="x must hold integers"):
        find(np.array([0.5]))


# ----------------------------------------------------------------------------- HopTask
def test_hoptask_layout_matches_authors_code():
    task = HopTask()
    inputs, targets = task.sample(64, seed=0)
    assert inputs.shape == targets.shape == (64, 99)
    assert inputs.dtype == targets.dtype == torch.long
    v = task.vocab
    assert (v.first_letter, v.no_answer, v.blank, v.size) == (17, 21, 22, 23)
    assert (inputs[:, 0] <= 16).all() and (inputs[:, 0] >= 0).all()
    assert (inputs[:, 1:] >= 17).all() and (inputs[:, 1:] <= 20).all()
    assert (targets[:, 0] == 22).all()
    assert ((targets[:, 1:] >= 17) & (targets[:, 1:] <= 21)).all()
    letters = inputs[:, 1:] - 17
    assert (letters[:, 1:] != letters[:, :-1]).all(), "no immediate repeats"
    for row in range(64):
        k = int(inputs[row, 0])
        expected = [a + 17 if a >= 0 else 21 for a in hop_reference(letters[row].tolist(), k)]
        assert targets[row, 1:].tolist() == expected


def test_hoptask_k_is_uniform_over_range_and_fixed_k_is_respected():
    task = HopTask(seq_len=20, max_hops=5, min_hops=2)
    inputs, _ = task.sample(3000, seed=1)
    counts = torch.bincount(inputs[:, 0], minlength=6)
    assert counts[:2].sum() == 0
    assert counts[2:].min() > 450  # 600 expected per value
    inputs, _ = task.sample(10, k=4, seed=1)
    assert (inputs[:, 0] == 4).all()


def test_hoptask_letters_are_roughly_uniform():
    task = HopTask(seq_len=100, alphabet_size=4)
    inputs, _ = task.sample(500, seed=2)
    counts = torch.bincount((inputs[:, 1:] - 17).flatten(), minlength=4).double()
    assert ((counts / counts.sum() - 0.25).abs() < 0.02).all()


def test_hoptask_seed_reproduces_and_differs():
    task = HopTask()
    a = task.sample(8, seed=5)
    b = task.sample(8, seed=5)
    c = task.sample(8, seed=6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_hoptask_decode_round_trip():
    task = HopTask(seq_len=12)
    inputs, targets = task.sample(2, k=2, seed=0)
    text = task.decode(inputs)
    assert len(text) == 2 and all(len(t) == 11 for t in text)
    assert text[0][0] == "2" and set(text[0][1:]) <= set("abcd")
    assert task.decode(targets[0])[0] == "_"
    assert HopTask(max_hops=16).decode(torch.tensor([16, 10]))[0] == "@"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seq_len": 2}, "seq_len must be in"),
        ({"alphabet_size": 1}, "alphabet_size must be in"),
        ({"max_hops": 2, "min_hops": 3}, "min_hops must be in"),
        ({"max_hops": -1}, "max_hops must be in"),
    ],
)
def test_hoptask_rejects_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HopTask(**kwargs)


def test_hoptask_sample_rejects_k_outside_the_task():
    task = HopTask(max_hops=4, min_hops=1)
    with pytest.raises(ValueError, match=r"k must be in \[1, 4\]"):
        task.sample(2, k=5)


def test_string_helpers_validate():
    assert letters_to_str(np.array([0, 1, -1])) == "ab~"
    with pytest.raises(ValueError, match="only lowercase"):
        str_to_letters("aB")
    with pytest.raises(TypeError):
        str_to_letters(3)


# ----------------------------------------------------------------------------- inputs that used to pass silently
@pytest.mark.parametrize("x", [np.array([3, -1, 3]), torch.tensor([[0, 1], [-1, 0]])])
def test_hop_rejects_symbols_equal_to_the_no_answer_value(x):
    with pytest.raises(ValueError, match="no answer"):
        hop(x, 1)


def test_hop_rejects_unsigned_values_that_wrap_to_the_no_answer_value():
    x = np.array([2**64 - 1, 5, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(ValueError, match="at most 2\\*\\*63 - 1"):
        hop(x, 1)
    assert hop(np.array([1, 2, 1], dtype=np.uint64), 1).tolist() == [-1, -1, 2]


@pytest.mark.parametrize("fn", [find, lambda x: hop(x, 1), lambda x: find_k(x, 2), lambda x: hop_reference(x, 1)])
def test_masked_arrays_are_rejected_not_silently_unmasked(fn):
    with pytest.raises(TypeError, match="masked"):
        fn(np.ma.array([1, 2, 1, 2], mask=[0, 1, 0, 0]))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (2, 4, 0)])
def test_empty_sequences_give_empty_results(shape):
    x = np.zeros(shape, dtype=np.int64)
    for out in (find(x), find_k(x, 3), hop(x, 3), hop(torch.from_numpy(x), 2)):
        assert tuple(out.shape) == shape
    assert hop(np.zeros((3, 0), np.int64), np.array([0, 1, 2])).shape == (3, 0)


def test_decode_rejects_floats_and_out_of_range_ids():
    task = HopTask(max_hops=4)
    with pytest.raises(TypeError, match="ids must hold integers"):
        task.decode([5.7])
    with pytest.raises(ValueError, match=r"token must be in \[0, 10\], got 11"):
        task.decode(np.array([0, 11]))
    with pytest.raises(ValueError, match="token must be in"):
        task.decode(torch.tensor([-1, 3]))
    with pytest.raises(TypeError, match="masked"):
        task.decode(np.ma.array([1, 2], mask=[0, 1]))
    assert task.decode([4, 5]) == "4a"


def test_letters_to_str_rejects_out_of_range_and_float_letters():
    with pytest.raises(ValueError, match=r"letters in \[0, 25\]"):
        letters_to_str(np.array([0, 26]))
    with pytest.raises(ValueError, match=r"letters in \[0, 25\]"):
        letters_to_str(np.array([-2, 0]))
    with pytest.raises(TypeError, match="integers"):
        letters_to_str(np.array([0.0, 1.0]))
    assert letters_to_str([25, -1]) == "z~"
