"""Record files: framing and CRCs, compression, index files, and the record writer.

A namespace of its own, free of torch::

    from tfrecord_torch.records import RecordWriter, build_index, read_records

The names are exported lazily: importing one module of the subpackage does
not import the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfrecord_torch._lazy import lazy_exports

_EXPORTS = {
    "Compression": "tfrecord_torch.records.compression",
    "CompressionOptions": "tfrecord_torch.records.compression",
    "IndexedReader": "tfrecord_torch.records.indexed",
    "RecordTail": "tfrecord_torch.records.tail",
    "RecordWriter": "tfrecord_torch.records.writer",
    "build_index": "tfrecord_torch.records.index",
    "check_index": "tfrecord_torch.records.index",
    "clear_index_cache": "tfrecord_torch.records.shardindex",
    "default_index_path": "tfrecord_torch.records.index",
    "load_index": "tfrecord_torch.records.index",
    "masked_crc32c": "tfrecord_torch.records.crc",
    "read_frames": "tfrecord_torch.records.frames",
    "read_records": "tfrecord_torch.records.framing",
}

__all__ = ["Compression", "CompressionOptions", "IndexedReader", "RecordTail", "RecordWriter", "build_index",
           "check_index", "clear_index_cache", "default_index_path", "load_index", "masked_crc32c", "read_frames",
           "read_records"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see
    from tfrecord_torch.records.compression import Compression, CompressionOptions
    from tfrecord_torch.records.crc import masked_crc32c
    from tfrecord_torch.records.frames import read_frames
    from tfrecord_torch.records.framing import read_records
    from tfrecord_torch.records.index import build_index, check_index, default_index_path, load_index
    from tfrecord_torch.records.indexed import IndexedReader
    from tfrecord_torch.records.shardindex import clear_index_cache
    from tfrecord_torch.records.tail import RecordTail
    from tfrecord_torch.records.writer import RecordWriter
