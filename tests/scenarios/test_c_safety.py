"""The compiled helpers (features/images/_jpegcrop.c, example/_fastwire.c) on input
built to break them: crop windows outside the image, JPEG headers of random bytes and mutated
JPEGs (walked as libjpeg walks them, TensorFlow's libjpeg and Pillow the oracles), varints protobuf refuses,
shapes too large for an array, and index rows that are negative, overflow or
change during a read. Each gives what the pure-Python path gives (a clear
error, protobuf's answer, the records) and touches no memory it does not own;
tests/scenarios/test_sanitizers.py runs this file under AddressSanitizer and UBSan."""

import os

import numpy as np
import pytest
from helpers import png_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_torch import (
    ExampleDecodeError,
    FeatureError,
    IndexedTFRecordDataset,
    Int64,
    RecordWriter,
    build_index,
    load_index,
    make_example,
    make_sequence_example,
    parse_example,
    parse_sequence_example,
)
from tfrecord_torch.example import codec
from tfrecord_torch.example.codec import parse_example_protobuf, parse_sequence_example_protobuf
from tfrecord_torch.features.images import jpeg as jpeg_module
from tfrecord_torch.features.images import limits
from tfrecord_torch.features.images.jpeg import crop_decoding_available, decode_jpeg, decode_jpeg_window
from tfrecord_torch.records import frames
from tfrecord_torch.records.crc import crc32c, masked_crc32c

compiled = pytest.mark.skipif(codec._FAST is None, reason="the compiled decoder is not built")


def jpeg(h=75, w=101):
    rng = np.random.default_rng(0)
    return png_bytes(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "JPEG", quality=90)


# -- crop windows ---------------------------------------------------------------------------------

OUTSIDE = [
    (0, -8, 75, 109),  # a negative left whose sum with the width wraps to the image's width
    (-8, 0, 83, 101),  # a negative top likewise
    (0, -1, 75, 1),
    (-1, -1, 1, 1),
    (0, 0, 0, 5),
    (0, 0, 5, -5),
    (0, 0, 75, 2**32 + 101),  # wraps to 101 in 32 bits
    (2**32, 0, 1, 1),
    (0, 0, 75, 2**40),
    (2**70, 0, 1, 1),
    (0, 2**63 - 1, 1, 2**63 - 1),
]


@pytest.mark.parametrize("helper", [True, False])
@pytest.mark.parametrize("box", OUTSIDE)
def test_a_window_outside_the_image_is_refused(helper, box, monkeypatch):
    if helper and not crop_decoding_available():
        pytest.skip("the crop helper is not built")
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    with pytest.raises(ValueError, match="crop window .*outside"):
        decode_jpeg_window(jpeg(), box)


def test_a_window_at_the_edges_equals_the_full_decode_sliced():
    data = jpeg()
    full = decode_jpeg(data)
    for top, left, h, w in [(0, 0, 75, 101), (74, 100, 1, 1), (np.int64(3), np.int64(5), np.int64(7), 96)]:
        got = decode_jpeg_window(data, (top, left, h, w))
        np.testing.assert_array_equal(got, full[top:top + h, left:left + w])


def test_a_batch_of_an_impossible_size_is_refused():
    if not crop_decoding_available():
        pytest.skip("the crop helper is not built")
    out = np.empty((1, 1, 1, 3), np.uint8)
    with pytest.raises(ValueError, match="not a JPEG size"):
        jpeg_module._CROP.decode_many([jpeg()], out, -1, 2**40, True)


def _claimed(images=2, out=(2, 4, 6, 3), slots=(0, 1), claim=0, size=(4, 6)):
    """decode_claimed's arguments, each replaceable by a crafted one."""
    data = [jpeg(4, 6)] * images
    out = np.zeros(out, np.uint8) if isinstance(out, tuple) else out
    slots = np.array(slots, np.int64) if isinstance(slots, tuple) else slots
    claim = np.array([claim], np.int64) if isinstance(claim, int) else claim
    return data, out, slots, claim, size[0], size[1], True


