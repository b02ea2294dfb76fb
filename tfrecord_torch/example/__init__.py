"""tf.train.Example and SequenceExample: protos, the codec, and the batch parser.

A namespace of its own, free of torch::

    from tfrecord_torch.example import make_example, parse_example

The names are exported lazily: importing one module of the subpackage does
not import the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfrecord_torch._lazy import lazy_exports

_EXPORTS = {
    "Example": "tfrecord_torch.example.protos",
    "SequenceExample": "tfrecord_torch.example.protos",
    "make_example": "tfrecord_torch.example.codec",
    "make_sequence_example": "tfrecord_torch.example.codec",
    "parse_example": "tfrecord_torch.example.codec",
    "parse_example_batch": "tfrecord_torch.example.batch",
    "parse_sequence_example": "tfrecord_torch.example.codec",
    "parse_sequence_example_batch": "tfrecord_torch.example.seqbatch",
}

__all__ = ["Example", "SequenceExample", "make_example", "make_sequence_example", "parse_example",
           "parse_example_batch", "parse_sequence_example", "parse_sequence_example_batch"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see
    from tfrecord_torch.example.batch import parse_example_batch
    from tfrecord_torch.example.codec import (
        make_example,
        make_sequence_example,
        parse_example,
        parse_sequence_example,
    )
    from tfrecord_torch.example.protos import Example, SequenceExample
    from tfrecord_torch.example.seqbatch import parse_sequence_example_batch
