"""Multi-player pointer chasing and the reduction from recurrent models to it (Section 5, Appendix E.1).

The pieces of the paper's lower bound for multi-layer RNNs (Corollary 5.2), each as code:

* :class:`PointerChasingInstance` and :func:`random_instance`: the problem of Definition E.2 (k+1 layers of q
  vertices, a perfect matching E_j from layer j to layer j+1, a start vertex of V_1 and a fixed split of the
  last layer into two halves; the question is which half the path from the start vertex ends in).
* :func:`to_hop_sequence` and :func:`decode_answer`: the encoding of Proposition E.4, a sequence x of length
  2kq + 1 over an alphabet of 2q + 2 symbols whose last hop_k value names the half that is reached.
* :class:`Blackboard` and :func:`run_protocol`: the blackboard model of Definition E.1 (in each round the
  players P_k, ..., P_1 post, in that order, a message of at most s bits that everyone can read; the output is
  P_1's last message), with exact bit accounting.
* :func:`pointer_chasing_players`: two protocols for pointer chasing, one with k rounds of about log q bits
  and one with a single round of q bits, the two sides of Proposition E.3 (R >= k or s = Omega(q / k^5)).
* :func:`simulate_rnn_protocol`: the reduction of Corollary 5.2. Any multi-layer recurrent model of
  :mod:`hoplib.lower_bounds.rnn` becomes an L-round protocol: in round l each player runs layer l on its block, starting
  from the state the previous player posted, and posts its own final state. Every bit that crosses from one
  player to the next goes through the blackboard, and the count of those bits is exact.

Conventions (0-based): vertex u of layer V_j (u in [0, q)) is written as symbol u when j is odd and q + u when
j is even; the two halves of V_{k+1} are the symbols 2q (half 0) and 2q + 1 (half 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from hoplib._book.validate import check_choice, check_int, check_int_array

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


def block_sizes(n: int, num_players: int) -> list[int]:
    """Lengths of the contiguous blocks of players P_p, ..., P_1 (left to right) for a sequence of length ``n``.

    Blocks are as equal as possible, the longer ones on the right; for Proposition E.4's sequences
    (n = 2kq + 1, p = k) this gives k - 1 blocks of 2q and P_1's block of 2q + 1, as in :func:`player_block`.
    """
    n = check_int("n", n, low=1)
    num_players = check_int("num_players", num_players, low=1, high=n)
    base, extra = divmod(n, num_players)
    return [base] * (num_players - extra) + [base + 1] * extra


def lower_bound_scale(n: int, k: int) -> float:
    """N / k^6, the scale of Proposition E.4's message-size bound s = Omega(N / k^6) (constants unknown)."""
    n = check_int("n", n, low=1)
    k = check_int("k", k, low=1)
    return n / k**6


# --------------------------------------------------------------------------- Definition E.1


def _as_bits(bits: object, name: str = "bits") -> tuple[int, ...]:
    if isinstance(bits, torch.Tensor):
        bits = bits.detach().cpu().reshape(-1).tolist()
    elif isinstance(bits, np.ndarray):
        bits = bits.reshape(-1).tolist()
    if not isinstance(bits, (list, tuple)):
        raise TypeError(f"{name} must be a sequence of 0/1 values, got {type(bits).__name__}")
    out = tuple(int(b) for b in bits)
    if any(b not in (0, 1) for b in out):
        raise ValueError(f"{name} must hold only 0 and 1")
    return out


@dataclass(frozen=True)
class Post:
    """One message on the blackboard: the round (1-based), the player j of P_j, and the bits."""

    round: int
    player: int
    bits: tuple[int, ...]