CLAIMED = {
    "a negative slot": (dict(slots=(0, -1)), ValueError, "slots\\[1\\] = -1 is not a slot of out"),
    "a slot past out": (dict(slots=(0, 2)), ValueError, "slots\\[1\\] = 2 is not a slot of out"),
    "a slot past 2**62": (dict(slots=(0, 2**62)), ValueError, "is not a slot of out"),
    "slots one short": (dict(slots=(0,)), ValueError, "slots must hold 2 int64"),
    "slots of 12 bytes": (dict(slots=np.zeros(3, np.int32)), ValueError, "slots must hold 2 int64"),
    "out not whole slots": (dict(out=np.zeros(2 * 4 * 6 * 3 + 1, np.uint8)), ValueError, "N x 4 x 6 x 3"),
    "out not contiguous": (dict(out=np.zeros((2, 4, 12, 3), np.uint8)[:, :, ::2]), TypeError,
                           "argument 2 must be read-write"),
    "a claim too short": (dict(claim=np.zeros(1, np.int32)), ValueError, "one int64"),
    "a claim not aligned": (dict(claim=np.frombuffer(bytearray(17), np.uint8)[1:9]), ValueError, "aligned"),
    "a claim read-only": (dict(claim=b"\0" * 8), TypeError, "argument 4 must be read-write"),
    "no height": (dict(size=(0, 6)), ValueError, "not a JPEG size"),
    "a height past 2**40": (dict(size=(2**40, 6)), ValueError, "not a JPEG size"),
    "a negative width": (dict(size=(4, -6)), ValueError, "not a JPEG size"),
}


@pytest.mark.parametrize("case", CLAIMED)
def test_crafted_claims_are_refused_before_any_write(case):
    """decode_claimed checks every slot number, out and the claim before the GIL goes: a slot outside
    out, a short or misaligned claim, a size no JPEG has are refused, out untouched."""
    if not crop_decoding_available():
        pytest.skip("the crop helper is not built")
    changes, error, words = CLAIMED[case]
    args = _claimed(**changes)
    with pytest.raises(error, match=words):
        jpeg_module._CROP.decode_claimed(*args)
    out = args[1]
    if isinstance(out, np.ndarray):
        assert not out.any()


@pytest.mark.parametrize("start", [-1, -(2**63), 2, 2**63 - 1, 2**62])
def test_a_claim_outside_the_images_decodes_nothing(start):
    """A counter already past the images (or negative, or about to wrap) ends the call at once."""
    if not crop_decoding_available():
        pytest.skip("the crop helper is not built")
    data, out, slots, claim, h, w, fast = _claimed(claim=start)
    assert jpeg_module._CROP.decode_claimed(data, out, slots, claim, h, w, fast) == []
    assert not out.any()


def test_a_claim_shares_a_batch_between_calls():
    if not crop_decoding_available():
        pytest.skip("the crop helper is not built")
    data, out, slots, claim, h, w, fast = _claimed(images=2, claim=1)  # image 0 taken by someone else
    assert jpeg_module._CROP.decode_claimed(data, out, slots, claim, h, w, fast) == []
    assert not out[0].any() and out[1].any() and claim[0] == 3
    np.testing.assert_array_equal(out[1], decode_jpeg(data[1]))


# -- JPEG headers of a batch ----------------------------------------------------------------------

header_scan = pytest.mark.skipif(limits._HELPER is None, reason="the compiled helper is not built")


def _answers(images):
    """Each image's header, or its error's type and message, from read_header one by one."""
    out = []
    for data in images:
        try:
            out.append(limits.read_header(data))
        except Exception as e:  # noqa: BLE001 - compared, not raised
            out.append((type(e), str(e)))
    return out


def _batch_answers(images):
    return [(type(h), str(h)) if isinstance(h, Exception) else h for h in limits.read_headers(images)]


@header_scan
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_after_the_jpeg_magic_get_read_headers_answer(tails):
    """JPEG magic followed by random bytes (markers, lengths, fill bytes cut
    anywhere): the compiled scan answers as read_header, reading nothing past the end."""
    images = [b"\xff\xd8\xff" + tail for tail in tails]
    assert _batch_answers(images) == _answers(images)


@header_scan
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_a_mutated_jpeg_header_gets_read_headers_answer(data):
    """A real JPEG's header with bytes overwritten, then cut: the same answer as read_header."""
    original = bytearray(jpeg()[:700])
    for _ in range(data.draw(st.integers(0, 6))):
        original[data.draw(st.integers(3, len(original) - 1))] = data.draw(st.sampled_from([0, 1, 0xC0, 0xC2, 0xC4,
                                                                                            0xD9, 0xFF, 0x80]))
    image = bytes(original[:data.draw(st.integers(3, len(original)))])
    assert _batch_answers([image]) == _answers([image])


