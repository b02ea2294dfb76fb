"""Feature specs from a TFDS ``features.json``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.features.images.boxes import StackedBoxes
from tfrecord_torch.features.images.specs import Image
from tfrecord_torch.features.specs import Bytes, Float, Int64, RawTensor, Text
from tfrecord_torch.io import files as fs
from tfrecord_torch.tfds.metadata import (
    _CLASS,
    _DICT,
    _IMAGE,
    _LABEL,
    _NUMERIC,
    _SCALAR,
    _TENSOR,
    _TEXT,
    _load_json,
)

__all__ = ["BBox", "ClassLabel", "boxes_on", "tfds_features"]

_SEQUENCE = _CLASS + "sequence_feature.Sequence"
_BBOX = _CLASS + "bounding_boxes.BBoxFeature"


class ClassLabel(Int64):
    """TFDS's ClassLabel: an int64 tensor [] whose class names are known.

    Attributes:
        names: the class names, index by label (from ``<key>.labels.txt``), or None.
        num_classes: how many classes ``features.json`` declares.
    """

    def __init__(self, key: str | None = None, *, names: list[str] | None = None,
                 num_classes: int | None = None, shape: tuple | None = ()) -> None:
        super().__init__(key, shape=shape)
        self.names, self.num_classes = names, num_classes

    def int2str(self, label: int) -> str:
        """The name of class ``label`` (as TFDS's ``ClassLabel.int2str``)."""
        if self.names is None:
            raise ValueError(f"feature {self.key!r} has no class names (no {self.key}.labels.txt)")
        return self.names[int(label)]


class BBox(Float):
    """TFDS's BBoxFeature as stored: float32 [4] (or [N, 4] in a Sequence) of
    normalised ``[ymin, xmin, ymax, xmax]``, as ``tfds.as_numpy`` gives it;
    :func:`boxes_on` turns it into ``tv_tensors.BoundingBoxes``."""


def boxes_on(spec: dict, image: str) -> dict:
    """``spec`` with each :class:`BBox` read as ``tv_tensors.BoundingBoxes``
    [N, 4] (XYXY pixels) on the canvas of the Image feature ``image``, so v2
    transforms move them with it (a lone BBoxFeature gives [1, 4]).

    Raises:
        ValueError: ``image`` is not an Image feature of ``spec`` (the message lists them).
    """
    images = _image_names(spec)
    if image not in images:
        raise ValueError(f"boxes_on={image!r} must name the Image feature the boxes lie on, one of {images}")
    return {name: StackedBoxes(feature.key, image=spec[image].key) if isinstance(feature, BBox) else feature
            for name, feature in spec.items()}


def _image_names(spec: dict) -> list[str]:
    """The names of the spec's Image features: the canvases boxes may lie on."""
    return [name for name, feature in spec.items() if isinstance(feature, Image)]


def tfds_features(directory, storage_options: dict | None = None) -> dict:
    """A feature spec derived from ``features.json``: Image, ClassLabel, Tensor,
    Text and Scalar features, nested dicts flattened with '/'."""
    directory = os.fspath(directory)
    tree = _load_json(os.path.join(directory, "features.json"), storage_options)
    spec: dict = {}
    _walk(tree, _Walk(spec, directory, storage_options))
    if not spec:
        raise TFRecordError(f"{directory}/features.json: no features found")
    return spec


def _shape(body: dict, key: str, directory: str) -> tuple:
    try:
        dims = body.get("shape", {}).get("dimensions", [])
        shape = tuple(int(d) for d in dims)
        if len(shape) > 32 or any(d < -1 or d > 1 << 31 for d in shape):
            raise ValueError(f"shape {shape}")
        return shape
    except (AttributeError, TypeError, ValueError) as e:
        raise TFRecordError(f"{directory}/features.json: bad shape for {key!r}: {e}") from e


def _label_names(directory: str, key: str, storage_options: dict | None) -> list[str] | None:
    path = os.path.join(directory, f"{key.replace('/', '-')}.labels.txt")
    if not fs.exists(path, storage_options):
        return None
    return fs.read_bytes(path, storage_options, limit=64 << 20).decode("utf-8").splitlines()


@dataclass(frozen=True)
class _Walk:
    """Where the walk through ``features.json`` stands: one node's key and what every node shares.

    Attributes:
        spec: the feature spec being filled, flat keys joined with '/'.
        directory: the dataset directory (for messages and ``<key>.labels.txt``).
        storage_options: passed to the file system for the label files.
        prefix: the key of the node, '/'-terminated.
        depth: how many dicts and sequences enclose the node.
        sequence: whether the node is inside a TFDS Sequence (one more leading dimension).
    """

    spec: dict
    directory: str
    storage_options: dict | None
    prefix: str = ""
    depth: int = 0
    sequence: bool = False

    @property
    def key(self) -> str:
        """The flat spec key of a leaf node."""
        return self.prefix.rstrip("/")

    def into(self, prefix: str, *, sequence: bool) -> _Walk:
        """The walk one level down, at ``prefix``."""
        return replace(self, prefix=prefix, depth=self.depth + 1, sequence=sequence)

    def error(self, message: str) -> TFRecordError:
        """A TFRecordError naming ``features.json`` of this directory."""
        return TFRecordError(f"{self.directory}/features.json: {message}")


def _features_dict(node: dict, at: _Walk) -> None:
    body = node.get("featuresDict")
    children = body.get("features", {}) if isinstance(body, dict) else None
    if not isinstance(children, dict):
        raise at.error(f"bad featuresDict at {at.prefix!r}")
    for key, child in children.items():
        if not isinstance(child, dict):
            raise at.error(f"bad entry {at.prefix}{key}")
        _walk(child, at.into(f"{at.prefix}{key}/", sequence=at.sequence))


def _sequence(node: dict, at: _Walk) -> None:
    """A list of the inner feature: one more leading dimension (as TFDS's ``as_numpy``)."""
    body = node.get("sequence")
    inner = body.get("feature") if isinstance(body, dict) else None
    if not isinstance(inner, dict) or at.sequence:
        raise at.error(f"unsupported Sequence at {at.prefix!r}")
    _walk(inner, at.into(at.prefix, sequence=True))


def _image(node: dict, at: _Walk) -> None:
    if at.sequence:
        raise at.error(f"a Sequence of images ({at.key!r}) is not supported")
    body = node.get("image", {})
    body = body if isinstance(body, dict) else {}
    dims = _shape(body, at.key, at.directory)
    channels = dims[-1] if dims else -1
    mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(channels, "unchanged")
    if body.get("dtype", "uint8") != "uint8":
        mode = "unchanged"  # uint16 images keep their exact values
    at.spec[at.key] = Image(at.key, mode=mode)


def _class_label(node: dict, at: _Walk) -> None:
    body = node.get("classLabel", {})
    count = body.get("numClasses") if isinstance(body, dict) else None
    at.spec[at.key] = ClassLabel(at.key, names=_label_names(at.directory, at.key, at.storage_options),
                                 num_classes=int(count) if count is not None else None,
                                 shape=None if at.sequence else ())


def _bbox(node: dict, at: _Walk) -> None:
    lead = (-1,) if at.sequence else ()
    at.spec[at.key] = BBox(at.key, shape=lead + (4,))


def _tensor(node: dict, at: _Walk) -> None:
    """A Tensor or Scalar: raw bytes, a numeric list, or a list of byte strings."""
    key = at.key
    body = node.get("tensor") or node.get("scalar") or {}
    if not isinstance(body, dict):
        raise at.error(f"bad tensor entry {key!r}")
    dtype = str(body.get("dtype", ""))
    shape = _shape(body, key, at.directory)
    lead = (-1,) if at.sequence else ()
    if body.get("encoding") in ("bytes", "zlib"):
        if dtype not in _NUMERIC:
            raise at.error(f"feature {key!r} has dtype {dtype!r}, not a numeric dtype this package decodes "
                           "from bytes")
        at.spec[key] = RawTensor(key, dtype=dtype, shape=shape, zlib=body["encoding"] == "zlib")
    elif dtype.startswith(("int", "uint", "bool", "float")):
        shape = lead + shape
        if shape.count(-1) > 1:  # more than one free dimension: the values, flat
            shape = (-1,)
        numeric = Float if dtype.startswith("float") else Int64
        # TFDS stores bool and narrow numbers as int64 or float lists and casts them back (as_numpy's dtype)
        at.spec[key] = numeric(key, shape=shape, cast=_TORCH_DTYPES.get(dtype))
    else:
        at.spec[key] = Bytes(key, many=bool(lead + shape))


# The torch dtype of each TFDS Tensor dtype stored in an int64 or float list.
_TORCH_DTYPES = {"bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
                 "uint16": torch.uint16, "int32": torch.int32, "uint32": torch.uint32, "uint64": torch.uint64,
                 "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def _text(node: dict, at: _Walk) -> None:
    at.spec[at.key] = Text(at.key)


# One reader per TFDS feature connector, keyed by the ``pythonClassName`` TFDS writes.
_CONNECTORS: dict[str, Callable[[dict, _Walk], None]] = {
    _DICT: _features_dict,
    _SEQUENCE: _sequence,
    _IMAGE: _image,
    _LABEL: _class_label,
    _BBOX: _bbox,
    _TENSOR: _tensor,
    _SCALAR: _tensor,
    _TEXT: _text,
}


def _walk(node: dict, at: _Walk) -> None:
    if at.depth > 32:
        raise at.error("features nested too deeply")
    cls = node.get("pythonClassName", "")
    if not cls and "featuresDict" in node:
        cls = _DICT
    connector = _CONNECTORS.get(cls) if isinstance(cls, str) else None
    if connector is None:
        raise at.error(f"feature {at.key!r} has a type this package does not decode ({cls or 'unknown'})")
    connector(node, at)
