"""Read and write TFRecord files from PyTorch, without TensorFlow."""

from .errors import CorruptRecordError, ExampleDecodeError, IndexMismatchError, TFRecordError
from .example import make_example, make_sequence_example, parse_example, parse_sequence_example
from .framing import RecordWriter, read_records
from .index import build_index, check_index, load_index
from .indexed import IndexedReader

__version__ = "0.1.0"

__all__ = [
    "CorruptRecordError",
    "ExampleDecodeError",
    "IndexMismatchError",
    "IndexedReader",
    "RecordWriter",
    "TFRecordError",
    "build_index",
    "check_index",
    "load_index",
    "make_example",
    "make_sequence_example",
    "parse_example",
    "parse_sequence_example",
    "read_records",
]