# Pieces a mutation inserts: standalone markers (RST, TEM), fill and stuffed bytes, garbage, SOI and EOI,
# markers libjpeg refuses, empty or short segments, a second frame, DNL
PIECES = [b"\xff\xd0", b"\xff\xd7", b"\xff\x01", b"\xff", b"\xff\xff", b"\x00", b"\xff\x00", b"\x12\x34",
          b"\xff\xd8", b"\xff\xd9", b"\xff\xc8", b"\xff\xfe\x00\x00", b"\xff\xe1\x00\x01",
          b"\xff\xdd\x00\x04\x00\x01", b"\xff\xc0\x00\x0b\x08\x00\x10\x00\x10\x01\x01\x11\x00", b"\xff\xf0",
          b"\xff\xdc\x00\x04\x00\x10"]
BYTES = [0x00, 0x01, 0xFF, 0xD0, 0xD5, 0xD8, 0xD9, 0xDA, 0xC0, 0xC2, 0xC4, 0xC8, 0xCC, 0xDB, 0xDD, 0xE0, 0xFE, 0x80]


def mutated_jpegs(count):
    """``count`` JPEGs (baseline, progressive, gray, EXIF, 4:4:4 with a comment, other tables) with one
    to three pieces inserted, bytes overwritten, deleted or flipped before the scan's data; one in ten
    cut short."""
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)
    seeds = [png_bytes(a, "JPEG", quality=90), png_bytes(a, "JPEG", progressive=True), png_bytes(a[..., 0], "JPEG"),
             png_bytes(a, "JPEG", exif=b"Exif\0\0" + bytes(60)), png_bytes(a, "JPEG", subsampling=0, comment=b"hello"),
             png_bytes(a, "JPEG", qtables="web_low")]
    out = []
    for i in range(count):
        data = bytearray(seeds[i % len(seeds)])
        scan = data.index(b"\xff\xda")
        for _ in range(int(rng.integers(1, 4))):
            kind, pos = int(rng.integers(0, 4)), int(rng.integers(2, scan + 4))
            if kind == 0:
                data[pos:pos] = PIECES[int(rng.integers(0, len(PIECES)))]
            elif kind == 1:
                data[pos] = BYTES[int(rng.integers(0, len(BYTES)))]
            elif kind == 2:
                del data[pos:pos + int(rng.integers(1, 4))]
            else:
                data[pos] ^= 1 << int(rng.integers(0, 8))
        if rng.random() < 0.1:
            data = data[:int(rng.integers(3, len(data)))]
        out.append(bytes(data))
    return out


def test_mutated_jpegs_are_walked_as_libjpeg_reads_them():
    """2,000 mutated JPEGs: the compiled walk and the Python walk give the same header or the same
    error, and wherever libjpeg reads a size (TensorFlow's extract_jpeg_shape, or Pillow's decode)
    the walk gives that size: it never refuses such a file, nor reads another size. Where it
    refuses, the error is one of the documented "JPEG header ..." ones."""
    import io

    import tensorflow as tf
    from PIL import Image as PILImage

    images = [data for data in mutated_jpegs(2000) if limits.image_format(data) == "jpeg"]
    python = _answers(images)
    if limits._HELPER is not None:
        assert _batch_answers(images) == python
    read = refused = 0
    for data, header in zip(images, python):
        walk = (header.width, header.height) if isinstance(header, limits.Header) else None
        if walk is None:
            assert header[0] is ValueError and header[1].startswith("JPEG header "), header
            refused += 1
        try:
            shape = tf.io.extract_jpeg_shape(data).numpy()
            oracles = [("libjpeg (TensorFlow)", (int(shape[1]), int(shape[0])))]
        except tf.errors.InvalidArgumentError:
            oracles = []
        try:
            with PILImage.open(io.BytesIO(data)) as image:
                image.load()
                oracles.append(("Pillow", image.size))
        except Exception:  # noqa: BLE001 - Pillow refuses it: no size to compare
            pass
        for name, size in oracles:
            assert walk == size, f"{name} reads {size}, the walk gives {header}: {data[:80]!r}"
        read += bool(oracles)
    assert read > 1000 and refused > 500, (read, refused)  # both kinds well represented


