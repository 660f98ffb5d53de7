"""One-layer transformers with chain of thought on hop_k (Definition 5.5, Corollary 5.6; the chapter
``chain_of_thought.md`` explains the format, builds a one-layer model by hand and runs Corollary 5.6's
reduction). The full chain for hop_k is ``@p_1 (p_1,a_1) ... @p_k``, a pointer token after each search and a pair
token after each fetch, then the answer; the half chain lists every other hop, ``none`` answers at once. Token ids
extend :class:`hoplib.tasks.Vocab` with n pointer and n·|Σ| pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.device import autocast, get_device
from hoplib.models import GPT, GPTConfig
from hoplib.tasks import HopTask, find_k, hop
from hoplib.train import TrainConfig, _step_forward, optimise

CHAINS = ("none", "half", "full")
_EVAL_SEED_BASE = 2**29  # evaluation seeds (per k) and training seeds (per step) are disjoint, below 2**32
_TRAIN_SEED_BASE = 2**31


# --------------------------------------------------------------------------- the format
def hops_listed(k: int, chain: str) -> list[int]:
    """The hops j whose pointer p_j = find^j(N-1) the chain writes: none, every
    other one ending at k, or all."""
    if chain not in CHAINS:
        raise ValueError(f"chain must be one of {CHAINS}, got {chain!r}")
    if chain == "none" or k == 0:
        return []
    if chain == "full":
        return list(range(1, k + 1))
    return list(range(2 - k % 2, k + 1, 2))  # k, k - 2, ..., down to 2 or 1


def micro_steps(k: int, chain: str) -> list[int]:
    """The micro-steps @p_1, (p_1,a_1), @p_2, ..., @p_k (numbered 0..2k-2) that the chain writes: the pair
    of every listed hop but the last, whose letter is the answer."""
    return [i for j in hops_listed(k, chain) for i in ((2 * j - 2, 2 * j - 1) if j < k else (2 * j - 2,))]


def chain_length(k: int, chain: str) -> int:
    """N_CoT in tokens: 0 (none), 2 ceil(k/2) - 1 (half), 2k - 1 (full); 0 for k = 0."""
    return len(micro_steps(k, chain))


def lookups_per_token(k: int, chain: str) -> list[int]:
    """For each generated token (the chain, then the answer a_k at micro-step 2k - 1): the dependent lookups
    between it and the token before it (the last input letter, at -1, for the first one)."""
    steps = [-1, *micro_steps(k, chain), 2 * k - 1]
    return [b - a for a, b in zip(steps, steps[1:], strict=False)]


@dataclass
class CotBatch:
    """``prompt`` (B, T0), ``chain`` (B, L) padded with the blank, ``chain_len``, ``answer`` and ``ks`` (B,)."""

    prompt: torch.Tensor
    chain: torch.Tensor
    chain_len: torch.Tensor
    answer: torch.Tensor
    ks: torch.Tensor
    blank: int

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: targets are the chain and the answer, -100 on the prompt and the padding."""
        t0, L = self.prompt.shape[1], self.chain.shape[1]
        full = torch.cat([self.prompt, self.chain, torch.full_like(self.answer[:, None], self.blank)], dim=1)
        idx = torch.arange(L + 1, device=full.device).unsqueeze(0)
        full[:, t0:] = torch.where(idx == self.chain_len[:, None], self.answer[:, None], full[:, t0:])
        inputs, targets = full[:, :-1], full[:, 1:].clone()
        keep = torch.zeros_like(targets, dtype=torch.bool)
        keep[:, t0 - 1:] = idx <= self.chain_len[:, None]
        return inputs, targets.masked_fill(~keep, -100)


class CotTask:
    """hop_k with chain of thought: :class:`hoplib.tasks.HopTask` prompts (the k-token, then n = seq_len - 2
    letters) followed by the chain ``chain`` and the answer; k uniform in [min_hops, max_hops] unless fixed."""

    def __init__(self, seq_len: int = 20, alphabet_size: int = 4, max_hops: int = 4, min_hops: int = 1,
                 chain: str = "full"):
        self.hop_task = HopTask(seq_len=seq_len, alphabet_size=alphabet_size, max_hops=max_hops, min_hops=min_hops)
        self.chain = chain
        self.vocab = self.hop_task.vocab
        self.n_letters = seq_len - 2
        self.ptr_base = self.vocab.size
        self.pair_base = self.vocab.size + self.n_letters
        self.max_chain = max(chain_length(k, chain) for k in range(min_hops, max_hops + 1))
        table = torch.full((max_hops + 1, max(1, self.max_chain)), -1, dtype=torch.long)
        for k in range(min_hops, max_hops + 1):
            idx = micro_steps(k, chain)
            table[k, :len(idx)] = torch.tensor(idx, dtype=torch.long)
        self._table = table

    @property
    def vocab_size(self) -> int:
        """k-tokens, letters, ⊥, blank, n pointer tokens and n·|Σ| pair tokens."""
        return self.pair_base + self.n_letters * self.hop_task.alphabet_size

    @property
    def prompt_length(self) -> int:
        return self.hop_task.length

    @property
    def n_positions(self) -> int:
        """Longest model input: the prompt and the longest chain (the answer is never fed back)."""
        return self.prompt_length + self.max_chain

    def from_letters(self, letters: torch.Tensor, ks: torch.Tensor) -> CotBatch:
        """The batch for letters (B, n) in 0..|Σ|-1 and hop counts ks (B,), on the letters' device."""
        v, b = self.vocab, letters.shape[0]
        micro = []
        for j in range(1, self.hop_task.max_hops + 1):  # @p_j and (p_j, a_j), from hoplib.tasks only
            p, a = find_k(letters, j)[:, -1], hop(letters, j)[:, -1]
            pair = self.pair_base + p.clamp(min=0) * self.hop_task.alphabet_size + a.clamp(min=0)
            micro += [torch.where(p >= 0, tok, v.no_answer) for tok in (self.ptr_base + p.clamp(min=0), pair)]
        micro_t = torch.stack(micro, 1) if micro else torch.zeros(b, 1, dtype=torch.long, device=letters.device)
        idx = self._table.to(letters.device)[ks]  # (B, L)
        chain = torch.gather(micro_t, 1, idx.clamp(min=0))
        chain = torch.where(idx >= 0, chain, torch.full_like(chain, v.blank))[:, :self.max_chain]
        ans = hop(letters, ks)[:, -1]
        answer = torch.where(ans >= 0, ans + v.first_letter, torch.full_like(ans, v.no_answer))
        prompt = torch.cat([ks.unsqueeze(1), letters + v.first_letter], dim=1)
        return CotBatch(prompt, chain, (idx >= 0).sum(dim=1), answer, ks, v.blank)

    def sample(self, batch_size: int, k: int | None = None, seed: int | None = None,
               device: str | torch.device | None = None) -> CotBatch:
        """Letters as in :meth:`HopTask.draw`, k uniform (or fixed), on ``device`` (CPU if None)."""
        return self.from_letters(*self.hop_task.draw(batch_size, k, seed, device))

    def token_str(self, token: int) -> str:
        """Readable token: k-tokens '0'.., letters 'a'.., ⊥ '~', blank '_', pointers '@p', pairs '(p,a)'."""
        token = int(token)
        if token < self.ptr_base:
            return self.vocab.token_char(token)
        if token < self.pair_base:
            return f"@{token - self.ptr_base}"
        p, a = divmod(token - self.pair_base, self.hop_task.alphabet_size)
        return f"({p},{chr(ord('a') + a)})"

    def decode(self, ids: torch.Tensor | list[int]) -> list[str]:
        """Readable tokens of a 1-D id sequence."""
        return [self.token_str(t) for t in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]


