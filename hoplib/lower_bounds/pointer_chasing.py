"""Multi-player pointer chasing, the hard problem behind every lower bound of Section 5 (Appendix E.1).

* :class:`PointerChasingInstance` and :func:`random_instance`: the problem of Definition E.2 (k+1 layers of q
  vertices, a perfect matching E_j from layer j to layer j+1, a start vertex of V_1 and a fixed split of the
  last layer into two halves; the question is which half the path from the start vertex ends in).
* :func:`to_hop_sequence` and :func:`decode_answer`: the encoding of Proposition E.4, a sequence x of length
  2kq + 1 over an alphabet of 2q + 2 symbols whose last hop_k value names the half that is reached; player P_j's
  block (:func:`player_block`) is written from E_j alone, and :func:`lower_bound_scale` is the N / k^6 of the
  proposition's message-size bound.
* :func:`pointer_chasing_players` and :func:`solve_by_protocol`: two protocols on the blackboard of
  :mod:`hoplib.lower_bounds.communication` (Definition E.1), one with k rounds of about log q bits and one with a
  single round of q bits, the two sides of Proposition E.3 (R >= k or s = Omega(q / k^5)).

The reductions that turn a model into a protocol on these sequences live with the models: recurrent models
(Corollary 5.2) in :mod:`hoplib.lower_bounds.rnn`, kernel and Longformer attention (Corollaries 5.3, 5.4) in
:mod:`hoplib.lower_bounds.efficient`, one-layer chain of thought (Corollary 5.6) in :mod:`hoplib.lower_bounds.cot`.

Conventions (0-based): vertex u of layer V_j (u in [0, q)) is written as symbol u when j is odd and q + u when
j is even; the two halves of V_{k+1} are the symbols 2q (half 0) and 2q + 1 (half 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from hoplib._book.validate import check_choice, check_int
from hoplib.lower_bounds.communication import Blackboard, Player, bits_to_int, int_to_bits, run_protocol

# --------------------------------------------------------------------------- Definition E.2


@dataclass(frozen=True)
class PointerChasingInstance:
    """A pointer-chasing instance (Definition E.2).

    ``matchings[j - 1, u]`` is E_j(u), the vertex of V_{j+1} matched to vertex ``u`` of V_j (j = 1..k);
    ``split[w]`` is the half (0 or 1) of vertex ``w`` of V_{k+1}; ``start`` is the start vertex of V_1.
    Player P_j holds E_j; the split is public.
    """

    k: int
    q: int
    matchings: np.ndarray
    split: np.ndarray
    start: int = 0

    def path(self) -> list[int]:
        """The vertices v_1 = start, v_2 = E_1(v_1), ..., v_{k+1} = E_k(v_k) of the chased path."""
        v = [int(self.start)]
        for j in range(self.k):
            v.append(int(self.matchings[j, v[-1]]))
        return v

    @property
    def answer(self) -> int:
        """The half (0 or 1) of V_{k+1} that the path from ``start`` ends in."""
        return int(self.split[self.path()[-1]])

    @property
    def alphabet_size(self) -> int:
        """Size 2q + 2 of the alphabet of Proposition E.4's encoding."""
        return 2 * self.q + 2

    @property
    def length(self) -> int:
        """Length 2kq + 1 of the encoded sequence (k blocks of 2q symbols and the start vertex)."""
        return 2 * self.k * self.q + 1


