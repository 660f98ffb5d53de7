"""One-layer transformers with chain of thought on hop_k (Definition 5.5 and Corollary 5.6 of the paper).

Definition 5.5: a transformer computes f with N_CoT extra tokens if, for every input X, the outputs at positions
N, ..., N + N_CoT are (X_CoT, f(X)) for some chain X_CoT: the model writes its own chain of thought, token by
token (each generated token is fed back as the next input), then the answer. Corollary 5.6: a *one-layer*
masked transformer that computes hop_k(X)_N this way needs N_CoT >= k, or width mHp = Omega(N / k^6). The paper
also says, without a formal statement, that a chain linear in k suffices. This module gives the data format,
training with teacher forcing and evaluation by greedy decoding to test both sides.

Why the chain lists pointers, not only letters
----------------------------------------------
With one layer, the output at a position is a token-wise function of that position's token and of one round of
attention (several heads, but in parallel: no head can use another head's result). Queries are computed from
the current token alone, and keys and values at an input position j from (x_j, j) alone. So each generated
token can do ONE lookup whose query is known from the token it sits on. One hop, p -> find(p), is two
dependent lookups:

1. *search*: knowing the letter a = x_p and the position p, find the last q < p with x_q = a (a
   "lastOccurrence" head: score = [x_q = a] + recency below p); then find(p) = q + 1;
2. *fetch*: knowing the position p' = q + 1, read the letter x_{p'} (a "lookUp" head; the key at q cannot know
   x_{q+1}, so this cannot be merged into step 1).

A letter-only chain hop_1(X)_N, ..., hop_{k-1}(X)_N does not work: a letter does not say *where* it was read
(letters repeat), so the search of the next hop has no threshold p. The format here writes the state of the
computation after each lookup as a token:

* a *pointer* token ``@p`` (the position p_j = find^j(N-1)), produced by a search, and
* a *pair* token ``(p, a)`` (position and letter a_j = x_{p_j}), produced by a fetch at ``@p``,

so the full chain for hop_k is ``@p_1 (p_1,a_1) @p_2 (p_2,a_2) ... @p_k`` followed by the answer a_k, which is
fetched at ``@p_k``: N_CoT = 2k - 1 tokens, each one lookup away from the token before it (the first search is
done at the last input position, whose token and position are (x_{N-1}, N-1) for free). This is linear in k,
as the paper's remark says; the lower bound asks for N_CoT >= k, and one layer cannot do better than one
lookup per token, so the factor 2 is the price of splitting each hop into its two dependent lookups.

Chains (``chain`` argument):

* ``"none"``: N_CoT = 0, the answer right after the input (2k dependent lookups in one token);
* ``"half"``: only every other hop is listed, hops j = k, k-2, ... >= 1, each as ``@p_j (p_j,a_j)`` except the
  last as ``@p_k`` alone: N_CoT = 2 ceil(k/2) - 1 tokens, and each listed pointer is 3 lookups after the previous
  token (a k = 2 chain is the single token ``@p_2``);
* ``"full"``: every hop listed, N_CoT = 2k - 1 tokens, one lookup per token.

Where the chain breaks (find^j = ⊥), its remaining tokens and the answer are the ⊥ token. For k = 0 the
answer is x_{N-1} and every chain is empty.

What is here: :class:`CotTask` (the format, sampled on the device), :func:`train_cot` (teacher forcing, loss
on chain and answer only), :func:`greedy_decode` and :func:`cot_errors` (the model writes its own chain),
:class:`CotConstruction` (a hand-built one-layer transformer that follows the full chain exactly),
:func:`simulate_cot_protocol` (Corollary 5.6's reduction: greedy decoding of a one-layer GPT as an
(N_CoT + 1)-round blackboard protocol with O(mH) numbers per player and round, bits counted exactly) and
:func:`run_cot_experiment` (error against k for the three chains).

Token ids extend :class:`hoplib.tasks.Vocab` (k-tokens, letters, ⊥, blank) with n pointer tokens and n·|Σ| pair
tokens, n = N the number of letters; prompts are exactly :class:`hoplib.tasks.HopTask` inputs (k-token, then the
letters), and every chain is computed with :func:`hoplib.tasks.find_k` and :func:`hoplib.tasks.hop`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from hoplib._book.device import autocast, get_device
from hoplib._book.validate import check_choice, check_int
from hoplib.lower_bounds import communication as comm
from hoplib.models import GPT, GPTConfig
from hoplib.tasks import HopTask, find_k, hop
from hoplib.train import TrainConfig, optimise

__all__ = [
    "CHAINS",
    "CotBatch",
    "CotConstruction",
    "CotTask",
    "chain_length",
    "cot_errors",
    "cot_model",
    "cot_protocol_bits",
    "greedy_decode",
    "hops_listed",
    "lookups_per_token",
    "plot_cot_errors",
    "reference_greedy_decode",
    "run_cot_experiment",
    "simulate_cot_protocol",
    "train_cot",
]

CHAINS = ("none", "half", "full")
"""The chain-of-thought lengths of the experiment: N_CoT = 0, about k/2 hops, k hops."""

_EVAL_SEED_BASE = 2**29  # evaluation seeds (per k) and training seeds (per step) are disjoint, below 2**32
_TRAIN_SEED_BASE = 2**31


# --------------------------------------------------------------------------- the format
def hops_listed(k: int, chain: str) -> list[int]:
    """The hops j whose pointer p_j = find^j(N-1) the chain writes: [] , [k, k-2, ...] reversed, or 1..k."""
    k = check_int("k", k, low=0)
    check_choice("chain", chain, CHAINS)
    if chain == "none" or k == 0:
        return []
    if chain == "full":
        return list(range(1, k + 1))
    return list(range(2 - k % 2, k + 1, 2))


def chain_length(k: int, chain: str) -> int:
    """N_CoT in tokens: 0 (none), 2 ceil(k/2) - 1 (half), 2k - 1 (full); 0 for k = 0."""
    listed = hops_listed(k, chain)
    return 2 * len(listed) - 1 if listed else 0


def lookups_per_token(k: int, chain: str) -> list[int]:
    """For each generated token (the N_CoT chain tokens, then the answer), how many dependent lookups separate
    it from the token before it (the last input letter for the first one).

    A hop is a search then a fetch; the micro-steps are @p_1, (p_1,a_1), @p_2, ..., @p_k, a_k (2k of them), and a
    written token that skips micro-steps must do their lookups in the same token. ``"full"`` needs 1 lookup
    per token, ``"half"`` 3 before each listed pointer, ``"none"`` 2k in the single answer token (0 for k = 0).
    One layer can do one lookup per token, so only the full chain is within its reach.
    """
    idx = _micro_indices(k, chain) + [2 * k - 1]
    prev = -1
    out = []
    for i in idx:
        out.append(i - prev)
        prev = i
    return out


def _micro_indices(k: int, chain: str) -> list[int]:
    """Indices into the micro-step list [@p_1, (p_1,a_1), @p_2, (p_2,a_2), ...] that the chain writes."""
    out = []
    for j in hops_listed(k, chain):
        out.append(2 * (j - 1))
        if j < k:
            out.append(2 * (j - 1) + 1)
    return out


class CotBatch:
    """A batch of chain-of-thought samples: ``prompt`` (B, T0), ``chain`` (B, L) padded with the blank,
    ``chain_len`` (B,), ``answer`` (B,) and ``ks`` (B,), all LongTensors on one device."""

    def __init__(self, prompt: torch.Tensor, chain: torch.Tensor, chain_len: torch.Tensor, answer: torch.Tensor,
                 ks: torch.Tensor, blank: int):
        self.prompt, self.chain, self.chain_len, self.answer, self.ks = prompt, chain, chain_len, answer, ks
        self.blank = blank

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forcing ``(inputs, targets)``, each (B, T0 + L): targets are the next token on the chain
        and the answer, and -100 (ignored by cross-entropy) on the prompt and the padding."""
        b, t0 = self.prompt.shape
        L = self.chain.shape[1]
        full = torch.cat([self.prompt, self.chain, torch.full_like(self.answer[:, None], self.blank)], dim=1)
        idx = torch.arange(L + 1, device=full.device).unsqueeze(0)
        full[:, t0:] = torch.where(idx == self.chain_len[:, None], self.answer[:, None], full[:, t0:])
        inputs, targets = full[:, :-1], full[:, 1:].clone()
        keep = torch.zeros_like(targets, dtype=torch.bool)
        keep[:, t0 - 1:] = idx <= self.chain_len[:, None]
        return inputs, targets.masked_fill(~keep, -100)