# --------------------------------------------------------------------------- model, decoding
def cot_model(task: CotTask, *, d_model: int = 64, heads: int = 4, depth: int = 1) -> GPT:
    """A :class:`hoplib.models.GPT` (depth 1 by default) sized for ``task``: one class per token id."""
    return GPT(GPTConfig(vocab_size=task.vocab_size, n_positions=task.n_positions, depth=depth, d_model=d_model,
                         heads=heads))


@torch.no_grad()
def greedy_decode(model: nn.Module, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """The ``n_new`` tokens (B, n_new) that greedy decoding appends to ``prompt`` (B, T0), in eval mode."""
    was = model.training
    model.eval()
    try:
        ids = prompt
        for _ in range(n_new):
            with autocast(ids.device):
                logits = model(ids)
            ids = torch.cat([ids, logits[:, -1].float().argmax(dim=-1, keepdim=True)], dim=1)
        return ids[:, prompt.shape[1]:]
    finally:
        model.train(was)


def cot_errors(model: nn.Module, task: CotTask, *, ks: list[int] | None = None, n_samples: int = 200,
               seed: int = 0, device: str | torch.device = "auto", batch_size: int = 1000) -> dict[int, dict]:
    """Per k, greedy decoding of chain and answer: ``error`` among letter answers (⊥ left out, as in
    :mod:`hoplib.evaluate`) and ``chain_exact``, the share of exact chains; seeds disjoint from training's."""
    t = task.hop_task
    ks = list(range(t.min_hops, t.max_hops + 1)) if ks is None else ks
    dev = get_device(device)
    out = {}
    for k in ks:
        batch = task.sample(n_samples, k=k, seed=_EVAL_SEED_BASE + seed + k, device=dev)
        n_cot = chain_length(k, task.chain)
        gen = torch.cat([greedy_decode(model, batch.prompt[i:i + batch_size], n_cot + 1)
                         for i in range(0, n_samples, batch_size)])
        letter = batch.answer != task.vocab.no_answer
        wrong = (gen[:, -1] != batch.answer) & letter
        chain_ok = (gen[:, :n_cot] == batch.chain[:, :n_cot]).all(dim=1)
        n_ans = int(letter.sum())
        out[k] = {"error": float(wrong.sum()) / n_ans if n_ans else float("nan"),
                  "chain_exact": float(chain_ok.double().mean()), "n_answered": n_ans, "n_cot": n_cot}
    return out


# --------------------------------------------------------------------------- training
def train_cot(model: nn.Module, task: CotTask, *, steps: int, batch_size: int = 64, lr: float = 3e-3,
              warmup_steps: int = 50, weight_decay: float = 0.01, seed: int = 0,
              device: str | torch.device = "auto", progress: bool = True) -> dict[str, Any]:
    """Teacher forcing with :func:`hoplib.train.optimise`: cross-entropy on the chain and answer tokens only, the
    batch of step t drawn with seed 2**31 + seed * 2**20 + t."""
    if steps >= 2**20:  # training seeds would run into the next seed's
        raise ValueError(f"steps must be < 2**20, got {steps}")
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps,
                         weight_decay=weight_decay, seed=seed)
    dev = get_device(device)
    model.to(dev)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return task.sample(batch_size, seed=_TRAIN_SEED_BASE + seed * 2**20 + step, device=dev).sequences()

    forward = _step_forward(model, False, batch(0)[0])  # a GPT's ids are checked once, not at every step

    def step_loss(step: int) -> torch.Tensor:
        x, y = batch(step)
        logits = forward(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)

    hist = optimise(model, step_loss, config, device=dev, progress=progress, desc=f"cot {task.chain}")
    return {"loss": hist["loss"], "wall_time_s": hist["wall_time_s"], "steps": hist["steps_done"]}
