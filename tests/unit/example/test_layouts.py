"""parse_example's per-record path without the compiled decoder (learned byte layouts) against protobuf."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import ExampleDecodeError, make_example, parse_example
from tfrecord_torch.example import codec, layouts
from tfrecord_torch.example.codec import parse_example_protobuf
from tfrecord_torch.example.layouts import RecordLayout


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setattr(codec, "_FAST", None)  # the layouts are the path without the compiled decoder
    layouts.clear()
    yield
    layouts.clear()


def outcome(parse, payload):
    try:
        return parse(payload)
    except ExampleDecodeError:
        return "error"


def assert_same(have, want):
    """Equal values, keys, dtypes and writability -- bit for bit, except a
    signalling NaN: Python's protobuf passes floats through doubles and sets
    the quiet bit; the fast paths keep the stored bits, as TensorFlow's C++
    parser does."""
    if isinstance(have, dict) and isinstance(want, dict):
        have, want = dict(have), dict(want)
        for key, w in want.items():
            h = have.get(key)
            if isinstance(w, np.ndarray) and w.dtype == np.float32 and isinstance(h, np.ndarray) \
                    and h.shape == w.shape and h.dtype == w.dtype and np.isnan(w).any():
                assert np.array_equal(np.isnan(h), np.isnan(w)), key
                keep = ~np.isnan(w)
                have[key], want[key] = h[keep], w[keep]
    if want == "error" or have == "error":
        assert have == want
        return
    assert list(have) == list(want) == sorted(want)  # keys sorted on both paths
    for key, w in want.items():
        h = have[key]
        assert type(h) is type(w), key
        if isinstance(w, np.ndarray):
            assert h.dtype == w.dtype and h.shape == w.shape, key
            assert h.tobytes() == w.tobytes(), key  # bit for bit (NaN payloads too)
            assert h.flags.writeable and h.flags.owndata or h.base is not None
        else:
            assert h == w, key


def examples(empty_floats=False):
    """Mappings make_example takes: int64 and float32 arrays, bytes lists
    (and empty float arrays if asked)."""
    kinds = [st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20).map(lambda v: np.array(v, np.int64)),
             st.lists(st.floats(width=32, allow_nan=True), max_size=5).map(lambda v: np.array(v, np.float32)),
             st.lists(st.binary(max_size=6), min_size=1, max_size=3)]
    if empty_floats:
        kinds.append(st.just(np.zeros(0, np.float32)))
    return st.dictionaries(st.text(max_size=5), st.one_of(*kinds), max_size=5 if empty_floats else 4)


FLIPS = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=12)


def mutations(payload, flips):
    """``payload`` with one byte changed per (position, xor) of ``flips``: same
    length, structure or value."""
    for pos, xor in flips if payload else ():
        mutated = bytearray(payload)
        mutated[pos % len(payload)] ^= xor
        yield bytes(mutated)


def learned(payload, must=True):
    """parse_example of ``payload`` after its length has a layout (``must``:
    assert that one was learned; some shapes, such as an empty int64 list
    beside others, are left to protobuf)."""
    for _ in range(3):
        parse_example(payload)
    assert not must or layouts.decode_cached(payload) is not None, "no layout was learned"
    return parse_example(payload)


def test_fixed_schema_takes_the_fast_path_and_matches_protobuf():
    rng = np.random.default_rng(0)
    for i in range(200):
        payload = make_example({"label": int(rng.integers(0, 1000)), "x": rng.standard_normal(32).astype(np.float32),
                                "ids": rng.integers(-(2**63), 2**63 - 1, 3), "name": b"n%d" % (i % 10),
                                "tags": [b"a", b"bb"], "none": np.zeros(0, np.float32),
                                "nint": np.zeros(0, np.int64)})
        assert_same(parse_example(payload), parse_example_protobuf(payload))
    assert_same(learned(payload), parse_example_protobuf(payload))


def test_outputs_are_fresh_writable_arrays():
    payload = make_example({"label": 7, "x": [1.0, 2.0]})
    first, second = learned(payload), parse_example(payload)
    first["x"][0] = 99.0
    first["label"][0] = -1
    assert second["x"].tolist() == [1.0, 2.0] and second["label"].tolist() == [7]
    assert first["x"].dtype == np.float32 and first["label"].dtype == np.int64


def test_varint_boundaries_may_move_within_a_run():
    # [300] packs as 2 bytes, [1, 2] too: same length, same structure bytes.
    one, two = make_example({"v": [300]}), make_example({"v": [1, 2]})
    assert len(one) == len(two)
    learned(one)
    assert parse_example(two)["v"].tolist() == [1, 2]
    big = make_example({"v": [2**40, -1, 5]})  # 6 + 10 + 1 bytes
    small = make_example({"v": list(range(1, 18))})  # 17 one-byte varints: the same run length
    assert len(big) == len(small)
    learned(small)
    assert parse_example(big)["v"].tolist() == [2**40, -1, 5]
    assert parse_example(small)["v"].tolist() == list(range(1, 18))


@pytest.mark.parametrize("values", [[-(2**63)], [2**63 - 1], [-1, 0, 1], list(range(-40, 40)),
                                    [2**62] * 30, [-5] * 3])
def test_int64_extremes(values):
    payload = make_example({"v": np.array(values, np.int64)})
    assert learned(payload)["v"].tolist() == values


def test_malformed_value_bytes_get_protobuf_answer():
    payload = make_example({"v": [1, 2, 3], "x": [0.5]})
    learned(payload)
    run = payload.index(bytes([1, 2, 3]))
    for bad in (b"\x81\x82\x83", b"\x01\x02\x83", b"\xff\xff\x7f"):
        mutated = payload[:run] + bad + payload[run + 3:]
        assert_same(outcome(parse_example, mutated), outcome(parse_example_protobuf, mutated))
    long_run = make_example({"v": np.arange(20, dtype=np.int64)})  # numpy varint path
    learned(long_run)
    run = long_run.index(bytes(range(20)))
    mutated = long_run[:run] + b"\xff" * 20 + long_run[run + 20:]
    assert outcome(parse_example, mutated) == outcome(parse_example_protobuf, mutated) == "error"


def test_unusual_shapes_are_left_to_protobuf():
    def ld(number, body):
        return bytes([number << 3 | 2, len(body)]) + body

    unpacked = ld(1, ld(1, ld(1, b"i") + ld(2, ld(3, b"\x08\x05\x08\x07"))))
    assert RecordLayout.compile(unpacked) is None
    assert parse_example(unpacked)["i"].tolist() == [5, 7]
    duplicate = ld(1, ld(1, ld(1, b"k") + ld(2, ld(3, ld(1, b"\x01")))) + ld(1, ld(1, b"k") + ld(2, ld(3, ld(1, b"\x02")))))
    assert RecordLayout.compile(duplicate) is None
    for _ in range(4):
        assert parse_example(duplicate)["k"].tolist() == [2]  # last one wins, as in protobuf


@settings(max_examples=60, deadline=None, derandomize=True)
@given(examples(),
       FLIPS)
def test_same_length_mutations_match_protobuf(mapping, flips):
    payload = make_example(mapping)
    assert_same(learned(payload, must=False), parse_example_protobuf(payload))
    for mutated in mutations(payload, flips):
        assert_same(outcome(parse_example, mutated), outcome(parse_example_protobuf, mutated))


def test_threads_share_the_cache():
    rng = np.random.default_rng(1)
    payloads = [make_example({"k%d" % (i % 7): int(rng.integers(0, 500)), "x": rng.random(i % 5).astype(np.float32)})
                for i in range(400)]
    want = [parse_example_protobuf(p) for p in payloads]
    failures = []

    def work(seed):
        order = np.random.default_rng(seed).permutation(len(payloads))
        for _ in range(3):
            for i in order.tolist():
                try:
                    assert_same(parse_example(payloads[i]), want[i])
                except AssertionError as e:  # pragma: no cover - reported below
                    failures.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_a_length_that_keeps_missing_is_learned_afresh():
    unlearnable = make_example({"k": [1.0]})
    learnable = make_example({"j": [2.0]})
    assert len(unlearnable) == len(learnable)
    for _ in range(layouts._PER_LENGTH + 2):
        parse_example(unlearnable)
    layouts._layouts.clear()  # as if every try had failed: the length's tries are spent
    for _ in range(layouts._RETRY):
        parse_example(learnable)
    assert layouts.decode_cached(learnable) is not None


def test_cache_stays_bounded():
    for n in range(layouts._MAX_LENGTHS + 50):
        payload = make_example({"b": bytes(n)})
        parse_example(payload)
        parse_example(payload)
    assert len(layouts._layouts) <= layouts._MAX_LENGTHS
    assert len(layouts._seen) <= layouts._MAX_SEEN
