"""Torch and NumPy dtypes (a bottom layer: the transport and the features both use it)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["numpy_dtype"]


def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The NumPy dtype of a torch dtype; None for one NumPy lacks (bfloat16, complex32, ...)."""
    try:
        return _NUMPY[dtype]
    except KeyError:
        pass
    try:
        found = torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        found = None
    _NUMPY[dtype] = found  # a dict's item set in one step: safe from several threads
    return found


_NUMPY: dict[torch.dtype, np.dtype | None] = {}  # torch's dtypes are a fixed set
