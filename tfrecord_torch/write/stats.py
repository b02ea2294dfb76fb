"""What a split's ``features.json`` needs to know about its images, gathered
per shard (in whichever process writes it) and merged at commit.

Only what the metadata uses is kept -- whether every image has one shape,
one channel count, one format -- so a shard's summary stays a few bytes
however varied its images are, and travels as JSON in its completion marker.
"""

from __future__ import annotations

from typing import Any

from tfrecord_torch.tfds.metadata import image_feature, raw_image_feature
from tfrecord_torch.write.detection import detection_features, tensor_feature

__all__ = ["ImageStats"]

_MIXED = "mixed"
_LABEL = "tensorflow_datasets.core.features.class_label_feature.ClassLabel"


def _join(a: Any, b: Any) -> Any:
    """The common value of two summaries: None means "nothing seen yet"."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    return _MIXED


class ImageStats:
    """Channels, shape, format and sample dtype of the images seen, and the largest label."""

    def __init__(self) -> None:
        self.channels: Any = None
        self.shape: Any = None  # [height, width], None, or "mixed"
        self.format: Any = None
        self.uint16 = False
        self.uint8 = False
        self.max_label = -1
        self.detection = self.text = False

    def add(self, meta: tuple) -> None:
        """Count one sample's ``(format, height, width, channels, label, dtype)``."""
        fmt, h, w, c, label, dtype = meta
        self.channels = _join(self.channels, int(c))
        self.shape = _join(self.shape, [int(h), int(w)])
        self.format = _join(self.format, fmt)
        self.uint16 = self.uint16 or dtype == "uint16"
        self.uint8 = self.uint8 or dtype == "uint8"
        if isinstance(label, tuple):  # a detection sample: (has class names,)
            self.detection, self.text = True, bool(label[0])
        else:
            self.max_label = max(self.max_label, int(label))

    def merge(self, other: ImageStats) -> ImageStats:
        """Fold another shard's summary into this one (returns self)."""
        self.channels = _join(self.channels, other.channels)
        self.shape = _join(self.shape, other.shape)
        self.format = _join(self.format, other.format)
        self.uint16 = self.uint16 or other.uint16
        self.uint8 = self.uint8 or other.uint8
        self.max_label = max(self.max_label, other.max_label)
        self.detection = self.detection or other.detection
        self.text = self.text or other.text
        return self

    @property
    def mixed_depths(self) -> bool:
        """Whether both 8-bit and 16-bit images were seen: one features.json dtype cannot hold both."""
        return self.uint8 and self.uint16

    def to_json(self) -> dict:
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: dict) -> ImageStats:
        stats = cls()
        for key in vars(stats):
            if key in data:
                setattr(stats, key, data[key])
        return stats

    def features(self, image_format: str | None, class_names: list[str] | None) -> dict:
        """``features.json``'s feature dict for the records these stats describe.

        Args:
            image_format: "png", "jpeg" or "raw" for encoded pixels; None when
                the files were copied as they were.
            class_names: the label names, if known.
        """
        classes = len(class_names) if class_names is not None else self.max_label + 1
        label = {"classLabel": {"numClasses": str(classes)}, "pythonClassName": _LABEL}
        channels = self.channels if isinstance(self.channels, int) else None
        shape = tuple(self.shape) if isinstance(self.shape, list) else (None, None)
        dtype = "uint16" if self.uint16 else "uint8"
        fmt = self.format if self.format != _MIXED else None
        if self.detection:
            return detection_features(channels, fmt, self.text)
        out: dict = {"label": label}
        if image_format == "raw":
            # Variable sizes: a flat vector (TFDS's Tensor takes one unknown dimension without
            # a layout of its own), with the size features every record holds to reshape it.
            fixed = channels is not None and None not in shape
            out["image"] = raw_image_feature(shape + (channels,) if fixed else (None,), dtype)
            out.update({k: tensor_feature("int64", []) for k in ("height", "width", "channels")})
        else:
            out["image"] = image_feature(channels or 3, fmt, shape, dtype)
        return out
