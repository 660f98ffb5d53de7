"""The k-hop induction heads task (Definition 4.1 of Sanford, Hsu & Telgarsky 2024) and its data, 0-based:
``find(x)[i]`` is the largest ``j`` in ``[1, i]`` with ``x[j-1] == x[i]``, else ``-1``; ``hop(x, k)[i]`` is
``x[find^k(i)]``, else ``-1`` (⊥). Vectorised: a sort, then pointer doubling (O(N log k) gathers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hoplib.device import get_device
from hoplib.validate import check_int, check_int_array

NO_ANSWER = -1
"""The value :func:`hop` and :func:`find` return where there is no answer (the paper's ⊥)."""

Array = np.ndarray | torch.Tensor


def _as_long(x: object, *, symbols: bool = False) -> tuple[torch.Tensor, bool]:
    """``x`` as a LongTensor, and whether it was numpy. Refused: masked arrays (the mask would be ignored),
    unsigned values above 2**63 - 1 (they would wrap) and, with ``symbols``, the ambiguous value -1."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError("x must be a plain numpy array or torch tensor, got a masked array; fill it first")
    check_int_array("x", x)
    if isinstance(x, np.ndarray) and x.dtype == np.uint64 and x.size and int(x.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"x must hold values at most 2**63 - 1 (int64), got {int(x.max())}")
    t = torch.from_numpy(np.ascontiguousarray(x)).long() if isinstance(x, np.ndarray) else x.long()
    if symbols and bool((t == NO_ANSWER).any()):
        raise ValueError(f"x must not contain {NO_ANSWER}: it is the value hop returns for no answer (⊥), "
                         "so an output -1 would be ambiguous; use nonnegative symbols")
    return t, isinstance(x, np.ndarray)


def _find_torch(x: torch.Tensor, bound: int | None = None) -> torch.Tensor:
    """find on a LongTensor (..., N): sort by (symbol, position), then link each
    entry to its left neighbour in sorted order if that holds the same symbol.
    ``bound``: the values are known to lie in [0, bound) (so their range is not
    read from the device)."""
    flat = x.reshape(-1, x.shape[-1])
    cpu = flat.device.type == "cpu" and flat.numel() > 0
    if bound is not None:
        small = cpu and bound <= 2**15
    else:  # two host reads of the range
        small = cpu and -(2**15) <= int(flat.min()) and int(flat.max()) < 2**15
    if small:
        # NumPy's stable sort of int16 is a radix sort: faster than torch.sort.
        order = np.argsort(flat.numpy().astype(np.int16), axis=-1, kind="stable")
        order = torch.from_numpy(order)
        vals = torch.gather(flat, 1, order)
    else:  # a stable sort keeps the positions of a symbol ascending
        vals, order = torch.sort(flat, dim=-1, stable=True)
    prev_pos = torch.full_like(order, -1)
    same = vals[:, 1:] == vals[:, :-1]
    prev_pos[:, 1:] = torch.where(same, order[:, :-1], -1)
    # prev[i]: the last earlier occurrence of x[i]
    prev = torch.empty_like(prev_pos).scatter_(1, order, prev_pos)
    return torch.where(prev >= 0, prev + 1, NO_ANSWER).reshape(x.shape)


def _compose_power(ptr: torch.Tensor, k: torch.Tensor, max_k: int) -> torch.Tensor:
    """find^k by repeated squaring: ``ptr`` (B, N) is find with -1 for none,
    ``k`` (B,) the hop count of each row. A sentinel slot N, pointing to
    itself, makes -1 absorbing, as the start token is in the paper."""
    b, n = ptr.shape
    sentinel = ptr.new_full((b, 1), n)
    base = torch.cat([torch.where(ptr < 0, n, ptr), sentinel], dim=1)
    result = torch.arange(n + 1, device=ptr.device).expand(b, n + 1)
    for bit in range(max_k.bit_length()):
        if bit:
            base = torch.gather(base, 1, base)  # find^(2^bit)
        use = ((k >> bit) & 1).bool().unsqueeze(1)
        result = torch.where(use, torch.gather(base, 1, result), result)
    result = result[:, :n]
    return torch.where(result == n, NO_ANSWER, result)


def _find_k(t: torch.Tensor, k: int | Array) -> torch.Tensor:
    batch_shape = t.shape[:-1]
    if isinstance(k, (np.ndarray, torch.Tensor)):
        check_int_array("k", k, min_ndim=0)
        kt = torch.as_tensor(k).long().to(t.device)
        if kt.shape != batch_shape:
            raise ValueError(f"k as an array must have shape x.shape[:-1] = {tuple(batch_shape)}, "
                             f"got {tuple(kt.shape)}")
        if kt.numel() and int(kt.min()) < 0:
            raise ValueError(f"k must be >= 0 everywhere, got min {int(kt.min())}")
        max_k = int(kt.max()) if kt.numel() else 0
    else:
        max_k = check_int("k", k, low=0)
        kt = torch.full(batch_shape, max_k, dtype=torch.long, device=t.device)
    if t.shape[-1] == 0:  # empty sequences: nothing to point at
        return t.clone()
    ptr = _find_torch(t).reshape(-1, t.shape[-1])
    return _compose_power(ptr, kt.reshape(-1), max_k).reshape(t.shape)


def find(x: Array) -> Array:
    """find¹ of Definition 4.1, 0-based: at i, the largest j in [1, i] with x[j-1] == x[i], else -1.
    ``x``: integer numpy array or torch tensor (..., N); the result has its shape and type."""
    t, was_numpy = _as_long(x)
    out = _find_torch(t) if t.shape[-1] else t.clone()
    return out.numpy() if was_numpy else out


def find_k(x: Array, k: int | Array) -> Array:
    """find^k, with -1 absorbing (k = 0 gives the positions); ``k`` an int or one per sequence
    (shape ``x.shape[:-1]``)."""
    t, was_numpy = _as_long(x)
    out = _find_k(t, k)
    return out.numpy() if was_numpy else out


def hop(x: Array, k: int | Array) -> Array:
    """hop_k of Definition 4.1: x at find^k(i), or -1 (⊥) where the chain breaks; hop(x, 0) is x.
    ``k``: int >= 0, or one per sequence; the result has x's shape and type (int64)."""
    t, was_numpy = _as_long(x, symbols=True)
    ptr = _find_k(t, k)
    out = torch.where(ptr >= 0, torch.gather(t, -1, ptr.clamp(min=0)), NO_ANSWER)
    return out.numpy() if was_numpy else out


def hop_reference(x: list[int] | np.ndarray, k: int) -> list[int]:
    """Definition 4.1 literally, one loop per position and hop: O(N² + Nk), slow and obviously right."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError("x must be a list or a plain numpy array, got a masked array; fill it first")
    seq, k = [int(v) for v in x], check_int("k", k, low=0)
    # find¹ straight from the definition: scan back from i for an earlier copy of x[i].
    f = [next((j for j in range(i, 0, -1) if seq[j - 1] == seq[i]), NO_ANSWER) for i in range(len(seq))]
    out = []
    for i in range(len(seq)):
        p = i
        for _ in range(k):
            p = f[p]
            if p == NO_ANSWER:
                break
        out.append(seq[p] if p != NO_ANSWER else NO_ANSWER)
    return out


# --------------------------------------------------------------------------- experiment data
@dataclass(frozen=True)
class Vocab:
    """Token ids of the paper's experiments (Section 4.2, Appendix G): k-tokens, letters, ⊥, blank."""

    max_hops: int
    alphabet_size: int

    @property
    def first_letter(self) -> int:
        return self.max_hops + 1

    @property
    def no_answer(self) -> int:
        return self.max_hops + self.alphabet_size + 1

    @property
    def blank(self) -> int:
        return self.max_hops + self.alphabet_size + 2

    @property
    def size(self) -> int:
        return self.max_hops + self.alphabet_size + 3

    def token_char(self, token: int) -> str:
        """The authors' characters: k-tokens '0', '1', ... (ASCII 48 + k), letters 'a'..., ⊥ '~', blank '_'."""
        token = int(token)
        if 0 <= token <= self.max_hops:
            return chr(48 + token) if token < 49 else f"<{token}>"
        if self.first_letter <= token < self.no_answer:
            letter = token - self.first_letter
            return chr(ord("a") + letter) if letter < 26 else f"<L{letter}>"
        if token in (self.no_answer, self.blank):
            return "~" if token == self.no_answer else "_"
        raise ValueError(f"token must be in [0, {self.size - 1}], got {token}")


class HopTask:
    """Multi-task hop_k data in the layout of the paper's experiments (Section 4.2, Appendix G): input the
    k-token, then ``seq_len - 2`` letters without immediate repeats; target the blank, then hop_k of the
    letters. Rows have length ``seq_len - 1`` (99: the authors draw 100 characters and drop the last two)."""

    def __init__(self, seq_len: int = 100, alphabet_size: int = 4, max_hops: int = 16, min_hops: int = 0):
        self.seq_len = check_int("seq_len", seq_len, low=3)
        self.alphabet_size = check_int("alphabet_size", alphabet_size, low=2)
        self.max_hops = check_int("max_hops", max_hops, low=0)
        self.min_hops = check_int("min_hops", min_hops, low=0, high=self.max_hops)
        self.vocab = Vocab(self.max_hops, self.alphabet_size)

    def __repr__(self) -> str:
        return (f"HopTask(seq_len={self.seq_len}, alphabet_size={self.alphabet_size}, "
                f"max_hops={self.max_hops}, min_hops={self.min_hops})")

    @property
    def vocab_size(self) -> int:
        """Number of token ids: k-tokens, letters, ⊥ and blank."""
        return self.vocab.size

    @property
    def length(self) -> int:
        """Length of an input (and target) row: ``seq_len - 1``."""
        return self.seq_len - 1

    def letters(self, batch_size: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
        """Letters 0..alphabet_size-1, shape (batch_size, seq_len - 2), with no immediate repeats."""
        first = torch.randint(0, self.alphabet_size, (batch_size, 1), generator=generator, device=device)
        steps = torch.randint(1, self.alphabet_size, (batch_size, self.seq_len - 3), generator=generator,
                              device=device)
        return torch.cat([first, steps], dim=1).cumsum(dim=1) % self.alphabet_size

    def draw(self, batch_size: int, k: int | None = None, seed: int | None = None,
             device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(letters, ks)``, the random part of :meth:`sample`, k uniform unless given. ``seed`` < 2**32 (torch
        keeps 32 bits) makes it reproducible on one device type; without it the global generator is used."""
        dev = get_device(device or "cpu")
        gen = None
        if seed is not None:
            gen = torch.Generator(device=dev).manual_seed(check_int("seed", seed, low=0, high=2**32 - 1))
        if k is None:
            ks = torch.randint(self.min_hops, self.max_hops + 1, (batch_size,), generator=gen, device=dev)
        else:
            k = check_int("k", k, low=self.min_hops, high=self.max_hops)
            ks = torch.full((batch_size,), k, dtype=torch.long, device=dev)
        return self.letters(batch_size, gen, dev), ks

    def sample(self, batch_size: int, k: int | None = None, seed: int | None = None,
               device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, targets)``, LongTensors (batch_size, seq_len - 1); arguments as in :meth:`draw`."""
        letters, ks = self.draw(batch_size, k, seed, device)
        # hop() without its checks, and letters in [0, alphabet_size): no host read (a device sync)
        ptr = _compose_power(_find_torch(letters, self.alphabet_size), ks, self.max_hops)
        answers = torch.where(ptr >= 0, torch.gather(letters, 1, ptr.clamp(min=0)), NO_ANSWER)
        v = self.vocab
        inputs = torch.cat([ks.unsqueeze(1), letters + v.first_letter], dim=1)
        targets = torch.where(answers >= 0, answers + v.first_letter, v.no_answer)
        return inputs, torch.cat([torch.full_like(ks.unsqueeze(1), v.blank), targets], dim=1)

    def decode(self, ids: Array | list[int]) -> str | list[str]:
        """Readable string(s) for one row (1-D) or a batch (2-D) of integer token ids in [0, vocab_size)."""
        arr = _int_values("ids", ids)  # token_char refuses ids out of range
        if arr.ndim == 1:
            return "".join(map(self.vocab.token_char, arr))
        return ["".join(map(self.vocab.token_char, row)) for row in arr]


def _int_values(name: str, x: object) -> np.ndarray:
    """``x`` (a numpy array, torch tensor or list of ints) as a numpy integer array, or a clear error."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} must be a plain array, got a masked array; fill it first (x.filled(value))")
    arr = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr


def letters_to_str(x: Array | list[int]) -> str:
    """'abca...' for a 1-D array of letters 0..25 (-1, the ⊥ of :func:`hop`, shown as '~')."""
    arr = _int_values("x", x)
    if arr.size and (arr.min() < NO_ANSWER or arr.max() > 25):
        raise ValueError(f"x must hold letters in [0, 25] or {NO_ANSWER} (⊥), got {arr.min()}..{arr.max()}")
    return "".join("~" if v < 0 else chr(ord("a") + int(v)) for v in arr)


def str_to_letters(s: str) -> np.ndarray:
    """Inverse of :func:`letters_to_str` for lowercase letters: 'baeb' -> array([1, 0, 4, 1])."""
    if not all("a" <= c <= "z" for c in s):
        raise ValueError(f"s must contain only lowercase letters a-z, got {s!r}")
    return np.array([ord(c) - ord("a") for c in s], dtype=np.int64)
