"""TensorFlow feature descriptions, as written by a TF team, read without TensorFlow.

``features=`` accepts a ``feature_description`` dict as given to
``tf.io.parse_single_example`` (and ``sequence_features=`` the sequence dict of
``tf.io.parse_single_sequence_example``): ``tf.io.FixedLenFeature``,
``VarLenFeature``, ``FixedLenSequenceFeature``, ``RaggedFeature`` (with its
partitions) and ``SparseFeature`` objects are recognised by their class
name and fields, so TensorFlow is never imported. The classes here are the
same, spelled for teams without TF (``tfspec.FixedLenFeature([], "int64")``).
Values equal TF's: defaults applied, shapes checked; VarLen and Ragged give
1-D tensors (lists of bytes for strings), which ``pad_collate`` pads; a
partitioned Ragged gives nested rows (:mod:`.ragged`), a SparseFeature a
dense tensor of its ``size``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.ragged import RaggedRows, StepRows
from tfrecord_torch.features.specs import _REQUIRED, Bytes, Feature, Float, Int64

__all__ = ["FixedLenFeature", "FixedLenSequenceFeature", "RaggedFeature", "SparseFeature", "VarLenFeature",
           "convert", "is_description"]


class FixedLenFeature(NamedTuple):
    """As ``tf.io.FixedLenFeature``: ``dtype`` "int64", "float32" or "string"."""

    shape: Any
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """As ``tf.io.VarLenFeature``: any number of values, a 1-D tensor."""

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """As ``tf.io.FixedLenSequenceFeature``: steps of ``shape`` (a feature list, or in an Example a flat list)."""

    shape: Any
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


class RaggedFeature(NamedTuple):
    """As ``tf.io.RaggedFeature``: a 1-D tensor of ``value_key``'s values, or
    with ``partitions`` (``RaggedFeature.RowLengths("lens")``, ...) nested rows
    (:mod:`tfrecord_torch.features.ragged`)."""

    dtype: Any
    value_key: str | None = None
    partitions: tuple = ()
    row_splits_dtype: Any = "int32"
    validate: bool = False


class RowSplits(NamedTuple):
    key: str


class RowLengths(NamedTuple):
    key: str


class RowStarts(NamedTuple):
    key: str


class RowLimits(NamedTuple):
    key: str


class ValueRowIds(NamedTuple):
    key: str


class UniformRowLength(NamedTuple):
    length: int


for _kind in (RowSplits, RowLengths, RowStarts, RowLimits, ValueRowIds, UniformRowLength):
    setattr(RaggedFeature, _kind.__name__, _kind)  # spelled as TF: RaggedFeature.RowLengths("lens")


class SparseFeature(NamedTuple):
    """As ``tf.io.SparseFeature``: a dense tensor of shape ``size`` with
    ``value_key``'s values at the positions ``index_key`` gives (a key, or one
    key per dimension), zeros elsewhere (TF gives a SparseTensor)."""

    index_key: Any
    value_key: str
    dtype: Any
    size: Any
    already_sorted: bool = False


_KINDS = {"FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature", "RaggedFeature", "SparseFeature"}


def is_description(value: Any) -> bool:
    """True for a TF (or this module's) feature description object."""
    return type(value).__name__ in _KINDS and hasattr(value, "dtype")


def _dtype(name: str, dtype: Any) -> str:
    text = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    text = {"tf.int64": "int64", "tf.float32": "float32", "tf.string": "string", "float": "float32",
            "bytes": "string", "str": "string", "object": "string"}.get(text, text)
    if text not in ("int64", "float32", "string"):
        raise ValueError(f"features[{name!r}]: dtype {dtype!r} is not one of int64, float32, string "
                         "(the kinds a tf.train.Example holds)")
    return text


def _shape(name: str, shape: Any) -> tuple:
    if shape is None:  # TF refuses it too (a scalar is shape [])
        raise ValueError(f"Missing shape for feature {name!r}: give [] for one value, [n, ...] otherwise")
    if isinstance(shape, (int, np.integer)):  # TF reads FixedLenFeature(2, ...) as [2]
        shape = [shape]
    try:
        dims = tuple(int(d) for d in (getattr(shape, "as_list", lambda: shape)() or ()))
    except (TypeError, ValueError):
        raise ValueError(f"features[{name!r}]: shape {shape!r} must be a list of ints") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"features[{name!r}]: shape {shape!r} must be fully defined")
    return dims


def _step_shape(name: str, shape: Any) -> tuple:
    dims = _shape(name, shape)
    if 0 in dims:  # no step would hold a value: TF refuses it
        raise ValueError(f"step shape {dims} of a FixedLenSequenceFeature: dimensions must be positive")
    return dims


def _default(name: str, value: Any) -> Any:
    if value is None:
        return _REQUIRED
    return value.numpy() if hasattr(value, "numpy") else value


