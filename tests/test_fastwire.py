"""The compiled Example decoder (example/_fastwire.c) against protobuf: values,
keys, dtypes and errors equal, on generated Examples and on every kind of
mutation; the shapes it leaves to protobuf; threads."""

import numpy as np
import pytest
from helpers import in_threads
from hypothesis import given, settings
from test_layouts import FLIPS, assert_same, examples, mutations, outcome

from tfrecord_torch import make_example, parse_example
from tfrecord_torch.example import codec
from tfrecord_torch.example.codec import parse_example_protobuf

pytestmark = pytest.mark.skipif(codec._FAST is None, reason="the compiled decoder is not built")


def ld(number, body):
    return bytes([number << 3 | 2, len(body)]) + body


def fast(payload):
    return codec._FAST.parse_example(payload)


def test_helper_is_built():
    """setup.py builds it wherever a C compiler is (this machine has one)."""
    assert codec._FAST is not None


def test_common_records_take_the_compiled_path():
    payload = make_example({"label": 3, "x": np.arange(4, dtype=np.float32), "key": b"abc",
                            "ids": np.array([-1, 2**63 - 1, -(2**63)], np.int64), "none": np.zeros(0, np.int64)})
    got = fast(payload)
    assert got is not None
    assert_same(got, parse_example_protobuf(payload))
    assert_same(parse_example(payload), parse_example_protobuf(payload))
    got["x"][0] = 9  # fresh, writable arrays
    assert fast(payload)["x"][0] == 0


@settings(max_examples=150, deadline=None, derandomize=True)
@given(examples(empty_floats=True),
       FLIPS)
def test_generated_and_mutated_records_match_protobuf(mapping, flips):
    payload = make_example(mapping)
    assert_same(fast(payload), parse_example_protobuf(payload))
    for mutated in mutations(payload, flips):
        assert_same(outcome(parse_example, mutated), outcome(parse_example_protobuf, mutated))
        have = fast(mutated)
        if have is not None:  # where it answers, it is protobuf's answer
            assert_same(have, outcome(parse_example_protobuf, mutated))
    for cut in range(len(payload)):  # every truncation
        assert_same(outcome(parse_example, payload[:cut]), outcome(parse_example_protobuf, payload[:cut]))


def test_unusual_shapes_are_left_to_protobuf():
    unpacked = ld(1, ld(1, ld(1, b"i") + ld(2, ld(3, b"\x08\x05\x08\x07"))))
    assert fast(unpacked)["i"].tolist() == [5, 7]  # unpacked int64: handled
    floats = ld(1, ld(1, ld(1, b"f") + ld(2, ld(2, b"\x0d\x00\x00\x80\x3f"))))
    assert fast(floats)["f"].tolist() == [1.0]  # unpacked float: handled
    duplicate = ld(1, ld(1, ld(1, b"k") + ld(2, ld(3, ld(1, b"\x01")))) + ld(1, ld(1, b"k") + ld(2, ld(3, ld(1, b"\x02")))))
    no_kind = ld(1, ld(1, ld(1, b"k") + ld(2, b"")))
    unknown = ld(1, ld(1, ld(1, b"k") + ld(2, ld(3, ld(1, b"\x01"))))) + b"\x10\x01"
    bad_utf8 = ld(1, ld(1, ld(1, b"\xff") + ld(2, ld(3, ld(1, b"\x01")))))
    no_key = ld(1, ld(1, ld(2, ld(3, ld(1, b"\x01")))))
    for payload in (duplicate, no_kind, unknown, bad_utf8, no_key):
        assert fast(payload) is None
        assert_same(outcome(parse_example, payload), outcome(parse_example_protobuf, payload))
    assert parse_example(duplicate)["k"].tolist() == [2]  # last one wins, as in protobuf
    assert fast(b"") == {} == parse_example_protobuf(b"")


def test_eight_threads_decode_alike():
    payloads = [make_example({"i": np.arange(n, dtype=np.int64), "b": [b"x" * n]}) for n in range(50)]
    expected = [parse_example_protobuf(p) for p in payloads]
    errors = []

    def run():
        for _ in range(20):
            for p, want in zip(payloads, expected):
                have = fast(p)
                if have["i"].tolist() != want["i"].tolist() or have["b"] != want["b"]:
                    errors.append(p)

    assert not in_threads(run) and not errors
