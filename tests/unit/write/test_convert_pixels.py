"""write_dataset keeps 16-bit images 16-bit and writes detection datasets in the
TF Object Detection API's layout; TensorFlow reads both back exactly."""

import json

import numpy as np
import pytest
import tensorflow as tf
import torch
import torchvision
from helpers import import_tfds
from PIL import Image as PILImage
from torchvision import tv_tensors

from tfrecord_torch import Encoding, Execution, Image, TFRecordDataset, presets, write_dataset, write_order
from tfrecord_torch.write.png16 import encode_png16

rng = np.random.default_rng(16)


def shards(folder):
    return sorted(str(p) for p in folder.glob("*.tfrecord*") if not p.name.endswith((".index", ".index.json")))


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png16_encoder_decodes_exactly_in_tensorflow(channels):
    a = rng.integers(0, 65536, (13, 17, channels), dtype=np.uint16)
    a[:, :5] = 1234  # runs, so the Sub filter's zero differences occur
    assert np.array_equal(tf.io.decode_png(encode_png16(a), dtype=tf.uint16).numpy(), a)


def test_16_bit_images_stay_16_bit(tmp_path):
    gray = [rng.integers(0, 65536, (6, 9), dtype=np.uint16) for _ in range(2)]
    rgb = [rng.integers(0, 65536, (5, 4, 3), dtype=np.uint16) for _ in range(2)]
    pil = PILImage.fromarray(gray[0])  # mode I;16, as Pillow opens a 16-bit gray PNG
    assert pil.mode.startswith("I;16")
    write_dataset([(g, 0) for g in gray] + [(pil, 1)], tmp_path / "g", name="g",
                  execution=Execution(progress=False))
    write_dataset([(torch.from_numpy(a).permute(2, 0, 1), 1) for a in rgb], tmp_path / "c", name="c",
                  execution=Execution(progress=False))
    for folder, arrays in (("g", gray + [gray[0]]), ("c", rgb)):
        arrays = [arrays[k] for k in write_order(len(arrays))]  # the seeded write order
        ours = list(TFRecordDataset(tmp_path / folder, features={"image": Image(mode="unchanged")}))
        raws = list(tf.data.TFRecordDataset(shards(tmp_path / folder)))
        assert len(ours) == len(raws) == len(arrays)
        for item, raw, a in zip(ours, raws, arrays):
            a = a.reshape(a.shape[:2] + (-1,))
            image = tf.io.parse_single_example(raw, {"image": tf.io.FixedLenFeature([], tf.string)})["image"]
            assert np.array_equal(tf.io.decode_png(image, dtype=tf.uint16).numpy(), a)  # not clipped
            assert item["image"].dtype == torch.uint16 and np.array_equal(item["image"].permute(1, 2, 0).numpy(), a)
        features = json.loads((tmp_path / folder / "features.json").read_text())
        assert features["featuresDict"]["features"]["image"]["image"]["dtype"] == "uint16"


def test_16_bit_raw_and_jpeg(tmp_path):
    arrays = [rng.integers(0, 65536, (4, 5, 3), dtype=np.uint16) for _ in range(2)]
    write_dataset([(a, 0) for a in arrays], tmp_path, name="r", encoding=Encoding(image_format="raw"),
                  execution=Execution(progress=False))
    spec = presets.converted(raw=True, dtype="uint16")
    ours = list(TFRecordDataset(tmp_path, features=spec))
    desc = {"image": tf.io.FixedLenFeature([], tf.string)}
    written = [arrays[k] for k in write_order(2)]
    for item, raw, a in zip(ours, tf.data.TFRecordDataset(shards(tmp_path)), written):
        theirs = tf.io.decode_raw(tf.io.parse_single_example(raw, desc)["image"], tf.uint16).numpy()
        assert np.array_equal(theirs.reshape(a.shape), a)
        assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), a)
    with pytest.raises(TypeError, match="sample 0: JPEG cannot store 16-bit"):
        write_dataset([(arrays[0], 0)], tmp_path / "j", name="j", encoding=Encoding(image_format="jpeg"),
                      execution=Execution(progress=False))


def voc_folder(root, sizes=((48, 64), (40, 30))):
    """A two-image PASCAL VOC folder, the layout torchvision's VOCDetection reads."""
    base = root / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (base / sub).mkdir(parents=True)
    names, objects = [], []
    for k, (h, w) in enumerate(sizes):
        name = f"img{k}"
        names.append(name)
        PILImage.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(base / "JPEGImages" / f"{name}.jpg")
        objs = [("dog", 3, 4, w - 5, h - 6), ("cat", 1, 2, 10, 12)][: k + 1]
        objects.append(objs)
        xml = "".join(f"<object><name>{n}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax>"
                      f"<ymax>{y1}</ymax></bndbox></object>" for n, x0, y0, x1, y1 in objs)
        (base / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename><size><width>{w}</width><height>{h}</height>"
            f"<depth>3</depth></size>{xml}</annotation>")
    (base / "ImageSets" / "Main" / "train.txt").write_text("\n".join(names) + "\n")
    return objects


