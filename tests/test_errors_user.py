"""A newcomer's common mistakes, written as a user writes them: each gives
the library's own message, naming the file, record and key, and the fix."""

import io

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import DataLoader

from tfrecord_torch import (
    RecordWriter,
    TFRecordDataset,
    make_example,
    pad_collate,
    tfspec,
)


def jpeg(height, width):
    buf = io.BytesIO()
    PILImage.fromarray(np.full((height, width, 3), 100, np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.fixture
def photos(tmp_path):
    """Four records of JPEG images of different heights, a label, a name and tags."""
    path = tmp_path / "photos.tfrecord"
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"image": jpeg(8 + i, 8), "label": i, "name": f"n{i}",
                                  "tags": [f"t{i}", "x"], "scores": np.arange(i + 1, dtype=np.float32)}))
    return path


def test_pad_collate_passes_bytes_through_as_lists(photos):
    """A TF description with string features (the image too) batches under
    pad_collate: bytes and lists of bytes are lists, one per record, as
    tf.io.parse_single_example gives them record by record."""
    description = {"image": tfspec.FixedLenFeature([], "string"),
                   "name": tfspec.FixedLenFeature([], "string"),
                   "tags": tfspec.VarLenFeature("string"),
                   "label": tfspec.FixedLenFeature([], "int64")}
    ds = TFRecordDataset(photos, features=description)
    batch = next(iter(DataLoader(ds, batch_size=4, collate_fn=pad_collate)))
    assert batch["image"] == [jpeg(8 + i, 8) for i in range(4)]
    assert batch["name"] == [b"n0", b"n1", b"n2", b"n3"]
    assert batch["tags"] == [[f"t{i}".encode(), b"x"] for i in range(4)]  # not transposed
    assert batch["label"].tolist() == [0, 1, 2, 3]
