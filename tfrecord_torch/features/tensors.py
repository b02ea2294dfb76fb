"""Serialized tensors: ``tf.io.serialize_tensor`` output (a TensorProto) as torch tensors, and back.

Teams store a whole tensor of any dtype and shape in one bytes feature with
``tf.io.serialize_tensor``; :func:`parse_tensor` is the counterpart of
``tf.io.parse_tensor``, :func:`serialize_tensor` of ``tf.io.serialize_tensor``,
and :class:`SerializedTensor` the feature spec that decodes such a feature
in a dataset::

    TFRecordDataset(paths, features={"t": SerializedTensor(dtype=torch.float32)})

Numbers come out as a tensor of the TensorProto's dtype and shape (float,
double, half, bfloat16, complex64/128, int8-64, uint8-64, bool, float8; the
quantized qint/quint types as their integer storage, int8 for qint8 and so
on). Strings come out as nested lists of bytes of the tensor's shape (a
scalar: bytes), as a string SparseFeature's dense value does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError, TensorDecodeError
from tfrecord_torch.example.tensorproto import (
    DTYPES,
    Decoded,
    DType,
    decode_tensor_proto,
    dtype_named,
    encode_tensor_proto,
)
from tfrecord_torch.features.specs import _REQUIRED, Feature, stacked_column

__all__ = ["SerializedTensor", "parse_tensor", "serialize_tensor", "tf_dtype", "to_torch"]

# torch dtype -> TF's dtype (the quantized types only by name: torch's own need a scale)
_FROM_TORCH = {getattr(torch, d.torch): d for d in sorted(DTYPES.values(), key=lambda d: d.enum, reverse=True)
               if d.torch and not d.name.startswith("q") and hasattr(torch, d.torch)}
_VALID = sorted({*(d.name for d in DTYPES.values()), "float32", "float64", "float16"})


def tf_dtype(dtype: Any, argument: str = "dtype") -> DType:
    """The TensorFlow dtype of ``dtype``: a torch dtype, a name as TF spells it
    ("float32" or "float", "string", "qint8"), or an object with such a
    ``name`` (``tf.float32``, a numpy dtype); ``bytes``/``str`` for strings.

    Raises:
        ValueError: none of those (names the argument and the valid names).
    """
    if isinstance(dtype, torch.dtype):
        found = _FROM_TORCH.get(dtype)
    elif dtype in (bytes, str):
        found = dtype_named("string")
    else:
        name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None)
        found = dtype_named(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{argument}={dtype!r} is not a dtype a serialized tensor holds; give a torch dtype "
                         f"(torch.float32), a TensorFlow dtype or one of the names {', '.join(_VALID)}")
    return found


def parse_tensor(payload: Any, dtype: Any = None) -> Any:
    """Decode a serialized TensorProto, as ``tf.io.parse_tensor`` does.

    Args:
        payload: the bytes ``tf.io.serialize_tensor`` (or :func:`serialize_tensor`) wrote.
        dtype: the dtype the payload must hold (a torch dtype, a TF dtype or
            name: see :func:`tf_dtype`); None takes whatever it holds.

    Returns:
        A tensor of the payload's dtype and shape (bfloat16 tensor [2, 3], bool
        tensor [], ...); for a string tensor, nested lists of bytes of its shape
        (bytes for a scalar).

    Raises:
        TensorDecodeError: the payload is not a TensorProto this library can
            give as a tensor, or holds another dtype than ``dtype``: "Type
            mismatch between parsed tensor (float) and dtype (int32)", as TF says.
        ValueError: ``dtype`` names no dtype.
    """
    want = None if dtype is None else tf_dtype(dtype)
    try:
        decoded = decode_tensor_proto(payload)
    except TensorDecodeError as e:
        raise TensorDecodeError(f"payload {e}") from e
    if want is not None and want.enum != decoded.dtype.enum:
        raise TensorDecodeError(f"Type mismatch between parsed tensor ({decoded.dtype.name}) and dtype "
                                f"({want.name})")
    return to_torch(decoded)


def to_torch(decoded: Decoded) -> Any:
    """A decoded TensorProto as a tensor (nested lists of bytes for strings)."""
    dtype, values = decoded.dtype, decoded.values
    if dtype.storage is None:
        return _nest(values, decoded.shape)
    target = getattr(torch, dtype.torch, None)
    if target is None:
        raise TensorDecodeError(f"holds a {dtype.name} tensor; this torch has no torch.{dtype.torch} (torch 2.3 "
                                f"added uint16, uint32 and uint64): upgrade torch to read it")
    # torch warns on read-only memory (np.ascontiguousarray would make a scalar 1-D)
    array = values if values.flags.writeable and values.flags.c_contiguous else values.copy()
    tensor = torch.from_numpy(array)
    return tensor.view(target) if tensor.dtype != target else tensor  # bfloat16, half, float8: their bits


def _nest(values: list, shape: tuple[int, ...]) -> Any:
    """A flat list (C order) as nested lists of ``shape``; a scalar's one value."""
    if not shape:
        return values[0]
    if len(shape) == 1:
        return list(values)
    step = math.prod(shape[1:])
    return [_nest(values[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def serialize_tensor(value: Any) -> bytes:
    """A serialized TensorProto of ``value``, as ``tf.io.serialize_tensor``
    writes it (TF's ``tf.io.parse_tensor`` reads it back).

    Args:
        value: a torch tensor or numpy array of any dtype
            :func:`parse_tensor` gives (numbers: tensor_content, little-endian),
            or bytes / str / nested lists of them, or a numpy array of
            bytes or str, for a string tensor (str encoded as UTF-8).

    Raises:
        TypeError: a value that is not a tensor, an array or strings (give a
            tensor so the dtype is explicit), or a dtype with no TF counterpart.
        ValueError: nested lists of strings that are not rectangular.
    """
    if isinstance(value, torch.Tensor):
        found = _FROM_TORCH.get(value.dtype)
        if found is None:
            raise TypeError(f"cannot serialize a tensor of dtype {value.dtype}: TensorFlow has no such dtype")
        tensor = value.detach().cpu().contiguous()
        if found.storage is not None and tensor.dtype.itemsize == found.storage.itemsize and \
                found.storage.kind == "u" and tensor.is_floating_point():
            tensor = tensor.view(getattr(torch, f"uint{8 * found.storage.itemsize}"))  # bfloat16, half, float8 bits
        array = tensor.numpy()
        return encode_tensor_proto(found, tuple(value.shape), array)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind in "SUO":
            return _strings(array)
        try:
            found = tf_dtype(array.dtype, "value")
        except ValueError:
            raise TypeError(f"cannot serialize an array of dtype {array.dtype}") from None
        if found.name == "half":
            array = array.view(np.uint16)
        return encode_tensor_proto(found, array.shape, array)
    if isinstance(value, (bytes, bytearray, memoryview, str, list, tuple)):
        return _strings(value)
    raise TypeError(f"cannot serialize a {type(value).__name__}; give a torch tensor (its dtype is kept), a "
                    f"numpy array, or bytes / str / nested lists of them for a string tensor")


def _strings(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value)
    try:
        array = np.array(value, dtype=object)
    except ValueError as e:
        raise ValueError(f"nested lists of strings must be rectangular: {e}") from None
    flat = array.reshape(-1).tolist()
    for bad in flat:
        if isinstance(bad, (bytes, str)):
            continue
        if isinstance(bad, (list, tuple)):  # numpy makes ragged lists an array of lists
            raise ValueError(f"nested lists of strings must be rectangular (all rows of one length), "
                             f"got {value!r:.80}")
        raise TypeError(f"a string tensor holds bytes or str, not {type(bad).__name__} ({bad!r:.50}); give "
                        f"numbers as a torch tensor so their dtype is explicit")
    data = [v.encode("utf-8") if isinstance(v, str) else v for v in flat]
    return encode_tensor_proto(DTYPES[7], array.shape, data)


class SerializedTensor(Feature):
    """A bytes feature holding ``tf.io.serialize_tensor`` output, as a tensor
    (what :func:`parse_tensor` gives).

    Args:
        key: the record's feature key (default: the output name).
        dtype: the dtype each record must hold (a torch dtype, a TF dtype or
            a name; "string" for strings), else a :class:`FeatureError`; None
            takes any.
        shape: the shape each record must have; ``None`` (or -1) in a
            dimension takes any size there; None takes any shape.
        default: value when the record lacks the key (default: required).

    In batch mode a feature with a numeric ``dtype`` and a fully known
    ``shape`` comes out as one tensor [B, ...]; otherwise as a list of B values.
    """

    kind = "bytes"

    def __init__(self, key: str | None = None, *, dtype: Any = None, shape: Any = None,
                 default: Any = _REQUIRED) -> None:
        if key is not None and not isinstance(key, str):
            raise TypeError(f"SerializedTensor's first argument is the feature key (a str), got {key!r}; "
                            f"give the dtype by name: SerializedTensor(dtype={key!r})")
        super().__init__(key, default=default)
        self.dtype = None if dtype is None else tf_dtype(dtype)
        if shape is None:
            self.shape = None
        else:
            try:
                self.shape = tuple(None if d is None or d == -1 else int(d) for d in shape)
            except (TypeError, ValueError):
                raise ValueError(f"shape must be a sequence of sizes (None or -1: any size), got {shape!r}") \
                    from None
            if any(d is not None and d < 0 for d in self.shape):
                raise ValueError(f"shape must hold sizes >= 0 (None or -1: any size), got {shape!r}")

    def convert(self, value: Any) -> Any:
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} values, expected 1 serialized tensor")
        try:
            decoded = decode_tensor_proto(value[0])
            if self.dtype is not None and decoded.dtype.enum != self.dtype.enum:
                raise TensorDecodeError(f"Type mismatch between parsed tensor ({decoded.dtype.name}) and dtype "
                                        f"({self.dtype.name})")
            self._check_shape(decoded.shape)
            return to_torch(decoded)
        except TensorDecodeError as e:
            raise FeatureError(self.key, str(e)) from e

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        if self.shape is None:
            return
        if len(shape) != len(self.shape) or any(w is not None and w != d for w, d in zip(self.shape, shape)):
            want = [-1 if d is None else d for d in self.shape]
            raise TensorDecodeError(f"holds a tensor of shape {list(shape)}, expected {want} (the spec's shape)")

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        if value is not None:
            return self.convert(value)
        return self.default.clone() if isinstance(self.default, torch.Tensor) else self.default

    def decode_column(self, column: Any, records: Callable[[], list[dict]]) -> Any:
        """A batch's values: of a known dtype and fixed shape, one tensor [B,
        *shape] made where the process makes its batches
        (:func:`~tfrecord_torch.features.collate.batch_memory`: in a DataLoader
        worker, a segment it uses again); else a list of B values."""
        values = [self.decode({self.key: v} if v is not None else {}) for v in column]
        if not self._stackable():
            return values
        return stacked_column(values, self.shape, ("SerializedTensor", self.key))

    def _stackable(self) -> bool:
        return self.dtype is not None and self.dtype.storage is not None and self.shape is not None and \
            None not in self.shape

    def __repr__(self) -> str:
        options = [repr(self.key)]
        if self.dtype is not None:
            options.append(f"dtype={self.dtype.name!r}")
        if self.shape is not None:
            options.append(f"shape={[-1 if d is None else d for d in self.shape]!r}")
        if self.default is not _REQUIRED:
            options.append(f"default={self.default!r}")
        return f"SerializedTensor({', '.join(options)})"

    encode = staticmethod(serialize_tensor)
