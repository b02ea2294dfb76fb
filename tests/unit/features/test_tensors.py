"""parse_tensor, serialize_tensor and the SerializedTensor spec without
TensorFlow, written as the docs show them: round trips of every torch dtype
a TensorProto holds (uint64 past int64 exact), the dtype spellings, the
spec's checks and errors (naming file, record and key in a dataset), its
default, batch mode, and the arguments refused. TensorFlow as the oracle:
tests/scenarios/tensorflow/test_tf_parse_tensor.py."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_torch import (
    FeatureError,
    IndexedTFRecordDataset,
    Int64,
    RecordWriter,
    SerializedTensor,
    TensorDecodeError,
    TFRecordDataset,
    make_example,
    parse_example,
    parse_tensor,
    serialize_tensor,
)

TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
                torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32,
                torch.uint64, torch.bool, torch.float8_e5m2, torch.float8_e4m3fn]


def bits(t):
    """A tensor's bytes, to compare any dtype exactly (NaN payloads, float8)."""
    return t.reshape(-1).view(torch.uint8).tolist() if t.numel() else []


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (2, 3, 4)], ids=str)
def test_round_trip(dtype, shape):
    source = torch.randn(shape) * 300
    tensor = source.to(dtype) if not dtype.is_complex else torch.complex(source, -source).to(dtype)
    back = parse_tensor(serialize_tensor(tensor), dtype)
    assert back.dtype == dtype and back.shape == tensor.shape and bits(back) == bits(tensor)


def test_unsigned_values_past_int64_stay_exact():
    big = torch.tensor([2**64 - 1, 2**63, 0], dtype=torch.uint64)
    assert parse_tensor(serialize_tensor(big)).tolist() == [2**64 - 1, 2**63, 0]
    assert parse_tensor(serialize_tensor(torch.tensor([2**32 - 1], dtype=torch.uint32))).tolist() == [2**32 - 1]


def test_a_dtype_this_torch_lacks_is_refused_not_wrapped():
    """A torch without the dtype (uint16/32/64 came in torch 2.3) gives an
    error, never the values reinterpreted as a signed type."""
    from tfrecord_torch.example.tensorproto import DType, decode_tensor_proto
    from tfrecord_torch.features.tensors import to_torch

    decoded = decode_tensor_proto(serialize_tensor(torch.tensor([2**32 - 1], dtype=torch.uint32)))
    missing = decoded._replace(dtype=DType("uint32", 22, np.dtype("<u4"), "uint32_val", "no_such_dtype"))
    with pytest.raises(TensorDecodeError, match="this torch has no torch.no_such_dtype.*upgrade torch"):
        to_torch(missing)


def test_strings_are_nested_lists_of_bytes():
    assert parse_tensor(serialize_tensor([["a", b"b"], ["é", b""]])) == [[b"a", b"b"], ["é".encode(), b""]]
    assert parse_tensor(serialize_tensor(b"x")) == b"x"
    assert parse_tensor(serialize_tensor(np.array([b"p", b"q"]))) == [b"p", b"q"]
    assert parse_tensor(serialize_tensor([]), "string") == []


@pytest.mark.parametrize("spelling", [torch.float32, "float32", "float", np.dtype(np.float32)])
def test_dtype_spellings(spelling):
    assert parse_tensor(serialize_tensor(torch.ones(2)), spelling).tolist() == [1.0, 1.0]


def test_dtype_mismatch_says_what_tf_says():
    with pytest.raises(TensorDecodeError, match=r"Type mismatch between parsed tensor \(float\) and dtype \(int32\)"):
        parse_tensor(serialize_tensor(torch.ones(2)), torch.int32)
    with pytest.raises(TensorDecodeError, match=r"\(string\) and dtype \(half\)"):
        parse_tensor(serialize_tensor(b"x"), torch.float16)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype='nope' is not a dtype a serialized tensor holds.*bfloat16"):
        parse_tensor(b"", "nope")
    with pytest.raises(TypeError, match=r"first argument is the feature key.*SerializedTensor\(dtype=torch.float32\)"):
        SerializedTensor(torch.float32)
    with pytest.raises(ValueError, match="shape must hold sizes >= 0"):
        SerializedTensor(shape=(2, -3))
    with pytest.raises(ValueError, match="shape must be a sequence"):
        SerializedTensor(shape=3)
    with pytest.raises(TypeError, match="give a torch tensor"):
        serialize_tensor(3)
    with pytest.raises(TypeError, match="not int"):
        serialize_tensor([1, 2])
    with pytest.raises(ValueError, match="rectangular"):
        serialize_tensor([[b"a"], [b"b", b"c"]])
    with pytest.raises(TypeError, match="holds bytes or str, not NoneType"):
        serialize_tensor(np.array([b"a", None], dtype=object))
    assert repr(SerializedTensor("t", dtype=torch.float32, shape=(None, 3))) == \
        "SerializedTensor('t', dtype='float', shape=[-1, 3])"


