"""Pointer chasing (Definition E.2), its encoding as hop_k (Proposition E.4) and two protocols, one per side
of Proposition E.3. Vertex u of V_j is the symbol u (j odd) or q + u (j even); the halves are 2q and 2q + 1."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hoplib.lower_bounds.communication import Blackboard, Player, bits_to_int, int_to_bits, run_protocol


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


STRATEGIES = ("k_rounds", "one_round")


def pointer_chasing_players(instance: PointerChasingInstance,
                            strategy: str = "k_rounds") -> list[Player]:
    """The k players' strategies; P_j sees only E_j and the blackboard.

    ``"k_rounds"``: in round r, P_r posts v_{r+1} (P_k posts the half); P_1 repeats
    the answer in round k. ``"one_round"``: P_k posts the half reached from every
    vertex of V_k (q bits); each next P_j composes that table with E_j and posts it;
    P_1 looks up the start vertex.
    """
    inst, k = instance, instance.k
    width = max(1, math.ceil(math.log2(inst.q)))

    def make(j: int) -> Player:
        edges = inst.matchings[j - 1]  # P_j's private input

        def k_rounds(r: int, board: Blackboard) -> object:
            if j == 1 and r == k and k > 1:
                return board.last_message(k, r)  # repeat the answer as the output
            if r != j:
                return None
            if j == 1:
                v = inst.start
            else:
                v = bits_to_int(board.last_message(j - 1, r - 1))
            if j == k:
                return (int(inst.split[edges[v]]),)
            return int_to_bits(int(edges[v]), width)

        def one_round(r: int, board: Blackboard) -> object:
            if r != 1:
                return None
            if j == k:
                later = inst.split
            else:
                later = np.array(board.last_message(j + 1, 1))
            table = later[edges]  # the half reached from each vertex of V_j
            if j == 1:
                return (int(table[inst.start]),)
            return tuple(int(t) for t in table)

        return {"k_rounds": k_rounds, "one_round": one_round}[strategy]

    return [make(j) for j in range(1, k + 1)]


def solve_by_protocol(instance: PointerChasingInstance, strategy: str = "k_rounds") -> tuple[int, Blackboard]:
    """Run :func:`pointer_chasing_players`; returns (P_1's output bit, the blackboard)."""
    rounds = instance.k if strategy == "k_rounds" else 1
    board = run_protocol(pointer_chasing_players(instance, strategy), rounds)
    return board.output[0], board
