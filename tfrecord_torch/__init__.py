"""Read and write TFRecord files from PyTorch, without TensorFlow.

The public names are exported lazily (PEP 562): ``import tfrecord_torch``
imports neither torch nor torchvision; a name is imported from its
subpackage the first time it is used. See docs/layout.md for
where each lives.
"""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING

from tfrecord_torch._lazy import lazy_exports

__version__ = "0.1.0"

if "tensorflow" in sys.modules and "torchvision" not in sys.modules:
    # torchvision's import loads triton (CUDA builds of torch), which crashes the
    # process once TensorFlow is loaded: say so before the first image does.
    warnings.warn("TensorFlow was imported before torchvision: import torchvision first "
                  "(`import torchvision` before `import tensorflow`); until then images decode with "
                  "Pillow into plain tensors, and importing torchvision now may crash the process",
                  RuntimeWarning, stacklevel=2)

# public name -> the module that defines it
_EXPORTS = {
    "Batching": "tfrecord_torch.data.options",
    "Boxes": "tfrecord_torch.features.images.boxes",
    "Bytes": "tfrecord_torch.features.specs",
    "Compression": "tfrecord_torch.records.compression",
    "CompressionOptions": "tfrecord_torch.records.compression",
    "CorruptRecordError": "tfrecord_torch.errors",
    "DatasetSource": "tfrecord_torch.write.source",
    "Encoding": "tfrecord_torch.write.options",
    "ErrorPolicy": "tfrecord_torch.policy",
    "ExampleDecodeError": "tfrecord_torch.errors",
    "Execution": "tfrecord_torch.write.options",
    "Feature": "tfrecord_torch.features.specs",
    "FeatureError": "tfrecord_torch.errors",
    "FillBudget": "tfrecord_torch.io.budget",
    "Float": "tfrecord_torch.features.specs",
    "Image": "tfrecord_torch.features.images.specs",
    "ImageBatching": "tfrecord_torch.features.images.engine",
    "IndexMismatchError": "tfrecord_torch.errors",
    "IndexedReader": "tfrecord_torch.records.indexed",
    "IndexedTFRecordDataset": "tfrecord_torch.data.mapstyle",
    "InstanceMasks": "tfrecord_torch.features.images.instances",
    "Int64": "tfrecord_torch.features.specs",
    "Mask": "tfrecord_torch.features.images.masks",
    "MixedSizesError": "tfrecord_torch.errors",
    "ObjectLabels": "tfrecord_torch.features.images.objects",
    "OnError": "tfrecord_torch.policy",
    "Payload": "tfrecord_torch.features.payload",
    "RawImage": "tfrecord_torch.features.images.specs",
    "RawTensor": "tfrecord_torch.features.specs",
    "ReadBudget": "tfrecord_torch.io.budget",
    "ReaderPool": "tfrecord_torch.io.pool",
    "RecordTail": "tfrecord_torch.records.tail",
    "RecordWriter": "tfrecord_torch.records.writer",
    "RemoteError": "tfrecord_torch.errors",
    "RequestBudget": "tfrecord_torch.io.budget",
    "ShardCache": "tfrecord_torch.io.shardcache",
    "ShardLayout": "tfrecord_torch.write.options",
    "SerializedTensor": "tfrecord_torch.features.tensors",
    "ShardedWriter": "tfrecord_torch.write.sharded",
    "Sharding": "tfrecord_torch.data.options",
    "Shuffling": "tfrecord_torch.data.options",
    "Source": "tfrecord_torch.data.options",
    "StaleIndexError": "tfrecord_torch.errors",
    "TFRecordDataset": "tfrecord_torch.data.iterable",
    "TFRecordError": "tfrecord_torch.errors",
    "TensorDecodeError": "tfrecord_torch.errors",
    "Text": "tfrecord_torch.features.specs",
    "build_index": "tfrecord_torch.records.index",
    "detection_collate": "tfrecord_torch.data.collating",
    "check_index": "tfrecord_torch.records.index",
    "load_index": "tfrecord_torch.records.index",
    "make_example": "tfrecord_torch.example.codec",
    "make_sequence_example": "tfrecord_torch.example.codec",
    "mix": "tfrecord_torch.data.mix",
    "pack_collate": "tfrecord_torch.features.packing",
    "pad_collate": "tfrecord_torch.features.collate",
    "parse_example": "tfrecord_torch.features.parsing",
    "parse_example_batch": "tfrecord_torch.features.parsing",
    "parse_sequence_example": "tfrecord_torch.features.parsing",
    "parse_sequence_example_batch": "tfrecord_torch.features.parsing",
    "parse_tensor": "tfrecord_torch.features.tensors",
    "read_records": "tfrecord_torch.records.framing",
    "serialize_tensor": "tfrecord_torch.features.tensors",
    "tfds_dataset": "tfrecord_torch.tfds.dataset",
    "write_dataset": "tfrecord_torch.write.convert",
    "write_order": "tfrecord_torch.write.plan",
}
_MODULES = {"presets": "tfrecord_torch.features.presets", "tfspec": "tfrecord_torch.features.tfspec"}  # exported as modules

