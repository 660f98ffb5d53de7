"""Lemma 3.2 (routing): one softmax attention layer that delivers every message of a valid (beta, s)-routing.

Sparse propagation (Prop. B.1) makes destination i attend to exactly its sources; multiple hashing (Fact B.2)
gives each packet slots where it arrives clean. Words travel as 16-bit pieces, which float64 averages exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from hoplib.device import get_device
from hoplib.mpc.primitives import mix_hash

PIECE_BITS = 16
PIECES = 64 // PIECE_BITS
_SHIFTS = np.arange(PIECES, dtype=np.uint64) * np.uint64(PIECE_BITS)


def _split_words(words: np.ndarray) -> np.ndarray:
    """int64 (..., w) -> (..., 4 w) unsigned 16-bit pieces."""
    u = words.astype(np.int64).view(np.uint64)
    pieces = (u[..., None] >> _SHIFTS) & np.uint64(2**PIECE_BITS - 1)
    return pieces.reshape(*words.shape[:-1], words.shape[-1] * PIECES).astype(np.int64)


def _join_words(pieces: np.ndarray) -> np.ndarray:
    p = pieces.astype(np.uint64).reshape(*pieces.shape[:-1], pieces.shape[-1] // PIECES, PIECES)
    return (p << _SHIFTS).sum(axis=-1, dtype=np.uint64).view(np.int64)


@dataclass
class RoutingResult:
    """Delivered messages ``src``, ``dest`` (n,) and ``msg`` (n, beta), with the layer's diagnostics."""

    src: np.ndarray
    dest: np.ndarray
    msg: np.ndarray
    max_offtarget_score: float


