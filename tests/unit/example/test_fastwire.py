"""The compiled Example decoder (example/_fastwire.c) against protobuf: values,
keys, dtypes and errors equal, on generated Examples and on every kind of
mutation; the shapes it leaves to protobuf; threads."""

import numpy as np
import pytest
from helpers import in_threads
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import make_example, make_sequence_example, parse_example, parse_sequence_example
from tfrecord_torch.example import codec
from tfrecord_torch.example.codec import parse_example_protobuf, parse_sequence_example_protobuf

from .test_layouts import FLIPS, assert_same, examples, mutations, outcome

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


def test_a_large_bytes_value_is_copied_without_the_gil():
    """Copying out an image (here 256 MB) lets the process's other threads run: a thread that stamps
    the time in a loop gets stamps into the middle of the call. Holding the GIL, the call let none in
    (a DataLoader worker's feeder thread waited up to 33 ms to send a batch of 500 KB images)."""
    import threading
    import time

    value = bytes(range(256)) * (1 << 20)
    payload = make_example({"image": value, "label": 1})
    stamps, running, stop = [], threading.Event(), threading.Event()

    def stamp():
        running.set()
        while not stop.is_set():
            stamps.append(time.perf_counter())

    thread = threading.Thread(target=stamp)
    thread.start()
    try:
        assert running.wait(10)
        inside = 0
        for _ in range(3):  # a call the OS kept the thread from running through would show none
            begin = time.perf_counter()
            got = fast(payload)
            end = time.perf_counter()
            middle = (begin + (end - begin) * 0.2, end - (end - begin) * 0.2)
            inside += sum(middle[0] < t < middle[1] for t in stamps)
            assert got is not None and got["image"] == [value]
            if inside:
                break
    finally:
        stop.set()
        thread.join()
    assert inside > 0


def test_eight_threads_decode_alike():
    payloads = [make_example({"i": np.arange(n, dtype=np.int64), "b": [b"x" * n]}) for n in range(50)]
    # values copied with the GIL released too (64 KiB and more), from a bytearray as well as bytes
    payloads += [make_example({"i": np.arange(3), "b": [bytes([n]) * (65535 + n), b"y" * n]}) for n in range(4)]
    payloads.append(bytearray(payloads[-1]))
    expected = [parse_example_protobuf(bytes(p)) for p in payloads]
    errors = []

    def run():
        for _ in range(20):
            for p, want in zip(payloads, expected):
                have = fast(p)
                if have["i"].tolist() != want["i"].tolist() or have["b"] != want["b"]:
                    errors.append(p)

    assert not in_threads(run) and not errors


def sequence_outcome(parse, payload):
    try:
        return parse(payload)
    except Exception as e:  # noqa: BLE001 -- the kind of failure is compared
        return type(e).__name__


def assert_same_sequence(have, want):
    if isinstance(want, str) or isinstance(have, str):
        assert have == want
        return
    assert_same(have[0], want[0])
    assert list(have[1]) == list(want[1]) == sorted(want[1])
    for key, steps in want[1].items():
        assert len(have[1][key]) == len(steps), key
        for h, w in zip(have[1][key], steps):
            assert_same({"v": h}, {"v": w})


@settings(max_examples=120, deadline=None, derandomize=True)
@given(examples(), st.dictionaries(st.text(max_size=4), st.lists(examples().map(lambda m: next(iter(m.values()), [b""])),
                                                                  max_size=4), max_size=3), FLIPS)
def test_sequence_examples_match_protobuf(context, lists, flips):
    payload = make_sequence_example(context, lists)
    got = codec._FAST.parse_sequence_example(payload)
    assert got is not None
    assert_same_sequence(got, parse_sequence_example_protobuf(payload))
    for mutated in [*mutations(payload, flips), *(payload[:cut] for cut in range(0, len(payload), 3))]:
        want = sequence_outcome(parse_sequence_example_protobuf, mutated)
        assert_same_sequence(sequence_outcome(parse_sequence_example, mutated), want)
        have = codec._FAST.parse_sequence_example(mutated)
        if have is not None:  # where it answers, it is protobuf's answer
            assert_same_sequence(have, want)


def test_sequence_example_shapes_left_to_protobuf():
    step = ld(3, ld(1, b"\x07"))  # Feature int64_list [7]
    entry = ld(1, ld(1, b"k") + ld(2, ld(1, step) + ld(1, step)))
    assert codec._FAST.parse_sequence_example(ld(2, entry))[1]["k"][1].tolist() == [7]
    no_value = ld(2, ld(1, ld(1, b"k")))  # a map entry without its FeatureList
    no_kind = ld(2, ld(1, ld(1, b"k") + ld(2, ld(1, b""))))  # a step with no kind
    twice = ld(2, entry) + ld(2, entry)  # feature_lists field twice: protobuf merges
    unknown = ld(2, entry) + b"\x18\x01"
    for payload in (no_value, no_kind, twice, unknown):
        assert codec._FAST.parse_sequence_example(payload) is None
        assert_same_sequence(parse_sequence_example(payload), parse_sequence_example_protobuf(payload))
    assert parse_sequence_example(twice)[1]["k"][0].tolist() == [7]
    assert codec._FAST.parse_sequence_example(b"") == ({}, {})


