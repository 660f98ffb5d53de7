"""The k-hop induction heads task (Definition 4.1 of Sanford, Hsu & Telgarsky 2024) and its data.

Positions are 0-based. ``find(x)[i]`` is the largest ``j`` with ``1 <= j <= i`` and ``x[j-1] == x[i]``
(the position just after the last earlier occurrence of ``x[i]``), or ``-1`` when there is none;
``hop(x, k)[i]`` is ``x[find^k(i)]``, or ``-1`` (the paper's "no answer", written ⊥) when the chain breaks.

Everything is vectorised: ``find`` sorts each sequence once (O(N log N)), and ``hop`` composes the pointer
map by repeated squaring, O(N log k) gathers per sequence, with no Python loop over batch or positions.
numpy in gives numpy out; torch in gives torch out on the same device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hoplib._book.validate import check_int, check_int_array

NO_ANSWER = -1
"""The value :func:`hop` and :func:`find` return where there is no answer (the paper's ⊥)."""

Array = np.ndarray | torch.Tensor


# --------------------------------------------------------------------------- backend helpers
_INT64_MAX = np.iinfo(np.int64).max


def _check_x(name: str, x: object, *, symbols: bool = False) -> Array:
    """``check_int_array`` plus what it cannot see: masked arrays (whose mask would be ignored) and unsigned
    values above 2**63 - 1 (they would wrap to negative int64). With ``symbols`` (the inputs of :func:`hop`,
    whose outputs are symbols) the no-answer value -1 is rejected too: an output -1 would be ambiguous."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} must be a plain numpy array or torch tensor, got a masked array; "
                        f"fill the masked entries first (x.filled(value))")
    check_int_array(name, x)
    if isinstance(x, np.ndarray) and x.dtype == np.uint64 and x.size:
        top = int(x.max())
        if top > _INT64_MAX:
            raise ValueError(f"{name} must hold values at most 2**63 - 1 (int64), got {top}")
    if symbols and bool((x == NO_ANSWER).any()):
        raise ValueError(f"{name} must not contain {NO_ANSWER}: it is the value hop returns for no answer (⊥), "
                         f"so an output {NO_ANSWER} would be ambiguous; use nonnegative symbols")
    return x


def _as_torch(x: Array) -> tuple[torch.Tensor, bool]:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x)).long(), True
    return x.long(), False


def _back(t: torch.Tensor, was_numpy: bool) -> Array:
    if was_numpy:
        return t.numpy().astype(np.int64, copy=False)
    return t


# --------------------------------------------------------------------------- find / hop
def _find_torch(x: torch.Tensor) -> torch.Tensor:
    """find on a LongTensor (..., N): sort by (symbol, position), link each entry to its predecessor."""
    n = x.shape[-1]
    flat = x.reshape(-1, n)
    # Stable sort by symbol keeps positions ascending within a symbol.
    if flat.device.type == "cpu" and flat.numel() and -(2**15) <= int(flat.min()) and int(flat.max()) < 2**15:
        # On CPU, NumPy's stable sort of 16-bit integers is a radix sort: several times faster than torch.sort.
        order = torch.from_numpy(np.argsort(flat.numpy().astype(np.int16), axis=-1, kind="stable"))
        vals = torch.gather(flat, 1, order)
    else:
        vals, order = torch.sort(flat, dim=-1, stable=True)
    prev_pos = torch.full_like(order, -1)
    same = vals[:, 1:] == vals[:, :-1]
    prev_pos[:, 1:] = torch.where(same, order[:, :-1], torch.full_like(order[:, 1:], -1))
    prev = torch.empty_like(prev_pos).scatter_(1, order, prev_pos)  # last earlier occurrence of x[i]
    out = torch.where(prev >= 0, prev + 1, torch.full_like(prev, NO_ANSWER))
    return out.reshape(x.shape)


def _compose_power(ptr: torch.Tensor, k: torch.Tensor, max_k: int) -> torch.Tensor:
    """find^k by repeated squaring. ``ptr`` (B, N) with -1 for "none"; ``k`` (B,) per-row hop counts.

    A sentinel column N (pointing to itself) makes -1 absorbing, as the start token is in the paper.
    """
    b, n = ptr.shape
    sentinel = torch.full((b, 1), n, dtype=ptr.dtype, device=ptr.device)
    base = torch.cat([torch.where(ptr < 0, sentinel.expand(b, n), ptr), sentinel], dim=1)
    result = torch.arange(n + 1, device=ptr.device).expand(b, n + 1).contiguous()
    bit = 0
    while (1 << bit) <= max_k:
        use = ((k >> bit) & 1).bool().unsqueeze(1)
        result = torch.where(use, torch.gather(base, 1, result), result)
        bit += 1
        if (1 << bit) <= max_k:
            base = torch.gather(base, 1, base)
    result = result[:, :n]
    return torch.where(result == n, torch.full_like(result, NO_ANSWER), result)


def _check_k(k: object, batch_shape: tuple[int, ...]) -> tuple[torch.Tensor | int, int]:
    if isinstance(k, (np.ndarray, torch.Tensor)):
        check_int_array("k", k, min_ndim=0)
        kt = torch.as_tensor(k).long() if isinstance(k, np.ndarray) else k.long()
        if tuple(kt.shape) != batch_shape:
            raise ValueError(f"k as an array must have shape x.shape[:-1] = {batch_shape}, got {tuple(kt.shape)}")
        if kt.numel() and int(kt.min()) < 0:
            raise ValueError(f"k must be >= 0 everywhere, got min {int(kt.min())}")
        return kt, int(kt.max()) if kt.numel() else 0
    k = check_int("k", k, low=0)
    return k, k


def find(x: Array) -> Array:
    """find¹ of Definition 4.1, 0-based: at i, the largest j in [1, i] with x[j-1] == x[i], else -1.

    ``x``: integer numpy array or torch tensor of shape (..., N). Returns the same shape and type.
    """
    _check_x("x", x)
    t, was_numpy = _as_torch(x)
    return _back(_find_torch(t) if t.shape[-1] else t.clone(), was_numpy)


def find_k(x: Array, k: int | Array) -> Array:
    """find^k (the k-fold composition of :func:`find`), with -1 absorbing; k = 0 gives the positions.

    ``k`` is an int, or an integer array of shape ``x.shape[:-1]`` giving one hop count per sequence.
    """
    _check_x("x", x)
    t, was_numpy = _as_torch(x)
    batch_shape = tuple(t.shape[:-1])
    kk, max_k = _check_k(k, batch_shape)
    n = t.shape[-1]
    if n == 0:  # empty sequences: nothing to point at
        return _back(t.clone(), was_numpy)
    flat_ptr = _find_torch(t).reshape(-1, n)
    rows = flat_ptr.shape[0]
    if isinstance(kk, torch.Tensor):
        k_rows = kk.to(t.device).reshape(rows)
    else:
        k_rows = torch.full((rows,), kk, dtype=torch.long, device=t.device)
    out = _compose_power(flat_ptr, k_rows, max_k).reshape(t.shape)
    return _back(out, was_numpy)


def hop(x: Array, k: int | Array) -> Array:
    """hop_k of Definition 4.1: x at find^k(i), or -1 (⊥) where the chain breaks; hop(x, 0) is x.

    ``x``: integer numpy array or torch tensor (..., N); ``k``: int >= 0, or one per sequence
    (shape ``x.shape[:-1]``). Output has x's shape and type (numpy int64, or a LongTensor on x's device).
    """
    _check_x("x", x, symbols=True)
    t, was_numpy = _as_torch(x)
    ptr = find_k(t, k)
    vals = torch.gather(t, -1, ptr.clamp(min=0))
    out = torch.where(ptr >= 0, vals, torch.full_like(vals, NO_ANSWER))
    return _back(out, was_numpy)


def hop_reference(x: list[int] | np.ndarray, k: int) -> list[int]:
    """A direct, loop-per-position implementation of Definition 4.1, for tests and teaching.

    Follows the definition literally: for each i, walk back k times to just after the last earlier
    occurrence of the current symbol. O(N² + Nk), slow, and obviously right.
    """
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError("x must be a list or a plain numpy array, got a masked array; fill it first")
    seq = [int(v) for v in x]
    k = check_int("k", k, low=0)
    # find¹ straight from the definition: scan back from i for an earlier copy of x[i].
    f = []
    for i in range(len(seq)):
        f.append(next((j for j in range(i, 0, -1) if seq[j - 1] == seq[i]), NO_ANSWER))
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
    """Token ids of the paper's experiments (paper-spec section 7): k-tokens, letters, ⊥, blank."""

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
        if token == self.no_answer:
            return "~"
        if token == self.blank:
            return "_"
        raise ValueError(f"token must be in [0, {self.size - 1}], got {token}")


