"""Input checks shared by every public function of hoplib.

Each helper raises a ``TypeError`` (wrong kind of value) or a ``ValueError`` (right kind, wrong range)
whose message names the argument and the allowed range, so a reader sees at once what to change.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

_TORCH_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[low, high]`` (either bound optional)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def check_int_array(name: str, x: object, *, min_ndim: int = 1) -> np.ndarray | torch.Tensor:
    """Check that ``x`` is an integer numpy array or torch tensor with at least ``min_ndim`` dimensions."""
    if isinstance(x, torch.Tensor):
        if x.dtype not in _TORCH_INT_DTYPES:
            raise TypeError(f"{name} must hold integers, got torch dtype {x.dtype}")
    elif isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"{name} must hold integers, got numpy dtype {x.dtype}")
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s) (..., N), got shape {tuple(x.shape)}")
    return x


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Check that ``value`` is one of the strings in ``choices``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {choices}, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value