def _partition(p: Any) -> tuple[str, Any]:
    """(kind, key or length) of a TF RaggedFeature partition (duck-typed, as TF's own)."""
    kind = type(p).__name__
    return (kind, p.length) if kind == "UniformRowLength" else (kind, p.key)


def _numeric(dtype: str):
    return Int64 if dtype == "int64" else Float


def convert(description: dict, *, sequence: bool = False) -> dict:
    """A spec of this package's features from a TF ``feature_description``.

    Args:
        description: name -> TF feature object (or one of this module's).
        sequence: the dict is the sequence part of a SequenceExample description.

    Raises:
        ValueError: an unknown or unsupported description, a bad dtype, shape or
            default (named).
    """
    out: dict = {}
    for name, desc in description.items():
        if isinstance(desc, Feature):
            out[name] = desc
            continue
        if not is_description(desc):
            raise ValueError(f"features[{name!r}] must be a Feature or a TF feature description, got {desc!r:.100}")
        kind = type(desc).__name__
        dtype = _dtype(name, desc.dtype)
        try:
            out[name] = _one(name, kind, desc, dtype, sequence)
        except ValueError as e:
            raise ValueError(f"features[{name!r}] ({kind}): {e}") from None
    return out


def _one(name: str, kind: str, desc: Any, dtype: str, sequence: bool) -> Feature:
    if sequence:
        if kind in ("VarLenFeature", "RaggedFeature"):  # one row per step (nested by its partitions)
            partitions = tuple(_partition(p) for p in getattr(desc, "partitions", ()))
            return StepRows(getattr(desc, "value_key", None) or name, dtype=dtype, partitions=partitions)
        if kind != "FixedLenSequenceFeature":
            raise ValueError("sequence features must be FixedLenSequenceFeature, VarLenFeature or RaggedFeature "
                             "(as in TF)")
        shape = _step_shape(name, desc.shape)
        default = None if desc.allow_missing else _REQUIRED
        if dtype == "string":
            if not shape:
                return Bytes(name, default=default)
            steps = FixedBytes(name, shape=shape)  # each step a list of prod(shape) bytes
            steps.default = default  # in a sequence spec it only marks the list optional (empty if missing)
            return steps
        return _numeric(dtype)(name, shape=shape, default=default)
    if kind == "FixedLenFeature":
        shape = _shape(name, desc.shape)
        default = _default(name, desc.default_value)
        if dtype == "string":
            return FixedBytes(name, shape=shape, default=default)
        return _numeric(dtype)(name, shape=shape, default=default)
    if kind in ("VarLenFeature", "RaggedFeature"):
        key = getattr(desc, "value_key", None) or name
        if getattr(desc, "partitions", ()):
            return RaggedRows(key, dtype=dtype, partitions=tuple(_partition(p) for p in desc.partitions))
        if dtype == "string":
            return Bytes(key, many=True, default=[])
        return _numeric(dtype)(key, shape=None, default=np.zeros(0, np.int64 if dtype == "int64" else np.float32))
    if kind == "FixedLenSequenceFeature":  # in an Example: a flat list of steps
        if not desc.allow_missing:
            raise ValueError("in features= (an Example) TF requires allow_missing=True")
        shape = _step_shape(name, desc.shape)
        if desc.default_value is not None and np.size(desc.default_value) not in (1, math.prod(shape)):
            # TF pads batches with it, so it must fill one step; it refuses any other
            raise ValueError(f"default_value {desc.default_value!r} does not fill a step of shape {shape}")
        if dtype == "string":
            return ByteSteps(name, step_shape=shape) if shape else Bytes(name, many=True, default=[])
        return Steps(name, step_shape=shape, dtype=dtype)
    index_keys = (desc.index_key,) if isinstance(desc.index_key, str) else tuple(desc.index_key)
    size = (int(desc.size),) if isinstance(desc.size, int) else _shape(name, desc.size)
    if len(index_keys) != len(size) or not index_keys:
        raise ValueError(f"feature {name!r}: SparseFeature has {len(index_keys)} index keys for a "
                         f"{len(size)}-D size {tuple(size)}")
    return Sparse(name, index_key=index_keys, value_key=desc.value_key, dtype=dtype, size=size)


class FixedBytes(Bytes):
    """A string FixedLenFeature: bytes for shape [], a list of prod(shape) bytes otherwise."""

    def __init__(self, key: str | None = None, *, shape: tuple = (), default: Any = _REQUIRED) -> None:
        super().__init__(key, many=bool(shape), default=default)
        self.shape = tuple(shape)
        if default is not _REQUIRED:
            # nested lists and arrays (np.array(..., bytes), as TF takes them) count by their elements
            values = np.asarray(default, dtype=object).reshape(-1).tolist() \
                if isinstance(default, (list, tuple, np.ndarray)) else [default]
            if shape and len(values) == 1:
                values = list(values) * math.prod(shape)
            if len(values) != max(math.prod(shape), 1) or not all(isinstance(v, (bytes, str)) for v in values):
                raise ValueError(f"default {default!r} does not give {math.prod(shape)} string values")
            values = [v.encode() if isinstance(v, str) else v for v in values]
            self.default = values if shape else values[0]

    def convert(self, value: Any) -> Any:
        want = math.prod(self.shape)
        if len(value) != want:
            raise FeatureError(self.key, f"holds {len(value)} values, expected {want} (shape {self.shape})")
        return list(value) if self.shape else value[0]


