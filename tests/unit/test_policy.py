"""Error policies: raise, skip, warn; across DataLoader workers."""

import gzip
import logging
import struct

import numpy as np
import pytest
from helpers import ids_of, png_bytes, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import (
    CorruptRecordError,
    FeatureError,
    Int64,
    RecordWriter,
    Source,
    TFRecordDataset,
    build_index,
    make_example,
    presets,
    read_records,
)
from tfrecord_torch.policy import ErrorPolicy


def corrupt(path, record_size, record, where):
    """Flip a byte of record ``record``: in its header (length CRC) or payload."""
    raw = bytearray(path.read_bytes())
    raw[record * record_size + (3 if where == "header" else 20)] ^= 0x40
    path.write_bytes(bytes(raw))


def fixed_shard(tmp_path, n=20, name="s.tfrecord"):
    path = tmp_path / name
    with RecordWriter(path) as w:
        for i in range(n):
            w.write(bytes([i]) * 30)
    return path, 46


def test_read_records_skips_bad_payload(tmp_path, caplog):
    path, size = fixed_shard(tmp_path)
    corrupt(path, size, 5, "payload")
    corrupt(path, size, 12, "payload")
    with pytest.raises(CorruptRecordError):
        list(read_records(path))
    policy = ErrorPolicy("skip")
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch"):
        got = list(read_records(path, on_error=policy))
    assert [r[0] for r in got] == [i for i in range(20) if i not in (5, 12)]
    assert policy.total == 2 and policy.counts[str(path)] == 2
    assert "record 5 at byte offset 230" in caplog.text


def test_bad_length_ends_a_streamed_shard(tmp_path):
    path, size = fixed_shard(tmp_path)
    corrupt(path, size, 7, "header")
    policy = ErrorPolicy("skip")
    got = list(read_records(path, on_error=policy))
    assert [r[0] for r in got] == list(range(7)) and policy.total == 1


def test_warn_issues_runtime_warning(tmp_path):
    path, size = fixed_shard(tmp_path)
    corrupt(path, size, 2, "payload")
    with pytest.warns(RuntimeWarning, match="record 2"):
        assert len(list(read_records(path, on_error="warn"))) == 19


def test_truncated_and_bad_gzip_end_the_shard(tmp_path):
    path, size = fixed_shard(tmp_path)
    path.write_bytes(path.read_bytes()[:-10])
    policy = ErrorPolicy("skip")
    assert len(list(read_records(path, on_error=policy))) == 19 and policy.total == 1
    gz = tmp_path / "a.gz"
    gz.write_bytes(gzip.compress(path.read_bytes())[:-30])
    policy = ErrorPolicy("skip")
    assert len(list(read_records(gz, on_error=policy))) < 19 and policy.total == 1


def test_huge_record_payload_skip(tmp_path):
    path = tmp_path / "big.tfrecord"
    with RecordWriter(path) as w:
        for i in range(3):
            w.write(bytes([i]) * 400_000)
    raw = bytearray(path.read_bytes())
    raw[400_016 + 100] ^= 1  # payload of record 1 (read on its own: larger than a block quarter)
    path.write_bytes(bytes(raw))
    policy = ErrorPolicy("skip")
    assert [r[0] for r in read_records(path, on_error=policy)] == [0, 2]


def test_bad_on_error():
    with pytest.raises(ValueError, match="on_error must be one of"):
        ErrorPolicy("ignore")


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_dataset_skips_and_counts_across_workers(tmp_path, workers, batch_size):
    paths = write_shards(tmp_path, [10, 10, 10])
    for p in paths:
        build_index(p)
    size = len(paths[0].read_bytes()) // 10  # equal-size records
    corrupt(paths[0], size, 3, "payload")
    corrupt(paths[1], size, 4, "header")  # the index says where record 5 starts: resume there
    ds = TFRecordDataset(tmp_path, on_error="skip",
                         batch_size=batch_size, source=Source(index=[str(p) + ".index" for p in paths]))
    got = ids_of(DataLoader(ds, batch_size=None, num_workers=workers))
    assert sorted(got) == [i for i in range(30) if i not in (3, 14)]
    assert ds.errors() == {"total": 2, "per_shard": {str(paths[0]): 1, str(paths[1]): 1}}


def test_dataset_errors_reach_main_process_with_location(tmp_path):
    paths = write_shards(tmp_path, [6, 6])
    TFRecordDataset(tmp_path,
                    source=Source(index="beside"))  # index files beside the shards while the data is good
    size = len(paths[1].read_bytes()) // 6
    corrupt(paths[1], size, 2, "payload")
    ds = TFRecordDataset(tmp_path)
    with pytest.raises(CorruptRecordError) as info:
        list(DataLoader(ds, batch_size=None, num_workers=2))
    err = info.value
    assert (err.path, err.record, err.offset) == (str(paths[1]), 2, 2 * size)


def test_corrupt_jpeg_follows_the_policy(tmp_path):
    good = png_bytes(np.zeros((4, 4, 3), np.uint8), "JPEG")
    with RecordWriter(tmp_path / "img.tfrecord") as w:
        for i in range(6):
            w.write(make_example({"image": good if i != 3 else good[:40] + b"\0" * 30, "label": i}))
    with pytest.raises(FeatureError) as info:
        list(DataLoader(TFRecordDataset(tmp_path, features=presets.tfds()), batch_size=None, num_workers=1))
    assert info.value.record == 3 and info.value.key == "image"
    ds = TFRecordDataset(tmp_path, features=presets.tfds(), on_error="skip")
    labels = [int(d["label"]) for d in DataLoader(ds, batch_size=None, num_workers=1)]
    assert labels == [0, 1, 2, 4, 5] and ds.errors()["total"] == 1
    batched = TFRecordDataset(tmp_path, features=presets.tfds(), on_error="skip", batch_size=6)
    (batch,) = list(batched)
    assert batch["label"].tolist() == [0, 1, 2, 4, 5]


