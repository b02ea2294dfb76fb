"""One serialized tf.train.Example as a template: the structure the Example decoders share.

Records of one schema serialize to the same structure bytes (tags, length
prefixes, keys); only the value bytes differ. One record walked strictly
(:class:`~tfrecord_torch.example.wire.Walker`) becomes a :class:`Template`:
the bits that are structure and, per feature, where its values sit. A payload
of the same length whose structure bits equal the template's has exactly the
same parse, so its values are read out with no protobuf message and no Python
step per value. Two decoders apply a template, and that is all they differ
in:

* one payload (:func:`~tfrecord_torch.example.codec.parse_example`'s
  fallback, through the per-length cache of
  :mod:`~tfrecord_torch.example.layouts`): :meth:`Template.decode` compares
  the structure runs with ``bytes.startswith`` and slices the values out;
* a batch (:mod:`~tfrecord_torch.example.batch`): :meth:`Template.matches`
  compares every row of an [N, length] byte matrix at once and
  :meth:`Template.extract` reads each feature as a column.

Only the common shape makes a template: numeric values in one packed run per
feature (as TensorFlow writes them). Anything else, and a value run the
readers cannot decode (a malformed varint), is left to the caller, which
parses with protobuf; the tests compare both paths. SequenceExamples make no
template (see :mod:`~tfrecord_torch.example.seqbatch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tfrecord_torch.example.wire import Reject, Span, Walker

__all__ = ["Template"]

_F32 = np.dtype("<f4")
_I64 = np.dtype(np.int64)
_U8 = np.dtype(np.uint8)
_ONE = np.zeros(1, _I64)
_SHORT = 16  # packed varint runs up to this many bytes are decoded in Python
_U64_MASK, _TWO_63, _TWO_64 = 2**64 - 1, 2**63, 2**64


class _Malformed(Exception):
    """A value run the fast path cannot decode: protobuf decides."""


def _ints(p: bytes, a: int, b: int) -> np.ndarray:
    """The packed varints in ``p[a:b]`` as int64 [N]."""
    n = b - a
    if n == 1:
        v = p[a]
        if v >= 0x80:
            raise _Malformed
        out = _ONE.copy()
        out[0] = v
        return out
    if n == 2:
        c0, c1 = p[a], p[a + 1]
        if c1 >= 0x80:
            raise _Malformed
        if c0 >= 0x80:
            out = _ONE.copy()
            out[0] = (c0 & 0x7F) | c1 << 7
            return out
        return np.array((c0, c1), _I64)
    if n <= _SHORT:  # a few values: a Python loop beats numpy's set-up
        return _short_ints(p, a, b)
    raw = np.frombuffer(p, _U8, n, a)
    ends = raw < 0x80
    if ends.all():
        return raw.astype(_I64)
    if not ends[-1]:
        raise _Malformed  # the last varint runs past its run
    last = np.flatnonzero(ends)
    first = np.empty(len(last), np.int64)
    first[0] = 0
    first[1:] = last[:-1] + 1
    if (last - first).max() >= 10:
        raise _Malformed  # longer than any varint: protobuf says why
    shifts = (np.arange(n) - np.repeat(first, last - first + 1)).astype(np.uint64) * np.uint64(7)
    parts = (raw & 0x7F).astype(np.uint64) << shifts  # bits past 64 drop, as protobuf drops them
    return np.add.reduceat(parts, first).view(_I64)


def _short_ints(p: bytes, a: int, b: int) -> np.ndarray:
    values = []
    v = shift = 0
    for i in range(a, b):
        c = p[i]
        v |= (c & 0x7F) << shift
        if c < 0x80:
            v &= _U64_MASK  # bits past 64 drop, as protobuf drops them
            values.append(v - _TWO_64 if v >= _TWO_63 else v)
            v = shift = 0
        else:
            shift += 7
            if shift >= 70:
                raise _Malformed
    if shift:
        raise _Malformed  # the last varint runs past its run
    return np.array(values, _I64)


def _floats(p: bytes, a: int, b: int) -> np.ndarray:
    return np.frombuffer(bytearray(p[a:b]), _F32)


def _one_bytes(p: bytes, a: int, b: int) -> list:
    return [p[a:b]]


def _empty_floats(p: bytes, a: int, b: int) -> np.ndarray:
    return np.empty(0, _F32)


def _empty_ints(p: bytes, a: int, b: int) -> np.ndarray:
    return np.empty(0, _I64)


def _empty(p: bytes, a: int, b: int) -> list:
    return []


class Template:
    """One canonical Example's structure and where its values sit (see the module)."""

    __slots__ = ("checks", "columns", "fields", "many", "mask", "template")

    def __init__(self, payload: bytes, mask: np.ndarray, spans: dict[str, Span]) -> None:
        self.template = np.frombuffer(payload, np.uint8).copy()
        self.mask = mask  # bits that must equal the template's
        self.columns = {key: (span.kind, span.columns) for key, span in spans.items()}  # for a batch
        fields: list[tuple[str, Callable[[bytes, int, int], object], int, int]] = []
        many: list[tuple[str, tuple]] = []
        for key in sorted(spans):
            kind, runs = spans[key].kind, spans[key].runs
            if kind == "bytes" and len(runs) != 1:
                if runs:
                    many.append((key, tuple(runs)))
                else:
                    fields.append((key, _empty, 0, 0))
            elif kind == "empty":
                fields.append((key, _empty, 0, 0))
            elif not runs:
                fields.append((key, _empty_floats if kind == "float" else _empty_ints, 0, 0))
            else:
                reader = {"float": _floats, "int64": _ints, "bytes": _one_bytes}[kind]
                fields.append((key, reader, *runs[0]))
        self.fields = tuple(fields)  # ((key, reader, a, b), ...), keys sorted
        self.many = tuple(many)  # ((key, [(a, b), ...]), ...): bytes lists of 2+ values
        self.checks = _structure_runs(payload, mask)  # ((structure bytes, offset), ...)

    @classmethod
    def compile(cls, payload: bytes) -> Template | None:
        """The template of ``payload``, or None if it is not a canonical Example
        whose numeric features each sit in one packed run."""
        try:
            walker = Walker(payload).walk()
        except Reject:
            return None
        if any(s.kind in ("float", "int64") and (not s.packed or len(s.runs) > 1) for s in walker.spans.values()):
            return None  # unpacked or split runs: rare, left to protobuf
        return cls(payload, walker.mask, walker.spans)

    def decode(self, p: bytes) -> dict | None:
        """``p`` decoded if it has this layout (None if not, or if malformed)."""
        starts = p.startswith
        for expect, at in self.checks:
            if not starts(expect, at):
                return None
        out = {}
        try:
            for key, reader, a, b in self.fields:
                out[key] = reader(p, a, b)
        except _Malformed:
            return None
        if self.many:
            for key, runs in self.many:
                out[key] = [p[a:b] for a, b in runs]
            out = dict(sorted(out.items()))
        return out

    def matches(self, rows: np.ndarray) -> np.ndarray:
        """Boolean [N]: which rows of an [N, length] byte matrix share this layout."""
        structure = np.flatnonzero(self.mask)
        picked = rows[:, structure]
        return ((picked ^ self.template[structure]) & self.mask[structure] == 0).all(axis=1)

    def extract(self, rows: np.ndarray) -> dict:
        """Each feature of ``rows`` (all matching this layout): numeric ones as [N, n] arrays,
        bytes ones as N lists."""
        out: dict[str, Any] = {}
        n = len(rows)
        for key, (kind, info) in self.columns.items():
            if kind == "float":
                cols = np.asarray(info, np.int64)
                picked = rows[:, cols[0]:cols[-1] + 1] if len(cols) else rows[:, cols]  # one packed run
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


def _structure_runs(payload: bytes, mask: np.ndarray) -> tuple:
    """The runs of whole structure bytes as ((bytes, offset), ...): what a payload must start with where."""
    structure = np.flatnonzero(mask == 0xFF)
    checks = []
    if len(structure):
        breaks = np.flatnonzero(np.diff(structure) != 1) + 1
        for run in np.split(structure, breaks):
            a, b = int(run[0]), int(run[-1]) + 1
            checks.append((payload[a:b], a))
    return tuple(checks)
