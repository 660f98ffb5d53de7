"""The one place where hoplib chooses a device, a dtype policy and seeds: every chapter and script calls
:func:`get_device` with its ``device`` parameter (``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``)."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from hoplib.validate import check_choice


def get_device(device: str | torch.device = "auto") -> torch.device:
    """Resolve ``device``: ``"auto"`` picks CUDA, then MPS, then CPU. A device that is not present raises
    ``ValueError`` rather than falling back, so a run labelled "cuda" in its provenance really ran on CUDA."""
    device = check_choice("device", device.type if isinstance(device, torch.device) else device,
                          ("auto", "cpu", "cuda", "mps"))
    present = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if device == "auto":
        return torch.device(next(name for name, ok in present.items() if ok))
    if not present[device]:
        raise ValueError(f"device={device!r} was asked for but is not available; use 'auto' or 'cpu'")
    return torch.device(device)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on a CUDA GPU with native bf16 (compute capability 8.0 or more: A100, H100, ...), else a
    no-op (float32). A T4 (7.5) trains in float32: ``torch.cuda.is_bf16_supported()`` is true there too, but
    counts emulation. CPU and MPS stay float32 and bit-reproducible."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
