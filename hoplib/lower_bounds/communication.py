"""The blackboard model of communication (Definition E.1 of the paper), the engine of every lower bound of
Section 5 and Appendix E.

In each round the players P_p, ..., P_1 post, in that order, a message that everyone can read; the output of the
protocol is P_1's last message. A lower bound on the rounds R or the message size s of such protocols for
pointer chasing (Proposition E.3, :mod:`hoplib.lower_bounds.pointer_chasing`) becomes a lower bound on a model
once the model is run as a protocol, with every bit that crosses from one player's block to the next posted and
counted: RNNs (Corollary 5.2, :func:`hoplib.lower_bounds.rnn.simulate_rnn_protocol`), kernel and Longformer
attention (Corollaries 5.3 and 5.4, :mod:`hoplib.lower_bounds.efficient`) and one-layer chain of thought
(Corollary 5.6, :func:`hoplib.lower_bounds.cot.simulate_cot_protocol`).

What they share is here:

* :class:`Blackboard`, :class:`Post`, :data:`Player` and :func:`run_protocol`: Definition E.1 with exact bit
  accounting and the speaking order enforced;
* :func:`block_sizes` and :func:`block_bounds`: the contiguous blocks of the input that the players hold
  (P_p leftmost, P_1 rightmost, as in Proposition E.4);
* bit encodings of what players post: integers (:func:`int_to_bits`, :func:`bits_to_int`, :func:`class_bits`
  for an argmax class) and float32 numbers, bit for bit (:func:`floats_to_bits`, :func:`bits_to_floats`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from hoplib._book.validate import check_int, check_int_array

# --------------------------------------------------------------------------- blocks of the input


def block_sizes(n: int, num_players: int) -> list[int]:
    """Lengths of the contiguous blocks of players P_p, ..., P_1 (left to right) for a sequence of length ``n``.

    Blocks are as equal as possible, the longer ones on the right; for Proposition E.4's sequences
    (n = 2kq + 1, p = k) this gives k - 1 blocks of 2q and P_1's block of 2q + 1, as in :func:`player_block`.
    """
    n = check_int("n", n, low=1)
    num_players = check_int("num_players", num_players, low=1, high=n)
    base, extra = divmod(n, num_players)
    return [base] * (num_players - extra) + [base + 1] * extra


def block_bounds(n: int, num_players: int) -> dict[int, tuple[int, int]]:
    """``{j: (lo, hi)}``: player P_j holds positions [lo, hi) of a sequence of length ``n`` (:func:`block_sizes`;
    P_p leftmost, P_1 rightmost)."""
    sizes = block_sizes(n, num_players)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    return {num_players - b: (starts[b], starts[b + 1]) for b in range(num_players)}


def sequence_ids(x: object, device: torch.device | str = "cpu") -> torch.Tensor:
    """A 1-D sequence of token ids (NumPy array or tensor of integers) as a LongTensor on ``device``."""
    check_int_array("x", x)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D sequence of ids, got shape {tuple(x.shape)}")
    xt = torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x
    return xt.long().to(device)


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


def class_bits(n_classes: int) -> int:
    """Bits of an answer that names one of ``n_classes`` classes: ceil(log2 C), at least 1."""
    n_classes = check_int("n_classes", n_classes, low=1)
    return max(1, math.ceil(math.log2(n_classes)))


def floats_to_bits(t: torch.Tensor) -> tuple[int, ...]:
    """The float32 bit patterns of ``t`` (flattened), 32 bits per entry, least significant bit first."""
    a = t.detach().float().cpu().contiguous().numpy().reshape(-1).view(np.uint8)
    return tuple(np.unpackbits(a, bitorder="little").tolist())


def bits_to_floats(bits: Sequence[int], shape: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """Inverse of :func:`floats_to_bits`: a float32 tensor of ``shape`` on ``device`` (exact round trip)."""
    arr = np.packbits(np.asarray(bits, dtype=np.uint8), bitorder="little").view(np.float32)
    n = int(np.prod(shape)) if len(shape) else 1
    if arr.size != n:
        raise ValueError(f"bits must hold {n} float32 numbers ({32 * n} bits), got {len(bits)} bits")
    return torch.from_numpy(arr.copy()).reshape(tuple(shape)).to(device)
