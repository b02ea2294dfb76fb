"""tf.TensorProto (what ``tf.io.serialize_tensor`` writes): decode and encode, without torch.

A TensorProto holds a dtype, a shape and the values, either as
``tensor_content`` (the elements' little-endian bytes, what TensorFlow's
``serialize_tensor`` writes for every numeric dtype) or in the dtype's
repeated field (``float_val``, ``int_val``, ...; ``tf.make_tensor_proto``
writes these, and ``string_val`` holds strings). Read from a repeated field,
fewer values than elements repeat the last one, no values give zeros (or
``b""``), and values past the element count are ignored, as TensorFlow's
``Tensor::FromProto`` reads them.

Values come out as numpy arrays of the dtype's storage (bfloat16 and float8
as their bit patterns, uint16 and uint8, which the torch layer views as the
float type) or, for strings, a list of bytes in C order. Everything TF's
parser refuses is refused here with a :class:`TensorDecodeError`; so are a
few things it accepts that cannot be meant (an integer field value outside
its dtype's range, which TF truncates; an unknown rank, which TF reads as a
scalar).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from google.protobuf.message import DecodeError

from tfrecord_torch.errors import TensorDecodeError
from tfrecord_torch.example.protos import TensorProto

__all__ = ["DTYPES", "MAX_TENSOR_BYTES", "DType", "Decoded", "decode_tensor_proto", "dtype_named",
           "encode_tensor_proto", "looks_like_tensorproto"]

MAX_TENSOR_BYTES = 1 << 31  # a repeated field's last value fills at most this much (a 20-byte record may ask for TBs)
_MAX_DIMS = 254  # TensorShape::MaxDimensions()
_STRING_REF = 8  # what one more list entry costs, for MAX_TENSOR_BYTES


class DType(NamedTuple):
    """One TensorFlow dtype: ``name`` as TensorFlow prints it (DataTypeString:
    "float", "half", "qint8"), its enum number, the numpy storage of one
    element (None for strings), the repeated field that may hold its values
    and the torch dtype attribute it decodes to."""

    name: str
    enum: int
    storage: np.dtype | None
    field: str
    torch: str


def _d(name: str, enum: int, storage: str | None, field: str, torch: str) -> DType:
    return DType(name, enum, None if storage is None else np.dtype(storage), field, torch)


DTYPES: dict[int, DType] = {d.enum: d for d in [
    _d("float", 1, "<f4", "float_val", "float32"),
    _d("double", 2, "<f8", "double_val", "float64"),
    _d("int32", 3, "<i4", "int_val", "int32"),
    _d("uint8", 4, "u1", "int_val", "uint8"),
    _d("int16", 5, "<i2", "int_val", "int16"),
    _d("int8", 6, "i1", "int_val", "int8"),
    _d("string", 7, None, "string_val", ""),
    _d("complex64", 8, "<c8", "scomplex_val", "complex64"),
    _d("int64", 9, "<i8", "int64_val", "int64"),
    _d("bool", 10, "?", "bool_val", "bool"),
    # quantized integers: their storage only (a TensorProto carries no scale or zero point)
    _d("qint8", 11, "i1", "int_val", "int8"),
    _d("quint8", 12, "u1", "int_val", "uint8"),
    _d("qint32", 13, "<i4", "int_val", "int32"),
    _d("bfloat16", 14, "<u2", "half_val", "bfloat16"),
    _d("qint16", 15, "<i2", "int_val", "int16"),
    _d("quint16", 16, "<u2", "int_val", "uint16"),
    _d("uint16", 17, "<u2", "int_val", "uint16"),
    _d("complex128", 18, "<c16", "dcomplex_val", "complex128"),
    _d("half", 19, "<u2", "half_val", "float16"),
    _d("uint32", 22, "<u4", "uint32_val", "uint32"),
    _d("uint64", 23, "<u8", "uint64_val", "uint64"),
    _d("float8_e5m2", 24, "u1", "float8_val", "float8_e5m2"),
    _d("float8_e4m3fn", 25, "u1", "float8_val", "float8_e4m3fn"),
    _d("float8_e4m3fnuz", 26, "u1", "float8_val", "float8_e4m3fnuz"),
    _d("float8_e5m2fnuz", 28, "u1", "float8_val", "float8_e5m2fnuz"),
]}
_BY_NAME = {d.name: d for d in DTYPES.values()}
# TF's dtypes with no tensor of their own here (handles, variants, sub-byte types)
_OTHER = {0: "invalid", 20: "resource", 21: "variant", 27: "float8_e4m3b11fnuz", 29: "int4", 30: "uint4",
          31: "int2", 32: "uint2", 33: "float4_e2m1fn"}
# spellings of TF's Python API (tf.float32.name) and numpy for DataTypeString's names
_ALIASES = {"float32": "float", "float64": "double", "float16": "half", "bytes": "string", "str": "string",
            "object": "string", "bool_": "bool"}


class Decoded(NamedTuple):
    """A decoded TensorProto: its dtype, its shape, and its values (a numpy
    array of ``dtype.storage`` and that shape, or for strings a flat list of
    bytes in C order)."""

    dtype: DType
    shape: tuple[int, ...]
    values: Any


def dtype_named(name: str) -> DType | None:
    """The dtype TensorFlow calls ``name`` ("float" or "float32", "string", "qint8"), or None."""
    return _BY_NAME.get(_ALIASES.get(name, name))


def decode_tensor_proto(payload: Any) -> Decoded:
    """Decode a serialized TensorProto as ``tf.io.parse_tensor`` reads it.

    Raises:
        TensorDecodeError: not a TensorProto; a dtype with no tensor here; an
            unknown rank or a negative dimension; ``tensor_content`` of the
            wrong size; a value outside its dtype's range; a repeated field
            that would fill more than :data:`MAX_TENSOR_BYTES`.
    """
    message = _parse(payload)
    dtype = DTYPES.get(message.dtype)
    if dtype is None:
        name = _OTHER.get(message.dtype, f"enum value {message.dtype}")
        raise TensorDecodeError(f"holds a TensorProto of dtype {name}, which has no tensor here (the numeric "
                                f"dtypes, bool and string have)")
    shape = _shape(message)
    n = math.prod(shape)
    if dtype.storage is None:
        return Decoded(dtype, shape, _strings(message, n))
    if n == 0:
        try:
            return Decoded(dtype, shape, np.zeros(shape, dtype.storage.newbyteorder("=")))
        except ValueError as e:  # numpy counts the nonzero dimensions' bytes, even of an empty array
            raise TensorDecodeError(f"holds an empty TensorProto of shape {list(shape)}, which no array can "
                                    f"have: {e}") from e
    content = message.tensor_content
    if content:
        want = n * dtype.storage.itemsize
        if len(content) != want:
            raise TensorDecodeError(f"holds tensor_content of {len(content)} bytes; {n} {dtype.name} values of "
                                    f"shape {list(shape)} take {want}")
        array = np.frombuffer(content, dtype.storage)
    else:
        array = _repeated(message, dtype, n)
    return Decoded(dtype, shape, array.astype(dtype.storage.newbyteorder("="), copy=False).reshape(shape))


def _parse(payload: Any):
    try:
        return TensorProto.FromString(payload if isinstance(payload, bytes) else bytes(payload))
    except (DecodeError, TypeError) as e:
        raise TensorDecodeError(f"is not a serialized TensorProto (tf.io.serialize_tensor's output): {e}") from e


def _shape(message) -> tuple[int, ...]:
    proto = message.tensor_shape
    if proto.unknown_rank:
        raise TensorDecodeError("holds a TensorProto of unknown rank; a serialized tensor needs a full shape")
    dims = tuple(int(d.size) for d in proto.dim)
    if len(dims) > _MAX_DIMS:
        raise TensorDecodeError(f"holds a TensorProto of rank {len(dims)}; TensorFlow allows {_MAX_DIMS} at most")
    if any(d < 0 for d in dims):
        raise TensorDecodeError(f"holds a TensorProto of shape {list(dims)}: a dimension is unknown (negative); "
                                f"a serialized tensor needs a full shape")
    lists = 1  # the lists nesting a string tensor, up to its first 0 dimension (each costs a list object)
    for d in dims[:-1]:
        if not d:
            break
        lists *= d
        if message.dtype == 7 and lists * _STRING_REF > MAX_TENSOR_BYTES:
            raise TensorDecodeError(f"holds a string TensorProto of shape {list(dims)}, whose nested lists take "
                                    f"more than MAX_TENSOR_BYTES ({MAX_TENSOR_BYTES})")
    count = 1
    for d in dims:  # a running product, as TF checks it: an overflow before a 0 dimension is refused too
        count *= d
        if count >= 1 << 63:
            raise TensorDecodeError(f"holds a TensorProto of shape {list(dims)}, more elements than an int64 "
                                    f"counts")
    return dims


def _check_fill(dtype: DType, n: int, have: int, itemsize: int) -> None:
    if have < n and n * itemsize > MAX_TENSOR_BYTES:
        raise TensorDecodeError(f"holds {have} {dtype.name} values to fill {n} elements ({n * itemsize} bytes), "
                                f"more than MAX_TENSOR_BYTES ({MAX_TENSOR_BYTES})")


def _fill(values: np.ndarray, n: int) -> np.ndarray:
    """TF's rule for a repeated field: the first ``n`` values, the last one
    repeated when there are fewer, zeros when there are none."""
    if len(values) >= n:
        return values[:n]
    if not len(values):
        return np.zeros(n, values.dtype)
    return np.concatenate([values, np.full(n - len(values), values[-1], values.dtype)])


def _repeated(message, dtype: DType, n: int) -> np.ndarray:
    values = _typed_values(message, dtype)
    assert dtype.storage is not None
    _check_fill(dtype, n, len(values), dtype.storage.itemsize)
    return _fill(values, n)


def _typed_values(message, dtype: DType) -> np.ndarray:
    """The values of the dtype's repeated field, as its storage (range-checked)."""
    storage = dtype.storage
    assert storage is not None
    field = dtype.field
    if field in ("scomplex_val", "dcomplex_val"):  # (real, imaginary) pairs; an odd last one is no element
        parts = np.array(getattr(message, field), "<f4" if field == "scomplex_val" else "<f8")
        return parts[:len(parts) // 2 * 2].view(storage)
    if field == "float8_val":
        return np.frombuffer(message.float8_val, storage)
    if field in ("float_val", "double_val", "bool_val"):
        return np.array(getattr(message, field), storage)
    # integer fields, and bit patterns in half_val
    wide = np.array(getattr(message, field), np.uint64 if field == "uint64_val" else np.int64)
    info = np.iinfo(storage)
    bad = np.flatnonzero((wide < info.min) | (wide > info.max))
    if len(bad):
        what = "bit pattern" if field == "half_val" else "value"
        raise TensorDecodeError(f"holds {field} {what} {int(wide[bad[0]])}, outside {dtype.name}'s range "
                                f"[{info.min}, {info.max}]")
    return wide.astype(storage)


def _strings(message, n: int) -> list[bytes]:
    if n == 0:
        return []  # (the empty lists that nest it are counted by _shape)
    if message.tensor_content:  # TF's string encoding: n varint lengths, then the bytes (DecodeStringList)
        return _string_list(message.tensor_content, n)
    values = list(message.string_val)
    _check_fill(DTYPES[7], n, len(values), _STRING_REF)
    if len(values) >= n:
        return values[:n]
    return values + [values[-1] if values else b""] * (n - len(values))


def _string_list(content: bytes, n: int) -> list[bytes]:
    sizes, pos, end = [], 0, len(content)
    for _ in range(n):
        value = shift = 0
        while True:
            if pos >= end or shift > 28:
                raise TensorDecodeError("holds string tensor_content cut short in its lengths")
            byte = content[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
        if value >= 1 << 32:
            raise TensorDecodeError("holds string tensor_content with a length past 32 bits")
        sizes.append(value)
    if sum(sizes) != end - pos:
        raise TensorDecodeError(f"holds string tensor_content of {end - pos} bytes after its lengths; they "
                                f"add up to {sum(sizes)}")
    out = []
    for size in sizes:
        out.append(content[pos:pos + size])
        pos += size
    return out


def encode_tensor_proto(dtype: DType, shape: tuple[int, ...], values: Any) -> bytes:
    """A serialized TensorProto as ``tf.io.serialize_tensor`` writes it: the
    elements' little-endian bytes in ``tensor_content`` (``values`` a numpy
    array of ``dtype.storage`` in any byte order), or for strings ``values``,
    a flat list of bytes in C order, in ``string_val``."""
    message = TensorProto()
    message.dtype = dtype.enum
    message.tensor_shape.SetInParent()  # written for a scalar too, as TF writes it
    for d in shape:
        message.tensor_shape.dim.add().size = int(d)
    if dtype.storage is None:
        message.string_val.extend(values)
    else:
        array = np.ascontiguousarray(values, dtype.storage.newbyteorder("<"))
        message.tensor_content = array.tobytes()
    return message.SerializeToString(deterministic=True)


def looks_like_tensorproto(payload: Any) -> bool:
    """True if ``payload`` reads as a serialized TensorProto whose values fill
    its shape: a known dtype, a shape field with a full shape, no fields a
    TensorProto lacks, and ``tensor_content`` of exactly the shape's size (or
    1 to N values in the dtype's own repeated field, none for an empty
    tensor). Conservative: other protos (an Example, a SequenceExample) and
    text give False; so do the rare TensorProtos that fill their shape
    with zeros from no values at all."""
    if not payload:
        return False
    try:
        message = TensorProto.FromString(payload if isinstance(payload, bytes) else bytes(payload))
    except (DecodeError, TypeError):
        return False
    dtype = DTYPES.get(message.dtype)
    if dtype is None or not message.HasField("tensor_shape") or _unknown_fields(message):
        return False
    try:
        n = math.prod(_shape(message))
    except TensorDecodeError:
        return False
    set_fields = [f.name for f, _ in message.ListFields() if f.name not in ("dtype", "tensor_shape",
                                                                           "version_number")]
    if n == 0:
        if set_fields:
            return False
        try:
            decode_tensor_proto(payload)  # cheap: no elements
        except TensorDecodeError:
            return False
        return True
    if set_fields == ["tensor_content"]:
        if dtype.storage is None:
            try:
                _string_list(message.tensor_content, n)
            except TensorDecodeError:
                return False
            return True
        return len(message.tensor_content) == n * dtype.storage.itemsize
    if set_fields != [dtype.field]:
        return False
    count = len(getattr(message, dtype.field))
    if dtype.field in ("scomplex_val", "dcomplex_val"):
        count, odd = divmod(count, 2)
        if odd:
            return False
    if not 1 <= count <= n:
        return False
    try:
        if dtype.storage is None:
            _check_fill(dtype, n, count, _STRING_REF)
        else:
            _check_fill(dtype, n, count, dtype.storage.itemsize)
            _typed_values(message, dtype)
    except TensorDecodeError:
        return False
    return True


def _unknown_fields(message) -> bool:
    try:
        from google.protobuf import unknown_fields
    except ImportError:  # protobuf before 4.21: no unknown field check
        return False
    return len(unknown_fields.UnknownFieldSet(message)) > 0

