"""Decode many tf.train.Examples at once, without a Python step per value.

Records of one schema usually serialize to the same byte layout: the same
keys in the same order, the same tags and length prefixes; only the value
bytes differ. So a batch is decoded by walking the wire format of one record
(the template) and noting which bytes are structure and which are values;
every other record of the same length whose structure bytes equal the
template's (one vectorized comparison) has exactly the same parse, and its
values are read out of the byte matrix with numpy. For varints the
continuation bits count as structure, so their boundaries are known too.
Records that do not match fall back to protobuf, record by record, so the
result never depends on which path was taken (the tests check this).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfrecord_torch._types import Bytes
from tfrecord_torch.example.codec import parse_example
from tfrecord_torch.records.framing import Chunk

__all__ = ["parse_example_batch"]

_MIN_GROUP = 4  # fewer same-length records than this are not worth a template
_MAX_LAYOUTS = 4  # templates tried per length group before falling back


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
    rows = _Rows(records)
    n = len(rows)
    columns: dict[str, list] = {}  # key -> list of (row indices, values) pieces
    slow: list[int] = []
    for length, members in rows.groups():
        if length == 0 or len(members) < _MIN_GROUP:
            slow.extend(members.tolist())
            continue
        matrix = rows.matrix(members, length)
        todo = np.arange(len(members))
        for _ in range(_MAX_LAYOUTS):
            if not len(todo):
                break
            layout = Layout.compile(matrix[todo[0]].tobytes())
            if layout is None:
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
        parsed = [parse_example(rows.payload(i)) for i in slow]
        keys = {k for p in parsed for k in p}
        where = np.array(slow, np.int64)
        for key in keys:
            columns.setdefault(key, []).append((where, [p.get(key) for p in parsed]))
    return {key: _assemble(pieces, n) for key, pieces in sorted(columns.items())}


def _assemble(pieces: list, n: int):
    """Merge (rows, values) pieces into one column: dense if every record
    holds a numeric array of one dtype and length, else a list."""
    if sum(len(rows) for rows, _ in pieces) == n:
        kinds: set[tuple[Any, int] | None] = set()
        for _, values in pieces:
            if isinstance(values, np.ndarray):
                kinds.add((values.dtype, values.shape[1]))
            else:
                kinds.update((v.dtype, len(v)) if isinstance(v, np.ndarray) else None for v in values)
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
        if isinstance(records, Chunk):
            self.buf = np.frombuffer(records.buf, np.uint8)
            self.starts = records.starts
            self.lengths = records.lengths
        else:
            records = [bytes(r) if not isinstance(r, bytes) else r for r in records]
            self.lengths = np.fromiter(map(len, records), np.int64, len(records))
            self.starts = np.zeros(len(records), np.int64)
            if len(records):
                np.cumsum(self.lengths[:-1], out=self.starts[1:])
            self.buf = np.frombuffer(b"".join(records), np.uint8)

    def __len__(self) -> int:
        return len(self.lengths)

    def groups(self):
        if not len(self.lengths):
            return
        if (self.lengths == self.lengths[0]).all():
            yield int(self.lengths[0]), np.arange(len(self.lengths))
            return
        order = np.argsort(self.lengths, kind="stable")
        values, first = np.unique(self.lengths[order], return_index=True)
        for length, members in zip(values.tolist(), np.split(order, first[1:])):
            yield length, members

    def matrix(self, members: np.ndarray, length: int) -> np.ndarray:
        starts = self.starts[members]
        step = starts[1] - starts[0] if len(starts) > 1 else 0
        if len(starts) > 1 and step >= length and (np.diff(starts) == step).all():
            first = self.buf[int(starts[0]):]
            return np.lib.stride_tricks.as_strided(first, (len(starts), length), (int(step), 1),
                                                   writeable=False)
        windows = np.lib.stride_tricks.sliding_window_view(self.buf, length)
        return windows[starts]  # copies N rows, with no [N, length] index array

    def payload(self, i: int) -> bytes:
        s = int(self.starts[i])
        return self.buf[s:s + int(self.lengths[i])].tobytes()


class _Reject(Exception):
    """The template uses a construct the fast path does not model."""


@dataclass
class Layout:
    """The byte layout of one serialized Example, as a template for others."""

    template: np.ndarray
    mask: np.ndarray  # bits that must equal the template's
    features: dict = field(default_factory=dict)  # key -> (kind, info)

    @classmethod
    def compile(cls, payload: bytes) -> Layout | None:
        try:
            return _Walker(payload).layout()
        except _Reject:
            return None

    def matches(self, rows: np.ndarray) -> np.ndarray:
        """Boolean [N]: which rows share this layout."""
        structure = np.flatnonzero(self.mask)
        picked = rows[:, structure]
        return ((picked ^ self.template[structure]) & self.mask[structure] == 0).all(axis=1)

    def extract(self, rows: np.ndarray) -> dict:
        out: dict[str, Any] = {}
        n = len(rows)
        for key, (kind, info) in self.features.items():
            if kind == "float":
                cols = np.asarray(info, np.int64)
                if len(cols) and cols[-1] - cols[0] + 1 == len(cols):  # one packed run
                    picked = rows[:, cols[0]:cols[-1] + 1]
                else:
                    picked = rows[:, cols]
                out[key] = np.ascontiguousarray(picked).view("<f4").reshape(n, -1)
            elif kind == "int64":
                cols, firsts, shifts = info
                parts = (rows[:, cols] & 0x7F).astype(np.uint64) << shifts
                if len(firsts) == 0:
                    out[key] = np.zeros((n, 0), np.int64)
                else:
                    out[key] = np.add.reduceat(parts, firsts, axis=1).view(np.int64)
            elif kind == "bytes":
                values = [[rows[:, a:b].tobytes(), b - a] for a, b in info]
                out[key] = [[blob[i * w:(i + 1) * w] for blob, w in values] for i in range(n)]
            else:
                out[key] = [[] for _ in range(n)]
        return out


class _Walker:
    """Walk one Example's wire bytes, strictly: only the canonical shapes."""

    def __init__(self, payload: bytes) -> None:
        self.p = payload
        self.mask = np.full(len(payload), 0xFF, np.uint8)
        self.features: dict = {}

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        value = shift = 0
        for i in range(pos, min(end, pos + 10)):
            b = self.p[i]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, i + 1
            shift += 7
        raise _Reject

    def length_field(self, pos: int, end: int, tag: int) -> tuple[int, int]:
        if pos >= end or self.p[pos] != tag:
            raise _Reject
        n, pos = self.varint(pos + 1, end)
        if pos + n > end:
            raise _Reject
        return pos, pos + n

    def layout(self) -> Layout:
        size = len(self.p)
        if size:
            pos, end = self.length_field(0, size, 0x0A)  # Example.features
            if end != size:
                raise _Reject
            while pos < end:
                pos = self.entry(*self.length_field(pos, end, 0x0A))
        return Layout(np.frombuffer(self.p, np.uint8).copy(), self.mask, self.features)

    def entry(self, pos: int, end: int) -> int:
        k0, k1 = self.length_field(pos, end, 0x0A)
        try:
            key = self.p[k0:k1].decode("utf-8")
        except UnicodeDecodeError:
            raise _Reject from None
        if key in self.features:
            raise _Reject  # duplicate keys: leave "last one wins" to protobuf
        f0, f1 = self.length_field(k1, end, 0x12)
        if f1 != end:
            raise _Reject
        if f0 == f1:
            self.features[key] = ("empty", None)
            return end
        tag = self.p[f0]
        kind = {0x0A: "bytes", 0x12: "float", 0x1A: "int64"}.get(tag)
        if kind is None:
            raise _Reject
        l0, l1 = self.length_field(f0, f1, tag)
        if l1 != f1:
            raise _Reject
        self.features[key] = (kind, getattr(self, kind)(l0, l1))
        return end

    def float(self, pos: int, end: int) -> list[int]:
        cols: list[int] = []
        while pos < end:
            if self.p[pos] == 0x0D:  # unpacked fixed32
                a, b = pos + 1, pos + 5
            else:
                a, b = self.length_field(pos, end, 0x0A)
                if (b - a) % 4:
                    raise _Reject
            if b > end:
                raise _Reject
            cols.extend(range(a, b))
            self.mask[a:b] = 0
            pos = b
        return cols

    def int64(self, pos: int, end: int):
        cols: list[int] = []
        firsts: list[int] = []
        shifts: list[int] = []
        while pos < end:
            if self.p[pos] == 0x08:  # unpacked varint
                a, b = pos + 1, self.varint(pos + 1, end)[1]
            else:
                a, b = self.length_field(pos, end, 0x0A)
            i = a
            while i < b:
                j = self.varint(i, b)[1]
                firsts.append(len(cols))
                cols.extend(range(i, j))
                shifts.extend(range(0, 7 * (j - i), 7))
                self.mask[i:j] = 0x80
                i = j
            pos = b
        return (np.asarray(cols, np.int64), np.asarray(firsts, np.int64),
                np.asarray(shifts, np.uint64))

    def bytes(self, pos: int, end: int) -> list[tuple[int, int]]:
        spans = []
        while pos < end:
            a, b = self.length_field(pos, end, 0x0A)
            spans.append((a, b))
            self.mask[a:b] = 0
            pos = b
        return spans
