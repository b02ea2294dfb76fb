"""A team's records that are not Examples (JSON documents, one of them cut short),
read as a user writes it: ``features=Payload()`` or ``Payload(decode=json.loads)``, split over
ranks and DataLoader workers, shuffled and resumed, with a bad record under ``on_error``; the
mistakes (``sequence_features=`` or image options with it) and the error that points to it."""

import json
import re
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from tfrecord_torch import (
    Batching,
    CorruptRecordError,
    ImageBatching,
    IndexedTFRecordDataset,
    Int64,
    Payload,
    RecordWriter,
    Sharding,
    TFRecordDataset,
)

OVERHEAD = 16  # framing bytes around each payload


def write_json_shards(folder, counts, *, bad=()):
    """Shards of JSON records ``{"id": i}`` (ids 0..N-1 in order); a record whose id is in ``bad``
    is cut short (not JSON). Returns the paths and every payload in order."""
    paths, payloads, next_id = [], [], 0
    for s, n in enumerate(counts):
        path = folder / f"rows-{s:05d}-of-{len(counts):05d}.tfrecord"
        with RecordWriter(path) as w:
            for _ in range(n):
                payload = json.dumps({"id": next_id}).encode()
                payload = payload[:-3] if next_id in bad else payload
                w.write(payload)
                payloads.append(payload)
                next_id += 1
        paths.append(path)
    return paths, payloads


def test_two_ranks_of_two_workers_read_every_payload_once(tmp_path):
    paths, payloads = write_json_shards(tmp_path, [11, 0, 7, 14])
    seen = []
    for rank in range(2):
        ds = TFRecordDataset(tmp_path, features=Payload(), shuffle=True, seed=3,
                             sharding=Sharding(rank=rank, world_size=2))
        got = list(DataLoader(ds, batch_size=None, num_workers=2))
        assert len(got) == len(ds)
        seen.extend(got)
    assert Counter(seen) == Counter(payloads)


def test_two_ranks_of_two_workers_in_batch_mode_read_every_payload_once(tmp_path):
    paths, payloads = write_json_shards(tmp_path, [11, 0, 7, 14])
    seen = []
    for rank in range(2):
        ds = TFRecordDataset(tmp_path, features=Payload(decode=json.loads), shuffle=True, batch_size=4,
                             sharding=Sharding(rank=rank, world_size=2))
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
        assert len(batches) == len(ds)
        assert all(isinstance(b, list) and 1 <= len(b) <= 4 for b in batches)
        seen.extend(row["id"] for b in batches for row in b)
    assert sorted(seen) == list(range(32))


@pytest.mark.parametrize("batch_size", [None, 4])
@pytest.mark.parametrize("workers", [0, 2])
def test_shuffled_epoch_resumed_mid_way_gives_exactly_the_rest(tmp_path, batch_size, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    write_json_shards(tmp_path, [13, 9, 11])

    def loader():
        ds = TFRecordDataset(tmp_path, features=Payload(decode=json.loads), shuffle=True, seed=7,
                             batch_size=batch_size)
        ds.set_epoch(2)
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers)

    def ids(items):
        rows = [row for item in items for row in (item if batch_size else [item])]
        return [row["id"] for row in rows]

    full = ids(loader())
    first = loader()
    it = iter(first)
    head = ids([next(it) for _ in range(5)])
    state = first.state_dict()
    del it, first
    resumed = loader()
    resumed.load_state_dict(state)
    rest = ids(resumed)
    assert head + rest == full
    assert sorted(full) == list(range(33)) and full != sorted(full)


