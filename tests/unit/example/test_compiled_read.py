"""The compiled record reader behind IndexedTFRecordDataset[i] (_fastwire's
read_example / read_item, and its CRC-32C): equal to the usual path -- read
the frame, check it, parse, decode with the spec -- on good records, and
leaving everything else to that path, which names the error."""

import os
import tempfile

import numpy as np
import pytest
import torch
from crc32c import crc32c
from helpers import in_threads
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from tfrecord_torch import (
    Bytes,
    CorruptRecordError,
    FeatureError,
    Float,
    IndexedTFRecordDataset,
    Int64,
    RecordWriter,
    build_index,
    load_index,
    make_example,
    parse_example,
)
from tfrecord_torch.data import fetch, recordspec
from tfrecord_torch.example import codec
from tfrecord_torch.features.specs import bind, decode, item_plan
from tfrecord_torch.records import frames
from tfrecord_torch.records.crc import masked_crc32c

from .test_layouts import FLIPS, assert_same, examples, mutations

pytestmark = pytest.mark.skipif(codec._FAST is None, reason="the compiled decoder is not built")


def frame(payload):
    n = len(payload).to_bytes(8, "little")
    return n + masked_crc32c(n).to_bytes(4, "little") + payload + masked_crc32c(payload).to_bytes(4, "little")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.binary(max_size=300), st.integers(0, 7))
def test_crc32c_equals_the_crc32c_package(data, skip):
    data = data[skip:]  # unaligned starts too
    assert codec._FAST.crc32c(data) == crc32c(data)
    assert codec._FAST.crc32c(data, True) == crc32c(data)  # the table, where the CPU has the instruction


@settings(max_examples=80, deadline=None, derandomize=True)
@given(examples(), FLIPS)
def test_read_example_equals_parse_or_leaves_it(mapping, flips):
    payload = make_example(mapping)
    good = frame(payload)
    with tempfile.TemporaryFile() as f:
        fd = f.fileno()
        os.pwrite(fd, b"xx" + good, 0)
        assert_same(codec.read_example(fd, 2, len(good), True), parse_example(payload))
        assert codec.read_example(fd, 2, len(good) + 1, True) is None  # past the end: a short read
        assert codec.read_example(fd, 1, len(good), True) is None  # not a frame there
        for mutated in mutations(good, flips):  # any changed byte: a CRC fails (or the length does)
            os.pwrite(fd, mutated, 2)
            assert codec.read_example(fd, 2, len(good), True) is None
            unchecked = codec.read_example(fd, 2, len(good), False)
            if unchecked is not None:  # unverified: whatever the payload parses to, as parse_example says
                assert_same(unchecked, parse_example(mutated[12:-4]))


def plan_and_record(spec):
    spec = bind(spec)
    return spec, item_plan(spec)


def read_item(tmp_path, payload, spec):
    spec, plan = plan_and_record(spec)
    path = tmp_path / "item.bin"
    path.write_bytes(frame(payload))
    fd = os.open(path, os.O_RDONLY)
    try:
        index = np.array([[0, len(frame(payload))]], np.int64)
        return codec.read_item(fd, index, 0, True, plan, torch.from_numpy)
    finally:
        os.close(fd)


def test_read_item_equals_decoding_with_the_spec(tmp_path):
    x = np.arange(6, dtype=np.float32)
    payload = make_example({"label": 7, "x": x, "ids": [1, 2, 3], "other": b"skipped", "big": 2**63 - 1})
    spec = {"label": Int64(), "x": Float(shape=(2, 3)), "ids": Int64(shape=None), "y": Float("x", shape=(6,)),
            "big": Int64(shape=(1,))}
    got = read_item(tmp_path, payload, spec)
    want = decode(parse_example(payload), bind(dict(spec)))
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert torch.equal(got[name], want[name]), name
    got["x"][0, 0] = 99  # fresh tensors: two features of one key do not share memory
    assert got["y"][0] == 0


