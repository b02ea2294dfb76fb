"""Torch and NumPy dtypes (a bottom layer: the transport and the features both use it)."""

from __future__ import annotations

import functools

import numpy as np
import torch

__all__ = ["numpy_dtype"]


@functools.cache  # torch's dtypes are a fixed set; a lookup, not a tensor made, per call
def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The NumPy dtype of a torch dtype; None for one NumPy lacks (bfloat16, complex32, ...)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return None
