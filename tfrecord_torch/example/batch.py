"""Decode many tf.train.Examples at once, without a Python step per value.

Records of one schema usually serialize to the same byte layout: the same
keys in the same order, the same tags and length prefixes; only the value
bytes differ. So the records of one length are a byte matrix, matched against
the :class:`~tfrecord_torch.example.template.Template` of one of them (the
same template ``parse_example`` uses one payload at a time) in one vectorized
comparison; the rows that match have exactly the same parse, and their values
are read out of the matrix with numpy. For varints the continuation bits
count as structure, so their boundaries are known too. Records that match no
template are decoded one by one (the compiled decoder, else protobuf), so the
result never depends on which path was taken (the tests check this).

A length group whose records hold more bytes values than their numeric
features pay for (:func:`_worth_a_template`) is decoded one by one too: the
compiled decoder copies a value (an image, an array) once where the matrix
copies it three times (joined, read out as a column, cut into rows), and those
copies cost more than the numpy read of a few numbers saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfrecord_torch._types import Bytes
from tfrecord_torch.example import codec
from tfrecord_torch.example.codec import parse_example, parse_record
from tfrecord_torch.example.template import Template
from tfrecord_torch.records.framing import Chunk

__all__ = ["parse_example_batch", "parse_record_batch"]

_MIN_GROUP = 4  # fewer same-length records than this are not worth a template
_MAX_LAYOUTS = 4  # templates tried per length group before falling back
# The bytes values a numeric feature pays for in a templated group: per record, the matrix costs
# about 1.5 us per KiB of values more than decoding one by one, which costs about 0.7 us per numeric
# feature more (benchmarks/parse_batch.py, batches of 64 records).
_VALUE_BYTES_PER_NUMERIC = 512

BatchLayout = Template  # the name the batch parser's tests know its template by


def parse_example_batch(records: Sequence[Bytes] | Chunk) -> dict[str, np.ndarray | list]:
    """Decode a batch of serialized tf.train.Examples into columns.

    Args:
        records: a sequence of payloads (bytes), or a :class:`~tfrecord_torch.framing.Chunk`.

    Returns:
        For each feature key found in any record: an array [N, n] (int64 or
        float32) when the feature is numeric and holds n values in every one
        of the N records; otherwise a list of N per-record values as
        :func:`parse_example` gives them (None where the record lacks the key).

    Raises:
        ExampleDecodeError: a record is not a valid Example.
    """
    return _parse_batch(records, parse_example)


def _parse_batch(records: Sequence[Bytes] | Chunk, parse_one: Any) -> dict[str, np.ndarray | list]:
    """Columns of a batch: records that match a learned layout decode
    together, the rest one by one with ``parse_one``."""
    rows = _Rows(records)
    n = len(rows)
    columns: dict[str, list] = {}  # key -> list of (row indices, values) pieces
    slow: list[int] = []
    for length, members in rows.groups(_MIN_GROUP, slow):
        layout = Template.compile(rows.payload(int(members[0])))
        if layout is None or not _worth_a_template(layout):
            slow.extend(members.tolist())
            continue
        matrix = rows.matrix(members, length)
        todo = np.arange(len(members))
        for attempt in range(_MAX_LAYOUTS):
            if not len(todo):
                break
            if attempt:
                layout = Template.compile(matrix[todo[0]].tobytes())
                if layout is None or not _worth_a_template(layout):
                    break
            sub = matrix if len(todo) == len(matrix) else matrix[todo]
            match = layout.matches(sub)
            hits = int(match.sum())
            if hits < _MIN_GROUP:
                break
            for key, values in layout.extract(sub if hits == len(sub) else sub[match]).items():
                columns.setdefault(key, []).append((members[todo[match]], values))
            todo = todo[~match]
        slow.extend(members[todo].tolist())
    if slow:
        slow.sort()
        payloads = [rows.records[i] for i in slow] if rows.records is not None else [rows.payload(i) for i in slow]
        # the compiled decoder called straight from the comprehension: no Python frame per record
        quick = codec._FAST.parse_example if parse_one is parse_example and codec._FAST is not None else None
        if quick is None:
            parsed = [parse_one(p) for p in payloads]
        else:
            parsed = [quick(p) for p in payloads]
            for k in [k for k, p in enumerate(parsed) if p is None]:  # what protobuf must decide
                parsed[k] = parse_one(payloads[k])
        keys = {k for p in parsed for k in p}
        slow_rows = np.array(slow, np.int64)
        for key in keys:
            columns.setdefault(key, []).append((slow_rows, [p.get(key) for p in parsed]))
    return {key: _assemble(pieces, n) for key, pieces in sorted(columns.items())}


def _worth_a_template(layout: Template) -> bool:
    """Whether a group of records of ``layout`` reads faster from its byte
    matrix than one by one: its bytes values are at most
    :data:`_VALUE_BYTES_PER_NUMERIC` per numeric feature."""
    columns = layout.columns.values()
    values = sum(b - a for kind, runs in columns if kind == "bytes" for a, b in runs)
    return values <= _VALUE_BYTES_PER_NUMERIC * sum(kind in ("float", "int64") for kind, _ in columns)


def parse_record_batch(records: Sequence[Bytes] | Chunk) -> dict[str, np.ndarray | list]:
    """:func:`parse_example_batch`, but a SequenceExample's feature lists come
    too (as :func:`~tfrecord_torch.example.codec.parse_record` gives them):
    each list's column is a list of N per-record step lists, None where a
    record lacks it.

    Raises:
        ExampleDecodeError: a record is neither an Example nor a SequenceExample.
        FeatureError: a record has a key both in its context and its feature lists.
    """
    # A record with feature lists never matches a layout (its top-level tags
    # are structure bytes no Example has), so it always takes parse_record.
    return _parse_batch(records, parse_record)


def _assemble(pieces: list, n: int):
    """Merge (rows, values) pieces into one column: dense if every record
    holds a numeric array of one dtype and length, else a list."""
    if sum(len(rows) for rows, _ in pieces) == n:
        kinds: set[tuple[Any, int] | None] = set()
        for _, values in pieces:
            if isinstance(values, np.ndarray):
                kinds.add((values.dtype, values.shape[1]))
            else:
                kinds |= {(v.dtype, len(v)) if isinstance(v, np.ndarray) else None for v in values}
        only = kinds.pop() if len(kinds) == 1 else None
        if only is not None:
            dtype, width = only
            if len(pieces) == 1 and isinstance(pieces[0][1], np.ndarray):
                return pieces[0][1]
            out = np.empty((n, width), dtype)
            for rows, values in pieces:
                out[rows] = values if isinstance(values, np.ndarray) else np.stack(values).reshape(len(values), width)
            return out
    items: list[Any] = [None] * n
    for rows, values in pieces:
        for i, v in zip(rows.tolist(), values):
            items[i] = v
    return items


class _Rows:
    """The payloads of a batch, addressable as byte rows."""

    def __init__(self, records) -> None:
        self.records: list[bytes] | None = None
        if isinstance(records, Chunk):
            self._buf: np.ndarray | None = np.frombuffer(records.buf, np.uint8)
            self.starts = records.starts
            self.lengths = records.lengths
        else:
            self.records = [bytes(r) if not isinstance(r, bytes) else r for r in records]
            self.lengths = np.fromiter(map(len, self.records), np.int64, len(self.records))
            self._buf = None  # joined only if some records share a layout worth a template

    @property
    def buf(self) -> np.ndarray:
        if self._buf is None:
            self.starts = np.zeros(len(self.lengths), np.int64)
            if len(self.lengths):
                np.cumsum(self.lengths[:-1], out=self.starts[1:])
            self._buf = np.frombuffer(b"".join(self.records or ()), np.uint8)
        return self._buf

    def __len__(self) -> int:
        return len(self.lengths)

    def groups(self, least: int, rest: list[int]):
        """(length, members) of each length that at least ``least`` records
        have (but 0); the other records' positions go to ``rest``."""
        if not len(self.lengths):
            return
        if (self.lengths == self.lengths[0]).all():
            if self.lengths[0] and len(self.lengths) >= least:
                yield int(self.lengths[0]), np.arange(len(self.lengths))
            else:
                rest.extend(range(len(self.lengths)))
            return
        values, inverse, counts = np.unique(self.lengths, return_inverse=True, return_counts=True)
        common = (counts >= least) & (values > 0)
        rest.extend(np.flatnonzero(~common[inverse]).tolist())
        for g in np.flatnonzero(common).tolist():
            yield int(values[g]), np.flatnonzero(inverse == g)

    def matrix(self, members: np.ndarray, length: int) -> np.ndarray:
        buf = self.buf
        starts = self.starts[members]
        step = starts[1] - starts[0] if len(starts) > 1 else 0
        if len(starts) > 1 and step >= length and (np.diff(starts) == step).all():
            first = buf[int(starts[0]):]
            return np.lib.stride_tricks.as_strided(first, (len(starts), length), (int(step), 1),
                                                   writeable=False)
        windows = np.lib.stride_tricks.sliding_window_view(buf, length)
        return windows[starts]  # copies N rows, with no [N, length] index array

    def payload(self, i: int) -> bytes:
        if self.records is not None:
            return self.records[i]
        s = int(self.starts[i])
        return self.buf[s:s + int(self.lengths[i])].tobytes()