def test_detection_dataset_writes_the_od_api_layout(tmp_path):
    objects = voc_folder(tmp_path)
    voc = torchvision.datasets.VOCDetection(str(tmp_path), year="2012", image_set="train")
    wrapped = torchvision.datasets.wrap_dataset_for_transforms_v2(voc)
    image, target = wrapped[0]
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
    from torchvision.tv_tensors._dataset_wrapper import VOC_DETECTION_CATEGORIES as names  # the wrapper's ids
    write_dataset(wrapped, tmp_path / "out", name="voc",
                  encoding=Encoding(image_format="jpeg", class_names=names),
                  execution=Execution(progress=False))
    # TensorFlow reads it with the OD API's TfExampleDecoder keys
    keys = {"image/encoded": tf.io.FixedLenFeature([], tf.string), "image/format": tf.io.FixedLenFeature([], tf.string),
            "image/height": tf.io.FixedLenFeature([], tf.int64), "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/object/class/label": tf.io.VarLenFeature(tf.int64),
            "image/object/class/text": tf.io.VarLenFeature(tf.string),
            **{f"image/object/bbox/{c}": tf.io.VarLenFeature(tf.float32) for c in ("xmin", "ymin", "xmax", "ymax")}}
    records = tf.data.TFRecordDataset(shards(tmp_path / "out"))
    parsed = [tf.io.parse_single_example(r, keys) for r in records]
    ours = list(TFRecordDataset(tmp_path / "out", features=presets.object_detection()))
    assert len(parsed) == len(ours) == 2
    for p, item, objs in zip(parsed, ours, [objects[k] for k in write_order(2)]):
        h, w = int(p["image/height"]), int(p["image/width"])
        assert tf.io.decode_jpeg(p["image/encoded"]).shape == (h, w, 3) and p["image/format"] == b"jpeg"
        dense = {k: tf.sparse.to_dense(v).numpy() for k, v in p.items() if isinstance(v, tf.SparseTensor)}
        # VOC's XML is 1-based; torchvision's wrapper gives the numbers as they are
        want = np.array([o[1:] for o in objs], np.float64)
        got = np.stack([dense[f"image/object/bbox/{c}"] for c in ("xmin", "ymin", "xmax", "ymax")], 1)
        assert np.allclose(got * [w, h, w, h], want, atol=1e-4) and (got >= 0).all() and (got <= 1).all()
        assert [names[k] for k in dense["image/object/class/label"]] == [o[0] for o in objs]
        assert dense["image/object/class/text"].tolist() == [o[0].encode() for o in objs]
        assert np.allclose(item["boxes"].numpy(), want, atol=1e-3) and item["text"] == [o[0] for o in objs]
    features = json.loads((tmp_path / "out" / "features.json").read_text())["featuresDict"]["features"]
    assert set(features["image"]["featuresDict"]["features"]) == {"encoded", "height", "width", "object"}


@pytest.mark.parametrize("sizes", [[(5, 4), (5, 4)], [(5, 4), (7, 3), (2, 9)]])
def test_raw_conversion_describes_the_image_for_any_sizes(tmp_path, sizes):
    """Fixed or variable sizes: features.json keeps the image and its size
    features; TFDS loads it and reshapes by height/width/channels to the source."""
    tfds = import_tfds()

    from tfrecord_torch import tfds_dataset

    arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    write_dataset([(a, i) for i, a in enumerate(arrays)], tmp_path, name="r",
                  encoding=Encoding(image_format="raw"), execution=Execution(progress=False))
    arrays = [arrays[k] for k in write_order(len(arrays))]  # as written: in the seeded order
    features = json.loads((tmp_path / "features.json").read_text())["featuresDict"]["features"]
    assert {"image", "height", "width", "channels", "label"} <= set(features)
    builder = tfds.builder_from_directory(str(tmp_path))
    loaded = list(builder.as_dataset(split="train", shuffle_files=False).as_numpy_iterator())
    assert len(loaded) == len(arrays)
    for item, a in zip(loaded, arrays):
        shape = (int(item["height"]), int(item["width"]), int(item["channels"]))
        assert np.array_equal(item["image"].reshape(shape), a)
    ours = list(tfds_dataset(tmp_path, "train"))
    assert [tuple(int(o[k]) for k in ("height", "width", "channels")) for o in ours] == [a.shape for a in arrays]
    assert all(np.array_equal(o["image"].numpy().reshape(a.shape), a) for o, a in zip(ours, arrays))
    shaped = list(TFRecordDataset(tmp_path, features=presets.converted(raw=True)))
    assert all(np.array_equal(s["image"].permute(1, 2, 0).numpy(), a) for s, a in zip(shaped, arrays))
