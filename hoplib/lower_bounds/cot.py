"""One-layer transformers with chain of thought on hop_k (Definition 5.5, Corollary 5.6; the chapter
``chain_of_thought.md`` explains the format, builds a one-layer model by hand, runs Corollary 5.6's reduction,
and decodes, scores and trains the models in its cells tagged ``cot-code``). The full chain for hop_k is
``@p_1 (p_1,a_1) ... @p_k``, a pointer token after each search and a pair token after each fetch, then the
answer; the half chain lists every other hop, ``none`` answers at once. Token ids extend
:class:`hoplib.tasks.Vocab` with n pointer and n·|Σ| pairs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hoplib.models import GPT, GPTConfig
from hoplib.tasks import HopTask, find

CHAINS = ("none", "half", "full")


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
        f = find(letters)  # find^1 at every position; p_j = find^j(N - 1) = f(p_{j-1})
        p, micro, answers = torch.full_like(ks, letters.shape[1] - 1), [], [letters[:, -1]]
        for _ in range(self.hop_task.max_hops):  # @p_j and (p_j, a_j), -1 absorbing
            p = torch.where(p >= 0, f.gather(1, p.clamp(min=0)[:, None])[:, 0], p)
            a = torch.where(p >= 0, letters.gather(1, p.clamp(min=0)[:, None])[:, 0], p)
            pair = self.pair_base + p.clamp(min=0) * self.hop_task.alphabet_size + a.clamp(min=0)
            micro += [torch.where(p >= 0, tok, v.no_answer) for tok in (self.ptr_base + p.clamp(min=0), pair)]
            answers.append(a)
        micro_t = torch.stack(micro, 1) if micro else torch.zeros(b, 1, dtype=torch.long, device=letters.device)
        idx = self._table.to(letters.device)[ks]  # (B, L)
        chain = torch.gather(micro_t, 1, idx.clamp(min=0))
        chain = torch.where(idx >= 0, chain, torch.full_like(chain, v.blank))[:, :self.max_chain]
        ans = torch.stack(answers, 1).gather(1, ks[:, None])[:, 0]  # hop_k at N - 1
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


# --------------------------------------------------------------------------- model
def cot_model(task: CotTask, *, d_model: int = 64, heads: int = 4, depth: int = 1) -> GPT:
    """A :class:`hoplib.models.GPT` (depth 1 by default) sized for ``task``: one class per token id."""
    return GPT(GPTConfig(vocab_size=task.vocab_size, n_positions=task.n_positions, depth=depth, d_model=d_model,
                         heads=heads))
