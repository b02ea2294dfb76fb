"""tf.train.Example and SequenceExample: encode and decode.

Decoded values are plain and exact: an int64 list becomes an int64 numpy
array, a float list a float32 array, a bytes list a list of bytes. A feature
with no kind set (TensorFlow writes these for empty values) decodes to ``[]``.
Keys come out sorted, whichever path decoded the record.

:func:`parse_example` first tries the compiled decoder (``_fastwire``, where
it was built), else the layouts learned from earlier records of the same
length (:mod:`tfrecord_torch.example.layouts`), then protobuf, which has the
last word on anything unusual.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Union

import numpy as np
from google.protobuf.message import DecodeError

from tfrecord_torch._types import Bytes
from tfrecord_torch.errors import ExampleDecodeError, FeatureError
from tfrecord_torch.example.layouts import _layouts, learn
from tfrecord_torch.example.protos import Example, SequenceExample

__all__ = ["PlannedKey", "has_feature_lists", "make_example", "make_sequence_example", "parse_example", "parse_record",
           "parse_sequence_example"]

Value = Union[np.ndarray, list]


def _fast_decoder():  # the compiled decoder, or None (not built, or a big-endian machine)
    if sys.byteorder != "little":
        return None
    try:
        # by name: grimp reads `from tfrecord_torch.example import _fastwire` as an import of the
        # package (it sees no .so), a cycle through the package's face
        return importlib.import_module("tfrecord_torch.example._fastwire")
    except ImportError:
        return None


_FAST = _fast_decoder()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_example(payload: Bytes) -> dict[str, Any]:
    """Decode a serialized tf.train.Example to its raw values.

    ``tfrecord_torch.parse_example(payload, features)`` takes a description too.

    Args:
        payload: the serialized Example.

    Returns:
        A dict from feature key (in sorted order) to its values: int64
        array [N], float32 array [N], or list of bytes.

    Raises:
        ExampleDecodeError: the payload is not a valid Example.
    """
    if not isinstance(payload, bytes):
        payload = bytes(payload)
    if _FAST is not None:
        fast = _FAST.parse_example(payload)
        if fast is not None:
            return fast
    for layout in _layouts.get(len(payload), ()):
        out = layout.decode(payload)
        if out is not None:
            return out
    out = parse_example_protobuf(payload)
    learn(payload)
    return out


def compiled_reader() -> bool:
    """Whether :func:`read_example` and :func:`read_item` can read (the compiled decoder is built)."""
    return _FAST is not None


def read_example(fd: int, offset: int, size: int, verify: bool) -> dict[str, Value] | None:
    """The framed record of ``size`` bytes at ``offset`` of the open file
    ``fd``, read and decoded in one compiled step (CRCs checked if ``verify``),
    as :func:`parse_example` decodes its payload; None where the compiled
    reader is not built or leaves the record to the caller (anything but a
    sound record of the common shape): read it the usual way then."""
    return _FAST.read_example(fd, offset, size, verify) if _FAST is not None else None


class PlannedKey(NamedTuple):
    """One key the compiled record reader (:func:`read_item`) decodes, and how.

    The layer above says which of its features the reader may decode whole
    (there, ``Feature.read_plan``); this layer says what it can decode: a
    packed int64 or float list of ``shape``'s element count, reshaped.
    """

    name: str | None  # the output name the array goes under
    key: bytes  # the record's key, UTF-8
    is_float: bool  # a float list (float32), else an int64 list
    shape: tuple[int, ...] | None  # the array's shape; None: 1-D, any length


def read_item(fd: int, index: np.ndarray, r: int, verify: bool, plan: tuple[PlannedKey, ...], wrap
              ) -> dict | None:
    """Record ``r`` of a shard (``index``: its int64 [n, 2] offsets and frame
    sizes) read as :func:`read_example` reads it, with only the keys of
    ``plan`` decoded, each
    array passed through ``wrap`` (``torch.from_numpy``); None wherever the
    usual path must decide (a missing key, another kind or size, a record
    :func:`read_example` leaves to the caller). Where the compiled decoder is
    built this name is its function, called with no Python frame between;
    this form, without it, leaves every record to the usual path."""
    return None


if _FAST is not None:
    read_item = _FAST.read_item  # noqa: F811


def parse_example_protobuf(payload) -> dict[str, Value]:
    """:func:`parse_example` by protobuf alone (no layout cache): the fallback,
    and the oracle the tests compare the fast path with."""
    message = _decode(Example, payload)
    return features_to_dict(message.features)


def parse_sequence_example(payload: Bytes, joined: frozenset[str] | None = None
                           ) -> tuple[dict[str, Value], dict[str, Any]]:
    """Decode a serialized tf.train.SequenceExample.

    Args:
        payload: the serialized message.
        joined: keys whose feature lists may come back joined: where every
            step holds exactly one bytes value and all have one length n (and
            one encoding), a :class:`JoinedSteps`, where the values lie in the
            payload, instead of a bytes object per step (the compiled decoder
            only; other lists of these keys, and every list without it, stay lists).

    Returns:
        ``(context, feature_lists)``: the context features as
        :func:`parse_example` gives them, and for each feature list the list of
        its steps' values (or, for a key in ``joined``, a :class:`JoinedSteps`).
    """
    if not isinstance(payload, bytes):
        payload = bytes(payload)
    if _FAST is not None:
        if not joined:
            fast = _FAST.parse_sequence_example(payload)
            if fast is not None:
                return fast
        else:
            fast = _FAST.parse_sequence_example(payload, joined)
            if fast is not None:
                lists = fast[1]
                for key in joined & lists.keys():
                    if type(lists[key]) is tuple:
                        lists[key] = JoinedSteps(payload, *lists[key])
                return fast
    return parse_sequence_example_protobuf(payload)


class JoinedSteps(NamedTuple):
    """A feature list of ``steps`` steps, each one bytes value of ``size``
    bytes, as they lie in ``payload``: value t at ``start + t * stride``."""

    payload: bytes
    start: int
    stride: int
    steps: int
    size: int

    def view(self) -> np.ndarray:
        """The values as a read-only uint8 array [steps, size] over the payload (no copy)."""
        if not (0 <= self.start and 0 <= self.size <= self.stride and self.steps >= 1 and
                self.start + (self.steps - 1) * self.stride + self.size <= len(self.payload)):
            raise ValueError(f"{self} lies outside its payload of {len(self.payload)} bytes")
        flat = np.frombuffer(self.payload, np.uint8)
        return np.lib.stride_tricks.as_strided(flat[self.start:], (self.steps, self.size), (self.stride, 1),
                                               writeable=False)


def parse_sequence_example_protobuf(payload) -> tuple[dict[str, Value], dict[str, list[Value]]]:
    """:func:`parse_sequence_example` by protobuf alone: the fallback, and the tests' oracle."""
    message = _decode(SequenceExample, payload)
    lists = {key: [feature_value(f) for f in flist.feature]
             for key, flist in sorted(message.feature_lists.feature_list.items())}
    return features_to_dict(message.context), lists


