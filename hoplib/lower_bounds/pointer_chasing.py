"""Pointer chasing (Definition E.2) and its encoding as hop_k (Proposition E.4); the chapter ``rnn.md`` runs
the two protocols of Proposition E.3. Vertex u of V_j is the symbol u (j odd) or q + u (j even); the halves are
2q and 2q + 1."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PointerChasingInstance:
    """``matchings[j - 1, u]`` is E_j(u), the vertex of V_{j+1} matched to vertex u of V_j (P_j's input);
    ``split[w]`` the half (0 or 1) of vertex w of V_{k+1}; ``start`` the start vertex of V_1 (both public)."""

    k: int
    q: int
    matchings: np.ndarray
    split: np.ndarray
    start: int = 0

    def path(self) -> list[int]:
        """v_1 = start, v_2 = E_1(v_1), ..., v_{k+1} = E_k(v_k)."""
        v = [int(self.start)]
        for j in range(self.k):
            v.append(int(self.matchings[j, v[-1]]))
        return v

    @property
    def answer(self) -> int:
        """The half of V_{k+1} that the path ends in."""
        return int(self.split[self.path()[-1]])

    @property
    def alphabet_size(self) -> int:
        return 2 * self.q + 2

    @property
    def length(self) -> int:  # k blocks of 2q symbols and the start vertex
        return 2 * self.k * self.q + 1


def random_instance(k: int, q: int, seed: int | None = None) -> PointerChasingInstance:
    """k independent uniform perfect matchings on q vertices; start vertex 0, split first half / second half."""
    rng = np.random.default_rng(seed)
    matchings = np.stack([rng.permutation(q) for _ in range(k)]).astype(np.int64)
    return PointerChasingInstance(k, q, matchings, (np.arange(q) >= q // 2).astype(np.int64), 0)


def player_block(instance: PointerChasingInstance, j: int) -> np.ndarray:
    """The block P_j writes from E_j alone: each vertex u of V_j, then its partner
    E_j(u); in P_k's block the partner is replaced by its half, 2q + split(E_k(u));
    P_1's block ends with the start vertex."""
    q, u = instance.q, np.arange(instance.q)
    partner = instance.matchings[j - 1]
    own = u if j % 2 == 1 else q + u
    if j == instance.k:
        nxt = 2 * q + instance.split[partner]
    else:
        nxt = partner if (j + 1) % 2 == 1 else q + partner
    block = np.stack([own, nxt], axis=1).reshape(-1)
    if j == 1:
        block = np.concatenate([block, [instance.start]])
    return block.astype(np.int64)


def to_hop_sequence(instance: PointerChasingInstance) -> tuple[np.ndarray, int]:
    """Proposition E.4's sequence (blocks of P_k, ..., P_1, left to right) and the instance's answer:
    ``hop(x, k)[-1]`` is 2q + answer."""
    x = np.concatenate([player_block(instance, j) for j in range(instance.k, 0, -1)])
    return x, instance.answer


def decode_answer(instance: PointerChasingInstance, symbol: int) -> int | None:
    """The half (0 or 1) named by the symbol 2q or 2q + 1; None for any other symbol."""
    half = int(symbol) - 2 * instance.q
    return half if half in (0, 1) else None


def lower_bound_scale(n: int, k: int) -> float:
    """N / k^6, the scale of Proposition E.4's bound s = Omega(N / k^6) (constants unknown)."""
    return n / k**6