@pytest.mark.parametrize("payload, spec", [
    (make_example({"a": 1}), {"b": Int64()}),  # missing: the default or the error decides
    (make_example({"a": 1.5}), {"a": Int64()}),  # another kind
    (make_example({"a": [1, 2]}), {"a": Int64()}),  # another size
    (make_example({"a": 1, "é": 2}), {"a": Int64()}),  # a key protobuf checks for UTF-8
    (b"\x0a\x07\x0a\x05\x0a\x01a\x12\x00", {"a": Int64(shape=None)}),  # no kind set: [] (or the default)
    (b"\x0a\x0c\x0a\x0a\x0a\x01a\x12\x05\x1a\x03\x0a\x01\x05" + b"\x0a\x0c\x0a\x0a\x0a\x01a\x12\x05\x1a\x03\x0a\x01\x06",
     {"a": Int64()}),  # the features field twice: protobuf merges
])
def test_read_item_leaves_the_unusual_to_the_usual_path(tmp_path, payload, spec):
    assert read_item(tmp_path, payload, spec) is None


def test_read_item_reads_an_unaligned_index(tmp_path):
    """An index that is contiguous but not aligned (a view one byte into a buffer): its row is
    copied out, so the read equals the aligned index's (under UBSan, tests/scenarios/test_sanitizers.py,
    a misaligned int64 load aborts)."""
    payloads = [make_example({"a": i, "x": np.arange(i, i + 3, dtype=np.float32)}) for i in range(3)]
    framed = [frame(p) for p in payloads]
    path = tmp_path / "three.bin"
    path.write_bytes(b"".join(framed))
    offsets = np.cumsum([0] + [len(f) for f in framed[:-1]])
    aligned = np.array([[o, len(f)] for o, f in zip(offsets, framed)], np.int64)
    unaligned = np.frombuffer(b"\0" + aligned.tobytes(), np.int64, offset=1).reshape(3, 2)
    assert unaligned.flags.c_contiguous and not unaligned.flags.aligned
    spec, plan = plan_and_record({"a": Int64(), "x": Float(shape=(3,))})
    fd = os.open(path, os.O_RDONLY)
    try:
        for r, payload in enumerate(payloads):
            got = codec.read_item(fd, unaligned, r, True, plan, torch.from_numpy)
            want = decode(parse_example(payload), spec)
            assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want), r
    finally:
        os.close(fd)


class Raises:
    """A flag whose truth cannot be told."""

    def __bool__(self):
        raise ValueError("no truth here")


def test_a_plan_flag_that_raises_gives_its_error(tmp_path):
    """The plan's is_float is asked for its truth; where that raises, its own error propagates
    (not a SystemError, "a result with an exception set")."""
    spec, plan = plan_and_record({"a": Int64()})
    ((name, key, _, shape),) = plan
    path = tmp_path / "item.bin"
    path.write_bytes(frame(make_example({"a": 1})))
    fd = os.open(path, os.O_RDONLY)
    try:
        index = np.array([[0, path.stat().st_size]], np.int64)
        assert codec.read_item(fd, index, 0, True, plan, torch.from_numpy) is not None
        with pytest.raises(ValueError, match="no truth here"):
            codec.read_item(fd, index, 0, True, (plan[0], (name, key, Raises(), shape)), torch.from_numpy)
    finally:
        os.close(fd)


def test_unplanned_features_are_still_checked(tmp_path):
    """A malformed feature the spec does not ask for: protobuf rejects the
    record, so the compiled reader must not answer for it."""
    entry_b = b"\x0a\x0a" + b"\x0a\x01b" + b"\x12\x05\x1a\x03\x0a\x05\x01"  # "b": an Int64List cut short
    payload = make_example({"a": 1})
    assert read_item(tmp_path, payload, {"a": Int64()}) is not None
    broken = b"\x0a" + bytes([len(payload) - 2 + len(entry_b)]) + payload[2:] + entry_b
    assert read_item(tmp_path, broken, {"a": Int64()}) is None
    with pytest.raises(Exception):  # noqa: B017 -- protobuf's own error, whatever it is
        codec.parse_example_protobuf(broken)


def test_plans_only_fixed_numeric_specs():
    assert item_plan(bind({"a": Int64(), "b": Float(shape=(2,)), "c": Int64(shape=None)})) == (
        ("a", b"a", False, ()), ("b", b"b", True, (2,)), ("c", b"c", False, None))
    assert item_plan(bind({"a": Int64(), "s": Bytes()})) is None
    assert item_plan(bind({"a": Float(shape=(-1, 2))})) is None
    assert item_plan(None) is None


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "d.tfrecord"
    with RecordWriter(path) as w:
        for i in range(200):
            fields = {"id": i, "x": np.full(4, i, np.float32), "name": b"r%d" % i}
            if i % 50 == 7:
                fields = {"id": i, "x": np.zeros(3, np.float32)}  # x of another size, no name
            w.write(make_example(fields))
    build_index(path)
    return path