def _scan_damaged(images, seed):
    """``images`` with bytes of their entropy-coded data overwritten or cut, beside the headers
    mutated_jpegs damages: what libjpeg warns of while decoding rows."""
    rng = np.random.default_rng(seed)
    out = []
    for data in images:
        data = bytearray(data)
        scan = data.rfind(b"\xff\xda")
        if scan >= 0 and len(data) > scan + 20 and rng.random() < 0.5:
            for _ in range(int(rng.integers(1, 6))):
                data[int(rng.integers(scan + 14, len(data)))] = int(rng.integers(0, 256))
        out.append(bytes(data))
    return out


def test_damaged_jpegs_decode_to_planes_as_to_rows_or_fail_alike():
    """1,500 JPEGs damaged in their headers or their scans, decoded straight to planes by the
    compiled helper: where the row decode (decode_many) gives pixels, the planes hold the same
    pixels; where it fails, this fails too, with a ValueError, and a size the header does not
    give is refused before a row is read. Run under AddressSanitizer by test_sanitizers.py."""
    decode = jpeg_module._DECODE_PLANES
    if decode is None:
        pytest.skip("the crop helper is not built")
    decoded = failed = 0
    for i, data in enumerate(_scan_damaged(mutated_jpegs(1500), seed=5)):
        try:
            header = limits.read_header(data)
        except ValueError:
            header = None
        h, w = (header.height, header.width) if header is not None and header.width * header.height else (24, 40)
        if h * w > 1 << 20:
            continue
        rows = np.zeros((1, h, w, 3), np.uint8)
        row_error = jpeg_module._CROP.decode_many([data], rows, h, w, i % 2 == 0)[0]
        planes = np.zeros((3, h, w), np.uint8)
        try:
            decode(data, planes, h, w, i % 2 == 0)
        except ValueError as e:
            assert row_error is not None, f"planes refused what rows decode: {e}: {data[:80]!r}"
            assert str(e) == row_error
            failed += 1
            continue
        assert row_error is None, f"rows refused what planes decode: {row_error}"
        np.testing.assert_array_equal(planes, rows[0].transpose(2, 0, 1))
        decoded += 1
    assert decoded > 100 and failed > 500, (decoded, failed)  # both well represented (164 and 1,334)


# -- varints protobuf refuses ---------------------------------------------------------------------

def varint(value, size):
    """value as a varint of exactly size bytes (padded with continuation bytes)."""
    return bytes(((value >> 7 * i) & 0x7F) | (0x80 if i < size - 1 else 0) for i in range(size))


def delimited(number, body, tag_size=1, length_size=1):
    return varint(number << 3 | 2, tag_size) + varint(len(body), length_size) + body


def example_with(where, size):
    """Example {"a": [5]} with the tag or length at ``where`` written in ``size`` bytes."""
    sizes = dict.fromkeys(["example", "entry", "key", "list", "packed"], (1, 1))
    sizes[where] = (size, 1) if where == "list" else (1, size) if where in ("key", "packed") else (size, size)
    values = delimited(1, b"\x05", *sizes["packed"])  # Int64List.value, packed
    feature = delimited(3, values)
    entry = delimited(1, b"a", *sizes["key"]) + delimited(2, feature)
    if where == "list":  # the Int64List's value unpacked: its own tag padded
        feature = delimited(3, varint(1 << 3, size) + b"\x05")
        entry = delimited(1, b"a") + delimited(2, feature)
    features = delimited(1, entry, *sizes["entry"])
    return delimited(1, features, *sizes["example"])


def outcome(parse, payload):
    try:
        return {key: np.asarray(value).tolist() for key, value in parse(payload).items()}
    except ExampleDecodeError:
        return "refused"


@compiled
@pytest.mark.parametrize("where", ["example", "entry", "key", "list", "packed"])
@pytest.mark.parametrize("size", range(1, 12))
def test_padded_tags_and_lengths_get_protobufs_answer(where, size):
    payload = example_with(where, size)
    want = outcome(parse_example_protobuf, payload)
    assert want == ({"a": [5]} if size <= 5 else "refused")  # what upb accepts: at most 5 bytes
    assert outcome(parse_example, payload) == want
    if size > 5:
        assert codec._FAST.parse_example(payload) is None  # left to protobuf


