"""The package's faces: each namespace's ``__all__`` is sorted and every name
in it resolves, the top-level names of earlier releases still import (and are
the namespaces' objects), the light namespaces stay free of torch, and the
compiled helpers load from where their sources now live."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import tfrecord_torch

NAMESPACES = ["tfrecord_torch", "tfrecord_torch.records", "tfrecord_torch.example",
              "tfrecord_torch.features.images", "tfrecord_torch.data.transport"]

# every name `from tfrecord_torch import ...` gave before the subpackages got faces
TOP_LEVEL = [
    "Boxes", "Bytes", "Compression", "CorruptRecordError", "DatasetSource", "ErrorPolicy", "ExampleDecodeError",
    "Feature", "FeatureError", "Float", "Image", "ImageBatching", "IndexMismatchError", "IndexedReader",
    "IndexedTFRecordDataset", "Int64", "Mask", "MixedSizesError", "OnError", "RawImage", "RawTensor", "ReaderPool",
    "RecordWriter", "RemoteError", "ShardedWriter", "StaleIndexError", "TFRecordDataset", "TFRecordError", "Text",
    "build_index", "check_index", "detection_collate", "load_index", "make_example", "make_sequence_example", "mix",
    "pad_collate", "parse_example", "parse_example_batch", "parse_sequence_example", "parse_sequence_example_batch",
    "presets", "read_records", "tfds_dataset", "tfspec", "write_dataset", "write_order",
]


@pytest.mark.parametrize("name", NAMESPACES)
def test_all_is_sorted_and_every_name_resolves(name):
    package = importlib.import_module(name)
    names = package.__all__
    assert names == sorted(names) and len(set(names)) == len(names)
    for public in names:
        assert getattr(package, public) is not None, f"{name}.{public}"
    assert set(names) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        package.nope  # noqa: B018


def test_every_earlier_top_level_name_still_imports():
    namespace: dict = {}
    exec(f"from tfrecord_torch import {', '.join(TOP_LEVEL)}", namespace)  # as a user's script writes it
    assert all(namespace[name] is not None for name in TOP_LEVEL)
    assert set(TOP_LEVEL) <= set(tfrecord_torch.__all__)


@pytest.mark.parametrize("face, names", [
    ("tfrecord_torch.records", ["Compression", "CompressionOptions", "IndexedReader", "RecordTail", "RecordWriter",
                                "build_index", "check_index", "load_index", "read_records"]),
    # the top-level parse_* take an optional feature description (features/parsing.py); example/'s are raw
    ("tfrecord_torch.example", ["make_example", "make_sequence_example"]),
    ("tfrecord_torch.features.images", ["Boxes", "Image", "ImageBatching", "Mask", "RawImage"]),
])
def test_the_top_level_and_the_namespaces_give_the_same_objects(face, names):
    package = importlib.import_module(face)
    for name in names:
        assert getattr(tfrecord_torch, name) is getattr(package, name), name


def test_the_top_level_parse_functions_give_the_raw_parse_without_a_description():
    from tfrecord_torch import example

    payload = example.make_example({"a": [1, 2], "b": b"x"})
    for name in ("parse_example", "parse_example_batch"):
        raw = getattr(example, name)(payload if name == "parse_example" else [payload])
        top = getattr(tfrecord_torch, name)(payload if name == "parse_example" else [payload])
        assert repr(top) == repr(raw), name


def test_the_light_namespaces_import_no_torch():
    code = ("import sys\nfrom tfrecord_torch.records import RecordWriter, build_index, read_records, read_frames\n"
            "from tfrecord_torch.example import make_example, parse_example, parse_example_batch\n"
            "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module, where", [
    ("tfrecord_torch.features.images._jpegcrop", os.path.join("features", "images")),
    ("tfrecord_torch.records._frames", "records"),
    ("tfrecord_torch.example._fastwire", "example"),
])
def test_compiled_helpers_load_from_their_folders(module, where):
    """A helper built before its source moved is never the one loaded: each
    is imported by its new dotted path only."""
    users = {"_jpegcrop": ("tfrecord_torch.features.images.jpeg", "_CROP"),
             "_frames": ("tfrecord_torch.records.frames", "_FRAMES"),
             "_fastwire": ("tfrecord_torch.example.codec", "_FAST")}
    user, attr = users[module.rsplit(".", 1)[1]]
    loaded = getattr(importlib.import_module(user), attr)
    if loaded is None:
        pytest.skip(f"{module} is not built here")
    assert loaded.__name__ == module
    assert os.path.dirname(loaded.__file__).endswith(os.path.join("tfrecord_torch", where))
