"""Lemma A.2 (softmax as hardmax): the inverse temperature of the hand-built heads, and its validation.

Every head of the construction scales its raw scores so that the best key beats every other key by a margin
of exactly 1; a single inverse temperature ``c`` (tracr's ``softmax_coldness``) multiplies all of them. Lemma
A.2 of Sanford, Hsu & Telgarsky (arXiv v1): ``c >~ ln M + p ln 2`` makes softmax equal hardmax to ``p`` bits.
"""

from __future__ import annotations

import math
import numbers

import torch

from hoplib._book.validate import check_int

__all__ = ["DTYPES", "check_dtype", "check_inverse_temperature", "lemma_a2_inverse_temperature"]

DTYPES = (torch.float32, torch.float64)


def check_dtype(dtype: object) -> torch.dtype:
    """``dtype`` if it is torch.float32 or torch.float64; TypeError / ValueError otherwise."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype (torch.float32 or torch.float64), got {type(dtype).__name__}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    return dtype


def check_inverse_temperature(c: object, allow_none: bool = False) -> float | None:
    """``c`` as a float if it is a finite real number > 0 (or None when ``allow_none``).

    A TypeError for a non-number (bools included), a ValueError for NaN, infinities, zero and negative values:
    at such a temperature softmax is undefined or uniform, and the model silently predicts nonsense.
    """
    if c is None and allow_none:
        return None
    if isinstance(c, bool) or not isinstance(c, numbers.Real):
        kind = "a positive real number or None" if allow_none else "a positive real number"
        raise TypeError(f"inverse_temperature must be {kind}, got {type(c).__name__}")
    if not (math.isfinite(float(c)) and float(c) > 0):
        raise ValueError(f"inverse_temperature must be in (0, inf), got {c}")
    return float(c)


def lemma_a2_inverse_temperature(seq_len: int, dtype: torch.dtype = torch.float32) -> float:
    """Lemma A.2's inverse temperature for score margin 1: c = ln M + (p + 1) ln 2.

    ``M = seq_len + 1`` positions (with the start token), ``p`` the dtype's mantissa bits (24 for float32,
    53 for float64). Then the softmax weight off the argmax is at most (M - 1) e^{-c} < 2^{-(p+1)}, so softmax
    rounds to hardmax (Lemma A.2 with margin ξ = 1 after our per-head normalisation).
    """
    seq_len = check_int("seq_len", seq_len, low=1)
    check_dtype(dtype)
    p = round(-math.log2(torch.finfo(dtype).eps)) + 1
    return math.log(seq_len + 1) + (p + 1) * math.log(2)