class HopTask:
    """Multi-task hop_k data in the exact layout of the paper's experiments (Section 4.2, Appendix G).

    A sample draws ``seq_len - 2`` letters with no immediate repeats (the first uniform, each next uniform
    over the other ``alphabet_size - 1`` letters) and a hop count k (uniform in ``[min_hops, max_hops]``
    unless given). Input: position 0 holds the k-token (id k), positions 1.. the letters (ids
    ``max_hops + 1 + letter``). Target: position 0 the blank, then hop_k of the letters, with the ⊥ id where
    there is no answer. Both have length ``seq_len - 1`` (99 for the paper's N = 100): the authors draw 100
    characters and drop the last two.
    """

    def __init__(self, seq_len: int = 100, alphabet_size: int = 4, max_hops: int = 16, min_hops: int = 0):
        self.seq_len = check_int("seq_len", seq_len, low=3)
        self.alphabet_size = check_int("alphabet_size", alphabet_size, low=2)
        self.max_hops = check_int("max_hops", max_hops, low=0)
        self.min_hops = check_int("min_hops", min_hops, low=0)
        if self.max_hops < self.min_hops:
            raise ValueError(f"max_hops must be >= min_hops = {self.min_hops}, got {self.max_hops}")
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
        n = self.seq_len - 2
        first = torch.randint(0, self.alphabet_size, (batch_size, 1), generator=generator, device=device)
        steps = torch.randint(1, self.alphabet_size, (batch_size, n - 1), generator=generator, device=device)
        return torch.cat([first, steps], dim=1).cumsum(dim=1) % self.alphabet_size

    def draw(self, batch_size: int, k: int | None = None, seed: int | None = None,
             device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(letters, ks)``: letters as in :meth:`letters` and hop counts, k uniform on
        ``min_hops..max_hops`` (or the fixed ``k``), on ``device``; the random part of :meth:`sample`.

        ``seed`` (0 <= seed < 2**32; torch's CPU generator keeps only 32 bits of a seed, so larger seeds would
        silently repeat smaller ones) makes the draw reproducible on a given device type (CPU and CUDA streams
        differ); without it the device's global torch generator is used. ``device`` None means CPU.
        """
        batch_size = check_int("batch_size", batch_size, low=1)
        dev = torch.device("cpu") if device is None else torch.device(device)
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
        """Return ``(inputs, targets)``, LongTensors of shape (batch_size, seq_len - 1) on ``device``;
        ``k``, ``seed`` and ``device`` as in :meth:`draw`."""
        letters, ks = self.draw(batch_size, k, seed, device)
        answers = hop(letters, ks)
        v = self.vocab
        inputs = torch.cat([ks.unsqueeze(1), letters + v.first_letter], dim=1)
        targets = torch.where(answers >= 0, answers + v.first_letter, torch.full_like(answers, v.no_answer))
        targets = torch.cat([torch.full_like(ks.unsqueeze(1), v.blank), targets], dim=1)
        return inputs, targets

    def decode(self, ids: Array | list[int]) -> str | list[str]:
        """Readable string(s) for one row (1-D) or a batch (2-D) of integer token ids in [0, vocab_size)."""
        arr = _int_values("ids", ids)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab.size):
            bad = arr[(arr < 0) | (arr >= self.vocab.size)].flat[0]
            raise ValueError(f"ids must be token ids in [0, {self.vocab.size - 1}], got {bad}")
        if arr.ndim == 1:
            return "".join(self.vocab.token_char(t) for t in arr)
        if arr.ndim == 2:
            return ["".join(self.vocab.token_char(t) for t in row) for row in arr]
        raise ValueError(f"ids must be 1-D or 2-D, got shape {arr.shape}")


def _int_values(name: str, x: object) -> np.ndarray:
    """``x`` (a numpy array, torch tensor or list of ints) as a numpy integer array, or a clear error."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} must be a plain array, got a masked array; fill it first (x.filled(value))")
    arr = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr


