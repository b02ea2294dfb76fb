"""Read and write TFRecord files from PyTorch, without TensorFlow."""

from . import presets
from .batch import parse_example_batch
from .collate import pad_collate
from .dataset import TFRecordDataset
from .errors import (CorruptRecordError, ExampleDecodeError, FeatureError, IndexMismatchError,
                     TFRecordError)
from .example import make_example, make_sequence_example, parse_example, parse_sequence_example
from .features import Bytes, Float, Image, Int64, RawImage, Text
from .framing import RecordWriter, read_records
from .index import build_index, check_index, load_index
from .indexed import IndexedReader
from .mapdataset import IndexedTFRecordDataset
from .convert import write_dataset
from .features import RawTensor
from .tfds import tfds_dataset
from .writer import ShardedWriter

__version__ = "0.1.0"

__all__ = [
    "Bytes",
    "CorruptRecordError",
    "ExampleDecodeError",
    "FeatureError",
    "Float",
    "Image",
    "IndexMismatchError",
    "IndexedReader",
    "IndexedTFRecordDataset",
    "Int64",
    "RawImage",
    "RawTensor",
    "RecordWriter",
    "ShardedWriter",
    "TFRecordDataset",
    "TFRecordError",
    "Text",
    "build_index",
    "check_index",
    "load_index",
    "make_example",
    "make_sequence_example",
    "pad_collate",
    "parse_example",
    "parse_example_batch",
    "parse_sequence_example",
    "presets",
    "read_records",
    "tfds_dataset",
    "write_dataset",
]
