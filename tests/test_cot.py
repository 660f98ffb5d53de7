"""Tests for hoplib.lower_bounds.cot, the chain-of-thought format (Def. 5.5, Cor. 5.6), and for the decoding,
scoring and training of chapters/chain_of_thought.md (its cells tagged ``cot-code``, run here on their own)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jupytext
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hoplib.lower_bounds.cot import CHAINS, CotTask, chain_length, cot_model, hops_listed, lookups_per_token
from hoplib.tasks import find_k, hop_reference

CHAPTER = Path(__file__).resolve().parent.parent / "chapters" / "chain_of_thought.md"
_CELLS: dict = {}  # the names the chapter's cot-code cells define (they import what they use)
exec(compile("\n\n".join(c.source for c in jupytext.read(CHAPTER, fmt="md:myst").cells  # noqa: S102
                          if "cot-code" in c.metadata.get("tags", [])), str(CHAPTER), "exec"), _CELLS)
greedy_decode, cot_errors, train_cot = _CELLS["greedy_decode"], _CELLS["cot_errors"], _CELLS["train_cot"]


def _expected_chain(task: CotTask, letters: np.ndarray, k: int) -> list[str]:
    """The chain written out by hand from hop_reference and find_k, as readable tokens."""
    out = []
    for j in hops_listed(k, task.chain):
        p = int(find_k(letters, j)[-1])
        a = hop_reference(letters, j)[-1]
        if p < 0:
            out.append("~")
            if j < k:
                out.append("~")
            continue
        out.append(f"@{p}")
        if j < k:
            out.append(f"({p},{chr(ord('a') + a)})")
    return out


@pytest.mark.parametrize("chain", CHAINS)
def test_chain_is_the_sequence_of_find_and_hop_values(chain: str) -> None:
    task = CotTask(seq_len=16, alphabet_size=3, max_hops=5, min_hops=0, chain=chain)
    batch = task.sample(300, seed=3)
    for i in range(300):
        k = int(batch.ks[i])
        letters = (batch.prompt[i, 1:] - task.vocab.first_letter).numpy()
        n = int(batch.chain_len[i])
        assert n == chain_length(k, chain)
        assert task.decode(batch.chain[i, :n]) == _expected_chain(task, letters, k)
        assert all(t == "_" for t in task.decode(batch.chain[i, n:]))
        ans = hop_reference(letters, k)[-1]
        assert task.token_str(batch.answer[i]) == ("~" if ans < 0 else chr(ord("a") + ans))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=3, max_size=14), st.integers(1, 6))
def test_full_chain_matches_reference_on_any_letters(seq: list[int], k: int) -> None:
    task = CotTask(seq_len=len(seq) + 2, alphabet_size=4, max_hops=6, chain="full")
    letters = torch.tensor([seq])
    batch = task.from_letters(letters, torch.tensor([k]))
    got = task.decode(batch.chain[0, :int(batch.chain_len[0])])
    assert got == _expected_chain(task, np.array(seq), k)
    assert len(got) == 2 * k - 1


def test_chain_lengths_are_zero_half_and_linear() -> None:
    for k in range(1, 12):
        assert chain_length(k, "none") == 0
        assert chain_length(k, "half") == 2 * math.ceil(k / 2) - 1
        assert chain_length(k, "full") == 2 * k - 1
        assert hops_listed(k, "full") == list(range(1, k + 1))
        half = hops_listed(k, "half")
        assert half[0] in (1, 2) and half == list(range(half[0], k + 1, 2)) and half[-1] == k
    assert all(chain_length(0, c) == 0 for c in CHAINS)


def test_lookups_per_token_add_up_to_2k_and_only_full_needs_one_per_token() -> None:
    for k in range(1, 10):
        for chain in CHAINS:
            look = lookups_per_token(k, chain)
            assert len(look) == chain_length(k, chain) + 1
            assert sum(look) == 2 * k
        assert lookups_per_token(k, "full") == [1] * (2 * k)
        assert lookups_per_token(k, "none") == [2 * k]
        if k >= 2:
            assert max(lookups_per_token(k, "half")) == 3
    assert lookups_per_token(0, "full") == [0]


def test_teacher_forcing_targets_are_chain_then_answer_only() -> None:
    task = CotTask(seq_len=12, alphabet_size=4, max_hops=4, chain="full")
    batch = task.sample(50, seed=1)
    x, y = batch.sequences()
    t0 = task.prompt_length
    assert x.shape == y.shape == (50, task.n_positions)
    assert torch.equal(x[:, :t0], batch.prompt)
    for i in range(50):
        n = int(batch.chain_len[i])
        kept = y[i][y[i] != -100]
        assert kept.tolist() == batch.chain[i, :n].tolist() + [int(batch.answer[i])]
        assert (y[i, :t0 - 1] == -100).all()
        # the input after the prompt is the chain itself (teacher forcing)
        assert x[i, t0:t0 + n].tolist() == batch.chain[i, :n].tolist()


def test_sampling_is_seeded_and_k_fixed_when_asked() -> None:
    task = CotTask(seq_len=12, alphabet_size=4, max_hops=4, chain="half")
    a, b = task.sample(20, seed=5), task.sample(20, seed=5)
    assert torch.equal(a.prompt, b.prompt) and torch.equal(a.chain, b.chain)
    c = task.sample(20, k=3, seed=5)
    assert (c.ks == 3).all() and (c.prompt[:, 0] == 3).all()


@torch.no_grad()
def reference_greedy_decode(model: torch.nn.Module, prompt: list[int], n_new: int) -> list[int]:
    """One sequence, one token at a time, in plain Python: the definition of greedy decoding."""
    model.eval()
    seq = [int(t) for t in prompt]
    for _ in range(n_new):
        logits = model(torch.tensor([seq]))[0, -1].float()
        seq.append(max(range(logits.shape[0]), key=lambda c: float(logits[c])))
    return seq[len(prompt):]


def test_greedy_decode_equals_reference_loop() -> None:
    torch.manual_seed(0)
    task = CotTask(seq_len=10, alphabet_size=3, max_hops=3, chain="full")
    model = cot_model(task, d_model=32, heads=2)
    batch = task.sample(6, k=3, seed=2)
    got = greedy_decode(model, batch.prompt, 5)
    assert got.shape == (6, 5)
    for i in range(6):
        assert got[i].tolist() == reference_greedy_decode(model, batch.prompt[i].tolist(), 5)


class _Oracle(torch.nn.Module):
    """A 'model' that reads the task from the prompt and emits the correct next token (or always ⊥)."""

    def __init__(self, task: CotTask, wrong: bool = False):
        super().__init__()
        self.task, self.wrong = task, wrong
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t0 = self.task.prompt_length
        ks = ids[:, 0]
        batch = self.task.from_letters(ids[:, 1:t0] - self.task.vocab.first_letter, ks)
        seq, _ = batch.sequences()
        full = torch.cat([seq, batch.answer[:, None]], dim=1)
        nxt = full[:, ids.shape[1]]  # only the last position matters for greedy decoding
        if self.wrong:
            nxt = torch.full_like(nxt, self.task.vocab.no_answer)
        logits = torch.zeros(ids.shape[0], ids.shape[1], self.task.vocab_size)
        logits[torch.arange(ids.shape[0]), -1, nxt] = 1.0
        return logits


def test_cot_errors_scores_a_correct_decoder_zero_and_a_wrong_one_one() -> None:
    task = CotTask(seq_len=12, alphabet_size=4, max_hops=3, chain="full")
    good = cot_errors(_Oracle(task), task, n_samples=40, device="cpu")
    assert set(good) == {1, 2, 3}
    assert all(r["error"] == 0.0 and r["chain_exact"] == 1.0 for r in good.values())
    bad = cot_errors(_Oracle(task, wrong=True), task, n_samples=40, device="cpu")
    assert all(r["error"] == 1.0 for r in bad.values())
    assert [good[k]["n_cot"] for k in (1, 2, 3)] == [1, 3, 5]


def test_training_learns_the_trivial_case_and_is_deterministic() -> None:
    # k = 0: the answer is the last letter of the prompt, which one attention layer copies.
    task = CotTask(seq_len=8, alphabet_size=3, max_hops=0, min_hops=0, chain="full")
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = cot_model(task, d_model=32, heads=2)
        hist = train_cot(model, task, steps=150, batch_size=32, lr=1e-2, warmup_steps=10, device="cpu",
                         progress=False)
        losses.append(hist["loss"])
    assert losses[0] == losses[1]
    assert losses[0][-1] < 0.1 < losses[0][0]
    assert cot_errors(model, task, n_samples=100, device="cpu")[0]["error"] == 0.0


def test_training_uses_the_shared_loop_and_reports_divergence() -> None:
    from hoplib.train import DivergedError

    task = CotTask(seq_len=8, alphabet_size=3, max_hops=1)
    with pytest.raises(DivergedError, match="diverged") as info:
        train_cot(cot_model(task, d_model=16, heads=2), task, steps=20, lr=1e30, warmup_steps=1, device="cpu",
                  progress=False)
    assert len(info.value.history["loss"]) < 20
    with pytest.raises(ValueError, match="steps"):
        train_cot(cot_model(task, d_model=16, heads=2), task, steps=2**20, device="cpu", progress=False)


@pytest.mark.slow
def test_one_layer_learns_hop_k_with_the_full_pointer_chain() -> None:
    task = CotTask(seq_len=12, alphabet_size=4, max_hops=3, min_hops=1, chain="full")
    torch.manual_seed(0)
    model = cot_model(task, d_model=64, heads=4)
    train_cot(model, task, steps=600, batch_size=64, lr=3e-3, warmup_steps=50, device="cpu", progress=False)
    errs = cot_errors(model, task, n_samples=200, device="cpu")
    assert errs[1]["error"] <= 0.02 and errs[1]["chain_exact"] >= 0.98
    assert all(e["error"] <= 0.1 for e in errs.values())


def test_an_unknown_chain_is_refused() -> None:
    with pytest.raises(ValueError, match="chain"):
        CotTask(chain="quarter")


def test_width_sweep_script_stores_every_model_and_k_and_refuses_to_overwrite(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / "run_chain_of_thought.py"
    spec = importlib.util.spec_from_file_location("run_chain_of_thought", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = script.main(["--profile", "quick", "--out", str(tmp_path)])
    record = json.loads(out.read_text(encoding="utf-8"))
    s = script.PROFILES["quick"]
    got = sorted((r["seed"], r["d_model"], r["chain"], r["k"]) for r in record["data"])
    assert got == sorted((seed, m, c, k) for seed in s["seeds"] for m in s["widths"] for c in s["chains"]
                         for k in range(1, s["max_hops"] + 1))
    assert all(0 <= r["error"] <= 1 and r["n_cot"] == chain_length(r["k"], r["chain"]) for r in record["data"])
    assert record["parameters"]["widths"] == s["widths"] and not out.with_name("width_sweep.partial.json").exists()
    with pytest.raises(ValueError, match="exists"):
        script.main(["--profile", "quick", "--out", str(tmp_path)])
