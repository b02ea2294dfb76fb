"""Feature specs for the common key layouts."""

from __future__ import annotations

from tfrecord_torch.features.specs import Image, Int64, RawImage

__all__ = ["converted", "raw", "slim", "tfds"]


def tfds(*, mode: str = "RGB") -> dict:
    """tensorflow-datasets and this package's writer: ``image`` (encoded bytes), ``label`` (int64)."""
    return {"image": Image("image", mode=mode), "label": Int64("label")}


def slim(*, mode: str = "RGB") -> dict:
    """TF-slim / Object Detection API: ``image/encoded``, ``image/class/label``."""
    return {"image": Image("image/encoded", mode=mode), "label": Int64("image/class/label")}


def raw() -> dict:
    """The TensorFlow tutorials: ``image_raw`` pixel bytes with ``height``, ``width``,
    ``depth``, and ``label``."""
    return {"image": RawImage("image_raw", height="height", width="width", depth="depth"),
            "label": Int64("label")}


def converted(*, raw: bool = False, mode: str = "RGB") -> dict:
    """Shards written by :func:`~tfrecord_torch.convert.write_dataset`: ``image``
    (encoded, or raw pixels with ``raw=True``), ``label``."""
    if raw:
        return {"image": RawImage("image", height="height", width="width", depth="channels"),
                "label": Int64("label")}
    return tfds(mode=mode)