class Steps(Feature):
    """An Example's FixedLenSequenceFeature: a flat list as [N, *step_shape] (N may be 0)."""

    def __init__(self, key: str | None = None, *, step_shape: tuple = (), dtype: str = "int64") -> None:
        super().__init__(key, default=None)
        self.step_shape, self.kind = tuple(step_shape), "int64" if dtype == "int64" else "float"
        self.dtype = np.dtype(np.int64 if dtype == "int64" else np.float32)

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        array = np.zeros(0, self.dtype) if value is None or not len(value) else np.asarray(value, self.dtype)
        size = math.prod(self.step_shape)
        if array.size % size:
            raise FeatureError(self.key, f"holds {array.size} values, not a whole number of steps of "
                                         f"shape {self.step_shape}")
        return torch.from_numpy(array.reshape((-1, *self.step_shape)).copy())


class ByteSteps(Bytes):
    """An Example's string FixedLenSequenceFeature with a step shape: a list of
    N steps, each a list of prod(step_shape) bytes (TF's [N, *step_shape])."""

    def __init__(self, key: str | None = None, *, step_shape: tuple) -> None:
        super().__init__(key, many=True, default=[])
        self.step_shape = tuple(step_shape)

    def convert(self, value: Any) -> Any:
        size = math.prod(self.step_shape)
        if len(value) % size:
            raise FeatureError(self.key, f"holds {len(value)} values, not a whole number of steps of "
                                         f"shape {self.step_shape}")
        return [list(value[i:i + size]) for i in range(0, len(value), size)]


class Sparse(Feature):
    """A SparseFeature (any number of dimensions) as a dense tensor of shape
    ``size``: ``value_key``'s values at the positions the ``index_key`` lists
    give (one list per dimension), zeros elsewhere -- what
    ``tf.sparse.to_dense`` gives of TF's SparseTensor. A string one gives
    nested lists of bytes of that shape, ``b""`` elsewhere. A position given
    twice keeps its last value."""

    def __init__(self, key: str | None = None, *, index_key: str | Sequence[str], value_key: str, dtype: str,
                 size: int | Sequence[int]) -> None:
        super().__init__(key, default=None)
        self.index_keys = (index_key,) if isinstance(index_key, str) else tuple(index_key)
        self.size = (int(size),) if isinstance(size, int) else tuple(int(n) for n in size)
        if len(self.index_keys) != len(self.size) or not self.size:
            raise ValueError(f"{len(self.index_keys)} index keys for a {len(self.size)}-D size {self.size}")
        self.index_key, self.value_key = self.index_keys[0], value_key
        self.string = dtype == "string"
        self.dtype = np.dtype(object if self.string else np.int64 if dtype == "int64" else np.float32)

    def decode(self, record: dict) -> Any:
        values = record.get(self.value_key, [])
        if isinstance(values, np.ndarray) == self.string and len(values):
            raise FeatureError(self.value_key, f"holds {'numbers' if self.string else 'bytes'}, expected "
                                               f"{'bytes' if self.string else self.dtype}")
        if isinstance(values, np.ndarray) and values.dtype != self.dtype and len(values):
            raise FeatureError(self.value_key, f"holds {values.dtype} values, expected {self.dtype}")
        values = np.array(values, self.dtype) if len(values) else np.zeros(0, self.dtype)
        positions = []
        for key, n in zip(self.index_keys, self.size):
            index = record.get(key, [])
            if isinstance(index, list) and not index:  # missing, or an empty Feature()
                index = np.zeros(0, np.int64)
            if not isinstance(index, np.ndarray) or (len(index) and index.dtype != np.int64):
                raise FeatureError(key, "SparseFeature indices must be int64 values")
            if len(index) != len(values):
                raise FeatureError(self.value_key, f"holds {len(values)} values for {len(index)} indices ({key!r})")
            bad = np.flatnonzero((index < 0) | (index >= n))
            if bad.size:
                raise FeatureError(key, f"index {int(index[bad[0]])} is out of range for size {n}")
            positions.append(index)
        dense = np.full(self.size, b"", object) if self.string else np.zeros(self.size, self.dtype)
        dense[tuple(positions)] = values
        return dense.tolist() if self.string else torch.from_numpy(dense)
