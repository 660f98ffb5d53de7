"""Depth formulas and the pointer program of the Theorem 4.2 construction.

Theorem 4.2 of Sanford, Hsu & Telgarsky (arXiv v1) states depth ⌊log₂ k⌋ + 2 for hop_k. The book's construction
does one lookUp per layer, so each layer can at most double the hop count (paper-spec section 4, "doubling
limit"), and it uses ⌈log₂ k⌉ + 2 layers: the two formulas agree exactly when k is a power of two.
:func:`hop_program` says what each layer 3, 4, ... does with the accumulator; :func:`program_hops` runs such a
program symbolically.
"""

from __future__ import annotations

from hoplib._book.validate import check_int
from hoplib.report import depth_ceil, depth_floor  # the formulas live in the core

__all__ = ["ACC", "KEEP", "PTR", "depth_ceil", "depth_floor", "hop_program", "program_hops"]

KEEP, ACC, PTR = "keep", "acc", "ptr"
"""Operations of layers 3, 4, ...: keep A, set A <- A∘P (fetch A at P), or set A <- P∘P (fetch P at P)."""


def hop_program(k: int, n_layers: int | None = None) -> list[str]:
    """The pointer program for hop_k: the operation (KEEP, ACC or PTR) of each layer 3, 4, ..., n_layers.

    After layer 2 the pointer P holds 1 hop and the accumulator A holds 0 hops. Layer ℓ >= 3 looks up at P:
    P doubles (to 2^(ℓ-2) hops) and A becomes A + 2^(ℓ-3) hops (ACC), 2^(ℓ-2) hops (PTR), or stays (KEEP).
    The answer is the letter at A after the last layer. ``n_layers`` defaults to :func:`depth_ceil` (k); a
    larger value pads the program with KEEPs at the start (the multi-task model uses one depth for all k).
    Returns [] for k = 0 (the identity) and for k = 1 with n_layers = 2 (then the answer is read from P).
    """
    k = check_int("k", k, low=0)
    need = depth_ceil(k)
    if n_layers is None:
        n_layers = need
    n_layers = check_int("n_layers", n_layers, low=need)
    if k == 0:
        return [KEEP] * max(0, n_layers - 2)
    if n_layers == 2:  # k == 1: the answer is P itself
        return []
    n_ops = n_layers - 2
    if k == 1 << n_ops:  # the one count that needs the last layer's P∘P
        return [KEEP] * (n_ops - 1) + [PTR]
    # k < 2^n_ops: binary expansion, layer 3 + b contributes 2^b hops when bit b of k is set
    return [ACC if (k >> b) & 1 else KEEP for b in range(n_ops)]


def program_hops(program: list[str]) -> int:
    """Symbolically run a program of :func:`hop_program` and return the hop count of its answer."""
    if not isinstance(program, list):
        raise TypeError(f"program must be a list of 'keep'/'acc'/'ptr', got {type(program).__name__}")
    if not program:
        raise ValueError("program must be non-empty (an empty program means k = 0 or 1: see hop_program)")
    p, a = 1, 0
    for op in program:
        if op not in (KEEP, ACC, PTR):
            raise ValueError(f"program entries must be 'keep', 'acc' or 'ptr', got {op!r}")
        a = a + p if op == ACC else (2 * p if op == PTR else a)
        p = 2 * p
    return a
