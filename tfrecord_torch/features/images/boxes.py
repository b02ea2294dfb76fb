"""Bounding boxes of the TF Object Detection API layout as ``tv_tensors.BoundingBoxes``.

The OD API stores each box as four float lists of coordinates normalised to
[0, 1] (``image/object/bbox/xmin``, ``ymin``, ``xmax``, ``ymax``). torchvision's
detection models and v2 transforms want absolute pixels, XYXY, with the
image's size attached: :class:`Boxes` scales by the size in the encoded
image's header (read without decoding), the image the boxes move with, or
without an image by the record's ``image/height``/``image/width``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.images.limits import read_header
from tfrecord_torch.features.images.wrap import as_boxes
from tfrecord_torch.features.specs import Feature, record_dim

__all__ = ["Boxes", "COORDINATES", "StackedBoxes", "image_canvas"]

COORDINATES = ("xmin", "ymin", "xmax", "ymax")


class Boxes(Feature):
    """Boxes [N, 4] as ``tv_tensors.BoundingBoxes`` (XYXY, absolute pixels,
    float32, ``canvas_size=(H, W)``); a plain float tensor where torchvision
    cannot be imported. A record without boxes gives N=0.

    Args:
        prefix: the coordinate keys' prefix (``prefix + "xmin"``, ...).
        image: the encoded image's key, whose header gives the size.
        height: the int64 feature with the image's height (used where the
            record has no image whose header this package reads).
        width: the int64 feature with the image's width (likewise).
        normalized: True (the OD API) when coordinates are fractions of the
            size; False when they are pixels already.
    """

    spatial = True

    kind = "float"

    def __init__(self, prefix: str = "image/object/bbox/", *, image: str = "image/encoded",
                 height: str = "image/height", width: str = "image/width", normalized: bool = True) -> None:
        super().__init__(prefix + "xmin")
        self.prefix, self.image, self.height, self.width = prefix, image, height, width
        self.normalized = normalized

    def bind(self, name: str) -> Feature:
        return self  # the keys come from the prefix, not the output name

    def decode(self, record: dict) -> Any:
        columns = []
        for name in COORDINATES:
            key = self.prefix + name
            value = record.get(key)
            if value is not None and len(value) and (not isinstance(value, np.ndarray) or value.dtype != np.float32):
                raise FeatureError(key, "holds non-float values, expected float box coordinates")
            columns.append(np.zeros(0, np.float32) if value is None else np.asarray(value, np.float32))
        if len({len(c) for c in columns}) != 1:
            counts = ", ".join(f"{n}: {len(c)}" for n, c in zip(COORDINATES, columns))
            raise FeatureError(self.prefix + "xmin", f"box coordinate lists differ in length ({counts})")
        h, w = self._size(record)
        boxes = np.stack(columns, axis=1)
        if self.normalized:
            boxes = boxes * np.array([w, h, w, h], np.float32)
        return as_boxes(torch.from_numpy(np.ascontiguousarray(boxes, np.float32)), (h, w))

    def _size(self, record: dict) -> tuple[int, int]:
        return image_canvas(record, self.height, self.width, self.image, self.prefix)

    def decode_column(self, column: Any, records: Any) -> Any:
        return [self.decode(r) for r in records()]

    def __repr__(self) -> str:
        return f"Boxes(prefix={self.prefix!r})"


class StackedBoxes(Feature):
    """Boxes stored as one float list of N * 4 normalised ``[ymin, xmin, ymax,
    xmax]`` (TFDS's ``BBoxFeature``, in a ``Sequence`` or alone) as
    ``tv_tensors.BoundingBoxes`` [N, 4] (XYXY, absolute pixels, float32), on
    the canvas of the encoded image under ``image`` (its header's size), so
    v2 transforms move them with that image.

    Args:
        key: the boxes' key.
        image: the encoded image's key.
    """

    spatial = True

    kind = "float"

    def __init__(self, key: str | None = None, *, image: str = "image") -> None:
        super().__init__(key, default=np.zeros(0, np.float32))
        self.image = image

    def convert(self, value: Any) -> Any:
        raise NotImplementedError  # decode() reads the image's size too

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        values = np.zeros(0, np.float32) if value is None else np.asarray(value, np.float32)
        if values.size % 4:
            raise FeatureError(self.key, f"holds {values.size} floats, not a whole number of boxes of 4")
        h, w = image_canvas(record, "", "", self.image, str(self.key))
        boxes = values.reshape(-1, 4)[:, [1, 0, 3, 2]] * np.array([w, h, w, h], np.float32)
        return as_boxes(torch.from_numpy(np.ascontiguousarray(boxes, np.float32)), (h, w))

    def decode_column(self, column: Any, records: Any) -> Any:
        return [self.decode(r) for r in records()]

    def __repr__(self) -> str:
        return f"StackedBoxes({self.key!r}, image={self.image!r})"


def image_canvas(record: dict, height: str, width: str, image: str, for_key: str) -> tuple[int, int]:
    """The image's (H, W) that ``for_key``'s per-object values are placed on:
    the size in the header of the encoded image under ``image`` (read
    without decoding), the image a transform moves them with -- as the OD
    API scales normalised boxes by the decoded image, whatever the record's
    ``height``/``width`` say; those features where the record has no image
    whose header this package reads."""
    data = record.get(image)
    problem = f"the record has neither {height!r}/{width!r} nor an image under {image!r}"
    if data:
        try:
            header = read_header(data[0])
        except ValueError as e:
            problem = str(e)
        else:
            return header.height, header.width
    if record.get(height) is not None and record.get(width) is not None:
        return record_dim(record, height, for_key), record_dim(record, width, for_key)
    raise FeatureError(image if data else height, f"needed for the size of {for_key!r}: {problem}")