def has_feature_lists(payload: Bytes) -> bool:
    """True if a serialized message holds a SequenceExample's ``feature_lists``
    (field 2); a tf.train.Example has only field 1, which a SequenceExample
    uses for its context. Only the top-level tags are read; a malformed
    message gives False (the parser then names what is wrong)."""
    view = payload if isinstance(payload, bytes) else bytes(payload)
    pos, end = 0, len(view)
    while pos < end:
        tag, pos = _varint(view, pos, end)
        if tag < 0:
            return False
        wire = tag & 7
        if wire == 2:
            if tag >> 3 == 2:
                return True
            size, pos = _varint(view, pos, end)
            if size < 0:
                return False
            pos += size
        elif wire == 0:
            _, pos = _varint(view, pos, end)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            return False
    return False


def _varint(data, pos: int, end: int) -> tuple[int, int]:
    """(value, next position); (-1, end) for a varint cut off or over 10 bytes."""
    value = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return -1, end


def parse_record(payload: Bytes) -> dict[str, Value | list[Value]]:
    """A record as one dict, whichever message it holds: for a
    tf.train.Example what :func:`parse_example` gives; for a
    tf.train.SequenceExample with feature lists, its context features (as
    :func:`parse_example` gives them) and its feature lists (each the list of
    its steps' values, as :func:`parse_sequence_example` gives it) side by side.

    Raises:
        ExampleDecodeError: the payload is neither message.
        FeatureError: a key is both a context feature and a feature list (the
            dict cannot hold both; read with ``sequence_features=``).
    """
    if not isinstance(payload, bytes):
        payload = bytes(payload)
    if _FAST is not None:  # a dict only for a plain Example (an unknown field, as feature lists are, gives None)
        fast = _FAST.parse_example(payload)
        if fast is not None:
            return fast
    if not has_feature_lists(payload):
        return parse_example(payload)
    context, lists = parse_sequence_example(payload)
    both = sorted(set(context) & set(lists))
    if both:
        raise FeatureError(both[0], f"is both a context feature and a feature list of this SequenceExample, "
                                    f"which one dict cannot hold: read it with features=<context spec> and "
                                    f"sequence_features=<feature list spec> (key= names one apart, e.g. "
                                    f"{{{both[0] + '_steps'!r}: Int64(key={both[0]!r})}}), or with "
                                    "parse_sequence_example")
    merged: dict[str, Value | list[Value]] = dict(context)
    merged.update(lists)
    return merged


def make_example(mapping: Mapping[str, Any]) -> bytes:
    """Encode a mapping as a serialized tf.train.Example.

    Values may be Python ints, floats, bools, bytes or str, lists or tuples of
    one of those kinds, numpy arrays or scalars, or torch tensors. Integers and
    bools become an int64 list, floats a float list (stored as float32), bytes
    and str (UTF-8) a bytes list. Arrays are flattened in C order; store their
    shape as another feature if it matters. Map keys are written sorted, so the
    same mapping always gives the same bytes.

    Raises:
        TypeError, ValueError: a value cannot be encoded; the message names its key.
    """
    message = Example()
    fill_features(message.features, mapping)
    return message.SerializeToString(deterministic=True)


