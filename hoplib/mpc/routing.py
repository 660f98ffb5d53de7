"""Lemma 3.2 (routing): one attention layer that delivers every message of a valid (beta, s)-routing.

Token ``i`` holds Sent_i, up to s pairs (message in Z^beta, destination). One softmax attention head, whose
token-wise maps are the arbitrary functions the model class allows, maps Sent to Rcvd, the messages each
token should receive with their sources. The construction (paper-spec section 5, Appendix B) combines:

* **Sparse propagation** (Prop. B.1). Destination i queries with ``c * (u_i, 1)``, u_i a random sign vector
  in {+-1/sqrt(d)}^d; source j keys with ``(w_S, 0)`` where S is its set of destinations and w_S solves
  ``u_i . w_S = 1`` for i in S (then ``|u_i . w_S| <= 1/2`` for i outside S when d is large enough); a start
  token keys with ``(0, 3/4)`` and has value 0. Scaled by c the softmax is a hardmax: destination i gets the
  **average** of the values of the sources that write to it.
* **Multiple hashing** (Fact B.2). A source's value has m' slots, each a packet (validity 1, source,
  destination, message) or zeros. A fixed 0/1 matrix A, one row per (source, destination, copy) and Bernoulli
  entries of rate 1/(b+1), picks the slots: a packet goes in slot j when its row has a 1 there and the
  source's other rows a 0. After averaging, slot j's validity is (packets landing there)/|Rcvd_i|; slots
  at the smallest nonzero validity hold one clean packet, recovered by multiplying by |Rcvd_i|.

Every word is split into 16-bit pieces so that float64 averaging and rescaling recover it exactly.
The width the lemma guarantees for *every* routing, m' = 12 b^2 ln(N^2) with b = s^2 (so m = O(s^4 beta log N)),
is far more than one routing needs (about e (b+1) ln(rows)): :func:`lemma_slots` and
:func:`minimal_slots` let the chapter show where the constants bite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from hoplib._book.device import get_device
from hoplib._book.validate import check_int
from hoplib.mpc.primitives import mix_hash

PIECE_BITS = 16
PIECES = 64 // PIECE_BITS


def lemma_slots(s: int, num_tokens: int) -> int:
    """Slots m' of Fact B.2 that work for every valid routing: 12 b^2 ln(N^2) with b = s^2."""
    b = check_int("s", s, low=1) ** 2
    return math.ceil(12 * b * b * math.log(check_int("num_tokens", num_tokens, low=2) ** 2))


def practical_slots(max_view: int, rows: int, failure: float = 1e-3) -> int:
    """Slots for one routing to succeed with probability >= 1 - failure: e (b+1) ln(rows / failure)."""
    return math.ceil(math.e * (max_view + 1) * math.log(max(rows, 2) / failure))


def _split_words(words: np.ndarray) -> np.ndarray:
    """int64 (..., w) -> (..., w * 4) unsigned 16-bit pieces (as int64)."""
    u = words.astype(np.int64).view(np.uint64)
    shifts = np.arange(PIECES, dtype=np.uint64) * np.uint64(PIECE_BITS)
    pieces = (u[..., None] >> shifts) & np.uint64(2**PIECE_BITS - 1)
    return pieces.reshape(*words.shape[:-1], words.shape[-1] * PIECES).astype(np.int64)


def _join_words(pieces: np.ndarray) -> np.ndarray:
    p = pieces.astype(np.uint64).reshape(*pieces.shape[:-1], -1, PIECES)
    shifts = np.arange(PIECES, dtype=np.uint64) * np.uint64(PIECE_BITS)
    return (p << shifts).sum(axis=-1, dtype=np.uint64).view(np.int64)


@dataclass
class RoutingResult:
    """Delivered messages: ``src``, ``dest`` (n,) and ``msg`` (n, beta); plus diagnostics of the layer."""

    src: np.ndarray
    dest: np.ndarray
    msg: np.ndarray
    max_offtarget_score: float
    clean_fraction: float