def joined_or_steps(steps):
    """What the parser gives for a joined key: [T, n] where every step is one
    bytes value of one length n (T >= 1), else the steps as protobuf gives them."""
    values = [s for s in steps if isinstance(s, list) and len(s) == 1]
    if steps and len(values) == len(steps) and len({len(v[0]) for v in values}) == 1:
        n = len(values[0][0])
        return np.frombuffer(b"".join(v[0] for v in values), np.uint8).reshape(len(steps), n)
    return steps


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]),
                       st.lists(st.one_of(st.binary(max_size=3).map(lambda b: [b]),
                                          st.lists(st.binary(max_size=2), min_size=2, max_size=2),
                                          st.just(np.array([], dtype="S1")),
                                          st.lists(st.integers(-2, 2), min_size=1, max_size=2)), max_size=5),
                       max_size=3),
       st.sets(st.sampled_from(["a", "b", "z"])), FLIPS)
def test_joined_feature_lists_are_the_steps_joined(lists, joined, flips):
    """With keys to join, a list of one bytes value per step, all of one length,
    comes back as uint8 [T, n] in step order; every other list (numbers, two
    values, two lengths, a key not asked for) as protobuf gives it. Truncated
    and mutated payloads give protobuf's answer or None, never other bytes."""
    payload = make_sequence_example({}, lists)
    want = parse_sequence_example_protobuf(payload)
    got = codec.parse_sequence_example(payload, frozenset(joined))
    assert got is not None and list(got[1]) == list(want[1])
    for key, steps in want[1].items():
        if key in joined and isinstance(joined_or_steps(steps), np.ndarray):
            assert isinstance(got[1][key], codec.JoinedSteps)
            np.testing.assert_array_equal(got[1][key].view(), joined_or_steps(steps))
        else:
            assert_same_sequence((got[0], {key: got[1][key]}), (want[0], {key: steps}))
    for mutated in [*mutations(payload, flips), *(payload[:cut] for cut in range(0, len(payload), 2))]:
        have = codec._FAST.parse_sequence_example(mutated, joined)
        if have is None:
            continue
        oracle = sequence_outcome(parse_sequence_example_protobuf, mutated)
        assert not isinstance(oracle, str), "the compiled parser answered where protobuf raises"
        for key, steps in oracle[1].items():
            expected = joined_or_steps(steps) if key in joined else steps
            if isinstance(expected, np.ndarray):  # where the values lie: inside the payload, as protobuf read them
                np.testing.assert_array_equal(codec.JoinedSteps(mutated, *have[1][key]).view(), expected)
            else:
                assert_same_sequence((have[0], {key: have[1][key]}), (oracle[0], {key: steps}))


def test_joined_frames_need_one_encoding_per_step():
    """A step whose length varint is padded (the same value, one byte longer)
    is valid protobuf but breaks the equal stride: a list mixing the two
    encodings comes back as steps; a list of one encoding, joined."""
    step = ld(1, ld(1, ld(1, b"ab")))  # Feature{bytes_list{value: "ab"}}
    padded = ld(1, ld(1, bytes([1 << 3 | 2, 0x82, 0x00]) + b"ab"))  # the value's length 2 as 0x82 0x00
    for lists, joined in ((step * 3, True), (padded * 3, True), (step + padded, False), (padded + step * 2, False)):
        payload = ld(2, ld(1, ld(1, b"k") + ld(2, lists)))
        got = codec.parse_sequence_example(payload, frozenset({"k"}))[1]["k"]
        want = parse_sequence_example_protobuf(payload)[1]["k"]
        assert [v for (v,) in want] == [b"ab"] * len(want)
        if joined:
            np.testing.assert_array_equal(got.view(), np.frombuffer(b"ab" * len(want), np.uint8).reshape(-1, 2))
        else:
            assert got == want
    with pytest.raises(TypeError, match="set of keys"):
        codec._FAST.parse_sequence_example(ld(2, b""), ["k"])


@pytest.mark.parametrize("where", [(-1, 4, 2, 2), (0, 1, 2, 2), (0, 4, 0, 2), (8, 4, 2, 2), (0, 4, 3, 3)])
def test_joined_steps_outside_the_payload_are_refused(where):
    """JoinedSteps.view() reads through NumPy's as_strided, which checks
    nothing: a description that is not inside the payload is refused."""
    with pytest.raises(ValueError, match="outside its payload"):
        codec.JoinedSteps(bytes(10), *where).view()
    assert codec.JoinedSteps(bytes(10), 0, 4, 3, 2).view().shape == (3, 2)
