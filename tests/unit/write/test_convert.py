"""Writer and converters: TensorFlow and TFDS are the oracles."""

import io
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import torch
import torchvision
from helpers import assert_same_files, import_tfds, listing, png_bytes
from PIL import Image as PILImage

from tfrecord_torch import (
    Encoding,
    Execution,
    IndexedTFRecordDataset,
    ShardedWriter,
    ShardLayout,
    TFRecordDataset,
    TFRecordError,
    check_index,
    load_index,
    make_example,
    presets,
    read_records,
    tfds_dataset,
    write_dataset,
    write_order,
)
from tfrecord_torch.cli import main
from tfrecord_torch.records.index import writer_index_path
from tfrecord_torch.records.stamp import stamp_matches

DESCRIPTION = {  # the tf.data feature_description the README gives
    "image": tf.io.FixedLenFeature([], tf.string),
    "format": tf.io.FixedLenFeature([], tf.string),
    "height": tf.io.FixedLenFeature([], tf.int64),
    "width": tf.io.FixedLenFeature([], tf.int64),
    "channels": tf.io.FixedLenFeature([], tf.int64),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def fake(n=40, size=(3, 12, 10), classes=5):
    return torchvision.datasets.FakeData(size=n, image_size=size, num_classes=classes, random_offset=3)


def tf_records(folder, pattern="*-train.tfrecord-*", compression=None):
    files = sorted(str(p) for p in folder.glob(pattern) if not p.name.endswith((".index", ".index.json")))
    ds = tf.data.TFRecordDataset(files, compression_type=compression or "")
    return [tf.io.parse_single_example(r, DESCRIPTION) for r in ds]


def test_tf_data_reads_png_shards_exactly(tmp_path):
    source = fake()
    paths = write_dataset(source, tmp_path, name="fake", shards=ShardLayout(size=15),
                          execution=Execution(progress=False))
    assert [os.path.basename(p) for p in paths] == [f"fake-train.tfrecord-0000{i}-of-00003" for i in range(3)]
    records = tf_records(tmp_path)
    assert len(records) == 40
    order = write_order(40)  # written in a seeded random order by default
    for i, r in enumerate(records):
        image, label = source[order[i]]
        pixels = tf.io.decode_png(r["image"], channels=3).numpy()
        assert np.array_equal(pixels, np.asarray(image))
        assert int(r["label"]) == label
        assert r["format"].numpy() == b"png" and (int(r["height"]), int(r["width"]), int(r["channels"])) == (12, 10, 3)
    for p in paths:
        check_index(load_index(writer_index_path(p)), p)


def test_tfds_builder_from_directory_loads_output(tmp_path):
    tfds = import_tfds()

    source = fake(n=20)
    write_dataset(source, tmp_path, name="fake", split="train", shards=ShardLayout(size=8),
                  execution=Execution(progress=False))
    write_dataset(fake(n=6), tmp_path, name="fake", split="test", execution=Execution(progress=False))
    builder = tfds.builder_from_directory(str(tmp_path))
    assert builder.info.splits["train"].num_examples == 20
    assert builder.info.splits["test"].num_examples == 6
    train = list(builder.as_dataset(split="train", shuffle_files=False).as_numpy_iterator())
    for i, example in enumerate(train):
        image, label = source[write_order(20)[i]]
        assert np.array_equal(example["image"], np.asarray(image)) and example["label"] == label


def test_as_supervised_reads_converter_output_in_tfds_and_here(tmp_path):
    tfds = import_tfds()

    source = fake(n=12)
    write_dataset(source, tmp_path, name="fake", execution=Execution(progress=False))
    order = write_order(12)
    pairs = list(tfds.builder_from_directory(str(tmp_path)).as_dataset(
        split="train", shuffle_files=False, as_supervised=True).as_numpy_iterator())
    assert [int(label) for _, label in pairs] == [source[j][1] for j in order]
    ours = list(tfds_dataset(tmp_path, "train", as_supervised=True))
    assert [int(label) for _, label in ours] == [source[j][1] for j in order]
    for (image, _), (theirs, _) in zip(ours, pairs):
        assert np.array_equal(image.permute(1, 2, 0).numpy(), theirs)


def test_our_reader_of_our_output_and_len_without_scanning(tmp_path):
    source = fake(n=25)
    write_dataset(source, tmp_path, name="fake", shards=ShardLayout(size=10),
                  execution=Execution(progress=False), encoding=Encoding(class_names=list("abcde")))
    assert (tmp_path / "label.labels.txt").read_text().split() == list("abcde")
    ds = tfds_dataset(tmp_path, "train")
    assert len(ds) == 25
    order = write_order(25)
    first = next(iter(ds))
    assert torch.equal(first["image"], torch.from_numpy(np.array(source[order[0]][0])).permute(2, 0, 1))
    mapped = tfds_dataset(tmp_path, "train", map_style=True)
    assert int(mapped[24]["label"]) == source[order[24]][1]


@pytest.mark.parametrize("workers", [0, 2])
def test_written_indexes_are_stamped_so_the_first_read_scans_nothing(tmp_path, monkeypatch, workers):
    from tfrecord_torch.records import shardindex

    paths = write_dataset(fake(n=30), tmp_path, name="fake", shards=ShardLayout(size=10),
                          execution=Execution(num_workers=workers, progress=False))
    for p in paths:
        assert stamp_matches(p, writer_index_path(p), 10)

    def no_scan(*args, **kwargs):
        raise AssertionError("a freshly written shard was scanned to check its index")

    monkeypatch.setattr(shardindex, "scan_index", no_scan)
    assert len(TFRecordDataset(paths)) == 30
    assert len(tfds_dataset(tmp_path, "train", map_style=True)) == 30


@pytest.mark.parametrize("fmt", ["jpeg", "raw"])
def test_jpeg_and_raw_formats(tmp_path, fmt):
    source = fake(n=8)
    write_dataset(source, tmp_path, name="fake", encoding=Encoding(image_format=fmt, quality=90),
                  execution=Execution(progress=False))
    records = tf_records(tmp_path)
    order = write_order(8)
    for i, r in enumerate(records):
        expected = np.asarray(source[order[i]][0])
        assert r["format"].numpy().decode() == fmt
        if fmt == "raw":
            pixels = tf.reshape(tf.io.decode_raw(r["image"], tf.uint8), (12, 10, 3)).numpy()
            assert np.array_equal(pixels, expected)
        else:
            # lossy: equal to what Pillow's own JPEG round trip at that quality gives
            pixels = tf.io.decode_jpeg(r["image"], dct_method="INTEGER_ACCURATE").numpy()
            reference = np.asarray(PILImage.open(io.BytesIO(png_bytes(expected, "JPEG", quality=90))))
            assert np.array_equal(pixels, reference)
    items = list(TFRecordDataset(tmp_path, features=presets.converted(raw=fmt == "raw")))
    assert items[0]["image"].shape == (3, 12, 10)
    if fmt == "raw":
        tfds = import_tfds()

        example = next(iter(tfds.builder_from_directory(str(tmp_path)).as_dataset(split="train")))
        assert np.array_equal(example["image"].numpy(), np.asarray(source[order[0]][0]))


def test_gzip_output(tmp_path):
    # tf.data reads GZIP shards (compression_type="GZIP"); TFDS reads only uncompressed ones.
    write_dataset(fake(n=10), tmp_path, name="fake", shards=ShardLayout(compression="gzip", size=4),
                  execution=Execution(progress=False))
    assert len(tf_records(tmp_path, "*-train.tfrecord-*.gz", "GZIP")) == 10
    assert not list(tmp_path.glob("*.index"))
    assert len(list(tfds_dataset(tmp_path, "train"))) == 10


def test_byte_identical_for_any_process_count(tmp_path):
    source = fake(n=150)
    outputs = []
    for workers in (0, 1, 3):
        out = tmp_path / f"w{workers}"
        write_dataset(source, out, name="fake", shards=ShardLayout(size=40),
                      execution=Execution(num_workers=workers, progress=False))
        outputs.append(out)
    assert len([n for n in listing(outputs[0]) if n.endswith(".index")]) == 4
    for other in outputs[1:]:
        assert_same_files(outputs[0], other)


def make_image_folder(root, n_per_class=3):
    rng = np.random.default_rng(0)
    files = []
    for c, cls in enumerate(["cat", "dog"]):
        (root / cls).mkdir(parents=True)
        for i in range(n_per_class):
            array = rng.integers(0, 256, (9 + i, 7, 3), dtype=np.uint8)
            fmt = "JPEG" if i % 2 else "PNG"
            path = root / cls / f"{i}.{fmt.lower()}"
            path.write_bytes(png_bytes(array, fmt))
            files.append((path, c))
    return sorted(files)


def test_image_folder_copies_original_bytes(tmp_path):
    files = make_image_folder(tmp_path / "images")
    folder = torchvision.datasets.ImageFolder(tmp_path / "images")
    write_dataset(folder, tmp_path / "out", name="pets", execution=Execution(progress=False))
    records = tf_records(tmp_path / "out", "pets-train.tfrecord-*")
    assert len(records) == 6
    for r, (path, label) in zip(records, [files[k] for k in write_order(6)]):
        assert r["image"].numpy() == path.read_bytes()
        assert int(r["label"]) == label
        assert r["format"].numpy() == (b"jpeg" if path.suffix == ".jpeg" else b"png")
    assert (tmp_path / "out" / "label.labels.txt").read_text().split() == ["cat", "dog"]
    info = json.loads((tmp_path / "out" / "features.json").read_text())
    assert info["featuresDict"]["features"]["label"]["classLabel"]["numClasses"] == "2"


def test_cli_convert_image_folder(tmp_path, capsys):
    make_image_folder(tmp_path / "images")
    assert main(["convert", str(tmp_path / "images"), str(tmp_path / "out"), "-q", "--shard-size", "4"]) == 0
    assert "6 records in 2 shards" in capsys.readouterr().out
    assert len(tfds_dataset(tmp_path / "out", "train")) == 6


def write_cifar10(root, n=20):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(4)
    data = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": rng.integers(0, 10, n).tolist()}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
        data[name] = batch
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, f)
    return data