__all__ = sorted([*_EXPORTS, *_MODULES])

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _MODULES)


if TYPE_CHECKING:  # what type checkers and IDEs see
    from tfrecord_torch.data.collating import detection_collate
    from tfrecord_torch.data.iterable import TFRecordDataset
    from tfrecord_torch.data.mapstyle import IndexedTFRecordDataset
    from tfrecord_torch.data.mix import mix
    from tfrecord_torch.data.options import Batching, Sharding, Shuffling, Source
    from tfrecord_torch.errors import (
        CorruptRecordError,
        ExampleDecodeError,
        FeatureError,
        IndexMismatchError,
        MixedSizesError,
        RemoteError,
        StaleIndexError,
        TensorDecodeError,
        TFRecordError,
    )
    from tfrecord_torch.example.codec import make_example, make_sequence_example
    from tfrecord_torch.features import presets, tfspec
    from tfrecord_torch.features.collate import pad_collate
    from tfrecord_torch.features.images.boxes import Boxes
    from tfrecord_torch.features.images.engine import ImageBatching
    from tfrecord_torch.features.images.instances import InstanceMasks
    from tfrecord_torch.features.images.masks import Mask
    from tfrecord_torch.features.images.objects import ObjectLabels
    from tfrecord_torch.features.images.specs import Image, RawImage
    from tfrecord_torch.features.packing import pack_collate
    from tfrecord_torch.features.parsing import (
        parse_example,
        parse_example_batch,
        parse_sequence_example,
        parse_sequence_example_batch,
    )
    from tfrecord_torch.features.payload import Payload
    from tfrecord_torch.features.specs import Bytes, Feature, Float, Int64, RawTensor, Text
    from tfrecord_torch.features.tensors import SerializedTensor, parse_tensor, serialize_tensor
    from tfrecord_torch.io.budget import FillBudget, ReadBudget, RequestBudget
    from tfrecord_torch.io.pool import ReaderPool
    from tfrecord_torch.io.shardcache import ShardCache
    from tfrecord_torch.policy import ErrorPolicy, OnError
    from tfrecord_torch.records.compression import Compression, CompressionOptions
    from tfrecord_torch.records.framing import read_records
    from tfrecord_torch.records.index import build_index, check_index, load_index
    from tfrecord_torch.records.indexed import IndexedReader
    from tfrecord_torch.records.tail import RecordTail
    from tfrecord_torch.records.writer import RecordWriter
    from tfrecord_torch.tfds.dataset import tfds_dataset
    from tfrecord_torch.write.convert import write_dataset
    from tfrecord_torch.write.options import Encoding, Execution, ShardLayout
    from tfrecord_torch.write.plan import write_order
    from tfrecord_torch.write.sharded import ShardedWriter
    from tfrecord_torch.write.source import DatasetSource
