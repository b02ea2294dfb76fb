"""Type aliases shared by the public API (the bottom layer: imports nothing of ours)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Union

__all__ = ["Bytes", "CompressionArg", "PathLike", "Paths"]

PathLike = Union[str, "os.PathLike[str]"]
"""A local path or an fsspec URL (``s3://bucket/key``)."""
Paths = Union[PathLike, Sequence[PathLike]]
"""A path, URL, glob pattern or folder, or a list of them."""
Bytes = Union[bytes, bytearray, memoryview]
"""A serialized record payload."""
CompressionArg = Union[str, None]
"""None, "gzip", "zlib" or "auto" (also a :class:`~tfrecord_torch.Compression` member)."""
