"""A strict walk over one serialized tf.train.Example's wire bytes.

Used to learn a record's byte layout: which bytes are structure (tags,
length prefixes, keys) and which are values. Only the canonical shapes are
modelled; anything else (unknown fields, duplicate keys, map entries out of
order, invalid UTF-8 keys, ...) raises :class:`Reject`, and the caller leaves
that record to protobuf.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Reject", "Span", "Walker"]


class Reject(Exception):
    """The record uses a construct the fast paths do not model."""


class Span(NamedTuple):
    """Where one feature's values sit in a walked Example."""

    kind: str  # "int64", "float", "bytes" or "empty" (a Feature with no list set)
    runs: list  # the value bytes [a, b) of each run (numeric kinds) or each value (bytes)
    packed: bool  # every numeric value sits in a packed run
    columns: Any  # the byte columns a batch reads: float [i...]; int64 (cols, firsts, shifts); bytes runs


class Walker:
    """Walk one Example's wire bytes, strictly: only the canonical shapes.

    After :meth:`walk`:

    - ``mask[i]`` says which bits of byte ``i`` are structure (0xFF: all,
      0x80: a varint value's continuation bit, 0: none);
    - ``spans[key]`` is a :class:`Span`: where the key's values sit.
    """

    def __init__(self, payload: bytes) -> None:
        self.p = payload
        self.mask = np.full(len(payload), 0xFF, np.uint8)
        self.spans: dict[str, Span] = {}
        self._packed = True

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        value = shift = 0
        for i in range(pos, min(end, pos + 10)):
            b = self.p[i]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, i + 1
            shift += 7
        raise Reject

    def length_field(self, pos: int, end: int, tag: int) -> tuple[int, int]:
        if pos >= end or self.p[pos] != tag:
            raise Reject
        n, pos = self.varint(pos + 1, end)
        if pos + n > end:
            raise Reject
        return pos, pos + n

    def walk(self) -> "Walker":
        size = len(self.p)
        if size:
            pos, end = self.length_field(0, size, 0x0A)  # Example.features
            if end != size:
                raise Reject
            while pos < end:
                pos = self.entry(*self.length_field(pos, end, 0x0A))
        return self

    def entry(self, pos: int, end: int) -> int:
        k0, k1 = self.length_field(pos, end, 0x0A)
        try:
            key = self.p[k0:k1].decode("utf-8")
        except UnicodeDecodeError:
            raise Reject from None
        if key in self.spans:
            raise Reject  # duplicate keys: leave "last one wins" to protobuf
        f0, f1 = self.length_field(k1, end, 0x12)
        if f1 != end:
            raise Reject
        if f0 == f1:
            self.spans[key] = Span("empty", [], True, None)
            return end
        tag = self.p[f0]
        kind = {0x0A: "bytes", 0x12: "float", 0x1A: "int64"}.get(tag)
        if kind is None:
            raise Reject
        l0, l1 = self.length_field(f0, f1, tag)
        if l1 != f1:
            raise Reject
        runs: list[tuple[int, int]] = []
        self._packed = True
        columns = getattr(self, kind)(l0, l1, runs)
        self.spans[key] = Span(kind, runs, self._packed, columns)
        return end

    def float(self, pos: int, end: int, runs: list) -> list[int]:
        cols: list[int] = []
        while pos < end:
            if self.p[pos] == 0x0D:  # unpacked fixed32
                a, b = pos + 1, pos + 5
                self._packed = False
            else:
                a, b = self.length_field(pos, end, 0x0A)
                if (b - a) % 4:
                    raise Reject
            if b > end:
                raise Reject
            cols.extend(range(a, b))
            runs.append((a, b))
            self.mask[a:b] = 0
            pos = b
        return cols

    def int64(self, pos: int, end: int, runs: list):
        cols: list[int] = []
        firsts: list[int] = []
        shifts: list[int] = []
        while pos < end:
            if self.p[pos] == 0x08:  # unpacked varint
                a, b = pos + 1, self.varint(pos + 1, end)[1]
                self._packed = False
            else:
                a, b = self.length_field(pos, end, 0x0A)
            runs.append((a, b))
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

    def bytes(self, pos: int, end: int, runs: list) -> list[tuple[int, int]]:
        while pos < end:
            a, b = self.length_field(pos, end, 0x0A)
            runs.append((a, b))
            self.mask[a:b] = 0
            pos = b
        return list(runs)