@dataclass
class Blackboard:
    """The shared blackboard of Definition E.1, with exact bit accounting.

    ``num_players`` players P_p, ..., P_1 speak in that order within each round, at most once each, with
    messages of at most ``message_bits`` bits (None: no limit). Everyone can read everything posted so far.
    The protocol's output is P_1's last message.
    """

    num_players: int
    message_bits: int | None = None
    posts: list[Post] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_players = check_int("num_players", self.num_players, low=1)
        if self.message_bits is not None:
            self.message_bits = check_int("message_bits", self.message_bits, low=0)

    def post(self, round: int, player: int, bits: object) -> None:
        """Append P_``player``'s message for ``round``; enforces the speaking order and the size limit."""
        round = check_int("round", round, low=1)
        player = check_int("player", player, low=1, high=self.num_players)
        b = _as_bits(bits)
        if self.message_bits is not None and len(b) > self.message_bits:
            raise ValueError(f"bits must have at most message_bits = {self.message_bits} bits, got {len(b)}")
        if self.posts:
            last = self.posts[-1]
            if round < last.round or (round == last.round and player >= last.player):
                raise ValueError(f"P_{player} cannot post in round {round} after P_{last.player} posted in round "
                                 f"{last.round}: players speak P_{self.num_players}, ..., P_1 each round")
        self.posts.append(Post(round, player, b))

    def last_message(self, player: int, round: int | None = None) -> tuple[int, ...] | None:
        """The last message of P_``player`` (in ``round`` if given), or None if it has not posted."""
        player = check_int("player", player, low=1, high=self.num_players)
        for p in reversed(self.posts):
            if p.player == player and (round is None or p.round == round):
                return p.bits
        return None

    @property
    def output(self) -> tuple[int, ...] | None:
        """P_1's last message: the protocol's output (Definition E.1)."""
        return self.last_message(1)

    @property
    def total_bits(self) -> int:
        """Number of bits posted, summed over all messages."""
        return sum(len(p.bits) for p in self.posts)

    @property
    def max_message_bits(self) -> int:
        """The longest message posted: the s this run actually used."""
        return max((len(p.bits) for p in self.posts), default=0)

    @property
    def rounds(self) -> int:
        """Number of rounds in which anything was posted (the last round index)."""
        return max((p.round for p in self.posts), default=0)


Player = Callable[[int, Blackboard], object]
"""A player's strategy: called with (round, blackboard), returns the bits to post, or None to stay silent."""


def run_protocol(players: Sequence[Player], num_rounds: int, message_bits: int | None = None,
                 blackboard: Blackboard | None = None) -> Blackboard:
    """Run a blackboard protocol (Definition E.1): ``players[j - 1]`` is P_j's strategy.

    In each of ``num_rounds`` rounds, P_p, ..., P_1 are called in that order with the round and the
    blackboard; a returned bit sequence is posted (at most ``message_bits`` bits each). A player only sees
    its own input (closed over by its strategy) and the blackboard. Returns the blackboard (``blackboard``,
    an empty :class:`Blackboard` for ``len(players)`` players, if given).
    """
    if not isinstance(players, Sequence) or not players or not all(callable(p) for p in players):
        raise TypeError("players must be a non-empty sequence of callables (round, blackboard) -> bits")
    num_rounds = check_int("num_rounds", num_rounds, low=1)
    if blackboard is None:
        board = Blackboard(len(players), message_bits)
    elif not isinstance(blackboard, Blackboard):
        raise TypeError(f"blackboard must be a Blackboard, got {type(blackboard).__name__}")
    elif blackboard.num_players != len(players) or blackboard.posts:
        raise ValueError(f"blackboard must be empty and have num_players = {len(players)}")
    else:
        board = blackboard
    for r in range(1, num_rounds + 1):
        for j in range(len(players), 0, -1):
            bits = players[j - 1](r, board)
            if bits is not None:
                board.post(r, j, bits)
    return board


def int_to_bits(value: int, width: int) -> tuple[int, ...]:
    """``value`` in ``width`` bits, least significant first."""
    width = check_int("width", width, low=0)
    value = check_int("value", value, low=0, high=2**width - 1)
    return tuple((value >> i) & 1 for i in range(width))


