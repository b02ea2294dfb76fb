"""Feature specs from a TFDS ``features.json``."""

from __future__ import annotations

import os

from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.features.image_specs import Image
from tfrecord_torch.features.specs import Bytes, Float, Int64, RawTensor, Text
from tfrecord_torch.tfds.metadata import _DICT, _IMAGE, _LABEL, _NUMERIC, _SCALAR, _TENSOR, _TEXT, _load_json

__all__ = ["tfds_features"]


def tfds_features(directory, storage_options: dict | None = None) -> dict:
    """A feature spec derived from ``features.json``: Image, ClassLabel, Tensor,
    Text and Scalar features, nested dicts flattened with '/'."""
    directory = os.fspath(directory)
    tree = _load_json(os.path.join(directory, "features.json"), storage_options)
    spec: dict = {}
    _walk(tree, "", spec, directory)
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


def _walk(node: dict, prefix: str, spec: dict, directory: str, depth: int = 0) -> None:
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
            _walk(child, f"{prefix}{key}/", spec, directory, depth + 1)
        return
    key = prefix.rstrip("/")
    if cls == _IMAGE:
        body = node.get("image", {})
        dims = _shape(body if isinstance(body, dict) else {}, key, directory)
        channels = dims[-1] if dims else -1
        spec[key] = Image(key, mode={1: "L", 3: "RGB", 4: "RGBA"}.get(channels, "unchanged"))
    elif cls == _LABEL:
        spec[key] = Int64(key)
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
        elif dtype.startswith(("int", "uint", "bool")):
            spec[key] = Int64(key, shape=None if -1 in shape else shape)
        elif dtype.startswith("float"):
            spec[key] = Float(key, shape=None if -1 in shape else shape)
        else:
            spec[key] = Bytes(key, many=bool(shape))
    elif cls == _TEXT:
        spec[key] = Text(key)
    else:
        raise TFRecordError(f"{directory}/features.json: feature {key!r} has a type this package "
                            f"does not decode ({cls or 'unknown'})")
