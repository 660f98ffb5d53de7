"""One builder per layer kind of the Theorem 4.2 construction, each reading and writing named subspaces.

Sanford, Hsu & Telgarsky (arXiv v1), Theorem 4.2 with Lemmas D.1 (lookUp) and D.2 (lastOccurrence), in the
corrected form of ``paper-spec.md`` section 4. The builders, in the order of the model:

* :func:`embedding` — token and positional embeddings: letters, the start token (⊥), e(t), e(t-1), recency,
  and for the multi-task model each k-token's program;
* :func:`previous_letter_layer` — layer 1, lookUp at t-1: ``prev_letter`` <- the previous ``letter``;
* :func:`induction_layer` — layer 2, lastOccurrence (the induction head): ``ptr`` <- find¹, with its letter;
* :func:`doubling_layer` — layer ℓ >= 3, lookUp at P: P <- P∘P, and A <- A∘P, P∘P or A as the program says;
* :func:`readout` — the unembedding: scores of each letter (and ⊥) from the answer's letter subspace.

Each returns float tensors or :mod:`~hoplib.construction.blocks` modules, so every layer can be built and
inspected on its own; :func:`build_parts` assembles them for :class:`~hoplib.construction.model.HopTransformer`.
A :class:`Spec` carries what the builders need, including whether k is fixed (``hop_transformer``) or read
from the k-token at position 0 (``multi_hop_transformer``, ``multi=True``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hoplib.construction.blocks import MLP, Head, HeadWeights, MLPWeights
from hoplib.construction.depth import ACC, KEEP, PTR
from hoplib.construction.layout import REGISTERS, Layout, angles, hop_layout
from hoplib.tasks import HopTask

__all__ = ["Spec", "build_parts", "doubling_layer", "embedding", "induction_layer", "previous_letter_layer",
           "readout"]

F64 = torch.float64


@dataclass(frozen=True)
class Spec:
    """What the layer builders need.

    ``programs`` maps k to the operations of layers 3..``n_layers`` (one entry for a single-k model);
    ``circle`` is M, the number of positions a pointer can name (start token included); ``multi`` means k is
    read from the k-token at position 0 in HopTask's layout; ``answer_from_ptr`` reads the answer from P
    (k = 1 with two layers) instead of from A.
    """

    n_layers: int
    programs: dict[int, list[str]]
    circle: int
    alphabet_size: int
    multi: bool = False
    answer_from_ptr: bool = False

    @property
    def n_ops(self) -> int:
        """Number of doubling layers (3, 4, ..., n_layers)."""
        return max(0, self.n_layers - 2)

    @property
    def delta(self) -> float:
        """lookUp margin before normalisation, 1 - cos(2π/M) (Lemma D.1)."""
        return 1 - math.cos(2 * math.pi / self.circle)

    @property
    def lam(self) -> float:
        """Λ, the symbol-match weight of lastOccurrence: any mismatch costs more than any recency gain."""
        sig = self.alphabet_size
        gap_sig = 1 - math.cos(2 * math.pi / sig) if sig > 1 else 1.0
        return max((self.circle + 2) / gap_sig, 3.0)

    @property
    def max_k(self) -> int:
        return max(self.programs)

    def start_ids(self) -> list[int]:
        """Token ids that act as the start token (⊥): the k-tokens when ``multi``, else id |Σ|."""
        return list(range(self.max_k + 1)) if self.multi else [self.alphabet_size]

    def letter_id(self, a: int) -> int:
        """Token id of letter ``a``."""
        return self.max_k + 1 + a if self.multi else a

    def vocab(self):  # noqa: ANN201 - hoplib.tasks.Vocab
        """HopTask's vocabulary, whose layout the multi-task model reads."""
        return HopTask(seq_len=3, alphabet_size=self.alphabet_size, max_hops=self.max_k).vocab

    def updates(self, ell: int) -> list[tuple[str, str | None]]:
        """Accumulator updates of layer ``ell`` >= 3 as (ACC or PTR, gate subspace or None = always)."""
        if self.multi:
            return [(ACC, f"gates.{ACC}{ell}"), (PTR, f"gates.{PTR}{ell}")]
        op = next(iter(self.programs.values()))[ell - 3]
        return [] if op == KEEP else [(op, None)]