def test_decode_hook_failure_skipped_under_on_error(tmp_path):
    paths, payloads = write_json_shards(tmp_path, [6, 6], bad={8})
    ds = TFRecordDataset(tmp_path, features=Payload(decode=json.loads), on_error="skip")
    assert [row["id"] for row in ds] == [i for i in range(12) if i != 8]
    assert ds.errors() == {"total": 1, "per_shard": {str(paths[1]): 1}}

    batched = TFRecordDataset(tmp_path, features=Payload(decode=json.loads), on_error="skip", batch_size=5)
    assert [[row["id"] for row in b] for b in batched] == [[0, 1, 2, 3, 4], [5, 6, 7, 9], [10, 11]]

    indexed = IndexedTFRecordDataset(tmp_path, features=Payload(decode=json.loads), on_error="skip")
    assert indexed[8] == {"id": 9}  # the next readable record stands in
    assert [row["id"] for row in indexed.__getitems__([7, 8, 9])] == [7, 9, 9]


@pytest.mark.parametrize("batch_size", [None, 5])
def test_decode_hook_failure_names_file_offset_and_record(tmp_path, batch_size):
    paths, payloads = write_json_shards(tmp_path, [6, 6], bad={8})
    offset = sum(len(p) + OVERHEAD for p in payloads[6:8])  # record 2 of the second shard
    where = f"{re.escape(str(paths[1]))}: record 2 at byte offset {offset}: .*json.loads.*JSONDecodeError"
    with pytest.raises(CorruptRecordError, match=where) as raised:
        list(TFRecordDataset(tmp_path, features=Payload(decode=json.loads), batch_size=batch_size))
    assert isinstance(raised.value.__cause__, json.JSONDecodeError)
    assert (raised.value.path, raised.value.offset, raised.value.record) == (str(paths[1]), offset, 2)

    met = []
    ds = TFRecordDataset(tmp_path, features=Payload(decode=json.loads), on_error=met.append,
                         batch_size=batch_size)
    assert len([r for item in ds for r in (item if batch_size else [item])]) == 11
    assert [(e.path, e.offset, e.record) for e in met] == [(str(paths[1]), offset, 2)]
    with pytest.raises(CorruptRecordError, match=where):
        IndexedTFRecordDataset(tmp_path, features=Payload(decode=json.loads))[8]


def test_payloads_with_sequence_features_or_image_options_are_refused(tmp_path):
    write_json_shards(tmp_path, [3])
    for dataset in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(ValueError, match=r"features=Payload\(\).*sequence_features= cannot apply"):
            dataset(tmp_path, features=Payload(), sequence_features={"tokens": Int64()})
    with pytest.raises(ValueError, match=r"ImageBatching.*Payload\(decode=json\.loads\).*no images"):
        TFRecordDataset(tmp_path, features=Payload(decode=json.loads), batch_size=2,
                        batching=Batching(images=ImageBatching(threads=2)))
    with pytest.raises(TypeError, match=r"Payload\.decode must be a callable.*got str"):
        Payload(decode="json")
    # batching options that do not concern images go with it
    ds = TFRecordDataset(tmp_path, features=Payload(), batch_size=2, batching=Batching(drop_last=True))
    assert [len(b) for b in ds] == [2]


@pytest.mark.parametrize("reader", ["records", "batches", "spec", "indexed"])
def test_records_that_are_not_examples_point_to_payload(tmp_path, reader):
    """Without Payload(), JSON records are a CorruptRecordError whose message says how to read them."""
    paths, _ = write_json_shards(tmp_path, [4])
    hint = r"not a valid Example.*features=Payload\(\).*Payload\(decode=json\.loads\)"
    with pytest.raises(CorruptRecordError, match=rf"{re.escape(str(paths[0]))}: record 0 at byte offset 0: {hint}"):
        if reader == "indexed":
            IndexedTFRecordDataset(tmp_path)[0]
        else:
            list(TFRecordDataset(tmp_path, batch_size=2 if reader == "batches" else None,
                                 features={"id": Int64()} if reader == "spec" else None))


def test_printing_the_datasets_shows_the_payload_mode(tmp_path):
    write_json_shards(tmp_path, [3])
    assert repr(TFRecordDataset(tmp_path, features=Payload(decode=json.loads))).endswith(
        "3 records, features=Payload(decode=json.loads))")
    assert repr(IndexedTFRecordDataset(tmp_path, features=Payload())).endswith("3 records, features=Payload())")
