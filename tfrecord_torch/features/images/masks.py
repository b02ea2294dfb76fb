"""Segmentation masks as ``tv_tensors.Mask`` [H, W], so v2 transforms crop,
flip and resize them with their image (nearest-neighbour for the mask)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.images.limits import check_pixels, pillow_open, read_header
from tfrecord_torch.features.images.wrap import as_mask
from tfrecord_torch.features.specs import _REQUIRED, Feature, record_dim

__all__ = ["Mask", "decode_mask"]

_MASK_DTYPES = ("uint8", "uint16")


class Mask(Feature):
    """A mask of class (or instance) ids, as ``tv_tensors.Mask`` [H, W].

    Two layouts:

    - encoded (the default): a PNG (or any one-channel image Pillow reads).
      Palette PNGs give their palette *indices* -- the class ids of PASCAL
      VOC-style masks -- not colours (unlike :class:`Image`); 16-bit PNGs
      give uint16 ids.
    - raw: ``height=``/``width=`` name int64 features (or ``shape=(H, W)``)
      and the bytes hold H*W ids of ``dtype`` (the classic ``mask_raw``).

    Args:
        key: the record's key.
        height: the int64 feature holding the raw mask's height.
        width: the int64 feature holding the raw mask's width.
        shape: a constant (H, W) for raw masks.
        dtype: "uint8" (default) or "uint16", for raw masks.
        default: value when the record lacks the key.
    """

    spatial = True

    kind = "bytes"
    stacks = True
    costly = True

    def __init__(self, key: str | None = None, *, height: str | None = None, width: str | None = None,
                 shape: tuple[int, int] | None = None, dtype: str = "uint8", default: Any = _REQUIRED) -> None:
        super().__init__(key, default=default)
        if (height is None) != (width is None):
            raise ValueError("height= and width= go together (the int64 features of a raw mask's size)")
        if dtype not in _MASK_DTYPES:
            raise ValueError(f"dtype must be one of {_MASK_DTYPES}, got {dtype!r}")
        self.height, self.width, self.shape, self.dtype = height, width, shape, np.dtype(dtype)
        self.raw_layout = height is not None or shape is not None

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        if value is None:
            return self.default
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} masks, expected 1; one mask per object (the OD "
                                         "API's image/object/mask) reads with InstanceMasks() as [N, H, W]")
        if not self.raw_layout:
            try:
                return as_mask(decode_mask(value[0]))
            except Exception as e:  # Pillow raises many types
                raise FeatureError(self.key, f"cannot decode mask ({len(value[0])} bytes): "
                                             f"{type(e).__name__}: {e}") from e
        if self.shape is not None:
            h, w = self.shape
        else:
            assert self.height is not None and self.width is not None  # raw_layout without shape
            h, w = record_dim(record, self.height, self.key), record_dim(record, self.width, self.key)
        data = value[0]
        if len(data) != h * w * self.dtype.itemsize:
            raise FeatureError(self.key, f"holds {len(data)} bytes, but a {h}x{w} {self.dtype} mask needs "
                                         f"{h * w * self.dtype.itemsize}")
        array = np.frombuffer(data, self.dtype.newbyteorder("<")).reshape(h, w).astype(self.dtype)
        return as_mask(torch.from_numpy(array))

    def decode_column(self, column: Any, records: Any) -> Any:
        return [self.decode(r) for r in records()]


def decode_mask(data: bytes) -> torch.Tensor:
    """Encoded one-channel mask bytes to uint8 (or uint16) ids [H, W];
    palette images give their indices. ValueError for colour images."""
    check_pixels(read_header(data))
    with pillow_open(data) as im:  # Pillow's own pixel limit applies beside this package's
        if im.mode not in ("P", "L", "1") and not im.mode.startswith("I;16"):
            raise ValueError(f"a mask needs one channel of ids (a palette or gray image), got mode "
                             f"{im.mode!r}; decode colour-coded masks with Image(mode='RGB')")
        array = np.array(im)
    array = array.astype(np.uint16 if array.dtype.itemsize == 2 else np.uint8)
    return torch.from_numpy(array)