def letters_to_str(x: Array | list[int]) -> str:
    """'abca...' for a 1-D array of letters 0..25 (-1, the ⊥ of :func:`hop`, shown as '~')."""
    arr = _int_values("x", x)
    if arr.ndim != 1:
        raise ValueError(f"x must be 1-D, got shape {arr.shape}")
    if arr.size and (arr.min() < NO_ANSWER or arr.max() > 25):
        bad = arr[(arr < NO_ANSWER) | (arr > 25)][0]
        raise ValueError(f"x must hold letters in [0, 25] or {NO_ANSWER} (⊥), got {bad}")
    return "".join("~" if v < 0 else chr(ord("a") + int(v)) for v in arr)


def str_to_letters(s: str) -> np.ndarray:
    """Inverse of :func:`letters_to_str` for lowercase letters: 'baeb' -> array([1, 0, 4, 1])."""
    if not isinstance(s, str):
        raise TypeError(f"s must be a string, got {type(s).__name__}")
    if not all("a" <= c <= "z" for c in s):
        raise ValueError(f"s must contain only lowercase letters a-z, got {s!r}")
    return np.array([ord(c) - ord("a") for c in s], dtype=np.int64)


def hop_statistics(task: HopTask, ks: list[int] | range, n_samples: int = 256, seed: int = 0,
                   device: str | torch.device | None = None) -> list[dict[str, float]]:
    """Per k: the share of ⊥ targets and the distance i - find^k(i) of answered positions, on task's data.

    Returns tidy records ``{"k", "no_answer_share", "mean_distance", "median_distance", "max_distance"}``
    computed from ``n_samples`` sequences drawn as in :meth:`HopTask.sample` (letters only, position 0 left out).
    """
    n_samples = check_int("n_samples", n_samples, low=1)
    dev = torch.device("cpu") if device is None else torch.device(device)
    records = []
    for k in ks:
        k = check_int("k", k, low=task.min_hops, high=task.max_hops)
        gen = torch.Generator(device=dev).manual_seed(check_int("seed", seed, low=0, high=2**32 - 1 - k) + k)
        x = task.letters(n_samples, gen, dev)
        ptr = find_k(x, k)
        pos = torch.arange(x.shape[-1], device=dev).expand_as(x)
        dist = (pos - ptr)[ptr >= 0].double()
        records.append({
            "k": k,
            "no_answer_share": float((ptr < 0).double().mean()),
            "mean_distance": float(dist.mean()) if dist.numel() else float("nan"),
            "median_distance": float(dist.median()) if dist.numel() else float("nan"),
            "max_distance": float(dist.max()) if dist.numel() else float("nan"),
        })
    return records
