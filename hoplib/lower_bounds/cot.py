"""One-layer transformers with chain of thought on hop_k (Definition 5.5, Corollary 5.6; the chapter
``chain_of_thought.md`` explains the format and builds a one-layer model by hand). The full chain for hop_k is
``@p_1 (p_1,a_1) ... @p_k``, a pointer token after each search and a pair token after each fetch, then the answer;
the half chain lists every other hop, ``none`` answers at once. Token ids extend :class:`hoplib.tasks.Vocab`
with n pointer and n·|Σ| pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.device import autocast, get_device
from hoplib.lower_bounds import communication as comm
from hoplib.models import GPT, GPTConfig
from hoplib.tasks import HopTask, find_k, hop
from hoplib.train import TrainConfig, optimise

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


# --------------------------------------------------------------------------- Corollary 5.6's reduction
def cot_protocol_bits(n_new: int, num_players: int, d_model: int, heads: int, n_classes: int) -> int:
    """Bits posted by :func:`simulate_cot_protocol`: per round, P_p..P_2 each post (m + 2H) float32 numbers and
    P_1 posts the next token in ceil(log2 C) bits; n_new = N_CoT + 1 rounds."""
    return n_new * ((num_players - 1) * 32 * (d_model + 2 * heads) + comm.class_bits(n_classes))


def block_softmax_stats(model: GPT, ids: torch.Tensor, pos: torch.Tensor,
                        q: torch.Tensor) -> torch.Tensor:
    """What one player posts: per head, over the keys of its block (tokens ``ids``
    at positions ``pos``), the max score, sum exp(score - max) and
    sum exp(score - max) * value: (H, d + 2) numbers."""
    blk = model.blocks[0]
    x = blk.ln1(model.wte(ids) + model.wpe(pos)).unsqueeze(0)
    _, k, v = (z[0] for z in blk.attn.qkv_heads(x))  # (H, n, d)
    sc = (k @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(q.shape[-1])  # (H, n)
    mx = sc.max(dim=-1).values
    w = torch.exp(sc - mx.unsqueeze(-1))
    return torch.cat([mx.unsqueeze(-1), w.sum(-1, keepdim=True),
                      (w.unsqueeze(-1) * v).sum(1)], dim=-1)


def finish_token(model: GPT, x: torch.Tensor,
                 parts: list[torch.Tensor]) -> torch.Tensor:
    """P_1's step: merge the blocks' statistics into exact softmax attention, then
    finish the layer at the query (projection, residual, MLP, final LayerNorm,
    head): the logits (C,)."""
    blk = model.blocks[0]
    st = torch.stack(parts)  # (P, H, d + 2)
    mx = st[..., 0].max(dim=0).values
    scale = torch.exp(st[..., 0] - mx)  # (P, H)
    num = (scale.unsqueeze(-1) * st[..., 2:]).sum(0)  # (H, d)
    y = num / (scale * st[..., 1]).sum(0).unsqueeze(-1)
    h = x + blk.attn.project(y.unsqueeze(1).unsqueeze(0))[0]
    h = model.ln_f(h + blk.mlp(blk.ln2(h)))
    return (h if model.unembed is None else model.unembed(h))[0]


def _cot_player(model: GPT, prompt: torch.Tensor, block: tuple[int, int], j: int, num_players: int,
                generated: list[int], result: dict[str, torch.Tensor]) -> comm.Player:
    """P_j posts its block's statistics for the current query; P_1 merges them and posts the next token."""
    t0, dev, blk = prompt.shape[0], prompt.device, model.blocks[0]
    ids, pos = prompt[block[0]:block[1]], torch.arange(*block, device=dev)  # P_j's private input

    def play(r: int, board: comm.Blackboard) -> object:
        if r > 1 and len(generated) < r - 1:  # read the previous round's token from P_1's post
            generated.append(comm.bits_to_int(board.last_message(1, r - 1)))
        # the public current token: the prompt's last or the last generated one
        tok = torch.tensor(generated[-1:], device=dev) if generated else prompt[-1:]
        x = model.wte(tok) + model.wpe(torch.tensor([t0 - 1 + len(generated)], device=dev))
        q = blk.attn.qkv_heads(blk.ln1(x).unsqueeze(0))[0][0, :, 0]  # (H, d)
        own = block_softmax_stats(model, ids, pos, q)
        if j > 1:
            return comm.floats_to_bits(own)
        parts = [own] + [comm.bits_to_floats(board.last_message(i, r), own.shape, dev)
                         for i in range(2, num_players + 1)]
        if generated:
            parts.append(block_softmax_stats(model, torch.tensor(generated, device=dev),
                                             torch.arange(t0, t0 + len(generated), device=dev), q))
        logits = result["logits"] = finish_token(model, x, parts)
        return comm.int_to_bits(int(logits.argmax()), comm.class_bits(logits.shape[-1]))
    return play


@torch.no_grad()
def simulate_cot_protocol(model: GPT, prompt: torch.Tensor, n_new: int, num_players: int,
                          blackboard: comm.Blackboard | None = None) -> tuple[list[int], torch.Tensor, int]:
    """Greedy decoding of a ONE-layer :class:`hoplib.models.GPT` as Cor. 5.6's protocol: the prompt (1-D ids) in
    ``num_players`` blocks, P_1 holding the rightmost; generated tokens and the prompt's last token are public;
    round r produces token r. Returns ``(tokens, last_logits, bits)``, tokens equal to :func:`greedy_decode`'s."""
    if model.config.depth != 1:  # the protocol would simulate a different model
        raise ValueError(f"model must have depth 1 (Corollary 5.6 is about one layer), got {model.config.depth}")
    prompt = prompt.to(next(model.parameters()).device)
    generated: list[int] = []
    result: dict[str, torch.Tensor] = {}
    players = [_cot_player(model, prompt, block, j, num_players, generated, result)
               for j, block in sorted(comm.block_bounds(prompt.shape[0], num_players).items())]
    was = model.training
    model.eval()
    try:
        board = comm.run_protocol(players, n_new, blackboard=blackboard)
    finally:
        model.train(was)
    generated.append(comm.bits_to_int(board.output))
    return generated, result["logits"], board.total_bits


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

    def step_loss(step: int) -> torch.Tensor:
        batch = task.sample(batch_size, seed=_TRAIN_SEED_BASE + seed * 2**20 + step, device=dev)
        x, y = batch.sequences()
        logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)

    hist = optimise(model, step_loss, config, device=dev, progress=progress, desc=f"cot {task.chain}")
    return {"loss": hist["loss"], "wall_time_s": hist["wall_time_s"], "steps": hist["steps_done"]}
