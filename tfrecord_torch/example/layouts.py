"""Decoding one tf.train.Example by its byte layout: parse_example's fast path.

Records of one schema serialize to the same structure bytes (tags, length
prefixes, keys); only the value bytes differ. The first time a payload length
is seen twice, one record of that length is walked strictly
(:class:`~tfrecord_torch.example.wire.Walker`) into a :class:`RecordLayout`:
the structure bytes to compare and, per feature, where its values sit. A later
payload of that length whose structure bytes all equal the layout's has the
same parse, so its values are sliced out with no protobuf message and no
Python step per value. Packed varints are decoded whatever their boundaries
(a value may take more or fewer bytes in the same run). Anything unusual, a
malformed varint for one, returns None and the caller parses with protobuf,
which then gives the value or the error; the tests compare both paths.

The cache is per process, bounded, and safe to share between threads: it maps
a payload length to a tuple of layouts, replaced whole when one is added.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import numpy as np

from tfrecord_torch.example.wire import Reject, Walker

__all__ = ["RecordLayout", "clear", "decode_cached", "learn"]

_F32 = np.dtype("<f4")
_I64 = np.dtype(np.int64)
_U8 = np.dtype(np.uint8)
_ONE = np.zeros(1, _I64)
_ENABLED = sys.byteorder == "little"  # float bytes are read in place as <f4
_SHORT = 16  # packed varint runs up to this many bytes are decoded in Python
_U64_MASK, _TWO_63, _TWO_64 = 2**64 - 1, 2**63, 2**64

_MAX_LENGTHS = 1024  # payload lengths with layouts; the cache is emptied past this
_MAX_SEEN = 4096  # lengths counted before learning; the counts are emptied past this
_PER_LENGTH = 4  # layouts (or failed walks) per length
_RETRY = 1024  # misses after which a length's layouts are learned afresh


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


class RecordLayout:
    """The structure of one serialized Example and where its values sit, for decoding one payload.

    It compares a payload's structure runs with ``bytes.startswith`` and slices
    the values out of it; :class:`~tfrecord_torch.example.batch.BatchLayout`
    is the batch parser's counterpart, matched against many rows at once.
    """

    __slots__ = ("checks", "fields", "many")

    def __init__(self, checks: tuple, fields: tuple, many: tuple) -> None:
        self.checks = checks  # ((structure bytes, offset), ...)
        self.fields = fields  # ((key, reader, a, b), ...), keys sorted
        self.many = many  # ((key, [(a, b), ...]), ...): bytes lists of 2+ values

    @classmethod
    def compile(cls, payload: bytes) -> "RecordLayout | None":
        """The layout of ``payload``, or None if it is not a canonical Example."""
        try:
            walker = Walker(payload).walk()
        except Reject:
            return None
        fields: list[tuple[str, Callable[[bytes, int, int], object], int, int]] = []
        many: list[tuple[str, tuple]] = []
        for key in sorted(walker.spans):
            kind, runs, packed = walker.spans[key]
            if kind == "bytes" and len(runs) != 1:
                if runs:
                    many.append((key, tuple(runs)))
                else:
                    fields.append((key, _empty, 0, 0))
                continue
            if kind in ("float", "int64") and (not packed or len(runs) > 1):
                return None  # unpacked or split runs: rare, left to protobuf
            if kind == "empty":
                fields.append((key, _empty, 0, 0))
            elif not runs:
                fields.append((key, _empty_floats if kind == "float" else _empty_ints, 0, 0))
            else:
                reader = {"float": _floats, "int64": _ints, "bytes": _one_bytes}[kind]
                fields.append((key, reader, *runs[0]))
        structure = np.flatnonzero(walker.mask == 0xFF)
        checks = []
        if len(structure):
            breaks = np.flatnonzero(np.diff(structure) != 1) + 1
            for run in np.split(structure, breaks):
                a, b = int(run[0]), int(run[-1]) + 1
                checks.append((payload[a:b], a))
        return cls(tuple(checks), tuple(fields), tuple(many))

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


_layouts: dict[int, tuple] = {}  # payload length -> layouts
_seen: dict[int, int] = {}  # payload length -> times missed (learning starts at 2)
_lock = threading.Lock()


def decode_cached(payload: bytes) -> dict | None:
    """``payload`` decoded by a cached layout of its length, or None."""
    for layout in _layouts.get(len(payload), ()):
        out = layout.decode(payload)
        if out is not None:
            return out
    return None


def learn(payload: bytes) -> None:
    """Note a payload that missed the cache; learn its layout once its
    length has missed twice (so one-off lengths, such as images, cost a
    dict update and no walk). A length that keeps missing after its tries
    starts over, so the cache follows the data a process reads."""
    if not _ENABLED:
        return
    n = len(payload)
    with _lock:
        if len(_seen) >= _MAX_SEEN:
            _seen.clear()
        tries = _seen[n] = _seen.get(n, 0) + 1
        if tries > _PER_LENGTH + 1:
            if tries >= _RETRY:
                _seen[n] = 1
                _layouts.pop(n, None)
            return
    if tries < 2:
        return
    layout = RecordLayout.compile(payload)
    if layout is None or layout.decode(payload) is None:
        return
    with _lock:
        if len(_layouts) >= _MAX_LENGTHS:
            _layouts.clear()
        known = _layouts.get(n, ())
        if len(known) < _PER_LENGTH:
            _layouts[n] = known + (layout,)


def clear() -> None:
    """Forget every learned layout (tests use it; nothing else needs to)."""
    with _lock:
        _layouts.clear()
        _seen.clear()
