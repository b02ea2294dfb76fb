"""What a user sees when printing the library's objects in a notebook."""

from helpers import write_shards

from tfrecord_torch import (
    Image,
    IndexedReader,
    IndexedTFRecordDataset,
    Int64,
    RecordTail,
    RecordWriter,
    ShardedWriter,
    TFRecordDataset,
    make_example,
)


def test_dataset_reprs_name_shards_records_and_features(tmp_path):
    write_shards(tmp_path, [3, 4, 5])
    ds = TFRecordDataset(tmp_path, features={"id": Int64()}, shuffle=True, seed=7)
    text = repr(ds)
    assert text.startswith("TFRecordDataset(3 shards in ") and "12 records" in text
    assert "features=['id']" in text and "seed=7" in text
    text = repr(IndexedTFRecordDataset(tmp_path, features={"id": Int64()}))
    assert "3 shards" in text and "12 records" in text and "features=['id']" in text


def test_feature_reprs_show_their_options():
    assert repr(Int64("label")) == "Int64('label', shape=())"
    assert "default=-1" in repr(Int64("label", default=-1))
    assert repr(Image("image/encoded", mode="L")).startswith("Image('image/encoded', mode='L'")


def test_writer_reprs_count_what_was_written(tmp_path):
    with RecordWriter(tmp_path / "a.tfrecord") as w:
        w.write(make_example({"id": 1}))
        assert repr(w).endswith("records=1, open)") and "a.tfrecord" in repr(w)
    assert repr(w).endswith("closed)")
    with ShardedWriter(tmp_path / "out", name="demo", max_records=2) as s:
        for i in range(5):
            s.write(make_example({"id": i}))
        assert "name='demo'" in repr(s) and "shards=3, records=5, open" in repr(s)
    assert "IndexedReader(" in repr(IndexedReader(tmp_path / "a.tfrecord"))


def test_a_followed_file_shows_where_its_reader_is(tmp_path):
    with RecordWriter(tmp_path / "events.tfrecord", atomic=False) as w:
        tail = RecordTail(tmp_path / "events.tfrecord")
        w.write(b"step 1")
        w.flush()
        assert list(tail) == [b"step 1"]
        assert "atomic=False, records=1, open" in repr(w)
        assert repr(tail).endswith("events.tfrecord', records=1, offset=22, pending=0)")
    tail.close()
    assert repr(tail).endswith("records=1, closed)")
