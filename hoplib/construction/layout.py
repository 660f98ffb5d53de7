"""The residual stream of the Theorem 4.2 construction, split into named subspaces (as tracr's residual space):
``layout["ptr"]`` is the slice holding the pointer P, ``layout["fetch.acc"]`` the part of the scratch subspace
``fetch`` where a lookUp deposits the accumulator it fetched."""

from __future__ import annotations

import math

import torch

KEEP, ACC, PTR = "keep", "acc", "ptr"  # what layer ℓ >= 3 does to A: keep it, A <- A∘P, or A <- P∘P
REGISTERS = ("ptr", "ptr_letter", "acc", "acc_letter")  # what a doubling layer's lookUp at P fetches


class Layout:
    """Named residual-stream subspaces, allotted in order, each optionally split into named parts."""

    def __init__(self) -> None:
        self.slices: dict[str, slice] = {}
        self.parts: dict[str, slice] = {}
        self.width = 0

    def add(self, name: str, size: int, parts: dict[str, int] | None = None) -> None:
        """Allot the next ``size`` coordinates to ``name``, split into ``parts`` (part name -> size)."""
        assert name not in self.slices and sum((parts or {size: size}).values()) == size, name
        self.slices[name] = slice(self.width, self.width + size)
        start = self.width
        for part, part_size in (parts or {}).items():
            self.parts[f"{name}.{part}"] = slice(start, start + part_size)
            start += part_size
        self.width += size

    def __getitem__(self, name: str) -> slice:
        """The slice of a subspace (``"ptr"``) or of a named part of one (``"fetch.acc"``)."""
        return self.slices[name] if name in self.slices else self.parts[name]

    def __contains__(self, name: object) -> bool:
        return name in self.slices or name in self.parts

    def size(self, name: str) -> int:
        return self[name].stop - self[name].start

    def coord(self, name: str) -> int:
        """The single coordinate of a one-wide subspace or part (``"one"``, ``"letter.bot"``)."""
        assert self.size(name) == 1, f"{name!r} spans {self.size(name)} coordinates"
        return self[name].start


def angles(m: int, idx: torch.Tensor) -> torch.Tensor:
    """Unit vectors (cos 2πi/m, sin 2πi/m) for integer tensors ``idx``, in float64, shape idx.shape + (2,)."""
    th = 2 * math.pi * idx.double() / m
    return torch.stack([torch.cos(th), torch.sin(th)], dim=-1)


def hop_layout(n_ops: int, multi: bool) -> Layout:
    """The residual stream for ``n_ops`` doubling layers (3, 4, ...);
    ``multi`` adds the k-token's program for the multi-task model."""
    letter = {"uv": 2, "bot": 1}  # the letter's unit vector and the ⊥-flag
    lay = Layout()
    for name, size in [("one", 1), ("is_start", 1), ("pos", 2), ("pos_prev", 2)]:
        lay.add(name, size)
    lay.add("recency", 1)
    lay.add("letter", 3, letter)
    lay.add("prev_letter", 2)
    lay.add("ptr", 2)
    lay.add("ptr_letter", 3, letter)
    lay.add("acc", 2)
    lay.add("acc_letter", 3, letter)
    lay.add("fetch", 10, {reg: lay.size(reg) for reg in REGISTERS})
    if multi:
        lay.add("bcast", 1)
        program = {f"{op}{ell}": 1 for ell in range(3, n_ops + 3)
                   for op in (ACC, PTR)}
        lay.add("kprog", 2 * n_ops, program)
        lay.add("gates", 2 * n_ops, program)
    return lay
