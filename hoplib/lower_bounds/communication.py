"""The blackboard model of communication (Definition E.1), with exact bit counts: players P_p, ..., P_1 post
in that order each round; P_p holds the leftmost block of the input (:func:`block_bounds`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch


def block_sizes(n: int, num_players: int) -> list[int]:
    """Lengths of the blocks of P_p, ..., P_1 (left to right): as equal as possible, longer ones on the right."""
    if not 1 <= num_players <= n:
        raise ValueError(f"need 1 <= num_players <= n, got {num_players} players for n = {n}")
    base, extra = divmod(n, num_players)
    return [base] * (num_players - extra) + [base + 1] * extra


def block_bounds(n: int, num_players: int) -> dict[int, tuple[int, int]]:
    """``{j: (lo, hi)}``: player P_j holds positions [lo, hi) (P_p leftmost, P_1 rightmost)."""
    starts = np.cumsum([0, *block_sizes(n, num_players)]).tolist()
    return {num_players - b: (starts[b], starts[b + 1]) for b in range(num_players)}


def sequence_ids(x: np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """A 1-D sequence of integer ids (NumPy array or tensor) as a LongTensor on ``device``."""
    xt = torch.as_tensor(x)
    if xt.ndim != 1 or xt.is_floating_point():  # .long() would truncate floats silently
        raise ValueError(f"x must be a 1-D sequence of integer ids, got {xt.dtype} of shape {tuple(xt.shape)}")
    return xt.long().to(device)


@dataclass(frozen=True)
class Post:
    """One message: the round (1-based), the player j of P_j, and the bits."""

    round: int
    player: int
    bits: tuple[int, ...]


@dataclass
class Blackboard:
    """The blackboard of Definition E.1: enforces the speaking order and counts every bit posted."""

    num_players: int
    posts: list[Post] = field(default_factory=list)

    def post(self, round: int, player: int, bits: object) -> None:
        if isinstance(bits, (torch.Tensor, np.ndarray)):
            bits = bits.reshape(-1).tolist()
        b = tuple(as_bits(bits).tolist())
        if not 1 <= player <= self.num_players:
            raise ValueError(f"no player P_{player} among P_{self.num_players}, ..., P_1")
        last = self.posts[-1] if self.posts else None
        if last and (round < last.round or (round == last.round and player >= last.player)):
            raise ValueError(f"P_{player} cannot post in round {round} after P_{last.player} posted in "
                             f"round {last.round}: players speak P_{self.num_players}, ..., P_1 each round")
        self.posts.append(Post(round, player, b))

    def last_message(self, player: int, round: int | None = None) -> tuple[int, ...] | None:
        """The last message of P_``player`` (in ``round`` if given), or None."""
        return next((p.bits for p in reversed(self.posts)
                     if p.player == player and round in (None, p.round)), None)

    @property
    def output(self) -> tuple[int, ...] | None:  # P_1's last message
        return self.last_message(1)

    @property
    def total_bits(self) -> int:
        return sum(len(p.bits) for p in self.posts)

    @property
    def max_message_bits(self) -> int:  # the s this run used
        return max((len(p.bits) for p in self.posts), default=0)

    @property
    def rounds(self) -> int:
        return max((p.round for p in self.posts), default=0)


Player = Callable[[int, Blackboard], object]
"""A player's strategy: (round, blackboard) -> the bits to post, or None to stay silent."""


def run_protocol(players: Sequence[Player], num_rounds: int, blackboard: Blackboard | None = None) -> Blackboard:
    """Run ``players[j - 1]`` as P_j for ``num_rounds`` rounds, P_p first in each; returns the blackboard."""
    board = Blackboard(len(players)) if blackboard is None else blackboard
    if board.posts or board.num_players != len(players):
        raise ValueError(f"blackboard must be empty and have num_players = {len(players)}")
    for r in range(1, num_rounds + 1):
        for j in range(len(players), 0, -1):
            bits = players[j - 1](r, board)
            if bits is not None:
                board.post(r, j, bits)
    return board


def int_to_bits(value: int, width: int) -> tuple[int, ...]:
    """``value`` in ``width`` bits, least significant first."""
    if not 0 <= value < 2**width:
        raise ValueError(f"value {value} does not fit in {width} bits")
    return tuple((value >> i) & 1 for i in range(width))


def as_bits(bits: object) -> np.ndarray:
    """``bits`` as a flat uint8 array, or a ValueError unless every value is exactly 0 or 1 (int() would round
    0.7 to 0 and a float32 pattern of 2s would decode to garbage, silently)."""
    arr = np.asarray(bits).reshape(-1)
    if not np.isin(arr, (0, 1)).all():
        raise ValueError(f"bits must hold only 0 and 1, got {arr[~np.isin(arr, (0, 1))][0].item()!r}")
    return arr.astype(np.uint8)


def bits_to_int(bits: Sequence[int]) -> int:
    """Inverse of :func:`int_to_bits`."""
    return sum(int(b) << i for i, b in enumerate(as_bits(bits)))


def class_bits(n_classes: int) -> int:
    """Bits of an answer naming one of ``n_classes`` classes: ceil(log2 C), at least 1."""
    return max(1, math.ceil(math.log2(n_classes)))


def floats_to_bits(t: torch.Tensor) -> tuple[int, ...]:
    """The float32 bit patterns of ``t`` (flattened), 32 bits per entry, least significant first."""
    a = t.detach().float().cpu().contiguous().numpy().reshape(-1).view(np.uint8)
    return tuple(np.unpackbits(a, bitorder="little").tolist())


def bits_to_floats(bits: Sequence[int], shape: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """Inverse of :func:`floats_to_bits`: a float32 tensor of ``shape`` (exact round trip)."""
    arr = np.packbits(as_bits(bits), bitorder="little").view(np.float32)
    return torch.from_numpy(arr.copy()).reshape(tuple(shape)).to(device)
