"""Names in a TFDS directory: the shard file template and the names that may
appear in it (one template, shared by the writer and the reader)."""

from __future__ import annotations

import re

from tfrecord_torch.records.compression import suffix

__all__ = ["SAFE_NAME", "TEMPLATE", "shard_name"]

SAFE_NAME = re.compile(r"[A-Za-z0-9_.]+")  # dataset and split names: no path can hide in them
TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"  # TFDS's default filepathTemplate


def shard_name(name: str, split: str, shard: int, num_shards: int, compression=None) -> str:
    """TFDS's shard file name: ``{name}-{split}.tfrecord-00000-of-00004``
    (with ``.gz`` appended for GZIP shards)."""
    return f"{name}-{split}.tfrecord-{shard:05d}-of-{num_shards:05d}{suffix(compression)}"