def bits_to_int(bits: Sequence[int]) -> int:
    """Inverse of :func:`int_to_bits`."""
    return sum(int(b) << i for i, b in enumerate(_as_bits(bits)))


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


# --------------------------------------------------------------------------- Corollary 5.2's reduction


def _model_device(model: torch.nn.Module) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return torch.device("cpu")


@torch.no_grad()
def simulate_rnn_protocol(model: torch.nn.Module, x: np.ndarray | torch.Tensor, num_players: int,
                          blackboard: Blackboard | None = None) -> tuple[torch.Tensor, int]:
    """Run a multi-layer recurrent model as the blackboard protocol of Corollary 5.2's proof.

    ``model`` is a :class:`hoplib.lower_bounds.rnn.RecurrentStack` (token-wise ``embed``, recurrent ``layers``,
    token-wise
    ``readout``); ``x`` a 1-D sequence of ids. The sequence is cut into ``num_players`` contiguous blocks
    (:func:`block_sizes`), P_p holding the leftmost and P_1 the rightmost. Each player embeds its block. In
    round l = 1..L, P_p, ..., P_1 in turn read the previous player's final layer-l state from the blackboard
    (the initial state for P_p), run layer l on their block's layer-(l-1) outputs, and P_p, ..., P_2 post
    their final layer-l state as bits (``layer.encode_state``). In round L, P_1 applies the readout at its
    last position and posts the argmax class (ceil(log2 C) bits) as the output.

    Returns ``(output, bits)``: P_1's output vector Y_N (the logits at the last position, which equal
    ``model(x)[-1]``) and the exact number of bits posted. Pass a :class:`Blackboard` to keep the transcript.
    """
    from hoplib.lower_bounds.rnn import (
        RecurrentStack,  # local import: hoplib.lower_bounds.rnn imports nothing from here
    )

    if not isinstance(model, RecurrentStack):
        raise TypeError(f"model must be a hoplib.lower_bounds.rnn.RecurrentStack, got {type(model).__name__}")
    check_int_array("x", x)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D sequence of ids, got shape {tuple(x.shape)}")
    n = int(x.shape[0])
    num_players = check_int("num_players", num_players, low=1, high=n)
    device = _model_device(model)
    xt = (torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x).long().to(device)
    sizes = block_sizes(n, num_players)
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    # Player P_j holds block index p - j (left to right).
    blocks = {num_players - b: xt[starts[b]:starts[b + 1]] for b in range(num_players)}
    n_layers = model.n_layers
    board = blackboard if blackboard is not None else Blackboard(num_players)
    if board.num_players != num_players or board.posts:
        raise ValueError(f"blackboard must be empty and have num_players = {num_players}")
    result: dict[str, torch.Tensor] = {}

    def make(j: int) -> Player:
        local = {"z": model.embed(blocks[j].unsqueeze(0))}  # P_j's private memory: its block's activations

        def play(r: int, board: Blackboard) -> object:
            if r > n_layers:
                return None
            layer = model.layers[r - 1]
            if j == num_players:
                state = None
            else:
                msg = board.last_message(j + 1, r)
                bits = torch.tensor(msg, dtype=torch.bool, device=device).unsqueeze(0)
                state = layer.decode_state(bits)
            z, state = layer(local["z"], state)
            local["z"] = z
            if j > 1:
                return layer.encode_state(state)[0]
            if r == n_layers:
                logits = model.readout(z)[0, -1]
                result["output"] = logits
                width = max(1, math.ceil(math.log2(logits.shape[-1])))
                return int_to_bits(int(logits.argmax()), width)
            return None
        return play

    if n_layers == 0:
        raise ValueError("model must have at least one recurrent layer")
    run_protocol([make(j) for j in range(1, num_players + 1)], n_layers, blackboard=board)
    return result["output"], board.total_bits
