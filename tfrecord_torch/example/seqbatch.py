"""Decode many tf.train.SequenceExamples at once, as ``tf.io.parse_sequence_example`` does.

The context features come back as :func:`parse_example_batch` gives columns;
each feature list whose steps are all numbers of one kind and one width comes
back padded to the longest list in the batch, with its lengths, as TF's
``parse_sequence_example`` returns a dense tensor and ``lengths``.

The records are decoded one by one (the compiled decoder, else protobuf) and
then assembled as :mod:`~tfrecord_torch.example.batch` assembles the columns
of the records no template matched. A SequenceExample makes no
:class:`~tfrecord_torch.example.template.Template` on purpose: its feature
lists hold a number of steps of its own, so its records seldom share a length
let alone a structure, and the byte-matrix match would find nothing to match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfrecord_torch._types import Bytes
from tfrecord_torch.example.batch import _assemble, _Rows
from tfrecord_torch.example.codec import parse_sequence_example
from tfrecord_torch.records.framing import Chunk

__all__ = ["parse_sequence_example_batch"]


def parse_sequence_example_batch(records: Sequence[Bytes] | Chunk
                                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    """Decode a batch of serialized tf.train.SequenceExamples.

    Args:
        records: a sequence of payloads (bytes), or a :class:`~tfrecord_torch.framing.Chunk`.

    Returns:
        ``(context, feature_lists, lengths)``, keys sorted:

        * ``context``: for each context key in any record, the column
          :func:`parse_example_batch` would give (an array [N, n] where every
          record holds n numbers of one kind, else a list with None where a
          record lacks the key).
        * ``feature_lists``: for each feature list in any record, an array
          [N, T, n] (int64 or float32) when every step of every record holds n
          numbers of one kind: padded with 0 after each record's steps to the
          longest list T, a record without the list counting as 0 steps. Any
          other list (bytes, or steps of different widths or kinds) is a list
          of N per-record step lists, None where a record lacks it.
        * ``lengths``: for each padded feature list, int64 [N], the number of
          steps of each record.

    Raises:
        ExampleDecodeError: a record is not a valid SequenceExample.
    """
    rows = _Rows(records)
    n = len(rows)
    parsed = [parse_sequence_example(rows.payload(i)) for i in range(n)]
    everyone = np.arange(n)
    context_keys = sorted({k for c, _ in parsed for k in c})
    context = {key: _assemble([(everyone, [c.get(key) for c, _ in parsed])], n) for key in context_keys}
    lists: dict[str, Any] = {}
    lengths: dict[str, np.ndarray] = {}
    for key in sorted({k for _, f in parsed for k in f}):
        column = [f.get(key) for _, f in parsed]
        padded = _pad(column)
        if padded is None:
            lists[key] = column
        else:
            lists[key], lengths[key] = padded
    return context, lists, lengths


def _pad(column: list) -> tuple[np.ndarray, np.ndarray] | None:
    """[N, T, n] zero-padded and the lengths, or None when the steps are not
    numbers of one kind and width (or no record has a step to tell them)."""
    kinds = {(s.dtype, len(s)) if isinstance(s, np.ndarray) else (None, 0)
             for steps in column if steps for s in steps}
    if len(kinds) != 1:
        return None
    dtype, width = kinds.pop()
    if dtype is None:  # bytes steps
        return None
    lengths = np.fromiter((len(steps) if steps else 0 for steps in column), np.int64, len(column))
    out = np.zeros((len(column), int(lengths.max()), width), dtype)
    for i, steps in enumerate(column):
        if steps:
            out[i, :len(steps)] = np.stack(steps)
    return out, lengths