class RoutingLayer:
    """route_{beta,s} of Lemma 3.2, one head over ``num_tokens`` tokens: ``max_messages`` (s) bounds what a
    token sends and receives, ``max_view`` (b, default s^2) the packets a destination sees; ``slots`` (m')
    defaults to e (b+1) ln(N s / 0.001) (one routing fails with probability <= 0.001), ``key_dim`` (d) to
    16 s^2 ln N + 64."""

    def __init__(self, num_tokens: int, max_messages: int, message_words: int, *, max_view: int | None = None,
                 slots: int | None = None, key_dim: int | None = None, scale: float = 400.0, seed: int = 0,
                 device: str | torch.device = "cpu"):
        self.n, self.s, self.beta, self.scale, self.seed = num_tokens, max_messages, message_words, scale, seed
        self.b = max_view or self.s**2
        self.slots = slots or math.ceil(math.e * (self.b + 1) * math.log(max(self.n * self.s, 2) / 1e-3))
        self.d = key_dim or int(16 * self.s**2 * math.log(self.n)) + 64
        self.device = get_device(device)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        signs = torch.randint(0, 2, (self.n, self.d), generator=gen, dtype=torch.float64) * 2 - 1
        self.u = (signs / math.sqrt(self.d)).to(self.device)

    @property
    def packet_width(self) -> int:
        return 4 + self.beta * PIECES

    @property
    def width(self) -> int:
        """Embedding width m: query/key dimension d + 1 plus value dimension m' (4 + 4 beta)."""
        return self.d + 1 + self.slots * self.packet_width

    def slot_matrix(self, src: np.ndarray, dest: np.ndarray, copy: np.ndarray) -> np.ndarray:
        """Rows of the fixed 0/1 matrix A for (source, destination, copy) triples: (n, m') bool."""
        row = (src * self.n + dest) * self.s + copy
        cols = np.arange(self.slots, dtype=np.int64)
        h = mix_hash(row[:, None] * self.slots + cols[None, :], salt=self.seed + 17)
        return (h % np.uint64(self.b + 1)) == 0

    def queries_and_keys(self, src: np.ndarray, dest: np.ndarray
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sparse propagation: row 0 is the start token, row j + 1 token j;
        query (u_i, 1), key (w_S, 0)."""
        n, d, dev = self.n, self.d, self.device
        query = torch.zeros(n + 1, d + 1, dtype=torch.float64, device=dev)
        query[1:, :d], query[1:, d] = self.u, 1.0
        keys = torch.zeros(n + 1, d + 1, dtype=torch.float64, device=dev)
        keys[0, d] = 0.75  # the start token: between off-target scores and 1
        pairs = np.unique(np.column_stack([src, dest]), axis=0)  # sorted by source
        if len(pairs):
            rank = np.arange(len(pairs)) - np.searchsorted(pairs[:, 0], pairs[:, 0])
            idx = np.zeros((n, rank.max() + 1), np.int64)
            used = np.zeros(idx.shape, bool)
            idx[pairs[:, 0], rank], used[pairs[:, 0], rank] = pairs[:, 1], True
            mask = torch.as_tensor(used, device=dev, dtype=torch.float64)
            us = self.u[torch.as_tensor(idx, device=dev)] * mask[..., None]
            # padding rows of the Gram matrix are the identity's, with rhs 0
            gram = us @ us.transpose(1, 2) + torch.diag_embed(1 - mask)
            # u_i . w_S = 1 for i in S: one batched solve for all sources
            coef = torch.linalg.solve(gram, mask)  # (n, |S| padded)
            keys[1:, :d] = (coef[:, None, :] @ us)[:, 0]
        return query, keys

    def forward(self, src: np.ndarray, dest: np.ndarray, msg: np.ndarray) -> RoutingResult:
        """Route messages ``msg`` (n, beta) from tokens ``src`` to tokens ``dest`` through attention."""
        src, dest = np.asarray(src, dtype=np.int64), np.asarray(dest, dtype=np.int64)
        msg = np.asarray(msg, dtype=np.int64).reshape(len(src), self.beta)
        n, dev = self.n, self.device
        if len(src) and max(np.bincount(src).max(), np.bincount(dest).max()) > self.s:
            raise ValueError(f"not a valid routing: some token sends or receives more than s = {self.s} messages")
        order = np.lexsort((dest, src))
        src, dest, msg = src[order], dest[order], msg[order]
        first = np.r_[True, (src[1:] != src[:-1]) | (dest[1:] != dest[:-1])][: len(src)]
        copy = np.arange(len(src)) - np.maximum.accumulate(np.where(first, np.arange(len(src)), 0))
        # multiple hashing: a packet takes the slots where its row of A has a 1 and its source's other rows 0
        a = self.slot_matrix(src, dest, copy)
        per_src = np.zeros((n, self.slots), dtype=np.int64)
        np.add.at(per_src, src, a.astype(np.int64))
        rows, cols = np.nonzero(a & (per_src[src] == 1))
        packets = np.column_stack([np.ones(len(src), np.int64), src, dest, copy, _split_words(msg)])
        value = torch.zeros(n + 1, self.slots, self.packet_width, dtype=torch.float64, device=dev)
        value[torch.as_tensor(src[rows] + 1, device=dev), torch.as_tensor(cols, device=dev)] = torch.as_tensor(
            packets[rows].astype(np.float64), device=dev)
        query, keys = self.queries_and_keys(src, dest)
        scores = query[1:] @ keys[1:].T  # (destination, source)
        target = torch.zeros_like(scores, dtype=torch.bool)
        target[torch.as_tensor(dest, device=dev), torch.as_tensor(src, device=dev)] = True
        max_off = float(scores[~target].max()) if (~target).any() else -1.0
        out = F.scaled_dot_product_attention((self.scale * query)[None], keys[None],
                                             value.reshape(n + 1, -1)[None], scale=1.0)[0]
        return self._decode(out[1:].reshape(n, self.slots, self.packet_width).cpu().numpy(), max_off)

    def _decode(self, out: np.ndarray, max_off: float) -> RoutingResult:
        """Token-wise decoding: clean slots sit at the smallest nonzero validity, 1/|Rcvd_i|."""
        validity = out[:, :, 0]
        nz = validity > 1e-9
        vmin = np.where(nz, validity, np.inf).min(axis=1)
        count = np.rint(1.0 / vmin)  # 0 where nothing arrived
        clean = nz & (np.abs(validity - vmin[:, None]) < 1e-6 * np.maximum(vmin[:, None], 1e-12))
        tok, slot = np.nonzero(clean)
        pk = np.rint(out[tok, slot] * count[tok, None]).astype(np.int64)
        mine = pk[:, 2] == tok
        uniq = np.unique(np.column_stack([tok[mine], pk[mine]]), axis=0)  # one copy of each packet
        msg = _join_words(uniq[:, 5:]).reshape(len(uniq), self.beta)
        return RoutingResult(uniq[:, 2], uniq[:, 0], msg, max_off)


def random_routing(num_tokens: int, s: int, beta: int, *, seed: int = 0,
                   fill: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random valid (beta, s)-routing: every token sends and receives at most s messages, distinct
    (source, destination) pairs, random 40-bit messages; ``fill`` is the fraction of the s used."""
    rng = np.random.default_rng(seed)
    n, per = num_tokens, max(1, int(round(fill * min(s, num_tokens))))
    pairs = np.unique(np.concatenate([np.column_stack([np.arange(n), rng.permutation(n)]) for _ in range(per)]),
                      axis=0)  # `per` random permutations, repeated pairs dropped
    return pairs[:, 0], pairs[:, 1], rng.integers(0, 2**40, (len(pairs), beta))


def routing_is_exact(result: RoutingResult, src: np.ndarray, dest: np.ndarray, msg: np.ndarray) -> bool:
    """Whether the delivered (src, dest, msg) multiset equals the sent one: nothing lost, nothing invented."""
    a = np.column_stack([src, dest, msg])
    b = np.column_stack([result.src, result.dest, result.msg])
    return a.shape == b.shape and bool(np.array_equal(a[np.lexsort(a.T[::-1])], b[np.lexsort(b.T[::-1])]))