def make_sequence_example(context: Mapping[str, Any] | None = None,
                          feature_lists: Mapping[str, Sequence[Any]] | None = None) -> bytes:
    """Encode a tf.train.SequenceExample.

    Args:
        context: features of the whole sequence, as for :func:`make_example`.
        feature_lists: for each key, a sequence of steps; each step is a value
            as for :func:`make_example` (a 2-D array gives one step per row).
    """
    message = SequenceExample()
    fill_features(message.context, context or {})
    for key, steps in (feature_lists or {}).items():
        _check_key(key)
        flist = message.feature_lists.feature_list[key]
        for step in steps:
            fill_feature(flist.feature.add(), key, step)
        if len(flist.feature) == 0:
            flist.SetInParent()
    return message.SerializeToString(deterministic=True)


def _decode(cls, payload):
    try:
        return cls.FromString(payload if isinstance(payload, bytes) else bytes(payload))
    except DecodeError as e:
        raise ExampleDecodeError(f"not a valid {cls.__name__}: {e}") from e


def features_to_dict(features) -> dict[str, Value]:
    """A Features message as a dict of numpy arrays / lists of bytes, keys sorted."""
    return {key: feature_value(f) for key, f in sorted(features.feature.items())}


def feature_value(feature) -> Value:
    """The values of one Feature message."""
    kind = feature.WhichOneof("kind")
    if kind == "int64_list":
        values = feature.int64_list.value
        return np.fromiter(values, np.int64, len(values))
    if kind == "float_list":
        values = feature.float_list.value
        return np.fromiter(values, np.float32, len(values))
    if kind == "bytes_list":
        return list(feature.bytes_list.value)
    return []


def fill_features(features, mapping: Mapping[str, Any]) -> None:
    """Set the entries of a Features message from a mapping."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"features must be a mapping of str to values, got {type(mapping).__name__}")
    for key, value in mapping.items():
        _check_key(key)
        fill_feature(features.feature[key], key, value)


def _check_key(key) -> None:
    if not isinstance(key, str):
        raise TypeError(f"feature keys must be str, got {key!r}")


def fill_feature(feature, key: str, value) -> None:
    """Set one Feature message from a Python / numpy / torch value."""
    kind, values = _classify(key, value)
    if kind == "int64":
        feature.int64_list.value.extend(values)
    elif kind == "float":
        feature.float_list.value.extend(values)
    else:
        feature.bytes_list.value.extend(values)


def _classify(key: str, value) -> tuple[str, list]:
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return _classify_array(key, np.asarray(value))
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        value = [value]
    elif isinstance(value, (bool, int, float)):
        value = [value]
    elif not isinstance(value, (list, tuple)):
        raise TypeError(f"feature {key!r}: cannot encode a value of type {type(value).__name__}; "
                        "use int, float, bytes, str, a list of one of those, a numpy array or a tensor")
    if not value:
        raise ValueError(f"feature {key!r}: an empty list has no kind; "
                         "pass an empty numpy array with a dtype (e.g. np.zeros(0, np.int64))")
    if all(isinstance(v, (bool, int, np.integer, np.bool_)) for v in value):
        return "int64", _checked_ints(key, [int(v) for v in value])
    if all(isinstance(v, (bool, int, float, np.integer, np.floating, np.bool_)) for v in value):
        try:
            return "float", [float(v) for v in value]
        except OverflowError as e:
            raise ValueError(f"feature {key!r}: {e}") from None
    if all(isinstance(v, (bytes, bytearray, memoryview, str)) for v in value):
        return "bytes", [_to_bytes(v) for v in value]
    kinds = sorted({type(v).__name__ for v in value})
    raise TypeError(f"feature {key!r}: a list must hold numbers or bytes/str, not a mix of {kinds}")


def _classify_array(key: str, array: np.ndarray) -> tuple[str, list]:
    flat = array.reshape(-1)
    if array.dtype.kind in "biu":
        if array.dtype.kind == "u" and flat.size and flat.max() > _INT64_MAX:
            raise ValueError(f"feature {key!r}: value {flat.max()} does not fit in int64")
        return "int64", flat.astype(np.int64).tolist()
    if array.dtype.kind == "f":
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, as in TensorFlow
            return "float", flat.astype(np.float32).tolist()
    if array.dtype.kind in "SUO":
        items = flat.tolist()
        if all(isinstance(v, (bytes, str)) for v in items):
            return "bytes", [_to_bytes(v) for v in items]
    raise TypeError(f"feature {key!r}: cannot encode an array of dtype {array.dtype}")


def _checked_ints(key: str, values: list[int]) -> list[int]:
    for v in values:
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"feature {key!r}: value {v} does not fit in int64")
    return values


def _to_bytes(v) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)
