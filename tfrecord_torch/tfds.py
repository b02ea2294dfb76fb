"""TFDS directory metadata: writing it for our shards, reading it for theirs.

A tensorflow-datasets directory (``data_dir/name[/config]/version/``) holds
shards ``{name}-{split}.tfrecord-00000-of-00004``, ``dataset_info.json``
(splits with ``shardLengths``), ``features.json`` (the feature tree) and a
``<feature>.labels.txt`` per ClassLabel.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from . import fs
from .errors import TFRecordError
from .features import Bytes, Float, Image, Int64, RawTensor, Text

__all__ = ["read_info", "tfds_dataset", "tfds_features", "tfds_split", "write_metadata"]

_CLASS = "tensorflow_datasets.core.features."
_IMAGE = _CLASS + "image_feature.Image"
_LABEL = _CLASS + "class_label_feature.ClassLabel"
_TENSOR = _CLASS + "tensor_feature.Tensor"
_TEXT = _CLASS + "text_feature.Text"
_DICT = _CLASS + "features_dict.FeaturesDict"
_SCALAR = _CLASS + "scalar.Scalar"
_MAX_JSON = 64 << 20  # metadata files larger than this are refused
_NUMERIC = {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
            "float16", "float32", "float64"}
SAFE_NAME = re.compile(r"[A-Za-z0-9_.]+")  # dataset and split names: no path can hide in them


def _dims(shape) -> dict:
    return {"dimensions": [str(-1 if d is None else int(d)) for d in shape]}


def image_feature(channels: int | None, encoding: str | None, shape=(None, None)) -> dict:
    body = {"dtype": "uint8", "shape": _dims(tuple(shape) + (channels,))}
    if encoding in ("png", "jpeg"):
        body["encodingFormat"] = encoding
    return {"image": body, "pythonClassName": _IMAGE}


def raw_image_feature(shape) -> dict:
    return {"pythonClassName": _TENSOR,
            "tensor": {"dtype": "uint8", "encoding": "bytes", "shape": _dims(shape)}}


def write_metadata(output_dir, *, name: str, split: str, shard_lengths: list[int], num_bytes: int,
                   features: dict, class_names: list[str] | None, compression=None,
                   storage_options: dict | None = None) -> None:
    """Write (or update, for another split) ``dataset_info.json``, ``features.json``
    and ``label.labels.txt`` so ``tfds.builder_from_directory`` loads the folder."""
    output_dir = os.fspath(output_dir)
    with _metadata_lock(output_dir):
        _update_info(output_dir, name=name, split=split, shard_lengths=shard_lengths, num_bytes=num_bytes,
                     compression=compression, storage_options=storage_options)
        _write_json(os.path.join(output_dir, "features.json"),
                    {"featuresDict": {"features": features}, "pythonClassName": _DICT}, storage_options)
        if class_names is not None:
            fs.write_bytes(os.path.join(output_dir, "label.labels.txt"),
                           "".join(f"{c}\n" for c in class_names).encode("utf-8"), storage_options)


@contextlib.contextmanager
def _metadata_lock(output_dir: str):
    """Serialize updates of a local folder's metadata: converters of two splits
    into one folder each add their split instead of the last one winning.
    (Object stores have no locks; there, write splits one after another.)"""
    if fs.is_url(output_dir):
        yield
        return
    fd = fs.lock_file(os.path.join(output_dir, ".dataset_info.lock"), wait=True)  # an update takes ms
    try:
        yield
    finally:
        os.close(fd)


def check_dataset_name(output_dir, name: str, storage_options: dict | None = None) -> dict:
    """The folder's ``dataset_info.json`` ({} if none), refusing to add dataset
    ``name`` to a folder whose metadata describes another."""
    info_path = os.path.join(os.fspath(output_dir), "dataset_info.json")
    info = _load_json(info_path, storage_options) if fs.exists(info_path, storage_options) else {}
    if info.get("name", name) != name:
        raise TFRecordError(f"{info_path} describes dataset {info['name']!r}, not {name!r}; "
                            "write each dataset to its own folder")
    return info


def _update_info(output_dir: str, *, name: str, split: str, shard_lengths: list[int], num_bytes: int,
                 compression, storage_options: dict | None) -> None:
    so = storage_options
    info = check_dataset_name(output_dir, name, so)
    info_path = os.path.join(output_dir, "dataset_info.json")
    template = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
    if compression == "gzip":
        template += ".gz"
    splits = [s for s in info.get("splits", []) if s.get("name") != split]
    splits.append({"filepathTemplate": template, "name": split, "numBytes": str(num_bytes),
                   "shardLengths": [str(n) for n in shard_lengths]})
    info.update({"fileFormat": "tfrecord", "name": name, "splits": splits,
                 "version": info.get("version", "1.0.0"), "moduleName": "tfrecord_torch"})
    _write_json(info_path, info, so)


def _load_json(path: str, storage_options: dict | None = None) -> dict:
    data = fs.read_bytes(path, storage_options, limit=_MAX_JSON)
    try:
        data = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise TFRecordError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise TFRecordError(f"{path}: expected a JSON object")
    return data


def _write_json(path: str, data: dict, storage_options: dict | None = None) -> None:
    fs.write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                   storage_options)


def read_info(directory, storage_options: dict | None = None) -> dict:
    """``dataset_info.json`` of a TFDS directory, checked for what we use."""
    directory = os.fspath(directory)
    info = _load_json(os.path.join(directory, "dataset_info.json"), storage_options)
    if not isinstance(info.get("name"), str) or not isinstance(info.get("splits", []), list):
        raise TFRecordError(f"{directory}/dataset_info.json: missing 'name' or 'splits'")
    info["splits"] = info.get("splits", [])
    names = [info["name"]] + [s.get("name") if isinstance(s, dict) else None for s in info["splits"]]
    for name in names:  # they become file names: nothing may lead outside the folder
        if not isinstance(name, str) or not SAFE_NAME.fullmatch(name) or name in (".", ".."):
            raise TFRecordError(f"{directory}/dataset_info.json: {name!r} is not a plain "
                                "dataset or split name")
    return info


def tfds_split(directory, split: str, storage_options: dict | None = None) -> tuple[list[str], list[int]]:
    """Shard paths and lengths of one split, from ``dataset_info.json``."""
    directory = os.fspath(directory)
    info = read_info(directory, storage_options)
    if info.get("fileFormat", "tfrecord") != "tfrecord":
        raise TFRecordError(f"{directory}: file format {info['fileFormat']!r} is not tfrecord")
    names = [s.get("name") for s in info["splits"]]
    if split not in names:
        raise ValueError(f"split must be one of {names}, got {split!r}")
    entry = info["splits"][names.index(split)]
    try:
        lengths = entry.get("shardLengths", [])
        if not isinstance(lengths, list):
            raise TypeError(f"expected a list, got {type(lengths).__name__}")
        lengths = [int(n) for n in lengths]
        if any(n < 0 for n in lengths) or len(lengths) > 99_999:
            raise ValueError("negative length or too many shards")
    except (TypeError, ValueError) as e:
        raise TFRecordError(f"{directory}/dataset_info.json: bad shardLengths: {e}") from e
    suffix = ".gz" if str(entry.get("filepathTemplate", "")).endswith(".gz") else ""
    compression = "gzip" if suffix else None
    from .writer import shard_name

    paths = [os.path.join(directory, shard_name(info["name"], split, i, len(lengths), compression))
             for i in range(len(lengths))]
    return paths, lengths


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


def tfds_dataset(directory, split: str = "train", *, map_style: bool = False, features: dict | None = None,
                 **kwargs):
    """Open one split of a TFDS-prepared directory (or of our converter's output)
    without TensorFlow.

    Args:
        directory: the folder with ``dataset_info.json`` (``data_dir/name/version``).
        split: the split name.
        map_style: an :class:`IndexedTFRecordDataset` instead of a
            :class:`TFRecordDataset` (uncompressed shards only).
        features: a spec to use instead of the one derived from ``features.json``.
        kwargs: passed on to the dataset.

    The shard lengths in ``dataset_info.json`` are checked against the shards.
    """
    from .dataset import TFRecordDataset
    from .mapdataset import IndexedTFRecordDataset

    so = kwargs.get("storage_options")
    paths, lengths = tfds_split(directory, split, so)
    spec = tfds_features(directory, so) if features is None else features
    cls = IndexedTFRecordDataset if map_style else TFRecordDataset
    dataset = cls(paths, features=spec, **kwargs)
    counts = [len(i) for i in dataset.indexes] if not getattr(dataset, "streamed", False) else None
    if counts is not None and counts != lengths:
        raise TFRecordError(f"{directory}: dataset_info.json lists shard lengths {lengths} for "
                            f"{split!r}, but the shards hold {counts}")
    return dataset