@compiled
def test_a_tag_above_32_bits_gets_protobufs_answer():
    payload = make_example({"a": 5})
    for tag in (1 << 32 | 0x0A, (1 << 35) - 1):
        crafted = varint(tag, 5) + payload[1:]
        assert outcome(parse_example, crafted) == outcome(parse_example_protobuf, crafted) == "refused"


@compiled
@pytest.mark.parametrize("size", [5, 6, 10])
def test_padded_sequence_example_tags_get_protobufs_answer(size):
    lists = make_sequence_example({}, {"s": [[1], [2]]})
    crafted = varint(2 << 3 | 2, size) + lists[1:]  # SequenceExample.feature_lists, its tag padded

    def answer(parse):
        try:
            context, steps = parse(crafted)
        except ExampleDecodeError:
            return "refused"
        return context, {key: [np.asarray(v).tolist() for v in value] for key, value in steps.items()}

    assert answer(parse_sequence_example) == answer(parse_sequence_example_protobuf)
    assert answer(parse_sequence_example_protobuf) == ("refused" if size > 5 else ({}, {"s": [[1], [2]]}))


@compiled
def test_empty_messages_decode_to_empty_dicts():
    assert codec._FAST.parse_example(make_example({})) == {}
    assert codec._FAST.parse_example(b"") == {}
    assert codec._FAST.parse_sequence_example(b"") == ({}, {})
    assert parse_sequence_example(make_sequence_example({}, {"s": []}))[1] == {"s": []}


# -- shapes too large for an array ----------------------------------------------------------------

@compiled
@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**62, 4), (2**31, 2**31, 3), (3, 2**61)])
def test_a_shape_too_large_for_an_array_is_a_feature_error(tmp_path, shape):
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example({"a": np.zeros(0, np.int64)}))
        w.write(make_example({"a": [1, 2, 3]}))
    build_index(path)
    ds = IndexedTFRecordDataset(str(path), features={"a": Int64(shape=shape)})
    for r in range(2):
        with pytest.raises(FeatureError, match=rf"record {r} at byte offset \d+: feature 'a': holds"):
            ds[r]


# -- index rows ------------------------------------------------------------------------------------

def frame(payload):
    n = len(payload).to_bytes(8, "little")
    return n + masked_crc32c(n).to_bytes(4, "little") + payload + masked_crc32c(payload).to_bytes(4, "little")


@pytest.fixture
def shard(tmp_path):
    """(path, index, payloads): 6 records, the odd ones over 1 KiB (their CRC computed by crc)."""
    path = tmp_path / "f.tfrecord"
    payloads = [make_example({"i": i, "blob": b"x" * (1500 * (i % 2))}) for i in range(6)]
    with RecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    build_index(path)
    return path, load_index(f"{path}.index"), payloads


def read_frames(path, index, r0, r1, verify=True, crc=crc32c):
    fd = os.open(path, os.O_RDONLY)
    try:
        return frames.read_frames(fd, index, r0, r1, verify, crc)
    finally:
        os.close(fd)


def read_records(path, index, records, verify=True, crc=crc32c):
    fd = os.open(path, os.O_RDONLY)
    try:
        return frames.read_records(fd, index, np.asarray(records, np.int64), verify, crc)
    finally:
        os.close(fd)


BIG = 2**63 - 1
CRAFTED = [
    [[16, BIG]],  # offset + size overflows
    [[0, BIG], [BIG, BIG], [-2, 102]],  # the sums wrap round to a 100-byte span
    [[0, 2**62], [2**62, 2**62]],
    [[-32, 48], [16, 32]],  # starts before the file
    [[BIG - 16, 32]],
    [[0, 32], [32, -16]],
    [[0, 32], [32, 2**40]],
]


