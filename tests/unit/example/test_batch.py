import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import ExampleDecodeError, RecordWriter, make_example, parse_example
from tfrecord_torch.example.batch import BatchLayout, parse_example_batch
from tfrecord_torch.example.codec import parse_example_protobuf
from tfrecord_torch.records.framing import iter_chunks
from tfrecord_torch.records.streams import open_stream


def reference(payloads):
    """What parse_example_batch must equal: protobuf, record by record."""
    parsed = [parse_example_protobuf(p) for p in payloads]
    return parsed, sorted({k for p in parsed for k in p})


def assert_same(payloads):
    got = parse_example_batch(payloads)
    parsed, keys = reference(payloads)
    assert sorted(got) == keys
    for key in keys:
        column = got[key]
        for i, p in enumerate(parsed):
            want = p.get(key)
            have = column[i]
            if want is None:
                assert have is None
            elif isinstance(want, np.ndarray):
                assert isinstance(have, np.ndarray) and have.dtype == want.dtype
                np.testing.assert_array_equal(have, want)
            else:
                assert have == want
        if isinstance(column, np.ndarray):
            assert all(isinstance(p.get(key), np.ndarray) for p in parsed)
            assert len({len(p[key]) for p in parsed}) == 1
    return got


def test_fixed_schema_gives_dense_columns():
    rng = np.random.default_rng(0)
    payloads = [make_example({"label": int(rng.integers(-5, 100_000)),
                              "x": rng.standard_normal(32).astype(np.float32),
                              "ids": rng.integers(-(2**63), 2**63 - 1, 3)}) for _ in range(300)]
    got = assert_same(payloads)
    assert got["x"].shape == (300, 32) and got["x"].dtype == np.float32
    assert got["label"].shape == (300, 1) and got["ids"].shape == (300, 3)


def test_mixed_schemas_and_fallbacks():
    payloads = [make_example({"a": 1, "b": [1.0, 2.0]}) for _ in range(10)]
    payloads += [make_example({"a": 2}) for _ in range(3)]  # too few for a template
    payloads += [make_example({"a": [1, 2], "c": b"xyz"}) for _ in range(6)]
    payloads += [make_example({"c": [b"a", b"bb"], "e": np.zeros(0, np.float32)}) for _ in range(6)]
    payloads += [b""] * 5
    got = assert_same(payloads)
    assert isinstance(got["a"], list) and got["a"][-1] is None


def test_nan_inf_and_extreme_ints_survive():
    payloads = [make_example({"f": [np.nan, np.inf, -0.0], "i": [2**63 - 1, -(2**63), 0]})] * 8
    got = parse_example_batch(payloads)
    assert np.isnan(got["f"][:, 0]).all() and (got["f"][:, 1] == np.inf).all()
    assert np.signbit(got["f"][:, 2]).all()
    assert got["i"][0].tolist() == [2**63 - 1, -(2**63), 0]


def test_unpacked_and_reordered_records_fall_back_correctly():
    def ld(number, body):
        return bytes([number << 3 | 2, len(body)]) + body

    unpacked = bytes([0x08, 5, 0x08, 7])
    entry_i = ld(1, b"i") + ld(2, ld(3, unpacked))
    entry_j = ld(1, b"j") + ld(2, ld(3, ld(1, bytes([9]))))
    forward = ld(1, ld(1, entry_i) + ld(1, entry_j))
    backward = ld(1, ld(1, entry_j) + ld(1, entry_i))
    duplicate = ld(1, ld(1, entry_i) + ld(1, entry_i))
    assert BatchLayout.compile(duplicate) is None
    assert_same([forward] * 6 + [backward] * 6 + [duplicate] * 5)


def test_chunks_from_the_reader(tmp_path):
    path = tmp_path / "s.tfrecord"
    rng = np.random.default_rng(1)
    payloads = [make_example({"label": int(rng.integers(0, 1000)),
                              "x": rng.standard_normal(8).astype(np.float32)}) for _ in range(5000)]
    with RecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    labels = []
    with open_stream(path) as stream:
        for chunk in iter_chunks(stream, block_size=4096):
            got = parse_example_batch(chunk)
            parsed = [parse_example(p) for p in chunk.payloads()]
            np.testing.assert_array_equal(got["x"], np.stack([p["x"] for p in parsed]))
            labels.extend(got["label"][:, 0].tolist())
    assert labels == [parse_example(p)["label"][0] for p in payloads]


def test_invalid_record_raises():
    good = make_example({"a": 1})
    with pytest.raises(ExampleDecodeError):
        parse_example_batch([good] * 5 + [b"\x0a\x05ab"])


def test_empty_batch():
    assert parse_example_batch([]) == {}


feature_values = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4).map(lambda v: np.array(v, np.int64)),
    st.lists(st.floats(width=32, allow_nan=False), max_size=4).map(lambda v: np.array(v, np.float32)),
    st.lists(st.binary(max_size=6), min_size=1, max_size=3),
)
schemas = st.dictionaries(st.sampled_from(["a", "b", "c", "label", "x/y"]), feature_values, max_size=4)


@settings(max_examples=120, deadline=None)
@given(st.lists(schemas, min_size=1, max_size=6), st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_property_equals_protobuf(templates, picks):
    payloads = [make_example(templates[i % len(templates)]) for i in picks]
    assert_same(payloads)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=5), st.data())
def test_property_corrupted_structure_never_misparses(values, data):
    payloads = [make_example({"v": np.array(values, np.int64), "f": [1.5]}) for _ in range(8)]
    bad = bytearray(payloads[3])
    bad[data.draw(st.integers(0, len(bad) - 1))] ^= data.draw(st.integers(1, 255))
    payloads[3] = bytes(bad)
    try:
        parse_example(payloads[3])
    except ExampleDecodeError:
        with pytest.raises(ExampleDecodeError):
            parse_example_batch(payloads)
        return
    assert_same(payloads)


def python_calls(function, *args):
    """The Python-level function calls (frames entered, generators resumed) ``function(*args)`` makes."""
    import sys

    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code) if event == "call" else None)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return len(calls)


def test_records_of_different_lengths_parse_with_no_python_call_per_record():
    """JPEG records differ in length, so no layout groups them: each goes to the
    compiled decoder straight from one comprehension, the same values as protobuf."""
    def batch(n):
        return [make_example({"image": b"\xff\xd8" + bytes(k), "label": k}) for k in range(n)]

    assert_same(batch(64))
    assert python_calls(parse_example_batch, batch(64)) == python_calls(parse_example_batch, batch(8))


def test_records_mostly_one_large_value_parse_one_by_one(monkeypatch):
    """Records of one length whose bytes are mostly a value (a raw array, an
    image) are decoded one by one: the byte matrix would copy each value three
    times (28x slower at 64 KiB, benchmarks/parse_batch.py). Records of numbers
    still read from the matrix. The values are protobuf's either way."""
    from tfrecord_torch.example import batch as batch_module

    built = []
    matrix = batch_module._Rows.matrix
    monkeypatch.setattr(batch_module._Rows, "matrix", lambda self, *a: built.append(a) or matrix(self, *a))
    rng = np.random.default_rng(0)
    large = [make_example({"data": rng.integers(0, 256, 100_000, np.uint8).tobytes(), "label": i}) for i in range(16)]
    got = assert_same(large)
    assert built == [] and got["label"].shape == (16, 1)
    numbers = [make_example({"data": bytes([i]) * 64, **{f"f{k}": [float(i)] * 4 for k in range(8)}})
               for i in range(16)]
    assert_same(numbers)
    assert len(built) == 1