def test_compressed_length_corruption_with_policy(tmp_path):
    path = tmp_path / "x.tfrecord"
    length = struct.pack("<Q", 2**60)
    path.write_bytes(length + b"\0\0\0\0" + b"x" * 50)
    policy = ErrorPolicy("skip")
    assert list(read_records(path, on_error=policy)) == [] and policy.total == 1


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("compressed", [False, True])
def test_resume_across_skipped_records_repeats_and_recounts_nothing(tmp_path, batch_size, compressed):
    # records 2 and 3 lack the feature: skipped (a whole batch in batch mode)
    write_shards(tmp_path, [8], extra=lambda i: {} if i in (2, 3) else {"label": i},
                 compression="gzip" if compressed else None)

    def make():
        return TFRecordDataset(tmp_path, features={"label": Int64()}, on_error="skip",
                               batch_size=batch_size)

    full = [int(v) for item in make() for v in np.asarray(item["label"]).reshape(-1)]
    assert full == [0, 1, 4, 5, 6, 7]
    first = make()
    it = iter(first)
    head = [int(v) for v in np.asarray(next(it)["label"]).reshape(-1)]
    head += [int(v) for v in np.asarray(next(it)["label"]).reshape(-1)]
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest = [int(v) for item in resumed for v in np.asarray(item["label"]).reshape(-1)]
    assert head + rest == full
    # each skipped record is reported once over the two runs (not again on resume)
    assert first.errors()["total"] + resumed.errors()["total"] == 2


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style_dataset_replaces_a_bad_record_with_the_next(tmp_path, workers):
    from tfrecord_torch import IndexedTFRecordDataset

    paths = write_shards(tmp_path, [5, 5])
    for p in paths:
        build_index(p)  # indexed while intact: damage comes later
    size = len(paths[0].read_bytes()) // 5
    corrupt(paths[0], size, 2, "payload")
    corrupt(paths[0], size, 4, "header")  # the last record of shard 0: its stand-in is shard 1's first
    with pytest.raises(CorruptRecordError) as info:
        IndexedTFRecordDataset(tmp_path)[2]  # the default raises, naming the record
    assert info.value.record == 2 and info.value.path == str(paths[0])
    ds = IndexedTFRecordDataset(tmp_path, on_error="skip")
    assert len(ds) == 10
    got = ids_of(DataLoader(ds, batch_size=5, num_workers=workers))
    assert got == [0, 1, 3, 3, 5, 5, 6, 7, 8, 9]  # every index gives an item; batches stay full
    assert ds.errors() == {"total": 2, "per_shard": {str(paths[0]): 2}}


def _missing(key, record):
    return FeatureError(key, "required feature is missing", "s.tfrecord", record * 10, record)


def test_a_run_of_one_spec_failure_before_any_delivery_raises_its_first():
    """SLIP_RUN records failing on one key before any is delivered: the first one's error."""
    from tfrecord_torch.policy import SLIP_RUN
    policy = ErrorPolicy("skip")
    policy.begin()
    policy.report(CorruptRecordError("s.tfrecord", 0, 0, "payload CRC mismatch"))  # data: not part of a run
    policy.report(_missing("b", 1))  # another key: a run that the next one ends
    for r in range(2, 2 + SLIP_RUN - 1):
        policy.report(_missing("a", r))
    with pytest.raises(FeatureError) as raised:
        policy.report(_missing("a", 2 + SLIP_RUN - 1))
    assert raised.value.record == 2
    assert "none was delivered" in "".join(getattr(raised.value, "__notes__", ["none was delivered"]))  # 3.11+


def test_failures_after_a_delivery_are_bad_records():
    from tfrecord_torch.policy import SLIP_RUN
    policy = ErrorPolicy("warn")
    policy.begin()
    policy.delivered()
    with pytest.warns(RuntimeWarning):
        for r in range(3 * SLIP_RUN):
            policy.report(_missing("a", r))
    policy.end("here")  # no raise: the spec read a record
    assert policy.total == 3 * SLIP_RUN


def test_an_iteration_ending_with_every_record_failing_one_way_raises():
    """Fewer records than a run: all of them (two or more) failing on one key raises at the end;
    one record, or records failing on different keys, are bad records."""
    for reported, raises in [(["a", "a", "a"], True), (["a"], False), (["a", "b"], False)]:
        policy = ErrorPolicy("skip")
        policy.begin()
        for r, key in enumerate(reported):
            policy.report(_missing(key, r))
        if raises:
            with pytest.raises(FeatureError) as raised:
                policy.end("here")
            assert raised.value.record == 0
        else:
            policy.end("here")


def test_callable_policies_decide_every_record_themselves():
    from tfrecord_torch.policy import SLIP_RUN
    seen = []
    policy = ErrorPolicy(seen.append)
    policy.begin()
    for r in range(2 * SLIP_RUN):
        policy.report(_missing("a", r))
    policy.end("here")
    assert len(seen) == 2 * SLIP_RUN