def test_cli_convert_cifar10(tmp_path, capsys, monkeypatch):
    data = write_cifar10(tmp_path / "root")
    # torchvision checks the real files' MD5 sums; these are ours, in the same format.
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path))
    assert main(["convert", "CIFAR10", str(tmp_path / "out"), "--root", str(tmp_path / "root"),
                 "--test", "-q", "--workers", "2"]) == 0
    records = tf_records(tmp_path / "out", "cifar10-test.tfrecord-*")
    batch = data["test_batch"]
    assert len(records) == 20
    for i, r in zip(write_order(20), records):
        expected = batch["data"][i].reshape(3, 32, 32).transpose(1, 2, 0)
        assert np.array_equal(tf.io.decode_png(r["image"]).numpy(), expected)
        assert int(r["label"]) == batch["labels"][i]
    assert (tmp_path / "out" / "label.labels.txt").read_text().split()[3] == "class3"


def write_mnist(root, n=12):
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    for prefix in ("train", "t10k"):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            (2051).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in (n, 28, 28)) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            (2049).to_bytes(4, "big") + n.to_bytes(4, "big") + labels.tobytes())
    return images, labels


def test_cli_convert_mnist_grayscale(tmp_path):
    images, labels = write_mnist(tmp_path / "root")
    assert main(["convert", "MNIST", str(tmp_path / "out"), "--root", str(tmp_path / "root"), "-q"]) == 0
    ds = tfds_dataset(tmp_path / "out", "train")
    assert ds.spec["image"].mode == "L"
    items = list(ds)
    assert len(items) == 12
    order = write_order(12)
    for item, image, label in zip(items, images[order], labels[order]):
        assert torch.equal(item["image"][0], torch.from_numpy(image)) and int(item["label"]) == label


