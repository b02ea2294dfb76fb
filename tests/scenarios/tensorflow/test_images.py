"""Images decoded here equal TensorFlow's decode of the same bytes."""

import numpy as np
import pytest
import tensorflow as tf
import torch
from helpers import png_bytes, restart_bomb

from tfrecord_torch import FeatureError, Image, Int64, RecordWriter, TFRecordDataset, make_example, presets
from tfrecord_torch.features.images import limits


def write_images(path, arrays, fmt, **kw):
    with RecordWriter(path) as w:
        for i, a in enumerate(arrays):
            w.write(make_example({"image": png_bytes(a, fmt, **kw), "label": i}))


def test_png_identical_to_tensorflow(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(5, 9), (32, 17), (64, 64)]]
    write_images(tmp_path / "p.tfrecord", arrays, "PNG")
    ours = list(TFRecordDataset(tmp_path, features=presets.tfds()))
    desc = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    theirs = [tf.io.parse_single_example(r, desc) for r in tf.data.TFRecordDataset(str(tmp_path / "p.tfrecord"))]
    assert len(ours) == len(theirs) == 3
    for o, t in zip(ours, theirs):
        tf_image = tf.io.decode_png(t["image"], channels=3).numpy()
        assert np.array_equal(o["image"].permute(1, 2, 0).numpy(), tf_image)
        assert o["label"].item() == int(t["label"])


def test_jpeg_equals_tensorflow_accurate_idct(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    arrays = [np.kron(base, np.ones((32, 32, 1), np.uint8))]  # smooth blocks, realistic for JPEG
    arrays.append(rng.integers(0, 256, (48, 40, 3), dtype=np.uint8))
    write_images(tmp_path / "j.tfrecord", arrays, "JPEG", quality=90)
    ours = list(TFRecordDataset(tmp_path, features=presets.tfds()))
    theirs = list(tf.data.TFRecordDataset(str(tmp_path / "j.tfrecord")))
    assert len(ours) == len(theirs) == 2
    for o, raw in zip(ours, theirs):
        desc = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
        parsed = tf.io.parse_single_example(raw, desc)
        assert o["label"].item() == int(parsed["label"])
        mine = o["image"].permute(1, 2, 0).numpy().astype(np.int16)
        # With the same (accurate integer) IDCT both libjpeg builds agree exactly ...
        accurate = tf.io.decode_jpeg(parsed["image"], channels=3, dct_method="INTEGER_ACCURATE")
        assert np.array_equal(mine, accurate.numpy())
        # ... and TensorFlow's default fast IDCT differs by a few levels at most.
        fast = tf.io.decode_jpeg(parsed["image"], channels=3).numpy().astype(np.int16)
        assert np.abs(mine - fast).max() <= 8


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_jpeg_items_are_planes_equal_to_tensorflow_accurate_idct(tmp_path, mode):
    """4:2:0 at an odd size, 4:2:2, progressive and gray JPEGs: each item's
    image is C-contiguous and equals TF's INTEGER_ACCURATE decode."""
    rng = np.random.default_rng(3)
    base = np.kron(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), np.ones((8, 8, 1), np.uint8))
    noisy = np.clip(base.astype(int) + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)
    encoded = [png_bytes(noisy[:51, :61], "JPEG", quality=75, subsampling=2),
               png_bytes(noisy[:40, :57], "JPEG", subsampling=1),
               png_bytes(noisy, "JPEG", quality=90, progressive=True),
               png_bytes(noisy[:, :, 0], "JPEG")]
    with RecordWriter(tmp_path / "j.tfrecord") as w:
        for i, data in enumerate(encoded):
            w.write(make_example({"image": data, "label": i}))
    ours = list(TFRecordDataset(tmp_path, features=presets.tfds(mode=mode)))
    assert len(ours) == len(encoded)
    for item, data in zip(ours, encoded):
        assert item["image"].is_contiguous()
        want = tf.io.decode_jpeg(data, channels=3 if mode == "RGB" else 1, dct_method="INTEGER_ACCURATE")
        assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), want.numpy())


