"""``tf.io.RaggedFeature`` with partitions: nested rows, as ``RaggedTensor.to_list()``.

Torch has no general ragged tensor, so a partitioned RaggedFeature decodes
to nested Python lists whose innermost rows are 1-D tensors (lists of bytes
for strings): ``values=[1, 2, 3, 4, 5]`` with ``RowLengths("lens")`` and
``lens=[2, 0, 3]`` gives ``[tensor([1, 2]), tensor([]), tensor([3, 4, 5])]``.
Partitions run from the outermost to the innermost, as in TF. Each is
checked as TF checks it (lengths that do not add up, splits that do not
start at 0 or end at the values' count, row ids out of order): a
``FeatureError`` naming the key. A feature list read as TF reads a
VarLenFeature or RaggedFeature in ``sequence_features`` is one such row per
step (:class:`StepRows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.specs import Feature

__all__ = ["PARTITIONS", "RaggedRows", "StepRows"]

PARTITIONS = ("RowSplits", "RowLengths", "RowStarts", "RowLimits", "ValueRowIds", "UniformRowLength")


class RaggedRows(Feature):
    """A RaggedFeature with ``partitions``: ((kind, key or length), ...) from
    the outermost to the innermost, kinds from :data:`PARTITIONS`."""

    def __init__(self, key: str | None = None, *, dtype: str, partitions: tuple) -> None:
        super().__init__(key, default=None)
        self.string = dtype == "string"
        self.dtype = None if self.string else np.dtype(np.int64 if dtype == "int64" else np.float32)
        for kind, _ in partitions:
            if kind not in PARTITIONS:
                raise ValueError(f"unknown RaggedFeature partition {kind!r} (known: {', '.join(PARTITIONS)})")
        self.partitions = tuple(partitions)

    def decode(self, record: dict) -> Any:
        values = record.get(self.key)
        if values is None or (not self.string and not len(values)):
            values = [] if self.string else np.zeros(0, self.dtype)
        elif self.string != isinstance(values, list):
            raise FeatureError(self.key, f"holds {'numbers' if self.string else 'bytes'}, expected "
                                         f"{'bytes' if self.string else self.dtype}")
        elif not self.string:
            if values.dtype != self.dtype:  # TF refuses another kind; a silent cast would change values
                raise FeatureError(self.key, f"holds {values.dtype} values, expected {self.dtype}")
            values = np.asarray(values, self.dtype)
        rows: Any = values
        count = len(values)
        for kind, arg in reversed(self.partitions):  # the innermost first
            splits = self._splits(kind, arg, count, record)
            rows = [rows[a:b] for a, b in zip(splits[:-1].tolist(), splits[1:].tolist())]
            count = len(rows)
        return _tensors(rows, len(self.partitions), self.string)

    def _splits(self, kind: str, arg: Any, n: int, record: dict) -> np.ndarray:
        """Row splits [rows + 1] over ``n`` items, checked."""
        if kind == "UniformRowLength":
            length = int(arg)
            if length < 0 or (length == 0 and n) or (length and n % length):
                raise FeatureError(self.key, f"{n} values do not split into rows of {length}")
            return np.arange(0, n + 1, length, dtype=np.int64) if length else np.zeros(1, np.int64)
        part = record.get(arg)
        if part is None or (isinstance(part, list) and not part):  # missing, or an empty Feature(), as in TF
            part = np.zeros(0, np.int64)
        if not isinstance(part, np.ndarray) or (len(part) and part.dtype != np.int64):
            raise FeatureError(arg, f"a {kind} partition must hold int64 values")
        if kind == "RowLengths":
            if (part < 0).any() or part.sum() != n:
                raise FeatureError(arg, f"row lengths {part.tolist()[:8]} do not add up to the {n} values")
            return np.concatenate([[0], np.cumsum(part)]).astype(np.int64)
        if kind == "RowSplits":
            splits = part if len(part) else np.zeros(1, np.int64)
        elif kind == "RowStarts":
            splits = np.concatenate([part, [n]]).astype(np.int64)
        elif kind == "RowLimits":
            splits = np.concatenate([[0], part]).astype(np.int64)
        else:  # ValueRowIds: one row id per value, in order; rows up to the last id
            if len(part) != n or (len(part) and (part[0] < 0 or (np.diff(part) < 0).any())):
                raise FeatureError(arg, f"value row ids must be {n} non-decreasing ids >= 0")
            rows = int(part[-1]) + 1 if len(part) else 0
            return np.concatenate([[0], np.cumsum(np.bincount(part, minlength=rows))]).astype(np.int64)
        if splits[0] != 0 or splits[-1] != n or (np.diff(splits) < 0).any():
            raise FeatureError(arg, f"{kind} {part.tolist()[:8]} do not split the {n} values into rows "
                                    f"(splits must start at 0, never decrease and end at {n})")
        return splits


class StepRows(Feature):
    """A feature list as TF reads a ``VarLenFeature`` or ``RaggedFeature`` in
    ``sequence_features``: a list of T rows, one per step, each a 1-D tensor
    of the step's values (a list of bytes for strings) -- or, with
    ``partitions`` (as :class:`~tfrecord_torch.features.ragged.RaggedRows`,
    each partition key a feature list with one step per value step), the
    step's values nested by them. Equal to TF's ``RaggedTensor.to_list()``
    (of ``tf.RaggedTensor.from_sparse`` for a VarLen's SparseTensor). A
    missing feature list has no steps, as in TF."""

    def __init__(self, key: str | None = None, *, dtype: str, partitions: tuple = ()) -> None:
        super().__init__(key, default=None)
        self.dtype, self.partitions = dtype, tuple(partitions)
        RaggedRows(key, dtype=dtype, partitions=self.partitions)  # checks the partitions now

    def check_sequence(self, name: str) -> None:
        """A feature list is what it reads: always fine."""

    def decode_steps(self, lists: dict, *, has_lists: bool = True) -> list:
        """One row per step (a missing list has none, whatever ``has_lists``)."""
        rows = RaggedRows(self.key, dtype=self.dtype, partitions=self.partitions)
        steps = lists.get(self.key) or []
        keys = [arg for kind, arg in self.partitions if kind != "UniformRowLength"]
        for key in keys:
            if len(lists.get(key) or []) != len(steps):
                raise FeatureError(key, f"holds {len(lists.get(key) or [])} steps for the {len(steps)} steps of "
                                        f"{self.key!r}: values and partitions are not aligned")
        return [rows.decode({self.key: step, **{key: lists[key][t] for key in keys}})
                for t, step in enumerate(steps)]


def _tensors(rows: Any, depth: int, string: bool) -> Any:
    """The innermost rows as tensors (strings stay lists of bytes)."""
    if depth == 0:
        return list(rows) if string else torch.from_numpy(np.array(rows))
    return [_tensors(r, depth - 1, string) for r in rows]
