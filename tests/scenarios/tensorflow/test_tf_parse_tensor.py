"""Serialized tensors against TensorFlow: ``tf.io.serialize_tensor`` output
read by :func:`parse_tensor` and :class:`SerializedTensor`, and
:func:`serialize_tensor` output read by ``tf.io.parse_tensor``, for every
dtype TF's SerializeTensor kernel takes x a scalar, a 0-size and a 3-D shape;
TF's ``ParseTensorOpTest`` (tensorflow/python/kernel_tests/io_ops/
parsing_ops_test.py) transcribed; TensorProtos with values in the typed
fields (``tf.make_tensor_proto``) and the repeat-the-last-value rule; and a
record file written by ``tf.io.TFRecordWriter`` read by the datasets.

Not applicable from ``ParseTensorOpTest``: the second half of
``testInvalidInput`` ("Expected `serialized` to be a scalar, got shape: [1]")
feeds a batch of strings to the graph op; :func:`parse_tensor` takes one
payload, and a list of them is refused (``test_invalid_input``).
``ParseTensorVariantRegressionTest`` crashes TensorFlow 2.21 itself (its
docstring says so), so it runs here without TF: a variant TensorProto is
refused cleanly (``test_variant_tensor_list_is_refused``).
"""

import numpy as np
import pytest
import tensorflow as tf
import torch
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow.python.framework import tensor_util

from tfrecord_torch import (
    FeatureError,
    IndexedTFRecordDataset,
    Int64,
    SerializedTensor,
    TensorDecodeError,
    TFRecordDataset,
    make_example,
    parse_tensor,
    serialize_tensor,
)

from .common import tf_write

# every dtype TF's SerializeTensor / ParseTensor kernels take, with its torch counterpart
DTYPES = [
    (tf.float32, torch.float32), (tf.float64, torch.float64), (tf.float16, torch.float16),
    (tf.bfloat16, torch.bfloat16), (tf.complex64, torch.complex64), (tf.complex128, torch.complex128),
    (tf.int8, torch.int8), (tf.int16, torch.int16), (tf.int32, torch.int32), (tf.int64, torch.int64),
    (tf.uint8, torch.uint8), (tf.uint16, torch.uint16), (tf.uint32, torch.uint32), (tf.uint64, torch.uint64),
    (tf.bool, torch.bool),
]
SHAPES = [(), (0,), (2, 0, 3), (2, 3, 4)]


def tf_tensor(tf_dtype, shape, seed=0):
    """A TF tensor of ``shape`` whose values use the dtype's range (extremes,
    negatives, high bits of unsigned types, NaN-free floats)."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if tf_dtype == tf.bool:
        return tf.constant(rng.random(size).reshape(shape) < 0.5)
    if tf_dtype.is_complex:
        real = rng.standard_normal(size) + 1j * rng.standard_normal(size)
        return tf.constant(real.reshape(shape), dtype=tf_dtype)
    if tf_dtype.is_floating:
        values = rng.standard_normal(size) * 1000
        return tf.cast(tf.constant(values.reshape(shape), tf.float64), tf_dtype)
    info = np.iinfo(tf_dtype.as_numpy_dtype)
    values = rng.integers(info.min, info.max, size, dtype=tf_dtype.as_numpy_dtype, endpoint=True)
    if size:
        values[0] = info.max
    return tf.constant(values.reshape(shape), dtype=tf_dtype)


def as_torch(t):
    """A TF tensor as the torch tensor parse_tensor must give (bfloat16 via its bits)."""
    if t.dtype == tf.bfloat16:
        bits = tf.bitcast(t, tf.uint16).numpy() if t.shape.rank else np.array(tf.bitcast(t, tf.uint16).numpy())
        return torch.from_numpy(np.array(bits, np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(t.numpy()))


def tf_list(t):
    """A TF string tensor as nested lists of bytes (bytes for a scalar)."""
    return np.asarray(t.numpy(), dtype=object).tolist()


def same(ours, want):
    assert ours.dtype == want.dtype and ours.shape == want.shape
    if ours.dtype.is_floating_point or ours.dtype.is_complex:
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}[ours.dtype.itemsize]
        if ours.dtype.is_complex:
            ours, want = torch.view_as_real(ours), torch.view_as_real(want)
            bits = {4: torch.int32, 8: torch.int64}[ours.dtype.itemsize]
        assert torch.equal(ours.view(bits), want.view(bits))  # bit for bit: signed zeros and all
    else:
        assert torch.equal(ours, want)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("tf_dtype,torch_dtype", DTYPES, ids=lambda d: getattr(d, "name", None) or str(d))
def test_tf_serialized_tensor_reads_back(tf_dtype, torch_dtype, shape):
    t = tf_tensor(tf_dtype, shape)
    payload = tf.io.serialize_tensor(t).numpy()
    ours = parse_tensor(payload, torch_dtype)
    same(ours, as_torch(t))
    assert parse_tensor(payload).dtype == torch_dtype


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("tf_dtype,torch_dtype", DTYPES, ids=lambda d: getattr(d, "name", None) or str(d))
def test_our_serialized_tensor_reads_back_in_tf(tf_dtype, torch_dtype, shape):
    want = tf_tensor(tf_dtype, shape, seed=1)
    ours = serialize_tensor(as_torch(want))
    got = tf.io.parse_tensor(ours, tf_dtype)
    assert got.dtype == tf_dtype and got.shape == want.shape
    same(as_torch(got), as_torch(want))
    assert ours == tf.io.serialize_tensor(want).numpy()  # byte for byte what TF writes


@pytest.mark.parametrize("shape", [(), (0,), (2, 1, 3)], ids=str)
def test_string_tensors_both_ways(shape):
    rng = np.random.default_rng(2)
    values = np.array([bytes(rng.integers(0, 256, int(n), np.uint8)) for n in rng.integers(0, 5, int(np.prod(shape)))],
                      dtype=object).reshape(shape)
    t = tf.constant(values, tf.string)
    want = tf_list(t)
    assert parse_tensor(tf.io.serialize_tensor(t).numpy(), "string") == want
    ours = serialize_tensor(values.tolist() if shape else values.item())
    assert tf_list(tf.io.parse_tensor(ours, tf.string)) == want
    assert ours == tf.io.serialize_tensor(t).numpy()


def test_numpy_arrays_and_str_serialize_as_tf_does():
    for array in (np.arange(6, dtype=">i4").reshape(2, 3), np.float16([1.5, -0.0]), np.bool_(True)):
        assert serialize_tensor(array) == tf.io.serialize_tensor(tf.constant(array.astype(array.dtype.newbyteorder("=")))).numpy()
    assert tf.io.parse_tensor(serialize_tensor([["é", "b"]]), tf.string).numpy().tolist() == [["é".encode(), b"b"]]


# ParseTensorOpTest


def test_to_float32():
    expected = np.random.default_rng(0).random((3, 4, 5)).astype(np.float32)
    tensor_proto = tensor_util.make_tensor_proto(expected)
    result = parse_tensor(tensor_proto.SerializeToString(), torch.float32)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_to_uint8():
    expected = (np.random.default_rng(0).random((3, 4, 5)) * 255).astype(np.uint8)
    tensor_proto = tensor_util.make_tensor_proto(expected)
    result = parse_tensor(tensor_proto.SerializeToString(), torch.uint8)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_type_mismatch():
    expected = (np.random.default_rng(0).random((3, 4, 5)) * 255).astype(np.uint8)
    serialized = tensor_util.make_tensor_proto(expected).SerializeToString()
    message = r"Type mismatch between parsed tensor \(uint8\) and dtype \(uint16\)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.io.parse_tensor(serialized, tf.uint16)
    with pytest.raises(TensorDecodeError, match=message):
        parse_tensor(serialized, torch.uint16)
    with pytest.raises(TensorDecodeError, match=message):
        parse_tensor(serialized, tf.uint16)  # a TF dtype as TF's test spells it


def test_invalid_input():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Could not parse `serialized` as TensorProto"):
        tf.io.parse_tensor(b"bogus", tf.uint16)
    with pytest.raises(TensorDecodeError, match="is not a serialized TensorProto"):
        parse_tensor(b"bogus", torch.uint16)
    with pytest.raises(TensorDecodeError, match="is not a serialized TensorProto"):
        parse_tensor([b"bogus"], torch.uint16)


def test_variant_tensor_list_is_refused():
    """ParseTensorVariantRegressionTest's malformed TensorList variant (not run
    through TF, which crashes on it): a clean error."""
    outer = tensor_pb2.TensorProto(dtype=types_pb2.DT_VARIANT)
    outer.tensor_shape.dim.add().size = 1
    v = outer.variant_val.add()
    v.type_name = "tensorflow::TensorList"
    v.tensors.add().dtype = types_pb2.DT_FLOAT
    with pytest.raises(TensorDecodeError, match="dtype variant"):
        parse_tensor(outer.SerializeToString())


# TensorProtos with values in the typed fields (tf.make_tensor_proto, hand-made)


def tf_parsed(proto, tf_dtype):
    return as_torch(tf.io.parse_tensor(proto.SerializeToString(), tf_dtype))


@pytest.mark.parametrize("tf_dtype,torch_dtype", DTYPES, ids=lambda d: getattr(d, "name", None) or str(d))
@pytest.mark.parametrize("given", [0, 1, 2, 6, 9], ids=lambda n: f"{n}_values")
def test_typed_fields_repeat_the_last_value(tf_dtype, torch_dtype, given):
    """A shape [2, 3] with 0 (zeros), 1, 2 (the last repeated), 6 or 9 (the
    first 6) values in the dtype's own field, as TF fills it."""
    full = as_torch(tf_tensor(tf_dtype, (9,), seed=3))
    proto = tensor_util.make_tensor_proto(np.zeros((2, 3)), dtype=tf_dtype)  # a shape and a dtype to fill
    for name in ("tensor_content", "float_val", "double_val", "int_val", "int64_val", "bool_val", "half_val",
                 "scomplex_val", "dcomplex_val", "uint32_val", "uint64_val"):
        proto.ClearField(name)
    values = full[:given]
    field = {torch.float32: "float_val", torch.float64: "double_val", torch.int64: "int64_val",
             torch.bool: "bool_val", torch.uint32: "uint32_val", torch.uint64: "uint64_val",
             torch.complex64: "scomplex_val", torch.complex128: "dcomplex_val",
             torch.float16: "half_val", torch.bfloat16: "half_val"}.get(torch_dtype, "int_val")
    if torch_dtype in (torch.float16, torch.bfloat16):
        items = values.view(torch.uint16).tolist()
    elif torch_dtype.is_complex:
        items = torch.view_as_real(values).reshape(-1).tolist()
    else:
        items = values.tolist()
    getattr(proto, field).extend(items)
    want = tf_parsed(proto, tf_dtype)
    same(parse_tensor(proto.SerializeToString(), torch_dtype), want)


def test_make_tensor_proto_of_a_constant_fill():
    for value, dtype in [(7.5, tf.float32), (-3, tf.int8), (True, tf.bool), (b"ab", tf.string), (2 + 1j, tf.complex128)]:
        proto = tensor_util.make_tensor_proto(value, dtype=dtype, shape=[2, 2])
        payload = proto.SerializeToString()
        want = tf_list(tf.io.parse_tensor(payload, dtype))
        ours = parse_tensor(payload)
        assert (ours if isinstance(ours, list) else ours.tolist()) == want


def test_string_tensor_content():
    """Strings in tensor_content (TF's varint lengths, then the bytes): read
    as TF reads them; lengths that do not add up are refused by both."""
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_content=b"\x01\x00\x03a" + b"xyz")
    proto.tensor_shape.dim.add().size = 3
    assert parse_tensor(proto.SerializeToString()) == tf_list(tf.io.parse_tensor(proto.SerializeToString(),
                                                                                 tf.string))
    proto.tensor_content = b"\x01\x00\x03a" + b"xy"
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.parse_tensor(proto.SerializeToString(), tf.string)
    with pytest.raises(TensorDecodeError, match="add up"):
        parse_tensor(proto.SerializeToString())


@pytest.mark.parametrize("edit", ["short_content", "long_content", "negative_dim", "invalid_dtype", "overflow"])
def test_refused_as_tf_refuses(edit):
    proto = tensor_util.make_tensor_proto(np.arange(6, dtype=np.float32).reshape(2, 3))
    if edit == "short_content":
        proto.tensor_content = proto.tensor_content[:-1]
    elif edit == "long_content":
        proto.tensor_content += b"\0\0\0\0"
    elif edit == "negative_dim":
        proto.tensor_shape.dim[0].size = -1
    elif edit == "overflow":  # more elements than an int64 counts, before a 0 dimension
        proto.tensor_shape.dim[0].size = 2**62
        proto.tensor_shape.dim[1].size = 4
        proto.tensor_shape.dim.add().size = 0
    else:
        proto.dtype = types_pb2.DT_INVALID
    payload = proto.SerializeToString()
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.parse_tensor(payload, tf.float32)
    with pytest.raises(TensorDecodeError):
        parse_tensor(payload)


# through the datasets, on a file TensorFlow wrote


def tf_records(tmp_path, tensors):
    payloads = []
    for t in tensors:
        feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.serialize_tensor(t).numpy()]))
        label = tf.train.Feature(int64_list=tf.train.Int64List(value=[len(payloads)]))
        payloads.append(tf.train.Example(features=tf.train.Features(
            feature={"t": feature, "label": label})).SerializeToString())
    path = tmp_path / "tensors.tfrecord"
    tf_write(path, payloads)
    return str(path)


def test_datasets_read_a_file_tensorflow_wrote(tmp_path):
    tensors = [tf_tensor(tf.bfloat16, (2, 3), seed=i) for i in range(5)]
    path = tf_records(tmp_path, tensors)
    features = {"t": SerializedTensor(dtype=torch.bfloat16, shape=(2, 3)), "label": Int64()}
    for sample, t in zip(TFRecordDataset(path, features=features), tensors, strict=True):
        same(sample["t"], as_torch(t))
    ds = IndexedTFRecordDataset(path, features=features)
    for i, t in enumerate(tensors):
        same(ds[i]["t"], as_torch(t))
    batches = list(TFRecordDataset(path, features=features, batch_size=2))
    same(batches[0]["t"], torch.stack([as_torch(t) for t in tensors[:2]]))
    assert batches[-1]["t"].shape == (1, 2, 3)


def test_datasets_read_strings_and_shapes_that_vary(tmp_path):
    tensors = [tf.constant([[b"a", b"b"]]), tf.constant(b"c"), tf.zeros((0, 2), tf.string)]
    path = tf_records(tmp_path, tensors)
    features = {"t": SerializedTensor(dtype="string")}
    assert [s["t"] for s in TFRecordDataset(path, features=features)] == [tf_list(t) for t in tensors]
    batch = next(iter(TFRecordDataset(path, features=features, batch_size=3)))
    assert batch["t"] == [tf_list(t) for t in tensors]


def test_dataset_errors_name_the_record_and_key(tmp_path):
    path = tf_records(tmp_path, [tf.zeros((2, 3)), tf.zeros((3, 2))])
    with pytest.raises(FeatureError, match=r"record 1 at byte offset \d+: feature 't': .*shape \[3, 2\], "
                                           r"expected \[2, 3\]"):
        list(TFRecordDataset(path, features={"t": SerializedTensor(shape=(2, 3))}))
    with pytest.raises(FeatureError, match=r"record 0 .*feature 't': Type mismatch between parsed tensor "
                                           r"\(float\) and dtype \(int32\)"):
        IndexedTFRecordDataset(path, features={"t": SerializedTensor(dtype=torch.int32)})[0]


def test_tf_reads_what_make_example_wrote(tmp_path):
    t = torch.arange(24, dtype=torch.int16).reshape(2, 3, 4)
    payload = make_example({"t": SerializedTensor.encode(t), "plain": t})
    parsed = tf.io.parse_single_example(payload, {"t": tf.io.FixedLenFeature([], tf.string),
                                                  "plain": tf.io.FixedLenFeature([24], tf.int64)})
    np.testing.assert_array_equal(tf.io.parse_tensor(parsed["t"], tf.int16).numpy(), t.numpy())
    np.testing.assert_array_equal(parsed["plain"].numpy(), t.reshape(-1).numpy())  # a plain tensor: as before



def test_refused_where_tf_gives_a_value_that_cannot_be_meant():
    """TF reads an unknown rank as a scalar, truncates int_val values outside
    the dtype (300 as uint8 is 44) and masks half_val bit patterns to 16 bits;
    each is a writer's bug, so each is refused here rather than guessed."""
    unknown = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[2.0])
    unknown.tensor_shape.unknown_rank = True
    wide = tensor_pb2.TensorProto(dtype=types_pb2.DT_UINT8, int_val=[300, 1])
    wide.tensor_shape.dim.add().size = 2
    bits = tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, half_val=[0x13C00])
    bits.tensor_shape.dim.add().size = 1
    cases = [(unknown, tf.float32, 2.0, "unknown rank"), (wide, tf.uint8, [44, 1], "outside uint8's range"),
             (bits, tf.float16, [1.0], "bit pattern 80896")]
    for proto, dtype, tf_value, match in cases:
        payload = proto.SerializeToString()
        assert tf.io.parse_tensor(payload, dtype).numpy().tolist() == tf_value
        with pytest.raises(TensorDecodeError, match=match):
            parse_tensor(payload)


def test_an_empty_shape_ignores_its_content_as_tf_does():
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=b"abcd")
    proto.tensor_shape.dim.add().size = 2
    proto.tensor_shape.dim.add().size = 0
    payload = proto.SerializeToString()
    assert tf.io.parse_tensor(payload, tf.float32).shape == (2, 0)
    assert parse_tensor(payload).shape == (2, 0)
    proto.tensor_shape.dim[1].size = 2**40  # a 0 first: no overflow, as TF counts
    proto.tensor_shape.dim[0].size = 0
    proto.tensor_shape.dim.add().size = 4
    payload = proto.SerializeToString()
    assert tf.io.parse_tensor(payload, tf.float32).shape == parse_tensor(payload).shape == (0, 2**40, 4)