def default_split(q: int) -> np.ndarray:
    """The fixed split of V_{k+1}: vertices ``u < q // 2`` form half 0, the others half 1."""
    q = check_int("q", q, low=2)
    return (np.arange(q) >= q // 2).astype(np.int64)


def random_instance(k: int, q: int, seed: int | None = None) -> PointerChasingInstance:
    """A uniformly random pointer-chasing instance of Definition E.2 with ``k`` matchings on ``q`` vertices.

    The k perfect matchings are independent uniform permutations of [q]; the start vertex is vertex 0 of V_1
    and the split is :func:`default_split`, both fixed and known to every player.
    """
    k = check_int("k", k, low=1)
    q = check_int("q", q, low=2)
    if seed is not None:
        seed = check_int("seed", seed, low=0, high=2**63 - 1)
    rng = np.random.default_rng(seed)
    matchings = np.stack([rng.permutation(q) for _ in range(k)]).astype(np.int64)
    return PointerChasingInstance(k=k, q=q, matchings=matchings, split=default_split(q), start=0)


def _check_instance(instance: object) -> PointerChasingInstance:
    if not isinstance(instance, PointerChasingInstance):
        raise TypeError(f"instance must be a PointerChasingInstance, got {type(instance).__name__}")
    m = np.asarray(instance.matchings)
    if m.shape != (instance.k, instance.q) or any(sorted(row) != list(range(instance.q)) for row in m.tolist()):
        raise ValueError(f"instance.matchings must be {instance.k} permutations of range({instance.q}), "
                         f"got shape {m.shape}")
    if np.asarray(instance.split).shape != (instance.q,) or not set(np.asarray(instance.split).tolist()) <= {0, 1}:
        raise ValueError(f"instance.split must be {instance.q} values in {{0, 1}}")
    check_int("instance.start", instance.start, low=0, high=instance.q - 1)
    return instance


# --------------------------------------------------------------------------- Proposition E.4's encoding


def vertex_symbol(instance: PointerChasingInstance, layer: int, u: int) -> int:
    """The symbol of vertex ``u`` of layer V_``layer`` (1-based layer): u for odd layers, q + u for even."""
    layer = check_int("layer", layer, low=1, high=instance.k)
    u = check_int("u", u, low=0, high=instance.q - 1)
    return u if layer % 2 == 1 else instance.q + u


def player_block(instance: PointerChasingInstance, j: int) -> np.ndarray:
    """The block of the sequence written from player P_j's input alone (Proposition E.4).

    Vertex u of V_j (in increasing order), each followed by its partner E_j(u) in V_{j+1}; in P_k's block the
    partner is replaced by the answer symbol 2q + split(E_k(u)); P_1's block ends with the start vertex.
    """
    inst = _check_instance(instance)
    j = check_int("j", j, low=1, high=inst.k)
    q = inst.q
    u = np.arange(q)
    own = u if j % 2 == 1 else q + u
    partner = inst.matchings[j - 1]
    if j == inst.k:
        nxt = 2 * q + inst.split[partner]
    else:
        nxt = partner if (j + 1) % 2 == 1 else q + partner
    block = np.stack([own, nxt], axis=1).reshape(-1)
    if j == 1:
        block = np.concatenate([block, [inst.start]])
    return block.astype(np.int64)


def to_hop_sequence(instance: PointerChasingInstance) -> tuple[np.ndarray, int]:
    """The sequence x of Proposition E.4 and the instance's answer, with ``hop(x, k)[-1]`` naming that answer.

    x is the concatenation of the blocks of P_k, P_{k-1}, ..., P_1 (P_k leftmost), length 2kq + 1, over the
    alphabet [2q + 2]. Starting from the last symbol (the start vertex), each find step moves one block left
    along one matching edge, so after k steps it reads 2q + (the half reached). Decode with
    :func:`decode_answer`.
    """
    inst = _check_instance(instance)
    x = np.concatenate([player_block(inst, j) for j in range(inst.k, 0, -1)])
    return x, inst.answer


def decode_answer(instance: PointerChasingInstance, symbol: int | np.integer | torch.Tensor) -> int | None:
    """The half (0 or 1) named by the hop_k value ``symbol`` (2q or 2q + 1), or None for any other value."""
    inst = _check_instance(instance)
    if isinstance(symbol, torch.Tensor):
        if symbol.numel() != 1:
            raise ValueError(f"symbol must be a single value, got shape {tuple(symbol.shape)}")
        symbol = int(symbol.item())
    symbol = check_int("symbol", symbol)
    if symbol in (2 * inst.q, 2 * inst.q + 1):
        return symbol - 2 * inst.q
    return None


def lower_bound_scale(n: int, k: int) -> float:
    """N / k^6, the scale of Proposition E.4's message-size bound s = Omega(N / k^6) (constants unknown)."""
    n = check_int("n", n, low=1)
    k = check_int("k", k, low=1)
    return n / k**6



# --------------------------------------------------------------------------- two pointer-chasing protocols

STRATEGIES = ("k_rounds", "one_round")


def pointer_chasing_players(instance: PointerChasingInstance, strategy: str = "k_rounds") -> list[Player]:
    """Strategies for the k players of an instance, each seeing only its own matching (Proposition E.3's setting).

    * ``"k_rounds"``: in round r, P_r posts the vertex v_{r+1} = E_r(v_r) (ceil(log2 q) bits; P_k posts the
      half, 1 bit), reading v_r from P_{r-1}'s post; P_1 repeats the final answer in round k. k rounds, s about
      log q: the "R >= k" side of the bound.
    * ``"one_round"``: a single round. P_k posts, for every u of V_k, the half reached from u (q bits); each
      next P_j composes it with E_j and posts the q-bit table for V_j; P_1 looks up the start vertex and posts
      1 bit. One round, s = q: the "s = Omega(q / k^5)" side.
    """
    inst = _check_instance(instance)
    check_choice("strategy", strategy, STRATEGIES)
    k, q = inst.k, inst.q
    width = max(1, math.ceil(math.log2(q)))

    def make(j: int) -> Player:
        edges = inst.matchings[j - 1]  # P_j's private input

        if strategy == "k_rounds":
            def play(r: int, board: Blackboard) -> object:
                if j == 1 and r == k and k > 1:
                    return board.last_message(k, r)  # repeat the answer as the output
                if r != j:
                    return None
                v = inst.start if j == 1 else bits_to_int(board.last_message(j - 1, r - 1))
                if j == k:
                    return (int(inst.split[edges[v]]),)
                return int_to_bits(int(edges[v]), width)
            return play

        def play_one(r: int, board: Blackboard) -> object:
            if r != 1:
                return None
            later = inst.split if j == k else np.array(board.last_message(j + 1, 1))
            table = later[edges]  # half reached from each vertex of V_j
            if j == 1:
                return (int(table[inst.start]),)
            return tuple(int(t) for t in table)
        return play_one

    return [make(j) for j in range(1, k + 1)]


def solve_by_protocol(instance: PointerChasingInstance, strategy: str = "k_rounds") -> tuple[int, Blackboard]:
    """Run :func:`pointer_chasing_players` and return (the output bit, the blackboard)."""
    inst = _check_instance(instance)
    rounds = inst.k if strategy == "k_rounds" else 1
    board = run_protocol(pointer_chasing_players(inst, strategy), rounds)
    out = board.output
    if out is None or len(out) != 1:
        raise RuntimeError(f"protocol {strategy!r} ended without a 1-bit output from P_1: {out}")
    return out[0], board