def write(tmp_path, records):
    path = tmp_path / "t.tfrecord"
    with RecordWriter(path) as writer:
        for record in records:
            writer.write(make_example(record))
    return str(path)


def test_dataset_reads_serialized_tensors(tmp_path):
    tensors = [torch.randn(2, 3) for _ in range(5)]
    path = write(tmp_path, [{"t": SerializedTensor.encode(t), "label": i} for i, t in enumerate(tensors)])
    features = {"t": SerializedTensor(dtype=torch.float32, shape=(2, 3)), "label": Int64()}
    assert all(torch.equal(s["t"], t) for s, t in zip(TFRecordDataset(path, features=features), tensors))
    ds = IndexedTFRecordDataset(path, features=features)
    assert torch.equal(ds[3]["t"], tensors[3])
    batch = next(iter(DataLoader(ds, batch_size=5)))
    assert torch.equal(batch["t"], torch.stack(tensors))
    batch = next(iter(TFRecordDataset(path, features=features, batch_size=4)))
    assert torch.equal(batch["t"], torch.stack(tensors[:4]))


def test_batch_mode_lists_what_may_not_stack(tmp_path):
    tensors = [torch.zeros(2, 3), torch.ones(1, 3)]
    path = write(tmp_path, [{"t": SerializedTensor.encode(t)} for t in tensors])
    for spec in (SerializedTensor(shape=(None, 3)), SerializedTensor(dtype="float32")):
        batch = next(iter(TFRecordDataset(path, features={"t": spec}, batch_size=2)))
        assert isinstance(batch["t"], list) and all(torch.equal(a, b) for a, b in zip(batch["t"], tensors))


def test_spec_errors_name_file_record_and_key(tmp_path):
    path = write(tmp_path, [{"t": SerializedTensor.encode(torch.zeros(2))}, {"t": b"bogus"},
                            {"t": [b"a", b"b"]}, {"t": 1}])
    ds = IndexedTFRecordDataset(path, features={"t": SerializedTensor(dtype=torch.float32, shape=(3,))})
    with pytest.raises(FeatureError, match=r"record 0 at byte offset 0: feature 't': holds a tensor of shape \[2\], "
                                           r"expected \[3\]"):
        ds[0]
    ds = IndexedTFRecordDataset(path, features={"t": SerializedTensor()})
    with pytest.raises(FeatureError, match=r"record 1 .*feature 't': is not a serialized TensorProto"):
        ds[1]
    with pytest.raises(FeatureError, match="holds 2 values, expected 1 serialized tensor"):
        ds[2]
    with pytest.raises(FeatureError, match="holds int64 values, expected bytes"):
        ds[3]
    with pytest.raises(FeatureError, match=r"record 1 .*feature 't'"):
        list(TFRecordDataset(path, features={"t": SerializedTensor()}))


def test_default_for_records_without_the_key():
    spec = {"t": SerializedTensor(dtype=torch.int64, default=torch.zeros(2, dtype=torch.int64))}
    first = parse_example(make_example({"other": 1}), spec)["t"]
    first += 1  # a transform editing in place does not change the default
    assert parse_example(make_example({"other": 1}), spec)["t"].tolist() == [0, 0]
    with pytest.raises(FeatureError, match="required feature is missing"):
        parse_example(make_example({"other": 1}), {"t": SerializedTensor()})


def test_plain_tensors_keep_their_encoding():
    t = torch.arange(4)
    assert make_example({"t": t}) != make_example({"t": SerializedTensor.encode(t)})
    assert parse_example(make_example({"t": t}))["t"].tolist() == [0, 1, 2, 3]
