"""The residual stream of the Theorem 4.2 construction, split into named subspaces (like tracr's residual space).

Every weight of the hand-built model reads and writes subspaces by name: ``layout["ptr"]`` is the slice of
the residual stream that holds the pointer P, ``layout["fetch.acc"]`` the part of the scratch subspace
``fetch`` where a lookUp deposits the accumulator it fetched. The top-level subspaces tile the stream
(:attr:`Layout.slices`, shown as ``model.subspaces``); their named parts (``"<subspace>.<part>"``) only give
names to pieces of them. :data:`SUBSPACE_DOC` says what each subspace holds.

Pointers and letters are unit vectors (Lemma D.1 of Sanford, Hsu & Telgarsky, arXiv v1): a position ``s``
among ``M`` is ``e(s) = (cos 2πs/M, sin 2πs/M)`` and a letter ``a`` of ``Σ`` is ``(cos 2πa/|Σ|, sin 2πa/|Σ|)``
(part ``uv`` of a letter subspace) plus a ⊥-flag (part ``bot``), so the width depends on neither N nor |Σ|.
"""

from __future__ import annotations

import math

import torch

from hoplib.construction.depth import ACC, PTR

__all__ = ["LETTER_PARTS", "REGISTERS", "SUBSPACE_DOC", "Layout", "angles", "hop_layout"]

LETTER_PARTS = {"uv": 2, "bot": 1}
"""A letter subspace: the letter's unit vector ``uv`` and the ⊥-flag ``bot``."""

REGISTERS = ("ptr", "ptr_letter", "acc", "acc_letter")
"""What a doubling layer's lookUp at P fetches, in the order of the ``fetch`` scratch subspace."""

SUBSPACE_DOC = {
    "one": "the constant 1 (a bias coordinate)",
    "is_start": "1 at the start token (position 0), else 0",
    "pos": "e(t): this position as a unit vector at angle 2πt/M (a key for every lookUp)",
    "pos_prev": "e(t-1): the query of layer 1's lookUp",
    "bcast": "multi-task only: 1 - cos(2π(t-1)/M), lets layer 1 also attend to position 0 (the k-token)",
    "recency": "the lastOccurrence key's recency term: t, or Λ - 1 at the start token",
    "letter": "this letter as (cos 2πa/|Σ|, sin 2πa/|Σ|, ⊥-flag)",
    "prev_letter": "written by layer 1: the previous letter (cos, sin)",
    "ptr": "P(t) as e(P(t)): find^(2^(ℓ-2))(t) after layer ℓ >= 2 (0 = start token = ⊥)",
    "ptr_letter": "the letter at P(t) (or ⊥)",
    "acc": "A(t) as e(A(t)): the accumulator pointer, identity before layer 3",
    "acc_letter": "the letter at A(t) (or ⊥): the answer after the last layer",
    "fetch": "scratch: what the lookUp at P fetched (P, P-letter, A, A-letter); cleared by the MLP",
    "kprog": "multi-task only: the k-token's program (per layer, one ACC gate and one PTR gate)",
    "gates": "multi-task only: the program broadcast from position 0 by layer 1",
}


class Layout:
    """Named residual-stream subspaces, allotted in order, each optionally split into named parts."""

    def __init__(self) -> None:
        self.slices: dict[str, slice] = {}
        self.parts: dict[str, slice] = {}
        self.width = 0

    def add(self, name: str, size: int, parts: dict[str, int] | None = None) -> slice:
        """Allot the next ``size`` coordinates to ``name``; ``parts`` (name -> size) must sum to ``size``."""
        if name in self.slices or "." in name:
            raise ValueError(f"name must be new and contain no '.', got {name!r}")
        s = slice(self.width, self.width + size)
        self.slices[name] = s
        self.width += size
        start = s.start
        for part, part_size in (parts or {}).items():
            self.parts[f"{name}.{part}"] = slice(start, start + part_size)
            start += part_size
        if parts and start != s.stop:
            raise ValueError(f"the parts of {name!r} must fill its {size} coordinates")
        return s

    def __getitem__(self, name: str) -> slice:
        """The slice of a subspace (``"ptr"``) or of a named part of one (``"fetch.acc"``)."""
        if name in self.slices:
            return self.slices[name]
        if name in self.parts:
            return self.parts[name]
        raise KeyError(f"no subspace or part named {name!r}; subspaces: {sorted(self.slices)}")

    def __contains__(self, name: object) -> bool:
        return name in self.slices or name in self.parts

    def size(self, name: str) -> int:
        """How many coordinates ``name`` spans."""
        s = self[name]
        return s.stop - s.start

    def coord(self, name: str) -> int:
        """The single coordinate of a one-wide subspace or part (``"one"``, ``"letter.bot"``)."""
        if self.size(name) != 1:
            raise ValueError(f"{name!r} spans {self.size(name)} coordinates, not 1")
        return self[name].start


def angles(m: int, idx: torch.Tensor) -> torch.Tensor:
    """Unit vectors (cos 2πi/m, sin 2πi/m) for integer tensors ``idx``, in float64, shape idx.shape + (2,)."""
    th = 2 * math.pi * idx.double() / m
    return torch.stack([torch.cos(th), torch.sin(th)], dim=-1)


def hop_layout(n_ops: int, multi: bool) -> Layout:
    """The construction's layout for ``n_ops`` doubling layers (3, 4, ...); ``multi`` adds the k-token's
    program (``kprog``) and its broadcast copy (``gates``), with parts ``acc<ℓ>`` and ``ptr<ℓ>`` per layer ℓ."""
    lay = Layout()
    for name, size in [("one", 1), ("is_start", 1), ("pos", 2), ("pos_prev", 2), ("recency", 1)]:
        lay.add(name, size)
    lay.add("letter", 3, LETTER_PARTS)
    lay.add("prev_letter", 2)
    lay.add("ptr", 2)
    lay.add("ptr_letter", 3, LETTER_PARTS)
    lay.add("acc", 2)
    lay.add("acc_letter", 3, LETTER_PARTS)
    lay.add("fetch", 10, {reg: 2 if reg in ("ptr", "acc") else 3 for reg in REGISTERS})
    if multi:
        lay.add("bcast", 1)
        program = {f"{op}{ell}": 1 for ell in range(3, n_ops + 3) for op in (ACC, PTR)}
        lay.add("kprog", 2 * n_ops, program)
        lay.add("gates", 2 * n_ops, program)
    return lay
