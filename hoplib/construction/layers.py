"""One builder per layer kind of Theorem 4.2's construction (Lemmas D.1 lookUp, D.2 lastOccurrence, the latter
with a score that cannot wrap around the circle of Lemma D.2's embedding), each reading and writing named
subspaces, so every layer can be built and inspected on its own; and the pointer program that says what each
doubling layer does."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hoplib.construction.blocks import F64, MLP, Head, HeadWeights, MLPWeights
from hoplib.construction.layout import ACC, KEEP, PTR, REGISTERS, Layout, angles
from hoplib.report import depth_ceil
from hoplib.tasks import HopTask


def hop_program(k: int, n_layers: int | None = None) -> list[str]:
    """What layers 3, 4, ..., n_layers do to the accumulator A to compute hop_k.

    After layer 2, P holds 1 hop and A holds 0. Layer ℓ >= 3 doubles P to
    2^(ℓ-2) hops and sets A to A + 2^(ℓ-3) hops (ACC), 2^(ℓ-2) hops (PTR), or
    keeps it (KEEP). ``n_layers`` defaults to ⌈log₂ k⌉ + 2; more layers pad
    the program with KEEPs. Empty for k = 1 with 2 layers: the answer is P.
    """
    n_ops = (depth_ceil(k) if n_layers is None else n_layers) - 2
    assert n_ops >= depth_ceil(k) - 2, f"n_layers must be at least {depth_ceil(k)}"
    if k == 0 or n_ops <= 0:
        return [KEEP] * max(0, n_ops)
    if k == 1 << n_ops:  # the one count that needs the last layer's P∘P
        return [KEEP] * (n_ops - 1) + [PTR]
    # binary expansion: layer 3 + b adds 2^b hops when bit b of k is set
    return [ACC if (k >> b) & 1 else KEEP for b in range(n_ops)]


def program_hops(program: list[str]) -> int:
    """Run a program of :func:`hop_program` on hop counts: the hops of A at the end."""
    p, a = 1, 0
    for op in program:
        a = {ACC: a + p, PTR: 2 * p, KEEP: a}[op]
        p = 2 * p
    return a


@dataclass(frozen=True)
class Spec:
    """The depth, the program of each k (one k, or every k <= max_hops when ``multi`` reads k from the
    k-token), M = ``circle`` positions, the alphabet, and whether the answer is read from P instead of A."""

    n_layers: int
    programs: dict[int, list[str]]
    circle: int
    alphabet_size: int
    multi: bool = False
    answer_from_ptr: bool = False

    @property
    def delta(self) -> float:  # lookUp margin before normalisation, 1 - cos(2π/M) (Lemma D.1)
        return 1 - math.cos(2 * math.pi / self.circle)

    @property
    def lam(self) -> float:  # Λ: any symbol mismatch costs more than any recency gain
        gap = 1 - math.cos(2 * math.pi / self.alphabet_size) if self.alphabet_size > 1 else 1.0
        return max((self.circle + 2) / gap, 3.0)

    @property
    def max_k(self) -> int:
        return max(self.programs)

    def updates(self, ell: int) -> list[tuple[str, str | None]]:
        """Accumulator updates of layer ``ell`` >= 3 as (ACC or PTR, gate subspace or None = always)."""
        if self.multi:
            return [(ACC, f"gates.{ACC}{ell}"), (PTR, f"gates.{PTR}{ell}")]
        op = next(iter(self.programs.values()))[ell - 3]
        return [] if op == KEEP else [(op, None)]


def embedding(spec: Spec, lay: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Token embedding (n_tokens, d) and positional embedding (M, d), in float64."""
    sig, m = spec.alphabet_size, spec.circle
    tok = torch.zeros(spec.max_k + sig + 3 if spec.multi else sig + 1, lay.width, dtype=F64)
    l0 = spec.max_k + 1 if spec.multi else 0  # letter ids come after the k-tokens
    tok[l0:l0 + sig, lay["letter.uv"]] = angles(sig, torch.arange(sig))
    tok[l0:l0 + sig, lay["acc_letter.uv"]] = angles(sig, torch.arange(sig))  # A starts as the identity
    for sid in range(spec.max_k + 1) if spec.multi else [sig]:  # start tokens (⊥): k-tokens, or id |Σ|
        for name in ("is_start", "letter.bot", "acc_letter.bot"):
            tok[sid, lay.coord(name)] = 1.0
    if spec.multi:
        for kk, prog in spec.programs.items():
            for ell, op in enumerate(prog, start=3):
                if op != KEEP:
                    tok[kk, lay.coord(f"kprog.{op}{ell}")] = 1.0
    pos = torch.zeros(m, lay.width, dtype=F64)
    idx = torch.arange(m)
    e, e_prev = angles(m, idx), angles(m, (idx - 1).clamp(min=0))
    pos[:, lay.coord("one")] = 1.0
    pos[:, lay["pos"]] = pos[:, lay["acc"]] = e  # A starts as the identity
    pos[:, lay["pos_prev"]] = e_prev
    pos[:, lay.coord("recency")] = idx.double()
    pos[0, lay.coord("recency")] = spec.lam - 1  # the start token: between mismatch and match
    if spec.multi:
        pos[:, lay.coord("bcast")] = 1 - e_prev[:, 0]
    return tok, pos


