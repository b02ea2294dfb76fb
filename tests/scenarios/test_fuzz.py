"""Hostile input: every outcome is a value or a TFRecordError, never another
exception, a hang or unbounded memory.

CI runs a fixed, seeded budget. A longer run:
    TFRECORD_TORCH_FUZZ_EXAMPLES=20000 bash dev.sh test --all tests/scenarios/test_fuzz.py
"""

import gzip
import json
import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_torch import (
    ExampleDecodeError,
    TFRecordError,
    load_index,
    make_example,
    make_sequence_example,
    parse_example,
    parse_example_batch,
    parse_sequence_example,
    read_records,
)
from tfrecord_torch.example.codec import has_feature_lists, parse_record
from tfrecord_torch.records import frames
from tfrecord_torch.records.crc import crc32c
from tfrecord_torch.records.framing import parse_frame
from tfrecord_torch.records.writer import frame
from tfrecord_torch.tfds.features import tfds_features
from tfrecord_torch.tfds.metadata import tfds_split

BUDGET = int(os.environ.get("TFRECORD_TORCH_FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=BUDGET, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# slow (about 15 s of CPU); the C readers' hostile inputs are checked fast in test_c_safety.py
pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]


def mutate(data: bytes, draw) -> bytes:
    """Random byte flips, cuts and insertions of a valid input."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[pos:pos + draw(st.integers(1, 16))]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def valid_file(payloads):
    return b"".join(frame(p) for p in payloads)


payload_lists = st.lists(st.binary(max_size=64), min_size=1, max_size=8)


@fuzz
@given(payload_lists, st.sampled_from([None, "gzip", "zlib"]), st.data())
def test_framing_reader(tmp_path, payloads, compression, data):
    raw = valid_file(payloads)
    if compression == "gzip":
        raw = gzip.compress(raw)
    elif compression == "zlib":
        raw = zlib.compress(raw)
    path = tmp_path / "f.tfrecord"
    path.write_bytes(mutate(raw, data.draw))
    for mode in ("auto", compression):
        try:
            out = list(read_records(path, compression=mode))
            assert all(isinstance(p, bytes) for p in out)
        except TFRecordError:
            pass


examples = st.dictionaries(
    st.text(max_size=6),
    st.one_of(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=4),
              st.lists(st.floats(width=32), min_size=1, max_size=4),
              st.lists(st.binary(max_size=8), min_size=1, max_size=3)),
    max_size=4)


@fuzz
@given(st.lists(examples, min_size=1, max_size=6), st.data())
def test_example_decoders(mappings, data):
    payloads = [make_example(m) for m in mappings]
    payloads = [mutate(p, data.draw) if data.draw(st.booleans()) else p for p in payloads]
    payloads += [data.draw(st.binary(max_size=64))]
    singles = []
    for p in payloads:
        try:
            singles.append(parse_example(p))
        except ExampleDecodeError:
            singles.append(None)
        try:
            parse_sequence_example(p)
        except ExampleDecodeError:
            pass
    try:
        batch = parse_example_batch(payloads * 5)  # repeats make templates
    except ExampleDecodeError:
        assert None in singles
        return
    assert None not in singles
    for key, column in batch.items():
        for i, parsed in enumerate(singles * 5):
            want, have = parsed.get(key), column[i]
            if isinstance(want, np.ndarray):
                np.testing.assert_array_equal(have, want)
            else:
                assert have == want


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return a == b


@fuzz
@given(examples, st.dictionaries(st.text(min_size=1, max_size=6),
                                 st.lists(st.one_of(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1,
                                                             max_size=3),
                                                    st.lists(st.binary(max_size=8), min_size=1, max_size=2)),
                                          max_size=3), max_size=3), st.data())
def test_sequence_example_decoder(context, lists, data):
    import tracemalloc

    payload = make_sequence_example(context, lists)
    got_context, got_lists = parse_sequence_example(payload)  # the valid input round-trips
    assert set(got_context) == set(context) and set(got_lists) == set(lists)
    assert all(len(got_lists[k]) == len(v) for k, v in lists.items())
    assert all(_same(got_context[k], parse_example(make_example({k: v}))[k]) for k, v in context.items())
    assert has_feature_lists(payload) == bool(lists)
    if not set(context) & set(lists):  # features=None's dict: context and lists side by side
        assert set(parse_record(payload)) == set(context) | set(lists)
    bad = mutate(payload, data.draw)
    try:
        parse_record(bad)
    except TFRecordError:
        pass
    tracemalloc.start()
    try:
        parse_sequence_example(bad)
    except ExampleDecodeError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < (1 << 20) + 64 * len(bad), peak  # memory follows the input's size


_ROWS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-20, 3000),
                  st.sampled_from([0, 15, 16, 17, 2**31, 2**32, 2**63 - 1 - (64 << 20), 2**63 - 1, -1]))


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
@fuzz
@given(st.lists(st.one_of(st.binary(max_size=40), st.binary(min_size=1025, max_size=1100)), min_size=1, max_size=6),
       st.data())
def test_compiled_frame_readers(tmp_path, payloads, data):
    """The compiled frame readers (records/_frames.c) on a damaged file and index rows changed to any
    value, records picked in any order, repeated or outside the index: each gives None or exactly
    the payloads the Python path (os.pread and parse_frame) reads at those rows, never an error."""
    good = valid_file(payloads)
    damaged = mutate(good, data.draw) if data.draw(st.booleans()) else good
    sizes = [len(p) + 16 for p in payloads]
    index = np.array(list(zip(np.cumsum([0] + sizes[:-1]).tolist(), sizes)), np.int64)
    for _ in range(data.draw(st.integers(0, 3))):
        index[data.draw(st.integers(0, len(index) - 1)), data.draw(st.integers(0, 1))] = data.draw(_ROWS)
    verify = data.draw(st.booleans())
    path = tmp_path / "f.tfrecord"
    path.write_bytes(damaged)

    def python(read, rows):
        return [parse_frame(read(int(index[r, 0]), int(index[r, 1])), name="f", offset=int(index[r, 0]), record=r,
                            verify=verify) for r in rows]

    fd = os.open(path, os.O_RDONLY)
    try:
        pread = lambda offset, size: os.pread(fd, size, offset)  # noqa: E731
        records = np.array(data.draw(st.lists(st.integers(-2, len(index) + 1), min_size=1, max_size=8)), np.int64)
        got = frames.read_records(fd, index, records, verify, crc32c)
        assert got is None or got == python(pread, records.tolist())
        r0 = data.draw(st.integers(0, len(index) - 1))
        r1 = data.draw(st.integers(r0 + 1, len(index)))
        got = frames.read_frames(fd, index, r0, r1, verify, crc32c)
        assert got is None or got == python(pread, range(r0, r1))
    finally:
        os.close(fd)
    start = int(index[r0, 0])
    window = damaged[start:] if 0 <= start <= len(damaged) else damaged
    got = frames.cut_frames(window, index, r0, r1, verify, crc32c)
    assert got is None or got == python(lambda offset, size: window[offset - start:offset - start + size],
                                        range(r0, r1))


@fuzz
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                 st.lists(st.tuples(st.integers(-5, 2**70), st.integers(-5, 2**70)), max_size=5)
                 .map(lambda rows: "".join(f"{a} {b}\n" for a, b in rows))))
def test_index_loader(tmp_path, text):
    path = tmp_path / "x.index"
    path.write_bytes(text.encode("utf-8"))
    try:
        index = load_index(path)
        assert index.dtype == np.int64 and index.ndim == 2 and index.shape[1] == 2 and (index >= 0).all()
    except TFRecordError:
        pass


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40), st.text(max_size=12),
              st.sampled_from(["tensorflow_datasets.core.features.image_feature.Image",
                               "tensorflow_datasets.core.features.class_label_feature.ClassLabel",
                               "tensorflow_datasets.core.features.tensor_feature.Tensor",
                               "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                               "../../etc/passwd", "train", "uint8", "bytes", "-1", "3"])),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(
                                   ["name", "splits", "shardLengths", "featuresDict", "features",
                                    "pythonClassName", "image", "tensor", "shape", "dimensions",
                                    "dtype", "encoding", "filepathTemplate", "label"]), children, max_size=4)),
    max_leaves=20)


@fuzz
@given(json_values, json_values)
def test_tfds_metadata_reader(tmp_path, info, features):
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    (tmp_path / "features.json").write_text(json.dumps(features))
    try:
        paths, lengths = tfds_split(tmp_path, "train")
        for p in paths:  # never outside the folder
            assert os.path.dirname(os.path.abspath(p)) == str(tmp_path)
    except TFRecordError:
        pass
    except ValueError as e:
        assert "split must be one of" in str(e)
    try:
        tfds_features(tmp_path)
    except TFRecordError:
        pass


def test_metadata_names_cannot_leave_the_folder(tmp_path):
    info = {"name": "../../etc", "splits": [{"name": "train", "shardLengths": ["1"]}]}
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(TFRecordError, match="not a plain"):
        tfds_split(tmp_path, "train")


def test_package_never_unpickles_or_evaluates():
    import tfrecord_torch

    root = os.path.dirname(tfrecord_torch.__file__)
    files = [os.path.join(folder, n) for folder, _, names in os.walk(root) for n in names if n.endswith(".py")]
    assert len(files) > 30  # the subpackages are walked too
    for name in files:
        if name.endswith(".py"):
            with open(name, encoding="utf-8") as f:
                source = f.read()
            # pickle.dumps (sizing a conversion's source) is fine: nothing read is ever unpickled
            for banned in ("pickle.load", "Unpickler", "marshal", "eval(", "exec(", "torch.load"):
                assert banned not in source, f"{name} uses {banned}"


def test_zlib_tensor_bomb_is_bounded():
    from tfrecord_torch import FeatureError, RawTensor

    bomb = zlib.compress(bytes(1 << 26))  # 64 MiB of zeros in ~65 KB
    feature = RawTensor("t", dtype="uint8", shape=(16,), zlib=True)
    with pytest.raises(FeatureError, match="inflates past"):
        feature.decode({"t": [bomb]})


def test_absurd_jpeg_size_is_refused_before_decoding():
    import io

    from PIL import Image as PILImage

    from tfrecord_torch import FeatureError, Image

    buf = io.BytesIO()
    PILImage.new("RGB", (8, 8)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = (60000).to_bytes(2, "big") * 2  # claims 60000 x 60000
    with pytest.raises(FeatureError, match="exceeds the limit"):
        Image("image").decode({"image": [bytes(data)]})