SPECS = [
    {"id": Int64(), "x": Float(shape=(4,))},  # planned
    {"id": Int64(), "x": Float(shape=None), "name": Bytes(default=b"-")},  # read_example + decode
    None,  # parse_example dicts
]


def items(ds, order):
    return [ds[i] for i in order]


def same(a, b):
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("spec", SPECS, ids=["planned", "parsed", "no spec"])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_dataset_items_equal_the_usual_path(shard, spec, on_error, monkeypatch):
    order = np.random.default_rng(0).permutation(200).tolist()

    def run():
        ds = IndexedTFRecordDataset(shard, features=spec, on_error=on_error)
        out = []
        for i in order:
            try:
                out.append(ds[i])
            except FeatureError as e:
                out.append(str(e))
        return out, ds.__getitems__(order[:64]) if on_error == "skip" else None, ds.errors()

    answered = []
    real = recordspec.read_item if spec is SPECS[0] else recordspec.read_example
    monkeypatch.setattr(recordspec, real.__name__, lambda *a: answered.append(real(*a)) or answered[-1])
    fast = run()
    assert sum(x is not None for x in answered) >= 196  # the compiled reader read the good records
    monkeypatch.setattr(fetch, "compiled_reader", lambda: False)
    monkeypatch.setattr(codec, "_FAST", None)
    usual = run()
    assert all(same(a, b) for a, b in zip(fast[0], usual[0]))
    if spec is SPECS[0]:  # the records of another size: the same error, naming the record
        assert sum(isinstance(x, str) for x in fast[0]) == (4 if on_error == "raise" else 0)
        assert all("record 7" in x or "record 57" in x or "record 107" in x or "record 157" in x
                   for x in fast[0] if isinstance(x, str))
    if fast[1] is not None:
        assert all(same(a, b) for a, b in zip(fast[1], usual[1]))
    assert fast[2] == usual[2]


def test_a_corrupt_record_is_named_and_replaced(shard):
    data = bytearray(shard.read_bytes())
    ds = IndexedTFRecordDataset(shard, features=SPECS[0])
    offset, size = (int(v) for v in ds.indexes[0][3])
    data[offset + size - 5] ^= 1  # the last payload byte of record 3: inside a float of "x"
    shard.write_bytes(bytes(data))
    ds = IndexedTFRecordDataset(shard, features=SPECS[0])
    with pytest.raises(CorruptRecordError, match=f"offset {offset}.*record 3|record 3.*offset {offset}"):
        ds[3]
    skipping = IndexedTFRecordDataset(shard, features=SPECS[0], on_error="skip")
    assert int(skipping[3]["id"]) == 4 and skipping.errors()["total"] == 1
    unchecked = IndexedTFRecordDataset(shard, features=SPECS[0], verify=False)
    assert unchecked[3]["x"][3] != 3 and unchecked[3]["x"][:3].tolist() == [3, 3, 3]  # read as it is


def test_a_replaced_spec_is_planned_afresh(shard):
    ds = IndexedTFRecordDataset(shard, features=SPECS[0])
    assert ds[1]["x"].shape == (4,)
    ds.spec = bind({"id": Int64()})
    assert list(ds[1]) == ["id"]


def test_eight_threads_and_forked_workers(shard):
    ds = IndexedTFRecordDataset(shard, features=SPECS[0], on_error="skip")
    want = {i: int(ds[i]["id"]) for i in range(200)}
    errors = []

    def work():
        for i in np.random.default_rng().permutation(200).tolist():
            if int(ds[i]["id"]) != want[i]:
                errors.append(i)

    assert not in_threads(work) and not errors
    loader = DataLoader(ds, batch_size=16, num_workers=2, shuffle=False)
    ids = torch.cat([b["id"] for b in loader]).tolist()
    assert ids == [want[i] for i in range(200)]


