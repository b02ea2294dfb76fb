"""Image features: encoded images (:class:`Image`) and raw pixel bytes (:class:`RawImage`)."""

from __future__ import annotations

from collections.abc import Callable
from copy import copy as _copy
from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.images.decode import FRAMES, IMAGE_MODES, decode_checked, preload
from tfrecord_torch.features.images.jpeg import check_decoder
from tfrecord_torch.features.images.wrap import as_image
from tfrecord_torch.features.specs import _REQUIRED, Feature, record_dim

__all__ = ["Image", "RawImage"]


class Image(Feature):
    """Encoded image bytes (PNG, JPEG, GIF, WebP, BMP, TIFF, ...), detected from
    the bytes and decoded as ``tf.io.decode_image`` decodes them, to a
    ``tv_tensors.Image`` uint8 [C, H, W] (a plain tensor when torchvision
    cannot be imported, see :mod:`tfrecord_torch.features.images.wrap`) in
    C-contiguous memory (another layout only through :meth:`laid_out`).

    Args:
        mode: "RGB" (C=3), "L" (gray, C=1), "RGBA" (C=4) or "unchanged" (the
            stored channels; 16-bit PNGs give uint16).
        frames: "first" (default: the first frame of an animated GIF/WebP) or
            "all" (GIF and WebP give [N, C, H, W]).
        decoder: a JPEG's IDCT. "accurate": ``tf.io.decode_jpeg(...,
            dct_method="INTEGER_ACCURATE")``'s pixels, torchvision's. "fast":
            TF's default ``dct_method``, bit for bit -- what
            ``tf.io.decode_jpeg(data)``, ``tf.io.decode_image``, the Object
            Detection API and TFDS give, so the pixels a model trained in TF
            saw. None (default): ``ImageBatching(decoder=...)`` where the
            dataset has one, else "accurate" -- except on batch mode's image
            fast path (one RGB Image alone), whose default is "fast". Other
            formats decode the same either way.
    """

    kind = "bytes"
    stacks = True
    costly = True
    spatial = True
    # C-contiguous planes, which a batch stacks with plain copies; False: the channels-last view of
    # the decoded buffer, which torch's antialiased resize reads without repacking (see laid_out)
    _planes = True

    def __init__(self, key: str | None = None, *, mode: str = "RGB", frames: str = "first",
                 decoder: str | None = None, default: Any = _REQUIRED) -> None:
        super().__init__(key, default=default)
        if mode not in IMAGE_MODES:
            raise ValueError(f"mode must be one of {IMAGE_MODES}, got {mode!r}")
        if frames not in FRAMES:
            raise ValueError(f"frames must be one of {FRAMES}, got {frames!r}")
        if decoder is not None:
            check_decoder(decoder)
        self.mode, self.frames, self.decoder = mode, frames, decoder
        preload()  # here, in the process that makes the dataset, not in every worker

    def convert(self, value: Any) -> torch.Tensor:
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} images, expected 1")
        try:
            return as_image(decode_checked(value[0], self.mode, self.frames, self._planes, self.jpeg_decoder))
        except Exception as e:  # decoders raise many types (Pillow's DecompressionBombError, ...)
            raise FeatureError(self.key, f"cannot decode image ({len(value[0])} bytes): "
                                         f"{type(e).__name__}: {e}") from e

    @property
    def jpeg_decoder(self) -> str:
        """The IDCT this feature decodes JPEGs with: ``decoder``, "accurate" when None."""
        return self.decoder or "accurate"

    def decoding_with(self, decoder: str) -> Image:
        """This feature decoding JPEGs with ``decoder`` (a path's choice for
        ``decoder=None``; a datasets' option that disagrees with a decoder
        given here is refused before this is called)."""
        copy = _copy(self)
        copy.decoder = check_decoder(decoder)
        return copy

    def laid_out(self, *, planes: bool) -> Image:
        """This feature giving the same values in another memory layout:
        ``planes`` C-contiguous [C, H, W] (the default), else the [C, H, W]
        view of the decoded [H, W, C] buffer, channels-last strides."""
        copy = _copy(self)
        copy._planes = planes
        return copy


class RawImage(Feature):
    """Raw pixel bytes (HWC order) reshaped to a ``tv_tensors.Image`` [C, H, W],
    with the shape read from other features (the tutorials' ``image_raw`` +
    ``height``/``width``/``depth`` layout) or given as ``shape=(H, W, C)``.

    Args:
        height: the int64 feature holding the height.
        width: the int64 feature holding the width.
        depth: the int64 feature holding the channel count, a constant channel
            count (``depth=3`` where records have no channels feature), or None for 1.
        shape: a constant (H, W, C) instead of the features.
        dtype: "uint8" (default) or "uint16" (little-endian, as ``tf.io.decode_raw``).
    """

    kind = "bytes"
    stacks = True
    spatial = True

    def __init__(self, key: str | None = None, *, height: str = "height", width: str = "width",
                 depth: str | int | None = "depth", shape: tuple | None = None, dtype: str = "uint8",
                 default: Any = _REQUIRED) -> None:
        super().__init__(key, default=default)
        if dtype not in ("uint8", "uint16"):
            raise ValueError(f"dtype must be one of ('uint8', 'uint16'), got {dtype!r}")
        self.height, self.width, self.depth, self.shape = height, width, depth, shape
        self.dtype = np.dtype(dtype)

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        if value is None:
            return self.default
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} values, expected 1")
        if self.shape is not None:
            h, w, c = self.shape
        else:
            h, w = (record_dim(record, k, self.key) for k in (self.height, self.width))
            depth = self.depth
            c = depth if isinstance(depth, int) else record_dim(record, depth, self.key) if depth else 1
        data, size = value[0], self.dtype.itemsize
        if len(data) != h * w * c * size:
            raise FeatureError(self.key, f"holds {len(data)} bytes, but an image of {h}x{w}x{c} {self.dtype} "
                                         f"needs {h * w * c * size}")
        array = np.frombuffer(data, self.dtype.newbyteorder("<")).reshape(h, w, c).transpose(2, 0, 1)
        return as_image(torch.from_numpy(np.ascontiguousarray(array).astype(self.dtype)))

    def decode_column(self, column: Any, records: Callable[[], list[dict]]) -> Any:
        return [self.decode(r) for r in records()]