def embedding(spec: Spec, lay: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Token embedding (n_tokens, d) and positional embedding (M, d), in float64."""
    sig, m = spec.alphabet_size, spec.circle
    n_tok = spec.max_k + sig + 3 if spec.multi else sig + 1
    tok = torch.zeros(n_tok, lay.width, dtype=F64)
    la = angles(sig, torch.arange(sig))
    for a in range(sig):
        tok[spec.letter_id(a), lay["letter.uv"]] = la[a]
        tok[spec.letter_id(a), lay["acc_letter.uv"]] = la[a]  # A starts as the identity
    for sid in spec.start_ids():
        tok[sid, lay.coord("is_start")] = 1.0
        tok[sid, lay.coord("letter.bot")] = 1.0
        tok[sid, lay.coord("acc_letter.bot")] = 1.0
    if spec.multi:
        for kk, prog in spec.programs.items():
            for ell, op in enumerate(prog, start=3):
                tok[kk, lay.coord(f"kprog.{ACC}{ell}")] = float(op == ACC)
                tok[kk, lay.coord(f"kprog.{PTR}{ell}")] = float(op == PTR)
    pos = torch.zeros(m, lay.width, dtype=F64)
    idx = torch.arange(m)
    e, e_prev = angles(m, idx), angles(m, (idx - 1).clamp(min=0))
    pos[:, lay.coord("one")] = 1.0
    pos[:, lay["pos"]] = e
    pos[:, lay["acc"]] = e
    pos[:, lay["pos_prev"]] = e_prev
    pos[:, lay.coord("recency")] = idx.double()
    pos[0, lay.coord("recency")] = spec.lam - 1  # the start token's constant score, between mismatch and match
    if spec.multi:
        pos[:, lay.coord("bcast")] = 1 - e_prev[:, 0]
    return tok, pos


def previous_letter_layer(spec: Spec, lay: Layout, dtype: torch.dtype) -> tuple[Head, MLP | None]:
    """Layer 1: lookUp at t-1 (Lemma D.1) copies the previous letter into ``prev_letter``.

    Multi-task: the head also scores position 0 (the k-token) as high as t-1, so each position receives the
    previous letter and the k-token's program (``kprog`` -> ``gates``) with weight 1/2 each; the MLP snaps
    the gates back to 0/1 (``prev_letter`` keeps its factor 1/2, which layer 2 compensates).
    """
    hw = HeadWeights(lay, n_scores=3)
    hw.score("pos_prev", "pos", scale=1 / spec.delta)
    hw.copy("letter.uv", "prev_letter")
    name = "lookUp(t-1): previous letter"
    if spec.multi:
        hw.score("bcast", "is_start", scale=1 / spec.delta)
        hw.copy("kprog", "gates")
        name += " + broadcast k"
    mlp = None
    if spec.multi and spec.n_ops:
        mw = MLPWeights(lay)
        mw.snap_to_bits("gates")
        mlp = mw.build(dtype)
    return hw.build(dtype, name), mlp


def induction_layer(spec: Spec, lay: Layout, dtype: torch.dtype) -> tuple[Head, None]:
    """Layer 2: lastOccurrence (Lemma D.2 with the wrap-around fixed), the induction head: P <- find¹.

    Score of key s for query t: Λ <u(letter(t)), u(prev_letter(s))> + recency(s), where recency is s and
    Λ - 1 at the start token (below every match, above every mismatch); value (e(s), letter(s)) -> P.
    """
    hw = HeadWeights(lay, n_scores=3)
    prev_letter_weight = 2.0 if spec.multi else 1.0  # the multi-task prev_letter carries weight 1/2
    hw.score("letter.uv", "prev_letter", scale=spec.lam * prev_letter_weight)
    hw.score("one", "recency")
    hw.copy("pos", "ptr")
    hw.copy("letter", "ptr_letter")
    return hw.build(dtype, "lastOccurrence: P = find^1"), None


def doubling_layer(spec: Spec, lay: Layout, ell: int, dtype: torch.dtype) -> tuple[Head, MLP | None]:
    """Layer ``ell`` >= 3: lookUp at P (Lemma D.1) fetches (P, P-letter, A, A-letter) into ``fetch``; the
    MLP sets P <- fetched P (now find^(2^(ℓ-2))), A <- fetched A (ACC) or fetched P (PTR) as the program
    (or, multi-task, the gates) says, and clears ``fetch``."""
    hw = HeadWeights(lay, n_scores=2)
    hw.score("ptr", "pos", scale=1 / spec.delta)
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
    return hw.build(dtype, f"lookUp(P): P = find^{2 ** (ell - 2)}"), mw.build(dtype)


def readout(spec: Spec, lay: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Unembedding (d, n_classes) and bias, in float64: letter a scores <u(a), answer letter> (1 for the right
    letter, <= cos(2π/|Σ|) else); ⊥ scores 2 * flag - 1/2; multi-task: blank 4 * is_start - 1, k-tokens -10."""
    ans = "ptr_letter" if spec.answer_from_ptr else "acc_letter"
    sig = spec.alphabet_size
    if spec.multi:
        v = spec.vocab()
        n_cls, l0, null_id = v.size, v.first_letter, v.no_answer
    else:
        n_cls, l0, null_id = sig + 1, 0, sig
    un = torch.zeros(lay.width, n_cls, dtype=F64)
    ub = torch.zeros(n_cls, dtype=F64)
    la = angles(sig, torch.arange(sig))
    for a in range(sig):
        un[lay[f"{ans}.uv"], l0 + a] = la[a]
    un[lay.coord(f"{ans}.bot"), null_id] = 2.0
    ub[null_id] = -0.5
    if spec.multi:
        un[lay.coord("is_start"), v.blank] = 4.0
        ub[v.blank] = -1.0
        ub[: v.first_letter] = -10.0
    return un, ub


def build_parts(spec: Spec, dtype: torch.dtype) -> dict:
    """Every weight of the model: the keyword arguments of HopTransformer's layers (layout, embeddings,
    heads, mlps, unembedding), in ``dtype``."""
    lay = hop_layout(spec.n_ops, spec.multi)
    tok, pos = embedding(spec, lay)
    layers = [previous_letter_layer(spec, lay, dtype), induction_layer(spec, lay, dtype)]
    layers += [doubling_layer(spec, lay, ell, dtype) for ell in range(3, spec.n_layers + 1)]
    un, ub = readout(spec, lay)
    return dict(layout=lay, tok_emb=tok.to(dtype), pos_emb=pos.to(dtype), heads=[h for h, _ in layers],
                mlps=[m for _, m in layers], unembed=un.to(dtype), unembed_bias=ub.to(dtype), circle=spec.circle,
                alphabet_size=spec.alphabet_size)