def test_read_frames_equals_the_records_or_leaves_them(tmp_path):
    from tfrecord_torch import read_records
    from tfrecord_torch.records.crc import crc32c as crc

    path = tmp_path / "f.tfrecord"
    payloads = [make_example({"i": i, "blob": b"x" * (i * 300)}) for i in range(12)]  # small and over 1 KiB
    with RecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    build_index(path)
    index = load_index(f"{path}.index")
    assert list(read_records(path)) == payloads
    fd = os.open(path, os.O_RDONLY)
    try:
        assert frames.read_frames(fd, index, 0, 12, True, crc) == payloads
        assert frames.read_frames(fd, index, 3, 7, True, crc) == payloads[3:7]
        gap = index.copy()
        gap[5, 0] += 1
        assert frames.read_frames(fd, gap, 3, 7, True, crc) is None  # not adjacent
        longer = index.copy()
        longer[11, 1] += 8
        assert frames.read_frames(fd, longer, 10, 12, True, crc) is None  # past the end of the file
        assert frames.read_frames(fd, index, 12, 13, True, crc) is None  # past the index
    finally:
        os.close(fd)
    data = bytearray(path.read_bytes())
    for r in (1, 9):  # a short payload (own CRC) and a long one (the crc32c package's)
        damaged = bytearray(data)
        damaged[int(index[r, 0]) + int(index[r, 1]) - 5] ^= 1  # the payload's last byte
        path.write_bytes(bytes(damaged))
        fd = os.open(path, os.O_RDONLY)
        try:
            assert frames.read_frames(fd, index, 0, 12, True, crc) is None
            unchecked = frames.read_frames(fd, index, 0, 12, False, crc)
            assert unchecked[r] != payloads[r] and unchecked[:r] == payloads[:r]
        finally:
            os.close(fd)


def _flip_footer(path, index, r):
    """Record ``r``'s payload CRC damaged in the file at ``path``; its bytes before."""
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[int(index[r, 0]) + int(index[r, 1]) - 1] ^= 1
    path.write_bytes(bytes(damaged))
    return data


