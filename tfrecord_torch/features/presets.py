"""Feature specs for the common key layouts.

Each preset with an encoded image takes ``decoder=`` for its :class:`Image`
(None: the path's default; "fast": TF's default JPEG pixels; "accurate":
``dct_method="INTEGER_ACCURATE"``'s).
"""

from __future__ import annotations

from tfrecord_torch.features.images.boxes import Boxes
from tfrecord_torch.features.images.instances import InstanceMasks
from tfrecord_torch.features.images.masks import Mask
from tfrecord_torch.features.images.objects import PerObject
from tfrecord_torch.features.images.specs import Image, RawImage
from tfrecord_torch.features.specs import Float, Int64, Text

__all__ = ["converted", "object_detection", "raw", "segmentation_raw", "slim", "tfds"]


def tfds(*, mode: str = "RGB", decoder: str | None = None) -> dict:
    """tensorflow-datasets and this package's writer: ``image`` (encoded bytes), ``label`` (int64)."""
    return {"image": Image("image", mode=mode, decoder=decoder), "label": Int64("label")}


def slim(*, mode: str = "RGB", decoder: str | None = None) -> dict:
    """TF-slim / Object Detection API: ``image/encoded``, ``image/class/label``."""
    return {"image": Image("image/encoded", mode=mode, decoder=decoder), "label": Int64("image/class/label")}


def raw() -> dict:
    """The TensorFlow tutorials: ``image_raw`` pixel bytes with ``height``, ``width``,
    ``depth``, and ``label``."""
    return {"image": RawImage("image_raw", height="height", width="width", depth="depth"),
            "label": Int64("label")}


def converted(*, raw: bool = False, mode: str = "RGB", dtype: str = "uint8", decoder: str | None = None) -> dict:
    """Shards written by :func:`~tfrecord_torch.convert.write_dataset`: ``image``
    (encoded, or raw pixels with ``raw=True``; ``dtype="uint16"`` for raw
    16-bit images), ``label``."""
    if raw and decoder is not None:
        raise ValueError(f"converted(raw=True, decoder={decoder!r}): raw pixels are not decoded; "
                         f"drop decoder= or raw=True")
    if raw:
        return {"image": RawImage("image", height="height", width="width", depth="channels", dtype=dtype),
                "label": Int64("label")}
    return tfds(mode=mode, decoder=decoder)


def segmentation_raw(*, image: str = "image_raw", mask: str = "mask_raw", height: str = "height",
                     width: str = "width", channels: str | int = 3) -> dict:
    """The classic segmentation layout: ``height``, ``width``, ``image_raw`` (HWC
    RGB bytes) and ``mask_raw`` (HW class-id bytes), with no channels key.

    Gives ``image`` (``tv_tensors.Image`` uint8 [C, H, W]) and ``mask``
    (``tv_tensors.Mask`` uint8 [H, W]). ``channels`` is the constant channel
    count, or the name of an int64 feature holding it.
    """
    return {"image": RawImage(image, height=height, width=width, depth=channels),
            "mask": Mask(mask, height=height, width=width)}


# the OD API's other per-object lists: output name -> (feature class, key)
OBJECT_LISTS = {"is_crowd": (Int64, "image/object/is_crowd"), "area": (Float, "image/object/area"),
                "difficult": (Int64, "image/object/difficult"), "group_of": (Int64, "image/object/group_of"),
                "weight": (Float, "image/object/weight")}


def object_detection(*, mode: str = "RGB", text: bool = True, masks: bool = False,
                     objects: tuple[str, ...] = (), decoder: str | None = None) -> dict:
    """TF Object Detection API records: ``image/encoded``, ``image/height``,
    ``image/width``, ``image/object/bbox/xmin|ymin|xmax|ymax`` (normalised),
    ``image/object/class/label`` and ``image/object/class/text``.

    Gives ``image`` (``tv_tensors.Image``), ``boxes`` (``tv_tensors.BoundingBoxes``
    XYXY in pixels, float32 [N, 4]), ``labels`` (int64 [N]) and, with ``text``,
    ``text`` (a list of N str). ``masks=True`` adds ``masks``
    (``tv_tensors.Mask`` uint8 0/1 [N, H, W], from ``image/object/mask``
    as PNGs or as floats: :class:`~tfrecord_torch.InstanceMasks`).
    ``objects`` names more per-object lists to read, each as a tensor [N]:
    ``is_crowd``, ``difficult``, ``group_of`` (int64), ``area``, ``weight``
    (float32). Every per-object value is in the boxes' order; to keep them
    so when ``v2.SanitizeBoundingBoxes`` drops boxes, give it
    ``labels_getter=ObjectLabels()`` (:mod:`~tfrecord_torch.features.images.objects`
    states the rule). Use :func:`~tfrecord_torch.detection_collate`
    to batch them for torchvision's detection models.

    Raises:
        ValueError: a name in ``objects`` that is not one of the OD API's lists.
    """
    unknown = [name for name in objects if name not in OBJECT_LISTS]
    if unknown or isinstance(objects, str):
        raise ValueError(f"objects must name some of {sorted(OBJECT_LISTS)}, got {objects!r}")
    spec = {"image": Image("image/encoded", mode=mode, decoder=decoder), "boxes": Boxes("image/object/bbox/"),
            "labels": PerObject(Int64("image/object/class/label", shape=None, default=[]))}
    if text:
        spec["text"] = PerObject(Text("image/object/class/text", many=True, default=[]),
                                 fix=" (read with presets.object_detection(text=False) to leave the text out)")
    if masks:
        spec["masks"] = InstanceMasks("image/object/mask")
    for name in objects:
        feature, key = OBJECT_LISTS[name]
        spec[name] = PerObject(feature(key, shape=None, default=[]),
                               fix=f" (leave {name!r} out of objects= to read without it)")
    return spec
