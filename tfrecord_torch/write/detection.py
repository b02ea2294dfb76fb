"""Detection samples written in the TF Object Detection API's layout.

A sample whose target is a dict with ``boxes`` and ``labels`` -- what
``torchvision.datasets.wrap_dataset_for_transforms_v2`` gives for VOC, COCO
and the rest -- becomes a record with the keys the OD API's
``TfExampleDecoder`` reads:

| key | kind | holds |
|---|---|---|
| ``image/encoded``, ``image/format`` | bytes | the encoded image and its format |
| ``image/height``, ``image/width`` | int64 | the image's size |
| ``image/object/bbox/xmin``, ``ymin``, ``xmax``, ``ymax`` | float | boxes normalised to [0, 1] |
| ``image/object/class/label`` | int64 | one label per box |
| ``image/object/class/text`` | bytes | the labels' names (when the class names are known) |

``presets.object_detection()`` reads them back as ``tv_tensors.BoundingBoxes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["detection_features", "detection_record", "is_detection_target", "tensor_feature"]

_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_DICT = "tensorflow_datasets.core.features.features_dict.FeaturesDict"


def is_detection_target(target: Any) -> bool:
    """True for a detection target: a dict with ``boxes`` (and ``labels``)."""
    return isinstance(target, dict) and "boxes" in target


# per-object values of torchvision's detection targets (wrap_dataset_for_transforms_v2, target_keys=...)
# that the OD layout has keys for but this writer does not write: refused, never dropped
UNWRITTEN = ("masks", "iscrowd", "area")


def detection_record(data: bytes, fmt: str, height: int, width: int, target: dict, i: int,
                     class_names: list[str] | None = None) -> dict:
    """The OD API's features of one sample (raises TypeError naming sample ``i``)."""
    unwritten = [key for key in UNWRITTEN if key in target]
    if unwritten:
        raise TypeError(f"sample {i}: the target's {', '.join(map(repr, unwritten))} would not be written: "
                        "this writer writes a detection target's boxes, labels and class names only. Leave "
                        "them out of the target (wrap_dataset_for_transforms_v2(ds, target_keys={'boxes', "
                        "'labels'})) to write the rest, or write the records with make_example")
    boxes = _boxes_xyxy(target["boxes"], i)
    labels = np.asarray(_numpy(target.get("labels", np.zeros(len(boxes), np.int64))))
    if labels.shape != (len(boxes),) or labels.dtype.kind not in "iu":
        raise TypeError(f"sample {i}: labels must be {len(boxes)} integers (one per box), got "
                        f"{labels.dtype} {labels.shape}")
    scale = np.array([width, height, width, height], np.float64)
    normalized = (boxes / scale).astype(np.float32)
    record: dict = {"image/encoded": data, "image/format": fmt, "image/height": height, "image/width": width}
    for column, name in enumerate(("xmin", "ymin", "xmax", "ymax")):
        record[f"image/object/bbox/{name}"] = normalized[:, column]
    record["image/object/class/label"] = labels.astype(np.int64)
    if class_names is not None:
        if len(labels) and not (0 <= labels.min() and labels.max() < len(class_names)):
            raise TypeError(f"sample {i}: label {int(labels.max())} has no name in the "
                            f"{len(class_names)} class names")
        record["image/object/class/text"] = [class_names[int(k)].encode("utf-8") for k in labels]
    return record


def detection_features(channels: int | None, fmt: str | None, with_text: bool) -> dict:
    """``features.json`` entries (nested as TFDS flattens them with '/') for the layout above."""
    from tfrecord_torch.tfds.metadata import image_feature

    def nested(features: dict) -> dict:
        return {"pythonClassName": _DICT, "featuresDict": {"features": features}}

    objects = {"bbox": nested({k: tensor_feature("float32", ["-1"]) for k in ("xmin", "ymin", "xmax", "ymax")}),
               "class": nested({"label": tensor_feature("int64", ["-1"]),
                                **({"text": {"pythonClassName": _TENSOR,
                                             "tensor": {"dtype": "string", "shape": {"dimensions": ["-1"]}}}}
                                   if with_text else {})})}
    image = {"encoded": image_feature(channels or 3, fmt), "height": tensor_feature("int64", []),
             "width": tensor_feature("int64", []), "object": nested(objects)}
    return {"image": nested(image)}


def tensor_feature(dtype: str, shape: list[str]) -> dict:
    """A TFDS ``Tensor`` entry of ``features.json`` (dimensions as strings, -1 unknown)."""
    return {"pythonClassName": _TENSOR, "tensor": {"dtype": dtype, "shape": {"dimensions": shape}}}


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def _boxes_xyxy(boxes: Any, i: int) -> np.ndarray:
    """Absolute XYXY pixels from a tv_tensors.BoundingBoxes (any format) or an array [N, 4] in XYXY."""
    fmt = getattr(boxes, "format", None)
    if fmt is not None and getattr(fmt, "name", str(fmt)) != "XYXY":
        from torchvision.ops import box_convert

        boxes = box_convert(boxes.as_subclass(type(boxes).__mro__[1]), fmt.name.lower(), "xyxy")
    array = np.asarray(_numpy(boxes), np.float64)
    if array.ndim != 2 or array.shape[1] != 4:
        raise TypeError(f"sample {i}: boxes must be [N, 4], got shape {array.shape}")
    return array
