"""Per-object instance masks of TF Object Detection API records, as one
``tv_tensors.Mask`` [N, H, W].

The OD API stores ``image/object/mask`` in one of two encodings, which its
``TfExampleDecoder(load_instance_masks=True, instance_mask_type=...)`` reads:

- ``PNG_MASKS`` (its ``create_coco_tf_record``): a bytes list of N PNGs,
  one per object, each decoded to one channel and made binary (``> 0``);
- ``NUMERICAL_MASKS``: a float list of N * H * W values, reshaped to
  [-1, H, W] with the image's size and made binary (``> 0.0``); the OD API
  takes the record's ``image/height`` / ``image/width``, the same size in a
  consistent record, but here the masks follow the image they move with.

A record without objects gives [0, H, W]. The wire tells the encodings apart
(a bytes list or a float list), so one feature reads both. The masks are
binary uint8 in both cases (the OD API gives numerical masks as float32 0/1;
torchvision's Mask R-CNN takes either). A mask count that differs from the
box count is an error: torchvision's ``SanitizeBoundingBoxes`` passes such
masks through unfiltered, and they would pair with the wrong boxes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.images import decode as _images
from tfrecord_torch.features.images.boxes import image_canvas
from tfrecord_torch.features.images.limits import check_pixels, pillow_open, read_header
from tfrecord_torch.features.images.wrap import as_mask
from tfrecord_torch.features.specs import Feature

__all__ = ["InstanceMasks"]

# PNG colour types whose first channel is what TF's decode_png(channels=1) gives: gray, gray + alpha
_GRAY_CHANNELS = (1, 2)


class InstanceMasks(Feature):
    """The objects' masks as ``tv_tensors.Mask`` uint8 [N, H, W] of 0/1 (a
    plain tensor where torchvision cannot be imported), from PNG masks or
    numerical masks (see the module's docstring); [0, H, W] for no objects.

    Args:
        key: the masks' key.
        height: the int64 feature with the image's height (used where the
            record has no image whose header this package reads).
        width: the int64 feature with the image's width (likewise).
        image: the encoded image's key, whose header gives the size.
        count: a key with one value per object (the boxes' ``xmin``) whose
            length the mask count must equal; None to skip the check.
    """

    spatial = True
    kind = "bytes"
    costly = True

    def __init__(self, key: str = "image/object/mask", *, height: str = "image/height",
                 width: str = "image/width", image: str = "image/encoded",
                 count: str | None = "image/object/bbox/xmin") -> None:
        super().__init__(key)
        self.height, self.width, self.image, self.count = height, width, image, count

    def bind(self, name: str) -> Feature:
        return self  # reads its own keys, whatever the output is called

    def decode(self, record: dict) -> Any:
        h, w = image_canvas(record, self.height, self.width, self.image, str(self.key))
        value = record.get(self.key)
        if value is None or len(value) == 0:
            masks = torch.zeros((0, h, w), dtype=torch.uint8)
        elif isinstance(value, np.ndarray) and value.dtype == np.float32:
            masks = self._numerical(value, h, w)
        elif isinstance(value, np.ndarray):
            raise FeatureError(self.key, "holds int64 values; instance masks are PNG bytes (one per object) "
                                         "or N * H * W floats")
        else:
            # filled in numpy: torch.stack of small uint8 tensors wakes torch's thread team (~70 ms a
            # record on 2 busy cores, measured) for a copy of a few hundred KB
            array = np.empty((len(value), h, w), np.uint8)
            for k, data in enumerate(value):
                array[k] = self._png(k, data, h, w)
            masks = torch.from_numpy(array)
        self._check_count(record, len(masks))
        return as_mask(masks)

    def _numerical(self, value: np.ndarray, h: int, w: int) -> torch.Tensor:
        if value.size % (h * w):
            raise FeatureError(self.key, f"holds {value.size} floats, not a whole number of {h}x{w} masks "
                                         f"(the image's {self.height!r} x {self.width!r})")
        return torch.from_numpy((value.reshape(-1, h, w) > 0.0).astype(np.uint8))

    def _png(self, k: int, data: bytes, h: int, w: int) -> np.ndarray:
        try:
            mask = decode_binary_png(data)
        except Exception as e:  # Pillow raises many types
            raise FeatureError(self.key, f"object {k}'s mask ({len(data)} bytes) cannot be decoded: "
                                         f"{type(e).__name__}: {e}") from e
        if mask.shape != (h, w):
            raise FeatureError(self.key, f"object {k}'s mask is {mask.shape[0]}x{mask.shape[1]}, the image "
                                         f"{h}x{w}: a transform would move it apart from its object")
        return mask

    def _check_count(self, record: dict, n: int) -> None:
        if self.count is None:
            return
        objects = record.get(self.count)
        boxes = 0 if objects is None else len(objects)
        if boxes != n:
            raise FeatureError(self.key, f"holds {n} masks but {self.count!r} {boxes} objects; each object "
                                         "needs one mask (read with count=None to skip this check)")

    def decode_column(self, column: Any, records: Any) -> Any:
        return [self.decode(r) for r in records()]

    def __repr__(self) -> str:
        return f"InstanceMasks({self.key!r})"


def decode_binary_png(data: bytes) -> np.ndarray:
    """One object's PNG mask as uint8 0/1 [H, W]: its gray channel ``> 0``,
    as the OD API's ``tf.image.decode_image(channels=1)`` then ``> 0`` gives.

    Raises:
        ValueError: not a PNG; a colour or palette PNG (TensorFlow turns
            those to gray by weighting the colours, so ``> 0`` would depend on
            the palette); a 16-bit PNG (TensorFlow keeps its high byte):
            re-encode such masks as 8-bit gray PNGs.
    """
    header = read_header(data)
    if header.format != "png" or header.channels not in _GRAY_CHANNELS:
        what = header.format if header.format != "png" else f"a PNG of {header.channels} channels (colour or palette)"
        raise ValueError(f"an instance mask must be a gray PNG, got {what}")
    if header.bit_depth > 8:  # TensorFlow's uint8 decode keeps the high byte: ids below 256 read as 0
        raise ValueError("an instance mask must be an 8-bit (or 1-bit) gray PNG, got a 16-bit one")
    check_pixels(header)
    gray = _libpng_gray(data) if _images._torchvision_usable() else _pillow_gray(data)
    return np.greater(gray, 0).view(np.uint8)


def _libpng_gray(data: bytes) -> np.ndarray:
    """The gray channel [H, W] by torchvision's libpng decoder: in C from
    bytes to pixels, where Pillow parses the chunks in Python (a third less
    time per 256x256 mask, measured)."""
    from torchvision.io import ImageReadMode

    pixels = _images.torchvision_decode("decode_png", data, ImageReadMode.UNCHANGED)
    return pixels[0].numpy()  # gray + alpha: TensorFlow's one channel drops the alpha


def _pillow_gray(data: bytes) -> np.ndarray:
    """The gray channel [H, W] by Pillow (where torchvision cannot be imported)."""
    with pillow_open(data) as im:  # Pillow's own pixel limit applies beside this package's
        array = np.asarray(im)
    return array[..., 0] if array.ndim == 3 else array  # gray + alpha: TensorFlow's one channel drops the alpha