def test_cli_convert_errors(tmp_path, capsys):
    assert main(["convert", "NoSuchDataset", str(tmp_path / "out")]) == 1
    assert "torchvision.datasets class" in capsys.readouterr().err
    assert main(["convert", "CIFAR10", str(tmp_path / "out"), "--root", str(tmp_path)]) == 1
    assert "CIFAR10" in capsys.readouterr().err


class Odd(torch.utils.data.Dataset):
    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            return self.bad
        return np.zeros((4, 4, 3), np.uint8), 1


@pytest.mark.parametrize("bad, match", [
    (("not an image", 1), "sample 2: cannot convert an image of type str"),
    ((np.zeros((4, 4, 3), np.float32), 1), "sample 2: image dtype is float32"),
    ((np.zeros((4, 4, 3), np.uint8), "cat"), "sample 2: label must be an int"),
    ((1, 2, 3), "sample 2: expected \\(image, label\\)"),
])
def test_unsupported_samples_name_their_index(tmp_path, bad, match):
    with pytest.raises(TypeError, match=match):
        write_dataset(Odd(bad), tmp_path, name="odd", execution=Execution(progress=False))
    assert not [f for f in os.listdir(tmp_path) if not f.startswith(".")]


def test_dict_samples_tensors_and_pil(tmp_path):
    class Mixed(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            array = np.full((5, 6, 3), i * 40, np.uint8)
            return [{"image": PILImage.fromarray(array), "label": i},
                    {"image": torch.from_numpy(array).permute(2, 0, 1), "label": torch.tensor(i)},
                    {"image": array}][i]

    write_dataset(Mixed(), tmp_path, name="mixed", shuffle=False,
                  execution=Execution(progress=False))  # in the source's order
    records = tf_records(tmp_path, "mixed-train.tfrecord-*")
    assert [int(r["label"]) for r in records] == [0, 1, -1]
    for i, r in enumerate(records):
        assert (tf.io.decode_png(r["image"]).numpy() == i * 40).all()


def test_sharded_writer_rolls_by_bytes_and_locks(tmp_path):
    with ShardedWriter(tmp_path, name="d", max_bytes=1000) as w:
        with pytest.raises(TFRecordError, match="another process is writing"):
            ShardedWriter(tmp_path, name="d")
        assert not list(tmp_path.glob("d-train.tfrecord-*"))  # nothing visible while writing
        for i in range(30):
            w.write(make_example({"i": i, "pad": b"x" * 60}))
    sizes = [os.path.getsize(p) for p in w.paths]
    assert len(sizes) > 2 and all(s <= 1000 for s in sizes)
    assert [int(v) for p in w.paths for v in (len(load_index(writer_index_path(p))),)] == w.shard_lengths
    assert sum(1 for p in w.paths for _ in read_records(p)) == 30


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardedWriter(tmp_path, name="d", max_records=2) as w:
            for _ in range(5):
                w.write(b"x")
            raise RuntimeError("boom")
    assert [f for f in os.listdir(tmp_path) if not f.endswith(".lock")] == []


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import torch
    from tfrecord_torch import Execution, ShardLayout, write_dataset

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 200
        def __getitem__(self, i):
            if i == 150 and sys.argv[2] == "slow":
                print("halfway", flush=True)
                time.sleep(60)
            return np.full((6, 6, 3), i, np.uint8), i % 3

    write_dataset(Slow(), sys.argv[1], name="slow", shards=ShardLayout(size=10), execution=Execution(progress=False))
    print("done", flush=True)
""")


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_sigkill_mid_conversion_then_rerun(tmp_path):
    script = tmp_path / "convert.py"
    script.write_text(KILL_SCRIPT)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(out), "slow"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "halfway"
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    visible = listing(out)
    assert visible and "dataset_info.json" not in visible  # finished shards, but no metadata yet
    shards = [f for f in visible if not f.endswith(".index")]
    assert len(shards) < 20
    for name in shards:  # every file that looks finished is: complete and indexed
        check_index(load_index(writer_index_path(out / name)), out / name)
        assert len(list(read_records(out / name))) == 10
    assert any(f.endswith(".partial") for f in os.listdir(out))  # the killed shard: hidden
    before = {name: os.stat(out / name).st_ino for name in shards}
    done = subprocess.run([sys.executable, str(script), str(out), "fast"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not any(".partial" in f for f in os.listdir(out))
    assert {name: os.stat(out / name).st_ino for name in shards} == before  # kept, not written again
    ds = tfds_dataset(out, "train", features=presets.tfds())
    assert len(ds) == 200
    order = write_order(200)
    assert [int(item["label"]) for item in ds] == [int(i) % 3 for i in order]
    assert int(IndexedTFRecordDataset(str(out / "slow-train.tfrecord-*"))[199]["label"][0]) == order[199] % 3


def test_tfds_prepared_directory_reads_without_tensorflow(tmp_path):
    tfds = import_tfds()

    class Tiny(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(8, 6, 3)),
                "label": tfds.features.ClassLabel(names=["a", "b", "c"]),
                "meta": {"score": tfds.features.Tensor(shape=(2,), dtype=np.float32),
                         "name": tfds.features.Text(),
                         "mask": tfds.features.Tensor(shape=(2, 3), dtype=np.uint8, encoding="bytes")},
            }))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(11), "test": self._generate_examples(3)}

        def _generate_examples(self, n):
            rng = np.random.default_rng(n)
            for i in range(n):
                yield i, {"image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8), "label": i % 3,
                          "meta": {"score": np.array([i, i + 0.5], np.float32), "name": f"n{i}",
                                   "mask": np.full((2, 3), i, np.uint8)}}

    builder = Tiny(data_dir=str(tmp_path))
    builder.download_and_prepare()
    directory = builder.data_dir
    theirs = {int(e["meta"]["score"][0]): e for e in
              builder.as_dataset(split="train", shuffle_files=False).as_numpy_iterator()}
    ds = tfds_dataset(directory, "train")
    assert len(ds) == 11
    assert set(ds.spec) == {"image", "label", "meta/score", "meta/name", "meta/mask"}
    ours = list(ds)
    assert len(ours) == 11
    for item in ours:
        ref = theirs[int(item["meta/score"][0])]
        assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), ref["image"])
        assert int(item["label"]) == ref["label"]
        assert item["meta/name"] == ref["meta"]["name"].decode()
        assert np.array_equal(item["meta/mask"].numpy(), ref["meta"]["mask"])
    with pytest.raises(ValueError, match="split must be one of"):
        tfds_dataset(directory, "validation")


def test_metadata_updates_of_two_splits_wait_for_each_other(tmp_path):
    import fcntl
    import threading

    from tfrecord_torch.tfds.metadata import read_info, write_metadata

    common = {"name": "d", "num_bytes": 0, "features": {}, "class_names": None}
    write_metadata(tmp_path, split="train", shard_lengths=[3], **common)
    held = os.open(tmp_path / ".dataset_info.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # another converter is updating the metadata
    second = threading.Thread(target=write_metadata, kwargs={"output_dir": tmp_path, "split": "test",
                                                             "shard_lengths": [2], **common})
    second.start()
    time.sleep(0.3)
    assert second.is_alive()  # it waits rather than read-modify-writing under the other
    os.close(held)
    second.join(10)
    assert sorted(s["name"] for s in read_info(tmp_path)["splits"]) == ["test", "train"]


def test_a_killed_metadata_writes_temporary_file_is_removed_by_the_next(tmp_path):
    """A converter killed while it wrote features.json (before the rename)
    left ``.features.json.<random>.partial``; the next metadata write (the
    rerun's commit) removes it. One a live writer holds (flocked) stays."""
    import fcntl

    from tfrecord_torch.io import atomic
    from tfrecord_torch.tfds.metadata import write_metadata

    killed = tmp_path / ".features.json.49fa4110.partial"
    killed.write_bytes(b'{"featuresDict": ')  # no writer holds it: its process is gone
    fd, live = atomic.create_temp(str(tmp_path), "dataset_info.json", lock=True)  # a writer still running
    try:
        write_metadata(tmp_path, name="d", split="train", shard_lengths=[3], num_bytes=0, features={},
                       class_names=None)
        assert not killed.exists() and os.path.exists(live)
        assert not [f for f in os.listdir(tmp_path) if f.endswith(".partial") and f != os.path.basename(live)]
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def test_second_dataset_name_in_a_folder_fails_before_writing(tmp_path):
    source = torchvision.datasets.FakeData(size=4, image_size=(3, 8, 8), num_classes=2)
    write_dataset(source, tmp_path, name="first", execution=Execution(progress=False))
    with pytest.raises(TFRecordError, match="describes dataset 'first', not 'second'"):
        write_dataset(source, tmp_path, name="second", execution=Execution(progress=False))
    assert not [f for f in os.listdir(tmp_path) if f.startswith(("second", ".second"))]


def test_sharded_writer_takes_compression_options_like_record_writer(tmp_path):
    from tfrecord_torch import CompressionOptions, RecordWriter, read_records

    words = np.random.default_rng(0).choice([b"tf", b"record", b"torch", b"shard", b"image"], 4000)
    payloads = [make_example({"id": i, "text": b" ".join(words[i * 100:(i + 1) * 100])}) for i in range(40)]
    sizes = {}
    for level in (1, 9):
        options = CompressionOptions(level=level)
        with ShardedWriter(tmp_path / f"l{level}", name="d", max_records=40, compression="gzip",
                           compression_options=options) as w:
            for p in payloads:
                w.write(p)
        (shard,) = w.paths
        single = tmp_path / f"single{level}.gz"
        with RecordWriter(single, compression="gzip", compression_options=options) as r:
            for p in payloads:
                r.write(p)
        assert Path(shard).read_bytes() == single.read_bytes()  # RecordWriter's bytes: TF's (test_writer.py)
        assert list(read_records(shard)) == payloads
        sizes[level] = os.path.getsize(shard)
    assert sizes[9] < sizes[1]
    with pytest.raises(ValueError, match="compression_options needs compression='gzip' or 'zlib'"):
        ShardedWriter(tmp_path / "bad", name="d", compression_options=CompressionOptions(level=1))
    with pytest.raises(TypeError, match="compression_options must be a CompressionOptions"):
        ShardedWriter(tmp_path / "bad", name="d", compression="gzip", compression_options={"level": 1})
    assert not (tmp_path / "bad").exists() or not list((tmp_path / "bad").iterdir())


GZIP_XFL = {1: 4, 9: 2}  # the gzip header's XFL byte zlib writes: 4 "fastest" (level 1), 2 "maximum" (level 9)


@pytest.mark.parametrize("how", ["write_dataset", "cli"])
def test_gzip_shards_take_compression_options(tmp_path, how):
    """A conversion with a compression level writes, per shard, the bytes
    RecordWriter writes with the same CompressionOptions (its bytes are
    TensorFlow's, tests/scenarios/tensorflow/test_writer.py); tf.data reads
    the records of the uncompressed conversion from them, and the level is in
    the gzip header."""
    from tfrecord_torch import CompressionOptions, RecordWriter

    source = torchvision.datasets.FakeData(size=10)  # as `convert FakeData --size 10` builds it

    def convert(out, level=None):
        if how == "cli":
            gzip = ["--compression", "gzip", "--compression-level", str(level)] if level is not None else []
            assert main(["convert", "FakeData", str(out), "--size", "10", "--num-shards", "2", "-q", *gzip]) == 0
            return sorted(str(p) for p in out.glob("fakedata-train.tfrecord-*-of-*") if ".index" not in p.name)
        layout = ShardLayout(count=2) if level is None else \
            ShardLayout(count=2, compression="gzip", compression_options=CompressionOptions(level=level))
        return write_dataset(source, out, name="fakedata", shards=layout, execution=Execution(progress=False))

    expected = [list(read_records(p)) for p in convert(tmp_path / "plain")]
    for level in (1, 9):
        paths = convert(tmp_path / f"level{level}", level)
        assert len(paths) == 2
        for path, records in zip(paths, expected):
            ds = tf.data.TFRecordDataset(path, compression_type="GZIP")
            assert [r.numpy() for r in ds] == records
            data = Path(path).read_bytes()
            assert data[8] == GZIP_XFL[level]
            with RecordWriter(tmp_path / "single.gz", compression="gzip",
                              compression_options=CompressionOptions(level=level)) as w:
                for r in records:
                    w.write(r)
            assert data == (tmp_path / "single.gz").read_bytes()


def test_compression_options_are_checked_naming_the_argument(tmp_path, capsys):
    from tfrecord_torch import CompressionOptions

    with pytest.raises(ValueError, match=r"ShardLayout.compression_options needs ShardLayout\(compression='gzip'\)"):
        ShardLayout(compression_options=CompressionOptions(level=9))
    with pytest.raises(TypeError, match="ShardLayout.compression_options must be a CompressionOptions"):
        ShardLayout(compression="gzip", compression_options={"level": 9})
    with pytest.raises(ValueError, match=r"level must be an int in \[-1, 9\], got 10"):
        ShardLayout(compression="gzip", compression_options=CompressionOptions(level=10))
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        main(["convert", "FakeData", str(out), "--compression", "gzip", "--compression-level", "10"])
    assert "argument --compression-level: invalid choice: 10" in capsys.readouterr().err
    assert main(["convert", "FakeData", str(out), "--size", "4", "--compression-level", "9"]) == 1
    assert "--compression-level 9 needs --compression gzip" in capsys.readouterr().err
    assert not out.exists()


class FailsOnce(torch.utils.data.Dataset):
    """Sample 5 raises while ``failing`` is set: a run stops after shard 0 of two."""

    failing = True

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5 and FailsOnce.failing:
            raise RuntimeError("sample 5 is not there yet")
        return np.full((4, 4, 3), i, np.uint8), i % 2


def test_a_rerun_with_another_compression_level_writes_the_shards_again(tmp_path):
    """The compression options are part of what a conversion writes: a rerun
    after a failure keeps the finished shards of a run with the same options
    only, so the shards never mix levels."""
    from tfrecord_torch import CompressionOptions

    def run(level):
        return write_dataset(FailsOnce(), tmp_path, name="flaky", shuffle=False,
                             shards=ShardLayout(count=2, compression="gzip",
                                                compression_options=CompressionOptions(level=level)),
                             execution=Execution(num_workers=0, retries=0, progress=False))

    FailsOnce.failing = True
    with pytest.raises(RuntimeError, match="sample 5"):
        run(1)
    FailsOnce.failing = False
    paths = run(9)
    assert [Path(p).read_bytes()[8] for p in paths] == [GZIP_XFL[9]] * 2
    labels = [int(r["label"]) for p in paths for r in tf_records(Path(p).parent, Path(p).name, "GZIP")]
    assert labels == [i % 2 for i in range(8)]
