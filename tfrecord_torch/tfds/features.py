"""Feature specs from a TFDS ``features.json``."""

from __future__ import annotations

import os

from tfrecord_torch.errors import TFRecordError
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

__all__ = ["ClassLabel", "tfds_features"]

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


def tfds_features(directory, storage_options: dict | None = None) -> dict:
    """A feature spec derived from ``features.json``: Image, ClassLabel, Tensor,
    Text and Scalar features, nested dicts flattened with '/'."""
    directory = os.fspath(directory)
    tree = _load_json(os.path.join(directory, "features.json"), storage_options)
    spec: dict = {}
    _walk(tree, "", spec, directory, storage_options=storage_options)
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


def _walk(node: dict, prefix: str, spec: dict, directory: str, depth: int = 0, *, sequence: bool = False,
          storage_options: dict | None = None) -> None:
    if depth > 32:
        raise TFRecordError(f"{directory}/features.json: features nested too deeply")
    cls = node.get("pythonClassName", "")
    if cls == _DICT or (not cls and "featuresDict" in node):
        body = node.get("featuresDict")
        children = body.get("features", {}) if isinstance(body, dict) else None
        if not isinstance(children, dict):
            raise TFRecordError(f"{directory}/features.json: bad featuresDict at {prefix!r}")
        for key, child in children.items():
            if not isinstance(child, dict):
                raise TFRecordError(f"{directory}/features.json: bad entry {prefix}{key}")
            _walk(child, f"{prefix}{key}/", spec, directory, depth + 1, sequence=sequence,
                  storage_options=storage_options)
        return
    if cls == _SEQUENCE:  # a list of the inner feature: one more leading dimension (as TFDS's as_numpy)
        body = node.get("sequence")
        inner = body.get("feature") if isinstance(body, dict) else None
        if not isinstance(inner, dict) or sequence:
            raise TFRecordError(f"{directory}/features.json: unsupported Sequence at {prefix!r}")
        _walk(inner, prefix, spec, directory, depth + 1, sequence=True, storage_options=storage_options)
        return
    key = prefix.rstrip("/")
    lead = (-1,) if sequence else ()
    if cls == _IMAGE:
        if sequence:
            raise TFRecordError(f"{directory}/features.json: a Sequence of images ({key!r}) is not supported")
        body = node.get("image", {})
        body = body if isinstance(body, dict) else {}
        dims = _shape(body, key, directory)
        channels = dims[-1] if dims else -1
        mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(channels, "unchanged")
        if body.get("dtype", "uint8") != "uint8":
            mode = "unchanged"  # uint16 images keep their exact values
        spec[key] = Image(key, mode=mode)
    elif cls == _LABEL:
        body = node.get("classLabel", {})
        count = body.get("numClasses") if isinstance(body, dict) else None
        spec[key] = ClassLabel(key, names=_label_names(directory, key, storage_options),
                               num_classes=int(count) if count is not None else None,
                               shape=None if sequence else ())
    elif cls == _BBOX:
        spec[key] = Float(key, shape=lead + (4,))
    elif cls in (_TENSOR, _SCALAR):
        body = node.get("tensor") or node.get("scalar") or {}
        if not isinstance(body, dict):
            raise TFRecordError(f"{directory}/features.json: bad tensor entry {key!r}")
        dtype = str(body.get("dtype", ""))
        shape = _shape(body, key, directory)
        if body.get("encoding") in ("bytes", "zlib"):
            if dtype not in _NUMERIC:
                raise TFRecordError(f"{directory}/features.json: feature {key!r} has dtype {dtype!r}, "
                                    "not a numeric dtype this package decodes from bytes")
            spec[key] = RawTensor(key, dtype=dtype, shape=shape, zlib=body["encoding"] == "zlib")
        elif dtype.startswith(("int", "uint", "bool", "float")):
            shape = lead + shape
            if shape.count(-1) > 1:  # more than one free dimension: the values, flat
                shape = (-1,)
            cls_ = Float if dtype.startswith("float") else Int64
            spec[key] = cls_(key, shape=shape)
        else:
            spec[key] = Bytes(key, many=bool(lead + shape))
    elif cls == _TEXT:
        spec[key] = Text(key)
    else:
        raise TFRecordError(f"{directory}/features.json: feature {key!r} has a type this package "
                            f"does not decode ({cls or 'unknown'})")