@compiled
@pytest.mark.parametrize("rows", CRAFTED)
def test_crafted_index_rows_are_left_to_the_usual_path(tmp_path, rows):
    """Rows no shard can have: None (the usual path then reads and names the
    record), never an allocation of their size or a read outside the buffer."""
    path = tmp_path / "crafted.bin"
    # a file whose first frame claims the length the first row implies, CRC and all
    length = (rows[0][1] - 16) % 2**64
    head = length.to_bytes(8, "little")
    path.write_bytes(head + masked_crc32c(head).to_bytes(4, "little") + bytes(200))
    index = np.array(rows, np.int64)
    for verify in (True, False):
        assert read_frames(path, index, 0, len(rows), verify) is None
        assert frames.cut_frames(path.read_bytes(), index, 0, len(rows), verify, crc32c) is None
        for records in (np.arange(len(rows)), np.arange(len(rows))[::-1].copy()):
            assert read_records(path, index, records, verify) is None
        for r in range(len(rows)):
            fd = os.open(path, os.O_RDONLY)
            try:
                assert codec.read_item(fd, index, r, verify, (("a", b"a", False, ()),), np.asarray) is None
                assert codec.read_example(fd, int(index[r, 0]), int(index[r, 1]), verify) is None
            finally:
                os.close(fd)


_ROW_VALUES = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, 12, 15, 16, 17, 2**31, 2**32, 2**40,
                                                                           2**63 - 1 - (64 << 20), 2**63 - 1, -1]),
                        st.integers(0, 6000))


@compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # read only
@given(changes=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1), _ROW_VALUES), max_size=4),
       records=st.lists(st.integers(-3, 8), min_size=1, max_size=12), verify=st.booleans())
def test_read_records_of_mutated_rows_gives_the_frames_or_none(shard, changes, records, verify):
    """Index rows changed to any value and any record numbers: read_records
    gives None or exactly the payloads the Python path reads at those rows
    (os.pread and parse_frame), never a read outside its buffers (run under
    ASan by test_sanitizers.py)."""
    from tfrecord_torch.records.framing import parse_frame

    path, index, _ = shard
    index = index.copy()
    for row, column, value in changes:
        index[row, column] = value
    got = read_records(path, index, records, verify)
    if got is None:
        return
    assert all(0 <= r < len(index) for r in records)
    fd = os.open(path, os.O_RDONLY)
    try:
        for r, payload in zip(records, got):
            offset, size = int(index[r, 0]), int(index[r, 1])
            assert payload == parse_frame(os.pread(fd, size, offset), name="f", offset=offset, record=r, verify=verify)
    finally:
        os.close(fd)


@compiled
@pytest.mark.parametrize("change", [17, "just past the read", 2**40, -(2**40)])
def test_an_index_changed_during_the_read_does_not_move_the_frames(shard, change):
    """crc runs Python code in the middle of the read: the rows are the ones
    the call was given, whatever happens to the caller's array meanwhile."""
    path, index, payloads = shard
    index = index.copy()
    if change == "just past the read":  # frame 2 would start a few bytes past the buffer
        change = int(index[:, 1].sum())

    def crc(data):  # the crc32c package's function, which also rewrites the index
        index[:, 1] = change
        index[:, 0] = change
        return crc32c(data)

    assert read_frames(path, index, 0, 6, True, crc) == payloads
    index[:] = load_index(f"{path}.index")
    records = np.array([5, 1, 3, 2], np.int64)
    assert read_records(path, index, records, True, crc) == [payloads[r] for r in records]
    index[:] = load_index(f"{path}.index")
    assert frames.cut_frames(path.read_bytes(), index, 0, 6, True, crc) == payloads


@compiled
def test_read_records_reads_an_unaligned_index_and_numbers(shard):
    """An index and record numbers that are contiguous but not aligned (views one byte into a
    buffer, which np.ascontiguousarray hands on as they are): the same payloads as aligned ones
    (under UBSan, tests/scenarios/test_sanitizers.py, a misaligned int64 load aborts)."""
    path, index, payloads = shard
    unaligned = np.frombuffer(b"\0" + index.tobytes(), np.int64, offset=1).reshape(index.shape)
    numbers = np.frombuffer(b"\0" + np.array([5, 1, 2, 3], np.int64).tobytes(), np.int64, offset=1)
    assert not unaligned.flags.aligned and not numbers.flags.aligned
    assert np.ascontiguousarray(numbers, np.int64) is numbers
    fd = os.open(path, os.O_RDONLY)
    try:
        assert frames.read_records(fd, unaligned, numbers, True, crc32c) == [payloads[r] for r in (5, 1, 2, 3)]
        assert frames.read_frames(fd, unaligned, 1, 4, True, crc32c) == payloads[1:4]
    finally:
        os.close(fd)
    assert frames.cut_frames(path.read_bytes(), unaligned, 0, 6, True, crc32c) == payloads
