"""Tests of hoplib.evaluate: the paper's per-sample metric, the authors' pooled metric, per-k evaluation."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from hoplib.evaluate import errors_from_predictions, per_k_error, per_k_errors, predictions
from hoplib.tasks import HopTask, hop


class Oracle(nn.Module):
    """A sequence model that computes hop_k exactly (one-hot logits); optionally always says one token."""

    def __init__(self, task: HopTask, constant: int | None = None):
        super().__init__()
        self.task, self.constant = task, constant
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        v = self.task.vocab
        if self.constant is not None:
            target = torch.full_like(ids, self.constant)
        else:
            ans = hop(ids[:, 1:] - v.first_letter, ids[:, 0])
            body = torch.where(ans >= 0, ans + v.first_letter, torch.full_like(ans, v.no_answer))
            target = torch.cat([torch.full_like(ids[:, :1], v.blank), body], dim=1)
        return nn.functional.one_hot(target, v.size).float() + 0 * self.dummy


def test_exact_model_has_zero_error_for_every_k_and_both_metrics():
    task = HopTask(seq_len=30, max_hops=6)
    for metric in ("paper", "pooled"):
        err = per_k_error(Oracle(task), task, n_samples=20, device="cpu", metric=metric)
        assert list(err) == list(range(7))
        assert all(v == 0.0 for v in err.values())


def test_always_no_answer_has_error_one_because_no_answer_targets_are_excluded():
    task = HopTask(seq_len=30, max_hops=4)
    err = per_k_error(Oracle(task, constant=task.vocab.no_answer), task, n_samples=10, device="cpu")
    assert all(v == 1.0 for v in err.values())


def test_paper_and_pooled_metrics_weight_samples_differently():
    task = HopTask(seq_len=6, max_hops=1)
    v = task.vocab
    a, b, na, bl = v.first_letter, v.first_letter + 1, v.no_answer, v.blank
    targets = torch.tensor([[bl, a, b, a, b], [bl, na, na, na, a]])
    pred = torch.tensor([[bl, a, b, a, a], [bl, na, na, na, b]])
    # sample 1: 1 of 4 letters wrong; sample 2: 1 of 1 wrong
    assert errors_from_predictions(pred, targets, task, "paper") == pytest.approx((0.25 + 1.0) / 2)
    assert errors_from_predictions(pred, targets, task, "pooled") == pytest.approx(2 / 5)


def test_evaluation_uses_eval_mode_no_grad_and_restores_mode():
    task = HopTask(seq_len=12, max_hops=2)
    seen = {}

    class Spy(Oracle):
        def forward(self, ids):
            seen["training"], seen["grad"] = self.training, torch.is_grad_enabled()
            return super().forward(ids)

    model = Spy(task).train()
    per_k_error(model, task, n_samples=4, device="cpu")
    assert seen == {"training": False, "grad": False}
    assert model.training


def test_test_samples_are_reproducible_and_seed_dependent():
    task = HopTask(seq_len=20, max_hops=3)
    model = Oracle(task, constant=task.vocab.first_letter)
    a = per_k_error(model, task, n_samples=30, seed=1, device="cpu")
    assert a == per_k_error(model, task, n_samples=30, seed=1, device="cpu")
    assert a != per_k_error(model, task, n_samples=30, seed=2, device="cpu")


def test_records_are_tidy_and_validation_names_arguments():
    task = HopTask(seq_len=12, max_hops=2)
    errors = per_k_errors(Oracle(task), task, n_samples=5, device="cpu")
    assert errors == {"paper": {0: 0.0, 1: 0.0, 2: 0.0}, "pooled": {0: 0.0, 1: 0.0, 2: 0.0}}
    with pytest.raises(ValueError, match="metric"):
        per_k_error(Oracle(task), task, metric="mean", device="cpu")
    with pytest.raises(ValueError, match="seed"):  # test seeds must stay clear of the training streams
        per_k_error(Oracle(task), task, seed=2**30, device="cpu")
    assert predictions(Oracle(task), task.sample(3, seed=0)[0]).shape == (3, 11)


def test_find_pattern_points_at_the_hop_answer_and_scores_itself_one():
    from hoplib.evaluate import alignment_score, find_pattern

    task = HopTask(seq_len=40, max_hops=4)
    x, y = task.sample(6, seed=7)
    for j in range(5):
        m = find_pattern(x, task, j)
        assert torch.all(m[:, 1:].sum(-1) == 1) and torch.all(m[:, 0] == 0)
        assert torch.all(m.triu(diagonal=1) == 0)  # causal: never points ahead
        col = m.argmax(-1)[:, 1:]
        ans = hop(x[:, 1:] - task.vocab.first_letter, j)
        got = torch.gather(x, 1, col) - task.vocab.first_letter
        assert torch.equal(torch.where(ans >= 0, got, ans), ans)  # the attended letter is hop_j's answer
        assert torch.equal(col == 0, ans < 0)  # ⊥ maps to position 0
        assert torch.allclose(alignment_score(m, m), torch.ones(6))
    start = find_pattern(x, task, "start")
    assert torch.all(start[:, 1:, 0] == 1) and start.sum() == 6 * (x.shape[1] - 1)  # every query row -> position 0
    uniform = torch.ones(40 - 1, 40 - 1).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    s = alignment_score(uniform.expand(6, -1, -1), find_pattern(x, task, 1))
    assert torch.all((s > 0) & (s < 0.5))


def test_alignment_scores_have_one_entry_per_layer_head_k_and_pattern():
    from hoplib.evaluate import best_find_per_head
    from hoplib.models import gpt_for_task

    task = HopTask(seq_len=20, max_hops=3)
    model = gpt_for_task(task, depth=3, d_model=32, heads=4).train()
    out = best_find_per_head(model, task, ks=[2], js=(0, 1, 2), n_samples=4, device="cpu")
    assert out["patterns"] == ["prev", "find^0", "find^1", "find^2", "start"]
    assert out["scores"].shape == (3, 4, 1, 5) and torch.all((out["scores"] >= 0) & (out["scores"] <= 1))
    assert model.training


class PatternModel(nn.Module):
    """Attention that is exactly a pattern: layer 1 = (prev, find^1, start), layer 2 = (find^k, find^2, find^0).

    The hop count k is read from the k-token, so head (2, 1) changes role with k, as in Figures 14-15.
    """

    def __init__(self, task: HopTask):
        super().__init__()
        self.task = task
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, ids, return_attention=False):
        from hoplib.evaluate import find_pattern

        def pat(j):
            m = find_pattern(ids, self.task, j)
            m[:, 0, 0] = 1.0  # the k-token attends to itself (rows of a causal softmax sum to 1)
            return m

        ks = ids[:, 0].tolist()
        by_k = torch.stack([pat(k)[b] for b, k in enumerate(ks)])
        atts = [torch.stack([pat("prev"), pat(1), pat("start")], dim=1), torch.stack([by_k, pat(2), pat(0)], dim=1)]
        logits = torch.zeros(*ids.shape, self.task.vocab.size) + 0 * self.dummy
        return (logits, atts) if return_attention else logits


def test_best_find_per_head_recovers_the_planted_patterns_for_every_k():
    from hoplib.evaluate import best_find_per_head

    task = HopTask(seq_len=30, max_hops=4)
    table = best_find_per_head(PatternModel(task), task, n_samples=6, device="cpu")
    names = table["patterns"]
    assert table["ks"] == [0, 1, 2, 3, 4] and names == ["prev"] + [f"find^{j}" for j in range(5)] + ["start"]
    assert table["scores"].shape == (2, 3, 5, 7) and table["best"].shape == (2, 3, 5)
    best = [[[names[int(i)] for i in head] for head in layer] for layer in table["best"]]
    assert best[0] == [["prev"] * 5, ["find^1"] * 5, ["start"] * 5]
    assert best[1][1] == ["find^2"] * 5 and best[1][2] == ["find^0"] * 5
    assert best[1][0] == [f"find^{k}" for k in range(5)]  # the head that follows k
    assert torch.allclose(table["best_score"], torch.ones(2, 3, 5))


def test_best_pattern_heatmap_writes_the_argmax_of_each_cell():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hoplib.evaluate import best_find_per_head
    from hoplib.plots import plot_best_pattern

    task = HopTask(seq_len=24, max_hops=3)
    table = best_find_per_head(PatternModel(task), task, ks=[1, 3], n_samples=4, device="cpu")
    ax = plot_best_pattern(table, plt.figure().gca())
    texts = [t.get_text().split("\n")[0] for t in ax.texts]
    # rows L1 h1..h3, L2 h1..h3; columns k = 1, 3
    assert texts == ["p", "p", "1", "1", "s", "s", "1", "3", "2", "2", "0", "0"]
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["L1 h1", "L1 h2"]
    plt.close("all")
    with pytest.raises(TypeError, match="table"):
        plot_best_pattern({"ks": []})


# ----------------------------------------------------------------------------- models that do not fit the task
class _TinyModel(nn.Module):
    """Embedding + linear map with chosen numbers of embedding rows and output classes."""

    def __init__(self, rows: int, classes: int):
        super().__init__()
        self.emb = nn.Embedding(rows, 8)
        self.out = nn.Linear(8, classes)

    def forward(self, ids):
        return self.out(self.emb(ids))


def test_per_k_error_rejects_a_model_with_too_few_output_classes():
    task = HopTask(seq_len=12, max_hops=2)
    model = _TinyModel(task.vocab_size, task.vocab_size - 2)  # can never predict the last two token ids
    with pytest.raises(ValueError, match="logits per position"):
        per_k_error(model, task, n_samples=4, device="cpu")
    with pytest.raises(ValueError, match="logits per position"):
        per_k_errors(model, task, n_samples=4, device="cpu")


def test_per_k_error_checks_a_gpt_config_against_the_task():
    from hoplib.models import GPT, GPTConfig

    task = HopTask(seq_len=12, max_hops=2)
    few_classes = GPT(GPTConfig(vocab_size=task.vocab_size, n_positions=11, depth=1, d_model=8, heads=1,
                                n_classes=task.vocab_size - 1))
    with pytest.raises(ValueError, match="logits per position"):
        per_k_error(few_classes, task, n_samples=4, device="cpu")


def test_predictions_checks_the_logits_shape():
    task = HopTask(seq_len=12, max_hops=2)
    x = task.sample(2, seed=0)[0]
    assert predictions(_TinyModel(task.vocab_size, 5), x).shape == x.shape  # no class count asked for
    with pytest.raises(ValueError, match="5 logits per position"):
        predictions(_TinyModel(task.vocab_size, 5), x, num_classes=task.vocab_size)