class CotTask:
    """hop_k with chain of thought (Definition 5.5) in the format of this module's docstring.

    ``seq_len``, ``alphabet_size``, ``max_hops``, ``min_hops`` are those of :class:`hoplib.tasks.HopTask`
    (prompts have ``seq_len - 1`` tokens: the k-token and n = seq_len - 2 letters); ``chain`` is one of
    :data:`CHAINS`. k is uniform in [min_hops, max_hops] per sample unless fixed.
    """

    def __init__(self, seq_len: int = 20, alphabet_size: int = 4, max_hops: int = 4, min_hops: int = 1,
                 chain: str = "full"):
        self.hop_task = HopTask(seq_len=seq_len, alphabet_size=alphabet_size, max_hops=max_hops, min_hops=min_hops)
        self.chain = check_choice("chain", chain, CHAINS)
        self.vocab = self.hop_task.vocab
        self.n_letters = seq_len - 2
        self.ptr_base = self.vocab.size
        self.pair_base = self.vocab.size + self.n_letters
        self.max_chain = max(chain_length(k, chain) for k in range(min_hops, max_hops + 1))
        table = torch.full((max_hops + 1, max(1, self.max_chain)), -1, dtype=torch.long)
        for k in range(min_hops, max_hops + 1):
            idx = _micro_indices(k, chain)
            table[k, :len(idx)] = torch.tensor(idx, dtype=torch.long)
        self._table = table

    def __repr__(self) -> str:
        t = self.hop_task
        return (f"CotTask(seq_len={t.seq_len}, alphabet_size={t.alphabet_size}, max_hops={t.max_hops}, "
                f"min_hops={t.min_hops}, chain={self.chain!r})")

    @property
    def vocab_size(self) -> int:
        """k-tokens, letters, ⊥, blank, n pointer tokens and n·|Σ| pair tokens."""
        return self.pair_base + self.n_letters * self.hop_task.alphabet_size

    @property
    def prompt_length(self) -> int:
        return self.hop_task.length

    @property
    def n_positions(self) -> int:
        """Longest model input: the prompt and the longest chain (the answer is predicted, never fed back)."""
        return self.prompt_length + self.max_chain

    def ptr_token(self, p: torch.Tensor) -> torch.Tensor:
        """Pointer token ids for letter positions p (⊥ where p < 0)."""
        return torch.where(p >= 0, self.ptr_base + p.clamp(min=0), torch.full_like(p, self.vocab.no_answer))

    def pair_token(self, p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Pair token ids for (position p, letter a) (⊥ where p < 0)."""
        ok = p >= 0
        ids = self.pair_base + p.clamp(min=0) * self.hop_task.alphabet_size + a.clamp(min=0)
        return torch.where(ok, ids, torch.full_like(p, self.vocab.no_answer))

    def from_letters(self, letters: torch.Tensor, ks: torch.Tensor) -> CotBatch:
        """Build the batch for given letters (B, n) in 0..|Σ|-1 and hop counts ks (B,), on letters' device."""
        t = self.hop_task
        dev = letters.device
        b = letters.shape[0]
        micro = []
        for j in range(1, t.max_hops + 1):  # @p_j and (p_j, a_j), from hoplib.tasks only
            p = find_k(letters, j)[:, -1]
            a = hop(letters, j)[:, -1]
            micro += [self.ptr_token(p), self.pair_token(p, a)]
        micro_t = torch.stack(micro, dim=1) if micro else torch.zeros(b, 1, dtype=torch.long, device=dev)
        idx = self._table.to(dev)[ks]  # (B, L)
        chain = torch.gather(micro_t, 1, idx.clamp(min=0))
        chain = torch.where(idx >= 0, chain, torch.full_like(chain, self.vocab.blank))
        chain = chain[:, :self.max_chain]
        chain_len = (idx >= 0).sum(dim=1)
        ans = hop(letters, ks)[:, -1]
        answer = torch.where(ans >= 0, ans + self.vocab.first_letter, torch.full_like(ans, self.vocab.no_answer))
        prompt = torch.cat([ks.unsqueeze(1), letters + self.vocab.first_letter], dim=1)
        return CotBatch(prompt, chain, chain_len, answer, ks, self.vocab.blank)

    def sample(self, batch_size: int, k: int | None = None, seed: int | None = None,
               device: str | torch.device | None = None) -> CotBatch:
        """Draw a batch: letters as in :meth:`HopTask.letters`, k uniform (or fixed), on ``device`` (CPU if None)."""
        letters, ks = self.hop_task.draw(batch_size, k, seed, device)
        return self.from_letters(letters, ks)

    def token_str(self, token: int) -> str:
        """Readable token: k-tokens '0'.., letters 'a'.., ⊥ '~', blank '_', pointers '@p', pairs '(p,a)'."""
        token = int(token)
        if token < self.ptr_base:
            return self.vocab.token_char(token)
        if token < self.pair_base:
            return f"@{token - self.ptr_base}"
        if token < self.vocab_size:
            p, a = divmod(token - self.pair_base, self.hop_task.alphabet_size)
            return f"({p},{chr(ord('a') + a) if a < 26 else a})"
        raise ValueError(f"token must be in [0, {self.vocab_size - 1}], got {token}")

    def decode(self, ids: torch.Tensor | list[int]) -> list[str]:
        """Readable tokens of a 1-D id sequence."""
        seq = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        if seq and isinstance(seq[0], list):
            raise ValueError("ids must be 1-D")
        return [self.token_str(t) for t in seq]


def _check_task(task: object) -> CotTask:
    if not isinstance(task, CotTask):
        raise TypeError(f"task must be a CotTask, got {type(task).__name__}")
    return task


def _check_model(model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


# --------------------------------------------------------------------------- model, decoding
def cot_model(task: CotTask, *, d_model: int = 64, heads: int = 4, depth: int = 1) -> nn.Module:
    """A :class:`hoplib.models.GPT` (depth 1 by default) sized for ``task``: one class per token id."""
    _check_task(task)
    cfg = GPTConfig(vocab_size=task.vocab_size, n_positions=task.n_positions, depth=check_int("depth", depth, low=1),
                    d_model=check_int("d_model", d_model, low=1), heads=check_int("heads", heads, low=1))
    return GPT(cfg)


@torch.no_grad()
def greedy_decode(model: nn.Module, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy decoding: append ``n_new`` tokens, each the argmax of the logits at the last position.

    ``prompt`` (B, T0) on the model's device; returns the generated tokens (B, n_new). The model runs in eval
    mode (its mode is restored). Each step reruns the whole prefix (no cache): a one-layer model is cheap.
    """
    _check_model(model)
    n_new = check_int("n_new", n_new, low=0)
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2:
        raise ValueError("prompt must be a LongTensor of shape (B, T0)")
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


@torch.no_grad()
def reference_greedy_decode(model: nn.Module, prompt: list[int], n_new: int) -> list[int]:
    """One sequence, one token at a time, in plain Python: the definition of greedy decoding, for tests."""
    _check_model(model)
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    try:
        seq = [int(t) for t in prompt]
        for _ in range(check_int("n_new", n_new, low=0)):
            logits = model(torch.tensor([seq], dtype=torch.long, device=dev))[0, -1].float()
            best = max(range(logits.shape[0]), key=lambda c: float(logits[c]))
            seq.append(best)
        return seq[len(prompt):]
    finally:
        model.train(was)


def cot_errors(model: nn.Module, task: CotTask, *, ks: list[int] | None = None, n_samples: int = 200,
               seed: int = 0, device: str | torch.device = "auto", batch_size: int = 1000) -> dict[int, dict]:
    """Greedy-decoding test error per k: the model writes its own chain (N_CoT tokens), then the answer.

    For each k: ``error`` = fraction of samples with a letter answer whose decoded answer is wrong (samples
    whose answer is ⊥ are left out, as in :mod:`hoplib.evaluate`), ``chain_exact`` = fraction whose chain is
    decoded exactly, ``n_answered`` = number of samples with a letter answer. Test seeds: ``seed`` + k, disjoint
    from training seeds.
    """
    _check_model(model)
    _check_task(task)
    n_samples = check_int("n_samples", n_samples, low=1)
    seed = check_int("seed", seed, low=0, high=2**28)
    batch_size = check_int("batch_size", batch_size, low=1)
    t = task.hop_task
    ks = list(range(t.min_hops, t.max_hops + 1)) if ks is None else [
        check_int("ks[i]", k, low=t.min_hops, high=t.max_hops) for k in ks]
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


# --------------------------------------------------------------------------- an exact one-layer construction
class CotConstruction(nn.Module):
    """A hand-built ONE-layer softmax transformer that writes the full chain and answers hop_k exactly.

    The linear-in-k side of Corollary 5.6 (sufficiency, stated without proof in the paper), ``"full"`` format:
    every generated token is one attention lookup away from the token before it. One layer, three heads, all
    run in parallel on the same input (no head sees another head's output):

    * *search* (lastOccurrence): at a pair token (p, a), and at every letter token (p = its own index, a = its
      letter; this starts the chain at the last input letter), find the largest sequence position s <= p whose
      letter is a; then find(p) = s. Score = lam [letter = a] + s for s <= p, a penalty -lam for s > p, lam/2 at
      the start token (position 0, the k-token: "not found" = ⊥), -2 lam at chain tokens; lam = 2n + 4. The
      threshold s <= p is content-dependent (not the causal mask), so the query holds the row
      (s if s <= p else -lam)_s over one-hot key positions: width n + 1 for this head (see the note below).
    * *fetch* (lookUp): at a pointer token @p, read the letter at sequence position p + 1 with the quadratic
      score 2(p+1)s - s² (width 3; the book's quadratic substitute for Lemma D.1's angles), -1 at non-letters.
    * *k*: read the hop count from position 0 (constant query, key = "is position 0").

    Every score gap between the best key and the next is at least 1, so softmax at inverse temperature
    ``coldness`` puts weight >= 1 - T e^(-coldness) on the right key (Lemma A.2); values are read by rounding.
    The token-wise output map ψ (any token-wise map is allowed in the paper's model class; here it is code, not
    MLP weights) writes: at a letter or pair token, ``@find`` (⊥ if the search hit the start token; the letter
    itself at the last input position when k = 0); at the j-th pointer token (its position says j), the pair
    (p, fetched letter) if j < k, else the fetched letter, which is the answer; ⊥ after ⊥.

    Note on resources: the search head's one-hot positions make the width O(N). With width about N|Σ| a single
    layer could average the whole input into one position, so this construction shows that the format is
    executable one lookup per token, not the asymptotic separation of Corollary 5.6 (whose lower bound is
    about small mHp). Scores are float64; all entries are at most O(N²).
    """

    def __init__(self, task: CotTask, coldness: float = 30.0):
        super().__init__()
        self.task = _check_task(task)
        if task.chain != "full":
            raise ValueError(f"task.chain must be 'full' for the construction, got {task.chain!r}")
        if isinstance(coldness, bool) or not isinstance(coldness, (int, float)) or not coldness > 0:
            raise ValueError(f"coldness must be a number > 0, got {coldness!r}")
        self.coldness = float(coldness)
        self.register_buffer("_anchor", torch.zeros(1, dtype=torch.float64))

    def _fields(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        task, v = self.task, self.task.vocab
        alpha = task.hop_task.alphabet_size
        t = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        letter = (ids >= v.first_letter) & (ids < v.no_answer)
        ptr = (ids >= task.ptr_base) & (ids < task.pair_base)
        pair = ids >= task.pair_base
        a = torch.where(letter, ids - v.first_letter, (ids - task.pair_base).clamp(min=0) % alpha)
        p = torch.where(letter, t - 1, torch.where(ptr, ids - task.ptr_base, (ids - task.pair_base).clamp(min=0)
                                                   // alpha))
        return {"t": t, "letter": letter, "ptr": ptr, "pair": pair, "a": a, "p": p,
                "start": t == 0, "other": ~letter & (t > 0)}

    def heads(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The three heads' attention weights (B, T, T), rows = queries, at the current coldness."""
        f = self._fields(ids)
        n, alpha = self.task.n_letters, self.task.hop_task.alphabet_size
        dd = torch.float64
        lam = 2.0 * n + 4.0
        s_idx = torch.arange(n + 1, device=ids.device)
        # search: query (row over key positions, letter one-hot, start, other); key (one-hot position, ...)
        row = torch.where(s_idx <= f["p"].unsqueeze(-1), s_idx.to(dd), torch.full((), -lam, dtype=dd))
        searcher = (f["letter"] | f["pair"]).unsqueeze(-1)
        q_s = torch.cat([row, lam * F.one_hot(f["a"], alpha).to(dd),
                         torch.full(ids.shape + (1,), lam / 2, dtype=dd, device=ids.device),
                         torch.full(ids.shape + (1,), -2 * lam, dtype=dd, device=ids.device)], dim=-1)
        q_s = q_s * searcher
        t_clip = f["t"].clamp(max=n)
        k_s = torch.cat([F.one_hot(t_clip, n + 1).to(dd) * f["letter"].unsqueeze(-1),
                         F.one_hot(f["a"], alpha).to(dd) * f["letter"].unsqueeze(-1),
                         f["start"].unsqueeze(-1).to(dd), f["other"].unsqueeze(-1).to(dd)], dim=-1)
        # fetch: quadratic lookUp of sequence position p + 1
        tt = f["t"].to(dd)
        q_f = torch.stack([2.0 * (f["p"] + 1).to(dd), torch.full_like(tt, -1.0), torch.full_like(tt, -1.0)], -1)
        q_f = q_f * f["ptr"].unsqueeze(-1)
        isl = f["letter"].to(dd)
        k_f = torch.stack([tt * isl, tt * tt * isl, 1.0 - isl], -1)
        # k: constant query, key = "is position 0"
        q_k = torch.ones(ids.shape + (1,), dtype=dd, device=ids.device)
        k_k = f["start"].unsqueeze(-1).to(dd)
        mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device).tril()
        out = {}
        for name, q, k in (("search", q_s, k_s), ("fetch", q_f, k_f), ("k", q_k, k_k)):
            scores = self.coldness * (q @ k.transpose(-2, -1))
            out[name] = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return out

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab): a one-hot vote for ψ's next token at every position."""
        task, v = self.task, self.task.vocab
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise ValueError("ids must be a LongTensor of shape (B, T)")
        with torch.autocast(device_type=ids.device.type, enabled=False):
            f = self._fields(ids)
            att = self.heads(ids)
            alpha = task.hop_task.alphabet_size
            dd = torch.float64
            val_s = torch.stack([f["t"].to(dd) * f["letter"], f["start"].to(dd)], -1)
            val_f = F.one_hot(f["a"], alpha).to(dd) * f["letter"].unsqueeze(-1)
            val_k = (ids * f["start"]).to(dd).unsqueeze(-1)
            found = att["search"] @ val_s
            s_found = found[..., 0].round().long()
            hit_start = found[..., 1] > 0.5
            fetched = (att["fetch"] @ val_f).argmax(dim=-1)
            k_val = (att["k"] @ val_k)[..., 0].round().long()
            j = (f["t"] - task.prompt_length) // 2 + 1
            nxt = torch.full_like(ids, v.blank)
            search_out = torch.where(hit_start, torch.full_like(ids, v.no_answer), task.ptr_base + s_found.clamp(min=0))
            search_out = torch.where(f["letter"] & (k_val == 0), ids, search_out)
            nxt = torch.where(f["letter"] | f["pair"], search_out, nxt)
            fetch_out = torch.where(j >= k_val, v.first_letter + fetched,
                                    task.pair_base + f["p"] * alpha + fetched)
            nxt = torch.where(f["ptr"], fetch_out, nxt)
            nxt = torch.where(ids == v.no_answer, torch.full_like(ids, v.no_answer), nxt)
        return F.one_hot(nxt, task.vocab_size).to(torch.float32)


# --------------------------------------------------------------------------- Corollary 5.6's reduction
def cot_protocol_bits(n_new: int, num_players: int, d_model: int, heads: int, n_classes: int) -> int:
    """Bits posted by :func:`simulate_cot_protocol`: per round, P_p..P_2 each post (m + 2H) float32 numbers and
    P_1 posts the next token in ceil(log2 C) bits; n_new = N_CoT + 1 rounds."""
    n_new = check_int("n_new", n_new, low=1)
    num_players = check_int("num_players", num_players, low=1)
    per_player = 32 * (check_int("d_model", d_model, low=1) + 2 * check_int("heads", heads, low=1))
    return n_new * ((num_players - 1) * per_player + comm.class_bits(check_int("n_classes", n_classes, low=2)))


def _query(model: GPT, prompt: torch.Tensor, generated: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The current last token (public: the prompt's last token or the last generated one), embedded (1, m), and
    its query vector split into heads (H, d)."""
    dev = prompt.device
    pos = prompt.shape[0] - 1 + len(generated)
    tok = prompt[-1] if not generated else torch.tensor(generated[-1], device=dev)
    x = model.wte(tok.view(1)) + model.wpe(torch.tensor([pos], device=dev))
    q, _, _ = model.blocks[0].attn.qkv_heads(model.blocks[0].ln1(x).unsqueeze(0))  # (1, H, 1, d)
    return x, q[0, :, 0]


def _softmax_stats(model: GPT, ids: torch.Tensor, pos: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(H, d + 2) per head over the keys at ``ids``/``pos``: max score, sum exp(score - max) and sum
    exp(score - max) * value, the statistics from which softmax attention over a union of blocks is exact."""
    blk = model.blocks[0]
    _, k, v = blk.attn.qkv_heads(blk.ln1(model.wte(ids) + model.wpe(pos)).unsqueeze(0))  # (1, H, n, d)
    k, v = k[0], v[0]
    sc = (k @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(q.shape[-1])  # (H, n)
    mx = sc.max(dim=-1).values
    w = torch.exp(sc - mx.unsqueeze(-1))
    return torch.cat([mx.unsqueeze(-1), w.sum(-1, keepdim=True), (w.unsqueeze(-1) * v).sum(1)], dim=-1)


def _finish_token(model: GPT, x: torch.Tensor, parts: list[torch.Tensor]) -> torch.Tensor:
    """Combine the blocks' softmax statistics into the attention output and finish the layer at the query
    (projection, residual, MLP, final LayerNorm and head): the logits (C,)."""
    blk = model.blocks[0]
    st = torch.stack(parts)  # (P, H, d + 2)
    mx = st[..., 0].max(dim=0).values
    scale = torch.exp(st[..., 0] - mx)  # (P, H)
    z = (scale * st[..., 1]).sum(0)
    y = (scale.unsqueeze(-1) * st[..., 2:]).sum(0) / z.unsqueeze(-1)  # (H, d)
    h = x + blk.attn.project(y.unsqueeze(1).unsqueeze(0))[0]
    h = model.ln_f(h + blk.mlp(blk.ln2(h)))
    return (h if model.unembed is None else model.unembed(h))[0]


def _cot_player(model: GPT, prompt: torch.Tensor, block: tuple[int, int], j: int, num_players: int,
                generated: list[int], result: dict[str, torch.Tensor]) -> comm.Player:
    """P_j's strategy: post its block's softmax statistics for the current query; P_1 combines them and posts
    the next token."""
    t0, dev = prompt.shape[0], prompt.device
    ids, pos = prompt[block[0]:block[1]], torch.arange(*block, device=dev)  # P_j's private input

    def play(r: int, board: comm.Blackboard) -> object:
        if r > 1 and len(generated) < r - 1:  # read the previous round's token from P_1's post
            generated.append(comm.bits_to_int(board.last_message(1, r - 1)))
        x, q = _query(model, prompt, generated)
        own = _softmax_stats(model, ids, pos, q)
        if j > 1:
            return comm.floats_to_bits(own)
        parts = [own]
        if generated:
            parts.append(_softmax_stats(model, torch.tensor(generated, device=dev),
                                        torch.arange(t0, t0 + len(generated), device=dev), q))
        parts += [comm.bits_to_floats(board.last_message(i, r), own.shape, dev) for i in range(2, num_players + 1)]
        logits = result["logits"] = _finish_token(model, x, parts)
        return comm.int_to_bits(int(logits.argmax()), comm.class_bits(logits.shape[-1]))
    return play


@torch.no_grad()
def simulate_cot_protocol(model: nn.Module, prompt: torch.Tensor, n_new: int, num_players: int,
                          blackboard: comm.Blackboard | None = None) -> tuple[list[int], torch.Tensor, int]:
    """Run greedy decoding of a ONE-layer :class:`hoplib.models.GPT` as the blackboard protocol of Cor. 5.6.

    The prompt (1-D ids) is cut into ``num_players`` blocks (:func:`hoplib.lower_bounds.communication.block_bounds`),
    P_p holding the leftmost, P_1 the rightmost. Generated tokens and the prompt's last token (the query of the
    first round; in Proposition E.4's instances it is the fixed start vertex) are public. Round r produces
    generated token r: P_p, ..., P_2 each post, for every head, the softmax statistics of the current query
    over their block, (max score, sum of exp(score - max), sum of exp(score - max) * value), as float32 bits
    (m + 2H numbers); P_1 adds its own block and the generated tokens, finishes the layer (projection,
    residual, MLP, output head) and posts the argmax token in ceil(log2 C) bits. ``n_new`` = N_CoT + 1 rounds.

    Returns ``(tokens, last_logits, bits)``: the generated tokens (equal to :func:`greedy_decode`), the logits
    of the last round, and the exact number of bits posted (:func:`cot_protocol_bits`).
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a hoplib.models.GPT, got {type(model).__name__}")
    if model.config.depth != 1:
        raise ValueError(f"model must have depth 1 (Corollary 5.6 is about one layer), got {model.config.depth}")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 1:
        raise ValueError("prompt must be a 1-D LongTensor of token ids")
    n_new = check_int("n_new", n_new, low=1)
    t0 = prompt.shape[0]
    num_players = check_int("num_players", num_players, low=1, high=t0)
    if t0 + n_new - 1 > model.config.n_positions:
        raise ValueError(f"n_new must be <= n_positions - len(prompt) + 1 = {model.config.n_positions - t0 + 1}")
    prompt = prompt.to(next(model.parameters()).device)
    generated: list[int] = []
    result: dict[str, torch.Tensor] = {}
    players = [_cot_player(model, prompt, block, j, num_players, generated, result)
               for j, block in sorted(comm.block_bounds(t0, num_players).items())]
    was = model.training
    model.eval()
    try:
        board = comm.run_protocol(players, n_new, blackboard=blackboard)
    finally:
        model.train(was)
    generated.append(comm.bits_to_int(board.output))
    return generated, result["logits"], board.total_bits


# --------------------------------------------------------------------------- training
def _train(model: nn.Module, task: CotTask, config: TrainConfig, *, device: str | torch.device,
           progress: bool) -> dict[str, Any]:
    if config.steps >= 2**20:
        raise ValueError(f"steps must be < 2**20 (training seeds are 2**31 + seed * 2**20 + step), got {config.steps}")
    dev = get_device(device)
    model.to(dev)

    def step_loss(step: int) -> torch.Tensor:
        batch = task.sample(config.batch_size, seed=_TRAIN_SEED_BASE + config.seed * 2**20 + step, device=dev)
        x, y = batch.sequences()
        logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)

    hist = optimise(model, step_loss, config, device=dev, progress=progress, desc=f"cot {task.chain}")
    return {"loss": hist["loss"], "wall_time_s": hist["wall_time_s"], "steps": hist["steps_done"]}


def train_cot(model: nn.Module, task: CotTask, *, steps: int, batch_size: int = 64, lr: float = 3e-3,
              warmup_steps: int = 50, weight_decay: float = 0.01, seed: int = 0,
              device: str | torch.device = "auto", progress: bool = True) -> dict[str, Any]:
    """Teacher forcing: cross-entropy on the chain and answer tokens only, fresh samples every step.

    The book's one training loop, :func:`hoplib.train.optimise`, with ``TrainConfig(steps, batch_size, lr,
    warmup_steps, weight_decay, seed=seed)`` (AdamW, linear warmup and linear decay to 0; torch's global RNG
    seeded with ``seed``); the batch of step t is drawn with seed 2**31 + seed * 2**20 + t on ``device``
    (deterministic on CPU). Returns ``{"loss": [...], "wall_time_s", "steps"}``.
    """
    _check_model(model)
    _check_task(task)
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps,
                         weight_decay=weight_decay, seed=seed)
    return _train(model, task, config, device=device, progress=progress)


def run_cot_experiment(*, seq_len: int, alphabet_size: int, max_hops: int, chains: tuple[str, ...] = CHAINS,
                       d_model: int = 64, heads: int = 4, steps: int = 500, batch_size: int = 64, lr: float = 3e-3,
                       warmup_steps: int = 50, n_eval: int = 200, seed: int = 0,
                       device: str | torch.device = "auto", progress: bool = True) -> list[dict[str, Any]]:
    """Train one one-layer GPT per chain (multi-task over k = 1..max_hops, :func:`train_cot`'s loop) and decode
    greedily per k.

    Returns tidy records ``{"chain", "k", "n_cot", "error", "chain_exact", "n_answered", "final_loss",
    "train_time_s"}``.
    """
    config = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, seed=seed)
    rows = []
    for chain in chains:
        check_choice("chain", chain, CHAINS)
        task = CotTask(seq_len=seq_len, alphabet_size=alphabet_size, max_hops=max_hops, min_hops=1, chain=chain)
        torch.manual_seed(config.seed)
        model = cot_model(task, d_model=d_model, heads=heads)
        hist = _train(model, task, config, device=device, progress=progress)
        errs = cot_errors(model, task, n_samples=n_eval, seed=seed, device=device)
        tail = hist["loss"][-max(1, steps // 20):]
        for k, e in errs.items():
            rows.append({"chain": chain, "k": k, **e, "final_loss": sum(tail) / len(tail),
                         "train_time_s": hist["wall_time_s"]})
    return rows


def plot_cot_errors(rows: list[dict[str, Any]], ax=None):  # noqa: ANN001, ANN201
    """Error against k, one line per chain, labelled with the chain's N_CoT in tokens."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2))
    for chain in CHAINS:
        sel = sorted((r for r in rows if r["chain"] == chain), key=lambda r: r["k"])
        if not sel:
            continue
        ks = [r["k"] for r in sel]
        ax.plot(ks, [r["error"] for r in sel], marker="o", label=f"{chain} (N_CoT = "
                + {"none": "0", "half": "2⌈k/2⌉−1", "full": "2k−1"}[chain] + ")")
    ax.set_xlabel("k")
    ax.set_ylabel("greedy-decoding error")
    ax.set_ylim(-0.03, 1.0)
    ax.set_xticks(sorted({r["k"] for r in rows}))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax
