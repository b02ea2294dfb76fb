"""The TensorProto codec without TensorFlow: encode/decode round trips of
every dtype and shape (hypothesis), the typed-field fill rule, the limits
and refusals, mutated payloads giving only TensorDecodeError, and
``looks_like_tensorproto`` on TensorProtos and on everything else a record
may hold. TensorFlow's side is tests/scenarios/tensorflow/test_tf_parse_tensor.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tfrecord_torch import TensorDecodeError, make_example, make_sequence_example
from tfrecord_torch.example.protos import TensorProto
from tfrecord_torch.example.tensorproto import (
    DTYPES,
    MAX_TENSOR_BYTES,
    decode_tensor_proto,
    dtype_named,
    encode_tensor_proto,
    looks_like_tensorproto,
)

NUMERIC = [d for d in DTYPES.values() if d.storage is not None]
STRING = dtype_named("string")


def proto(dtype, dims, **fields):
    message = TensorProto(dtype=dtype, **fields)
    message.tensor_shape.SetInParent()
    for d in dims:
        message.tensor_shape.dim.add().size = d
    return message.SerializeToString()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(NUMERIC), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4), st.data())
def test_numeric_round_trip(dtype, shape, data):
    array = data.draw(hnp.arrays(dtype.storage, shape))
    decoded = decode_tensor_proto(encode_tensor_proto(dtype, shape, array))
    assert decoded.dtype == dtype and decoded.shape == shape
    assert decoded.values.tobytes() == array.astype(dtype.storage).tobytes()


@settings(max_examples=40, deadline=None)
@given(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), st.data())
def test_string_round_trip(shape, data):
    values = data.draw(st.lists(st.binary(max_size=6), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    decoded = decode_tensor_proto(encode_tensor_proto(STRING, shape, values))
    assert decoded.shape == shape and decoded.values == values
    assert looks_like_tensorproto(encode_tensor_proto(STRING, shape, values))


def test_typed_fields_fill_as_tf_does():
    assert decode_tensor_proto(proto(1, [4], float_val=[1, 2])).values.tolist() == [1, 2, 2, 2]
    assert decode_tensor_proto(proto(3, [2, 2])).values.tolist() == [[0, 0], [0, 0]]
    assert decode_tensor_proto(proto(9, [2], int64_val=[5, 6, 7])).values.tolist() == [5, 6]
    assert decode_tensor_proto(proto(7, [3], string_val=[b"a", b"b"])).values == [b"a", b"b", b"b"]
    assert decode_tensor_proto(proto(7, [2])).values == [b"", b""]
    assert decode_tensor_proto(proto(8, [2], scomplex_val=[1, 2, 3])).values.tolist() == [1 + 2j, 1 + 2j]
    assert decode_tensor_proto(proto(23, [1], uint64_val=[2**64 - 1])).values.tolist() == [2**64 - 1]


@pytest.mark.parametrize("payload,match", [
    (proto(1, [2**40], float_val=[1]), "MAX_TENSOR_BYTES"),
    (proto(7, [2**40], string_val=[b"x"]), "MAX_TENSOR_BYTES"),
    (proto(3, [2**40], int_val=[1]), "MAX_TENSOR_BYTES"),
    (proto(1, [2**62, 4], float_val=[1]), "more elements than an int64"),
    (proto(1, [2**62, 4, 0], float_val=[1]), "more elements than an int64"),
    (proto(1, [1] * 255, float_val=[1]), "rank 255"),
    (proto(1, [0, 2**62, 4]), "empty TensorProto of shape .* which no array can have"),
    (proto(7, [2**40, 3, 0]), "string TensorProto .* nested lists take more than MAX_TENSOR_BYTES"),
    (proto(1, [-1], float_val=[1]), "negative"),
    (proto(1, [3], tensor_content=b"\0" * 8), "holds tensor_content of 8 bytes; 3 float values"),
    (proto(6, [1], int_val=[128]), r"outside int8's range \[-128, 127\]"),
    (proto(17, [1], int_val=[-1]), "outside uint16's range"),
    (proto(14, [1], half_val=[-1]), "bit pattern -1"),
    (proto(21, [1]), "dtype variant"),
    (proto(29, [1]), "dtype int4"),
    (proto(99, [1]), "enum value 99"),
    (proto(7, [2], tensor_content=b"\x05"), "cut short"),
    (b"\x08", "not a serialized TensorProto"),
])
def test_refused(payload, match):
    with pytest.raises(TensorDecodeError, match=match):
        decode_tensor_proto(payload)
    assert not looks_like_tensorproto(payload)


def test_mutated_payloads_give_only_tensor_decode_errors():
    rng = np.random.default_rng(0)
    payloads = [encode_tensor_proto(d, (2, 3), np.ones((2, 3), d.storage)) for d in NUMERIC] + \
        [encode_tensor_proto(STRING, (2,), [b"ab", b"c"]), proto(1, [5], float_val=[1.0, 2.0])]
    for _ in range(3000):
        data = bytearray(payloads[rng.integers(len(payloads))])
        for _ in range(rng.integers(1, 4)):
            data[rng.integers(len(data))] = rng.integers(256)
        if rng.random() < 0.3:
            data = data[:rng.integers(len(data) + 1)]
        try:
            decode_tensor_proto(bytes(data))
        except TensorDecodeError:
            pass
        looks_like_tensorproto(bytes(data))  # never raises


def test_looks_like_tensorproto():
    for dtype in NUMERIC:
        for shape in [(), (0,), (2, 0, 3), (2, 3)]:
            assert looks_like_tensorproto(encode_tensor_proto(dtype, shape, np.zeros(shape, dtype.storage)))
    assert looks_like_tensorproto(proto(1, [2, 2], float_val=[1.0]))  # tf.make_tensor_proto of a fill
    assert looks_like_tensorproto(proto(7, [2], tensor_content=b"\x01\x00a"))
    not_tensors = [
        b"", b"bogus", b"\x89PNG\r\n\x1a\n" + bytes(30), "text, not bytes".encode(),
        make_example({"a": 1, "b": b"x"}), make_example({"t": [1.0, 2.0]}),
        make_sequence_example({"a": 1}, {"s": [[1], [2]]}),
        proto(1, [2]),  # no values at all: zeros by TF's rule, but nothing says "tensor"
        proto(1, [2], float_val=[1, 2, 3]),  # more values than elements
        proto(1, [2], int_val=[1, 2]),  # another dtype's field
        proto(1, [2], float_val=[1], string_val=[b"x"]),
        proto(1, [2], tensor_content=b"\0" * 4),
        TensorProto(dtype=1, float_val=[1]).SerializeToString(),  # no shape field
        proto(1, [0], float_val=[1]),
        proto(8, [1], scomplex_val=[1, 2, 3]),
        proto(1, [1], float_val=[1]) + b"\x98\x01\x01",  # a field TensorProto lacks (19)
    ]
    for payload in not_tensors:
        assert not looks_like_tensorproto(payload), payload


def test_scalar_shape_field_is_written_as_tf_writes_it():
    assert encode_tensor_proto(DTYPES[1], (), np.float32(1.5)).hex() == "0801120022040000c03f"
    assert MAX_TENSOR_BYTES == 1 << 31
