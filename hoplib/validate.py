"""Input checks shared by hoplib's public functions: a ``TypeError`` (wrong kind of value) or ``ValueError``
(wrong range) whose message names the argument and what is allowed."""

from __future__ import annotations

import numbers

import numpy as np
import torch

_TORCH_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[low, high]`` (either bound optional)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be in [{'-inf' if low is None else low}, {'inf' if high is None else high}], "
                         f"got {value}")
    return int(value)


def check_int_array(name: str, x: object, *, min_ndim: int = 1) -> np.ndarray | torch.Tensor:
    """Check that ``x`` is an integer numpy array or torch tensor with at least ``min_ndim`` dimensions."""
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if not (x.dtype in _TORCH_INT_DTYPES if isinstance(x, torch.Tensor) else np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"{name} must hold integers, got dtype {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s) (..., N), got shape {tuple(x.shape)}")
    return x


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Check that ``value`` is one of the strings in ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value