def test_grayscale_matches_tensorflow(tmp_path):
    rng = np.random.default_rng(2)
    arrays = [rng.integers(0, 256, (10, 12), dtype=np.uint8)]
    write_images(tmp_path / "g.tfrecord", arrays, "PNG")
    (ours,) = list(TFRecordDataset(tmp_path, features=presets.tfds(mode="L")))
    raw = next(iter(tf.data.TFRecordDataset(str(tmp_path / "g.tfrecord"))))
    parsed = tf.io.parse_single_example(raw, {"image": tf.io.FixedLenFeature([], tf.string)})
    assert np.array_equal(ours["image"][0].numpy(), tf.io.decode_png(parsed["image"], channels=1).numpy()[:, :, 0])


def test_numeric_features_equal_tensorflow(tmp_path):
    from tfrecord_torch import Float, Int64

    rng = np.random.default_rng(3)
    path = tmp_path / "n.tfrecord"
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"label": int(rng.integers(-2**40, 2**40)), "box": rng.standard_normal(4),
                                  "ids": rng.integers(0, 99, i + 1), "score": float(rng.standard_normal())}))
    spec = {"label": Int64(), "box": Float(shape=(2, 2)), "ids": Int64(shape=None), "score": Float()}
    ours = list(TFRecordDataset(path, features=spec))
    desc = {"label": tf.io.FixedLenFeature([], tf.int64), "box": tf.io.FixedLenFeature([2, 2], tf.float32),
            "ids": tf.io.VarLenFeature(tf.int64), "score": tf.io.FixedLenFeature([], tf.float32)}
    theirs = [tf.io.parse_single_example(r, desc) for r in tf.data.TFRecordDataset(str(path))]
    assert len(ours) == len(theirs) == 4
    for o, t in zip(ours, theirs):
        assert o["label"].shape == () and o["label"].item() == int(t["label"])
        assert o["box"].dtype == torch.float32 and np.array_equal(o["box"].numpy(), t["box"].numpy())
        assert o["ids"].tolist() == tf.sparse.to_dense(t["ids"]).numpy().tolist()
        assert o["score"].shape == () and o["score"].item() == float(t["score"])


@pytest.mark.parametrize("compiled", [True, False])
def test_a_restart_marker_cannot_hide_a_jpegs_size(tmp_path, compiled, monkeypatch):
    """A JPEG with a restart marker (RST0, no length) before its frame, and a 1x1 frame header
    planted where a walk reading a length after RST0 lands: its header gives the size TensorFlow's
    libjpeg reads, and the pixel limit refuses it from there in a dataset of TensorFlow's records,
    naming the file, record and key, before anything is decoded (with the header walk in C and in Python)."""
    if compiled and limits._HELPER is None:
        pytest.skip("the compiled helper is not built")
    if not compiled:
        monkeypatch.setattr(limits, "_HELPER", None)
    data = restart_bomb(300, 400)
    assert tf.io.extract_jpeg_shape(data).numpy().tolist() == [300, 400, 3]
    header = limits.read_headers([data])[0]
    assert (header.width, header.height) == (400, 300) == (limits.read_header(data).width, limits.read_header(data).height)
    path = tmp_path / "crafted.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, image in enumerate([png_bytes(np.zeros((30, 40, 3), np.uint8), "JPEG"), data]):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            })).SerializeToString())
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 300 * 400 - 1)
    features = {"image": Image("image/encoded"), "label": Int64("image/class/label")}
    for batch_size in (None, 2):  # per sample, and the batch path (its headers read in one call)
        ds = TFRecordDataset(path, features=features, batch_size=batch_size)
        with pytest.raises(FeatureError) as info:
            list(ds)
        message = str(info.value)
        assert info.value.record == 1 and info.value.key == "image/encoded" and str(path) in message, message
        assert "400x300 pixels exceeds the limit" in message, message