def _indexed_shard(path, payloads):
    with RecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    build_index(path)
    return load_index(f"{path}.index")


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
def test_read_frames_of_runs_longer_than_one_read_call(tmp_path):
    """Runs of more records than one vectored read takes (341): every payload,
    the empty ones too, whatever run is asked; a file cut short or a frame
    damaged in a later call leaves the run to the usual path."""
    path = tmp_path / "many.tfrecord"
    payloads = [bytes([i % 251]) * (i % 7 * 300) for i in range(1200)]  # empty, short and over 1 KiB
    index = _indexed_shard(path, payloads)
    fd = os.open(path, os.O_RDONLY)
    try:
        for r0, r1 in [(0, 1200), (0, 341), (0, 342), (340, 683), (0, 511), (510, 1023), (1, 1200), (1199, 1200)]:
            assert frames.read_frames(fd, index, r0, r1, True, crc32c) == payloads[r0:r1]
            assert frames.read_frames(fd, index, r0, r1, False, crc32c) == payloads[r0:r1]
    finally:
        os.close(fd)
    data = _flip_footer(path, index, 1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert frames.read_frames(fd, index, 0, 1200, True, crc32c) is None
        assert frames.read_frames(fd, index, 0, 1200, False, crc32c) == payloads  # only a CRC is wrong
    finally:
        os.close(fd)
    path.write_bytes(data[:-3])  # the last footer cut short: the last call's read comes back short
    fd = os.open(path, os.O_RDONLY)
    try:
        for verify in (True, False):
            assert frames.read_frames(fd, index, 0, 1200, verify, crc32c) is None
            assert frames.read_frames(fd, index, 0, 1199, verify, crc32c) == payloads[:1199]
    finally:
        os.close(fd)


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
def test_read_records_equals_the_records_in_any_order_or_leaves_them(tmp_path):
    """Records anywhere in a shard (a shuffled batch's), in the order asked:
    stretches of adjacent ones, lone ones, repeats, more than one vectored
    read takes; a number outside the index, a records array it cannot use, a
    damaged frame or a file cut short leave them to the usual path."""
    path = tmp_path / "many.tfrecord"
    payloads = [bytes([i % 251]) * (i % 7 * 300) for i in range(1200)]  # empty, short and over 1 KiB
    index = _indexed_shard(path, payloads)
    rng = np.random.default_rng(0)
    asked = [np.arange(1200), rng.permutation(1200), np.sort(rng.choice(1200, 400, replace=False)),
             np.array([7]), np.array([5, 6, 7, 3, 4, 1199, 0, 0]), np.arange(1199, -1, -1)]
    fd = os.open(path, os.O_RDONLY)
    try:
        for records in asked:
            records = records.astype(np.int64)
            for verify in (True, False):
                assert frames.read_records(fd, index, records, verify, crc32c) == [payloads[r] for r in records]
        for records in (np.array([3, 1200]), np.array([-1, 2]), np.array([], np.int64), np.array([1, 2], np.int32),
                        np.array([[1, 2]]), np.arange(10)[::2], [1, 2]):
            assert frames.read_records(fd, index, records, True, crc32c) is None
        assert frames.read_records(fd, index.astype(np.int32), np.array([1]), True, crc32c) is None
    finally:
        os.close(fd)
    data = _flip_footer(path, index, 1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        records = np.array([3, 1000, 20], np.int64)
        assert frames.read_records(fd, index, records, True, crc32c) is None
        assert frames.read_records(fd, index, records, False, crc32c) == [payloads[r] for r in records]
        assert frames.read_records(fd, index, np.array([3, 20]), True, crc32c) == [payloads[3], payloads[20]]
    finally:
        os.close(fd)
    path.write_bytes(data[:-3])  # the last footer cut short
    fd = os.open(path, os.O_RDONLY)
    try:
        assert frames.read_records(fd, index, np.array([5, 1199]), False, crc32c) is None
        assert frames.read_records(fd, index, np.array([1198, 5]), False, crc32c) == [payloads[1198], payloads[5]]
    finally:
        os.close(fd)


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
def test_read_frames_reads_payloads_with_no_buffer_of_the_run(tmp_path):
    """Each payload is read straight into its bytes: what a run's read
    allocates at its peak is the payloads and a little more, not a buffer of
    the whole run beside them (a fresh one per call costs a page fault per
    4 KiB in a DataLoader worker)."""
    import tracemalloc

    path = tmp_path / "big.tfrecord"
    payloads = [bytes([i]) * 100_000 for i in range(40)]  # 4 MB in all
    index = _indexed_shard(path, payloads)
    fd = os.open(path, os.O_RDONLY)
    tracemalloc.start()
    try:
        got = frames.read_frames(fd, index, 0, 40, True, crc32c)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        os.close(fd)
    assert got == payloads
    assert peak < 1.1 * sum(map(len, payloads))


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
def test_cut_frames_equals_the_records_or_leaves_them(tmp_path):
    """Frames cut from bytes fetched from a record's offset on (a window of a
    bucket's shard): the payloads, or None for frames that are not adjacent,
    run past the bytes given, or fail a length or CRC check."""
    path = tmp_path / "f.tfrecord"
    payloads = [make_example({"i": i, "blob": b"x" * (i * 300)}) for i in range(12)]  # small and over 1 KiB
    index = _indexed_shard(path, payloads)
    data = path.read_bytes()
    window = data[int(index[3, 0]):]
    assert frames.cut_frames(data, index, 0, 12, True, crc32c) == payloads
    assert frames.cut_frames(memoryview(window), index, 3, 7, True, crc32c) == payloads[3:7]
    assert frames.cut_frames(window, index, 3, 12, False, crc32c) == payloads[3:]
    gap = index.copy()
    gap[5, 0] += 1
    assert frames.cut_frames(window, gap, 3, 7, True, crc32c) is None  # not adjacent
    assert frames.cut_frames(window[:-1], index, 3, 12, True, crc32c) is None  # the last frame cut short
    assert frames.cut_frames(window, index, 12, 13, True, crc32c) is None  # past the index
    assert frames.cut_frames(window[1:], index, 3, 7, True, crc32c) is None  # not at the first frame: its length
    for r in (1, 9):  # a short payload (own CRC) and a long one (the crc32c package's)
        damaged = bytearray(data)
        damaged[int(index[r, 0]) + int(index[r, 1]) - 5] ^= 1  # the payload's last byte
        assert frames.cut_frames(bytes(damaged), index, 0, 12, True, crc32c) is None
        unchecked = frames.cut_frames(bytes(damaged), index, 0, 12, False, crc32c)
        assert unchecked[r] != payloads[r] and unchecked[:r] == payloads[:r]
    header = bytearray(data)
    header[int(index[4, 0]) + 9] ^= 1  # a length CRC
    assert frames.cut_frames(bytes(header), index, 0, 12, True, crc32c) is None