def previous_letter_layer(spec: Spec, lay: Layout, dtype: torch.dtype
                          ) -> tuple[Head, MLP | None]:
    """Layer 1: lookUp at t-1 (Lemma D.1) copies the previous letter into
    ``prev_letter``.

    Multi-task: it also attends to the k-token at 0 and copies its program into
    ``gates``, each with weight 1/2; the MLP snaps the gates back to 0/1.
    """
    hw = HeadWeights(lay, n_scores=3)
    hw.score("pos_prev", "pos", scale=1 / spec.delta)
    hw.copy("letter.uv", "prev_letter")
    if not spec.multi:
        return hw.build(dtype, "lookUp(t-1): previous letter"), None
    hw.score("bcast", "is_start", scale=1 / spec.delta)
    hw.copy("kprog", "gates")
    mw = MLPWeights(lay)
    mw.snap_to_bits("gates")
    name = "lookUp(t-1): previous letter + broadcast k"
    return hw.build(dtype, name), mw.build(dtype)


def induction_layer(spec: Spec, lay: Layout, dtype: torch.dtype
                    ) -> tuple[Head, None]:
    """Layer 2, lastOccurrence (Lemma D.2, wrap-around fixed): P <- find¹.

    Score of key s for query t: Λ <u(letter(t)), u(prev_letter(s))> + recency(s),
    where recency is s, and Λ - 1 at the start token (below every match, above
    every mismatch). The head copies (e(s), letter(s)) into P.
    """
    hw = HeadWeights(lay, n_scores=3)
    weight = 2.0 if spec.multi else 1.0  # the multi-task prev_letter has weight 1/2
    hw.score("letter.uv", "prev_letter", scale=spec.lam * weight)
    hw.score("one", "recency")
    hw.copy("pos", "ptr")
    hw.copy("letter", "ptr_letter")
    return hw.build(dtype, "lastOccurrence: P = find^1"), None


def doubling_layer(spec: Spec, lay: Layout, ell: int, dtype: torch.dtype
                   ) -> tuple[Head, MLP]:
    """Layer ``ell`` >= 3: one lookUp at P (Lemma D.1), then an MLP.

    The head fetches (P, P-letter, A, A-letter) stored at P(t) into ``fetch``.
    The MLP sets P <- fetched P (now find^(2^(ℓ-2))) and A <- fetched A (ACC)
    or fetched P (PTR) as the program (multi-task: the gates) says; it clears
    ``fetch`` for the next layer.
    """
    hw = HeadWeights(lay, n_scores=2)
    hw.score("ptr", "pos", scale=1 / spec.delta)  # query e(P(t)), key e(s)
    for reg in REGISTERS:
        hw.copy(reg, f"fetch.{reg}")
    mw = MLPWeights(lay)
    mw.replace("ptr", "fetch.ptr")
    mw.replace("ptr_letter", "fetch.ptr_letter")
    for op, gate in spec.updates(ell):
        src = "acc" if op == ACC else "ptr"
        mw.replace("acc", f"fetch.{src}", gate)
        mw.replace("acc_letter", f"fetch.{src}_letter", gate)
    mw.clear("fetch")
    name = f"lookUp(P): P = find^{2 ** (ell - 2)}"
    return hw.build(dtype, name), mw.build(dtype)


def readout(spec: Spec, lay: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Unembedding and bias: letter a scores <u(a), answer letter>, ⊥ scores 2 * flag - 1/2; multi-task: the
    blank scores 4 * is_start - 1, the k-tokens -10."""
    ans = "ptr_letter" if spec.answer_from_ptr else "acc_letter"
    sig = spec.alphabet_size
    if spec.multi:
        v = HopTask(seq_len=3, alphabet_size=sig, max_hops=spec.max_k).vocab
        n_cls, l0, null_id = v.size, v.first_letter, v.no_answer
    else:
        n_cls, l0, null_id = sig + 1, 0, sig
    un = torch.zeros(lay.width, n_cls, dtype=F64)
    ub = torch.zeros(n_cls, dtype=F64)
    un[lay[f"{ans}.uv"], l0:l0 + sig] = angles(sig, torch.arange(sig)).T
    un[lay.coord(f"{ans}.bot"), null_id] = 2.0
    ub[null_id] = -0.5
    if spec.multi:
        un[lay.coord("is_start"), v.blank] = 4.0
        ub[v.blank] = -1.0
        ub[: v.first_letter] = -10.0
    return un, ub

