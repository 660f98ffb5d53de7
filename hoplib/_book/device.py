"""The one place where hoplib chooses a device, a dtype policy and seeds.

Every chapter and every script calls :func:`get_device` with the ``device`` parameter of its parameters
cell (``"auto"``, ``"cpu"``, ``"cuda"`` or ``"mps"``); nothing else in hoplib looks at what hardware exists.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from hoplib._book.validate import check_choice, check_int

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def get_device(device: str | torch.device = "auto") -> torch.device:
    """Resolve ``device``: ``"auto"`` picks CUDA, then MPS, then CPU.

    Asking for a device that is not present raises ``ValueError`` rather than silently falling back, so a
    run labelled "cuda" in its provenance really ran on CUDA.
    """
    if isinstance(device, torch.device):
        device = device.type
    check_choice("device", device, DEVICE_CHOICES)
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch.cuda.is_available() is False; use 'auto' or 'cpu'")
    if device == "mps" and not _mps_available():
        raise ValueError("device='mps' was asked for but MPS is not available; use 'auto' or 'cpu'")
    return torch.device(device)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``device``: bf16 on a CUDA GPU that supports it, else None (float32).

    GPUs without bf16 (Colab's free T4, compute capability 7.5) train in float32: fp16 would need a gradient
    scaler and loses the loss curve's small values, and these models are small enough that float32 is fast.
    CPU and MPS stay in float32, so CPU results are bit-reproducible.
    """
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device (see get_device), got {type(device).__name__}")
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def autocast(device: torch.device):
    """bf16 autocast where :func:`autocast_dtype` says so, else a no-op context (float32)."""
    dtype = autocast_dtype(device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (all devices)."""
    seed = check_int("seed", seed, low=0, high=2**32 - 1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def describe(device: torch.device) -> str:
    """A human-readable device name for provenance records, e.g. ``'cuda (NVIDIA H200)'``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