class RoutingLayer:
    """route_{beta,s} of Lemma 3.2 as one attention layer with one head over ``num_tokens`` tokens.

    ``max_messages`` (s) bounds the messages a token sends and receives; ``message_words`` is beta;
    ``max_view`` (b, default s^2) bounds the packets any destination can "see" (the rows of A that its
    sources use); ``slots`` (m') defaults to :func:`practical_slots`; ``key_dim`` (d) to 16 s^2 ln N + 64.
    """

    def __init__(self, num_tokens: int, max_messages: int, message_words: int, *, max_view: int | None = None,
                 slots: int | None = None, key_dim: int | None = None, scale: float = 400.0, seed: int = 0,
                 device: str | torch.device = "cpu"):
        self.n = check_int("num_tokens", num_tokens, low=2)
        self.s = check_int("max_messages", max_messages, low=1)
        self.beta = check_int("message_words", message_words, low=1)
        self.b = check_int("max_view", max_view if max_view is not None else self.s**2, low=1)
        self.slots = check_int("slots", slots if slots is not None else practical_slots(self.b, self.n * self.s),
                               low=1)
        self.d = check_int("key_dim", key_dim if key_dim is not None
                           else int(16 * self.s**2 * math.log(self.n)) + 64, low=1)
        self.scale = float(scale)
        self.seed = check_int("seed", seed, low=0)
        self.device = get_device(device)
        gen = torch.Generator(device="cpu").manual_seed(self.seed)
        signs = torch.randint(0, 2, (self.n, self.d), generator=gen, dtype=torch.float64) * 2 - 1
        self.u = (signs / math.sqrt(self.d)).to(self.device)

    @property
    def packet_width(self) -> int:
        return 4 + self.beta * PIECES

    @property
    def width(self) -> int:
        """Embedding width m used: query/key dimension d + 1 plus value dimension m' * (4 + 4 beta)."""
        return self.d + 1 + self.slots * self.packet_width

    def slot_matrix(self, src: np.ndarray, dest: np.ndarray, copy: np.ndarray) -> np.ndarray:
        """Rows of the fixed 0/1 matrix A for (source, destination, copy) triples: (n, m') bool."""
        row = (src * self.n + dest) * self.s + copy
        cols = np.arange(self.slots, dtype=np.int64)
        h = mix_hash(row[:, None] * self.slots + cols[None, :], salt=self.seed + 17)
        return (h % np.uint64(self.b + 1)) == 0

    def forward(self, src: np.ndarray, dest: np.ndarray, msg: np.ndarray) -> RoutingResult:
        """Route messages ``msg`` (n, beta) int64 from tokens ``src`` to tokens ``dest`` through attention."""
        src = np.asarray(src, dtype=np.int64).reshape(-1)
        dest = np.asarray(dest, dtype=np.int64).reshape(-1)
        msg = np.asarray(msg, dtype=np.int64).reshape(len(src), self.beta)
        if len(dest) != len(src):
            raise ValueError(f"src and dest must have the same length, got {len(src)} and {len(dest)}")
        n, s = self.n, self.s
        if len(src) and (src.min() < 0 or src.max() >= n or dest.min() < 0 or dest.max() >= n):
            raise ValueError(f"src and dest must be tokens in [0, {n - 1}]")
        if len(src) and (np.bincount(src, minlength=n).max() > s or np.bincount(dest, minlength=n).max() > s):
            raise ValueError(f"not a valid routing: some token sends or receives more than s = {s} messages")
        order = np.lexsort((dest, src))
        src, dest, msg = src[order], dest[order], msg[order]
        pair_first = np.r_[True, (src[1:] != src[:-1]) | (dest[1:] != dest[:-1])] if len(src) else np.zeros(0, bool)
        start = np.maximum.accumulate(np.where(pair_first, np.arange(len(src)), 0)) if len(src) else src
        copy = np.arange(len(src)) - start

        # --- multiple hashing: which slots each packet occupies (token-wise: uses only the source's rows)
        a = self.slot_matrix(src, dest, copy)
        per_src = np.zeros((n, self.slots), dtype=np.int64)
        np.add.at(per_src, src, a.astype(np.int64))
        exclusive = a & (per_src[src] == 1)
        packets = np.column_stack([np.ones(len(src), np.int64), src, dest, copy, _split_words(msg)]).astype(np.float64)
        dev = self.device
        value = torch.zeros(n + 1, self.slots, self.packet_width, dtype=torch.float64, device=dev)
        rows, cols = np.nonzero(exclusive)
        value[torch.as_tensor(src[rows] + 1, device=dev), torch.as_tensor(cols, device=dev)] = torch.as_tensor(
            packets[rows], device=dev)

        # --- sparse propagation: keys w_S with u_i . w_S = 1 exactly for i in S
        keys = torch.zeros(n + 1, self.d + 1, dtype=torch.float64, device=dev)
        keys[0, self.d] = 0.75  # the start token
        for j in np.unique(src):
            dests = np.unique(dest[src == j])
            us = self.u[torch.as_tensor(dests, device=dev)]  # (|S|, d)
            coef = torch.linalg.solve(us @ us.T, torch.ones(len(dests), dtype=torch.float64, device=dev))
            keys[j + 1, : self.d] = coef @ us
        query = torch.zeros(n + 1, self.d + 1, dtype=torch.float64, device=dev)
        query[1:, : self.d] = self.u
        query[1:, self.d] = 1.0
        scores = query[1:] @ keys[1:].T  # (dest, src)
        target = torch.zeros_like(scores, dtype=torch.bool)
        target[torch.as_tensor(dest, device=dev), torch.as_tensor(src, device=dev)] = True
        off = scores[~target]
        max_off = float(off.max()) if off.numel() else -1.0
        out = F.scaled_dot_product_attention((self.scale * query)[None], keys[None],
                                             value.reshape(n + 1, -1)[None], scale=1.0)[0]
        out = out[1:].reshape(n, self.slots, self.packet_width).cpu().numpy()
        return self._decode(out, max_off)

    def _decode(self, out: np.ndarray, max_off: float) -> RoutingResult:
        """Token-wise decoding: clean slots sit at the smallest nonzero validity, 1/|Rcvd_i|."""
        validity = out[:, :, 0]
        nz = validity > 1e-9
        vmin = np.where(nz, validity, np.inf).min(axis=1)
        count = np.where(np.isfinite(vmin), np.rint(1.0 / np.where(np.isfinite(vmin), vmin, 1.0)), 0)
        clean = nz & (np.abs(validity - vmin[:, None]) < 1e-6 * np.maximum(vmin[:, None], 1e-12))
        tok, slot = np.nonzero(clean)
        pk = np.rint(out[tok, slot] * count[tok, None]).astype(np.int64)
        mine = pk[:, 2] == tok
        pk = pk[mine]
        rec_tok = tok[mine]
        # the same packet may sit alone in several slots: keep one copy of each
        uniq = np.unique(np.column_stack([rec_tok, pk]), axis=0) if len(pk) else np.zeros((0, 1 + pk.shape[1]),
                                                                                          np.int64)
        msg = _join_words(uniq[:, 5:]) if len(uniq) else np.zeros((0, self.beta), np.int64)
        clean_fraction = float(clean.sum() / max(nz.sum(), 1))
        return RoutingResult(uniq[:, 2], uniq[:, 0], msg.reshape(len(uniq), self.beta), max_off, clean_fraction)


