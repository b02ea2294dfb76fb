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

from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs
from tfrecord_torch.tfds.layout import SAFE_NAME, TEMPLATE, shard_name

__all__ = ["check_dataset_name", "image_feature", "raw_image_feature", "read_info", "shard_path", "supervised_keys",
           "tfds_split", "write_metadata"]

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



def _dims(shape) -> dict:
    return {"dimensions": [str(-1 if d is None else int(d)) for d in shape]}


def image_feature(channels: int | None, encoding: str | None, shape=(None, None), dtype: str = "uint8") -> dict:
    body = {"dtype": dtype, "shape": _dims(tuple(shape) + (channels,))}
    if encoding in ("png", "jpeg"):
        body["encodingFormat"] = encoding
    return {"image": body, "pythonClassName": _IMAGE}


def raw_image_feature(shape, dtype: str = "uint8") -> dict:
    return {"pythonClassName": _TENSOR,
            "tensor": {"dtype": dtype, "encoding": "bytes", "shape": _dims(shape)}}


def write_metadata(output_dir, *, name: str, split: str, shard_lengths: list[int], num_bytes: int,
                   features: dict, class_names: list[str] | None, compression=None,
                   storage_options: dict | None = None) -> None:
    """Write (or update, for another split) ``dataset_info.json``, ``features.json``
    and ``label.labels.txt`` so ``tfds.builder_from_directory`` loads the folder."""
    output_dir = os.fspath(output_dir)
    with _metadata_lock(output_dir):
        if not fs.is_url(output_dir):  # a write of these killed before its rename left a hidden temporary file
            for leftover in ("features.json", "label.labels.txt", "dataset_info.json"):
                atomic.remove_orphans(output_dir, leftover)
        # dataset_info.json last: once it names the split, a reader finds everything it needs
        _write_json(os.path.join(output_dir, "features.json"),
                    {"featuresDict": {"features": features}, "pythonClassName": _DICT}, storage_options)
        if class_names is not None:
            atomic.write_bytes(os.path.join(output_dir, "label.labels.txt"),
                           "".join(f"{c}\n" for c in class_names).encode("utf-8"), storage_options)
        _update_info(output_dir, name=name, split=split, shard_lengths=shard_lengths, num_bytes=num_bytes,
                     compression=compression, supervised=_supervised(features), storage_options=storage_options)


def _supervised(features: dict) -> tuple[str, str] | None:
    """``("image", "label")`` for an (image, class label) dataset, so ``as_supervised=True``
    works in TFDS and in ``tfds_dataset``; None for others (detection targets)."""
    label = features.get("label")
    if "image" in features and isinstance(label, dict) and label.get("pythonClassName") == _LABEL:
        return "image", "label"
    return None


@contextlib.contextmanager
def _metadata_lock(output_dir: str):
    """Serialize updates of a local folder's metadata: converters of two splits
    into one folder each add their split instead of the last one winning.
    (Object stores have no locks; there, write splits one after another.)"""
    if fs.is_url(output_dir):
        yield
        return
    lock = os.path.join(output_dir, ".dataset_info.lock")
    fd = atomic.lock_file(lock, wait=True)  # an update takes ms
    if fd is None:  # cannot happen with wait=True
        raise RuntimeError(f"{output_dir}: could not lock dataset_info.json")
    try:
        yield
    finally:
        atomic.unlock(lock, fd)


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
                 compression, supervised: tuple[str, str] | None, storage_options: dict | None) -> None:
    info = check_dataset_name(output_dir, name, storage_options)
    info_path = os.path.join(output_dir, "dataset_info.json")
    template = TEMPLATE
    if compression == "gzip":
        template += ".gz"
    splits = [s for s in info.get("splits", []) if s.get("name") != split]
    splits.append({"filepathTemplate": template, "name": split, "numBytes": str(num_bytes),
                   "shardLengths": [str(n) for n in shard_lengths]})
    info.update({"fileFormat": "tfrecord", "name": name, "splits": splits,
                 "version": info.get("version", "1.0.0"), "moduleName": "tfrecord_torch"})
    if supervised is not None:  # TFDS's SupervisedKeys proto as JSON: a tuple of feature keys
        info["supervisedKeys"] = {"tuple": {"items": [{"featureKey": key} for key in supervised]}}
    _write_json(info_path, info, storage_options)


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
    atomic.write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"),
                   storage_options)


def read_info(directory, storage_options: dict | None = None) -> dict:
    """``dataset_info.json`` of a TFDS directory, checked for what we use."""
    directory = os.fspath(directory)
    info = _load_json(os.path.join(directory, "dataset_info.json"), storage_options)
    if not isinstance(info.get("name", ""), str) or not isinstance(info.get("splits", []), list):
        raise TFRecordError(f"{directory}/dataset_info.json: bad 'name' or 'splits'")
    info["splits"] = info.get("splits", [])
    # the name is needed only where a split's filepathTemplate uses {DATASET}
    names = ([info["name"]] if "name" in info else []) + \
        [s.get("name") if isinstance(s, dict) else None for s in info["splits"]]
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
    template = entry.get("filepathTemplate")
    if template is None:  # written before TFDS recorded templates (or by an older tfrecord_torch)
        compression = "gzip" if str(info.get("compression", "")).lower() == "gzip" else None
        if "name" not in info:
            raise TFRecordError(f"{directory}/dataset_info.json: no 'name' and no filepathTemplate")
        paths = [os.path.join(directory, shard_name(info["name"], split, i, len(lengths), compression))
                 for i in range(len(lengths))]
    else:
        paths = [os.path.join(directory, shard_path(template, info, split, i, len(lengths), directory))
                 for i in range(len(lengths))]
    return paths, lengths


def shard_path(template: str, info: dict, split: str, shard: int, num_shards: int, directory: str) -> str:
    """A shard's path under ``directory`` from a TFDS ``filepathTemplate``
    (``{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}`` and TFDS's other fields)."""
    digits = max(len(str(num_shards)), 5)
    fields = {"SPLIT": split, "FILEFORMAT": info.get("fileFormat", "tfrecord"),
              "SHARD_INDEX": f"{shard:0{digits}d}", "NUM_SHARDS": f"{num_shards:0{digits}d}",
              "SHARD_X_OF_Y": f"{shard:0{digits}d}-of-{num_shards:0{digits}d}"}
    if "name" in info:
        fields["DATASET"] = info["name"]
    try:
        path = str(template).format(**fields)
    except (KeyError, IndexError, ValueError) as e:
        raise TFRecordError(f"{directory}/dataset_info.json: cannot fill filepathTemplate "
                            f"{template!r} for {split!r}: {e!r}") from e
    parts = path.replace("\\", "/").split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):  # stay inside the folder
        raise TFRecordError(f"{directory}/dataset_info.json: filepathTemplate {template!r} leads outside "
                            "the dataset folder")
    return path


def supervised_keys(info: dict) -> tuple[str, str] | None:
    """The (input, target) feature keys of ``supervisedKeys`` in ``dataset_info.json``, if any."""
    keys = info.get("supervisedKeys")
    if not isinstance(keys, dict):
        return None
    if "input" in keys and "output" in keys:  # the older spelling
        return str(keys["input"]), str(keys["output"])
    items = keys.get("tuple", {}).get("items", []) if isinstance(keys.get("tuple"), dict) else []
    found = [str(i["featureKey"]) for i in items if isinstance(i, dict) and isinstance(i.get("featureKey"), str)]
    if len(found) == 2:
        return found[0], found[1]
    return None