def random_routing(num_tokens: int, s: int, beta: int, *, seed: int = 0,
                   fill: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random valid (beta, s)-routing: every token sends and receives at most s messages, distinct
    (source, destination) pairs, random 40-bit messages. ``fill`` is the fraction of the s slots used."""
    n = check_int("num_tokens", num_tokens, low=2)
    s = check_int("s", s, low=1)
    rng = np.random.default_rng(check_int("seed", seed, low=0))
    per = max(1, int(round(fill * min(s, n))))
    # s random permutations give every token exactly `per` sends and receives; drop repeated pairs
    pairs = np.concatenate([np.column_stack([np.arange(n), rng.permutation(n)]) for _ in range(per)])
    pairs = np.unique(pairs, axis=0)
    msg = rng.integers(0, 2**40, (len(pairs), beta))
    return pairs[:, 0], pairs[:, 1], msg


def routing_is_exact(result: RoutingResult, src: np.ndarray, dest: np.ndarray, msg: np.ndarray) -> bool:
    """True when the delivered (src, dest, msg) multiset equals the sent one: nothing lost, nothing spurious."""
    a = np.column_stack([src, dest, msg])
    b = np.column_stack([result.src, result.dest, result.msg])
    if a.shape != b.shape:
        return False
    return bool(np.array_equal(a[np.lexsort(a.T[::-1])], b[np.lexsort(b.T[::-1])]))


def minimal_slots(num_tokens: int, s: int, beta: int = 1, *, trials: int = 5, seed: int = 0,
                  device: str | torch.device = "cpu") -> int:
    """The smallest m' (searched over powers of 2^(1/2)) at which ``trials`` random full routings all arrive
    exactly: the width one needs in practice, to set against :func:`lemma_slots`."""
    m = 8
    while True:
        layer = RoutingLayer(num_tokens, s, beta, slots=m, seed=seed, device=device)
        ok = all(routing_is_exact(layer.forward(*r), *r)
                 for r in (random_routing(num_tokens, s, beta, seed=seed + 1000 + t) for t in range(trials)))
        if ok:
            return m
        m = int(math.ceil(m * math.sqrt(2)))
