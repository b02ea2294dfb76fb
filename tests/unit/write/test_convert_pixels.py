"""write_dataset keeps 16-bit images 16-bit and writes detection datasets in the
TF Object Detection API's layout; TensorFlow reads both back exactly."""

import json
import re

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


@pytest.mark.parametrize("unwritten", [("masks",), ("iscrowd", "area")])
def test_a_detection_target_with_values_the_writer_cannot_write_is_refused(tmp_path, unwritten):
    """A Mask R-CNN target (torchvision's wrapper with target_keys asking for
    masks, iscrowd or area): the writer writes boxes, labels and class names,
    so it names what it would drop and how to write the rest, and writes
    nothing, rather than records without the masks."""
    image = tv_tensors.Image(torch.zeros(3, 8, 10, dtype=torch.uint8))
    boxes = tv_tensors.BoundingBoxes([[1, 1, 5, 6]], format="XYXY", canvas_size=(8, 10))
    target = {"boxes": boxes, "labels": torch.tensor([1]), "masks": tv_tensors.Mask(torch.ones(1, 8, 10)),
              "iscrowd": torch.tensor([0]), "area": torch.tensor([20.0])}
    target = {k: v for k, v in target.items() if k in ("boxes", "labels", *unwritten)}
    with pytest.raises(TypeError, match=rf"sample 0: the target's {re.escape(repr(unwritten[0]))}.* would not be "
                                        r"written.*target_keys=\{'boxes', 'labels'\}"):
        write_dataset([(image, target)], tmp_path / "out", name="od", execution=Execution(progress=False))
    kept = {"boxes": target["boxes"], "labels": target["labels"]}
    write_dataset([(image, kept)], tmp_path / "kept", name="od", execution=Execution(progress=False))
    (item,) = TFRecordDataset(tmp_path / "kept", features=presets.object_detection(text=False))
    assert item["boxes"].tolist() == [[1.0, 1.0, 5.0, 6.0]] and item["labels"].tolist() == [1]


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


def mixed_image_folder(root, *, eight_bit=True):
    """An ImageFolder as people keep one: RGB and L JPEGs, L, RGBA and P PNGs, and two
    16-bit gray PNGs (I;16, samples above and below 255), every image 10 x 12."""
    files = {"i16a.png": PILImage.fromarray(rng.integers(0, 65536, (10, 12), dtype=np.uint16)),
             "i16b.png": PILImage.fromarray(rng.integers(0, 300, (10, 12), dtype=np.uint16))}
    if eight_bit:
        files.update({
            "rgb.jpg": PILImage.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)),
            "gray.jpg": PILImage.fromarray(rng.integers(0, 256, (10, 12), dtype=np.uint8)),
            "l.png": PILImage.fromarray(rng.integers(0, 256, (10, 12), dtype=np.uint8)),
            "rgba.png": PILImage.fromarray(rng.integers(0, 256, (10, 12, 4), dtype=np.uint8)),
            "p.png": PILImage.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).convert("P")})
    for k, (name, image) in enumerate(sorted(files.items())):
        (root / ("cat" if k % 2 else "dog")).mkdir(parents=True, exist_ok=True)
        image.save(root / ("cat" if k % 2 else "dog") / name)
    return torchvision.datasets.ImageFolder(str(root))


def test_an_image_folder_of_8_and_16_bit_files_reads_as_the_image_folder_gives_it(tmp_path):
    """One 16-bit PNG among 8-bit JPEGs and PNGs: features.json, the stored bytes, TFDS,
    tf.data and tfds_dataset all give the 8-bit RGB pixels the ImageFolder gives (its
    loader's convert("RGB")), and the first batch stacks."""
    tfds = import_tfds()
    from tfrecord_torch import tfds_dataset

    folder = mixed_image_folder(tmp_path / "photos")
    expected = [np.asarray(image) for image, _ in folder]  # what the ImageFolder user sees: uint8 [H, W, 3]
    labels = [label for _, label in folder]
    for k, (path, _) in enumerate(folder.samples):
        if path.endswith(".jpg"):  # JPEG decoders differ by a few levels: TensorFlow's is the reference here
            with open(path, "rb") as f:
                decoded = tf.io.decode_image(f.read(), channels=3).numpy()
            assert np.abs(decoded.astype(int) - expected[k]).max() <= 8
            expected[k] = decoded
    out = tmp_path / "records"
    write_dataset(folder, out, name="photos", shuffle=False, execution=Execution(progress=False))
    image = json.loads((out / "features.json").read_text())["featuresDict"]["features"]["image"]["image"]
    assert image["dtype"] == "uint8" and image["shape"]["dimensions"][-1] == "3"
    loaded = list(tfds.builder_from_directory(str(out)).as_dataset(split="train", shuffle_files=False)
                  .as_numpy_iterator())
    assert [int(x["label"]) for x in loaded] == labels
    for x, want in zip(loaded, expected):
        assert x["image"].dtype == np.uint8 and np.array_equal(x["image"], want)
    desc = {"image": tf.io.FixedLenFeature([], tf.string)}
    for raw, want in zip(tf.data.TFRecordDataset(shards(out)), expected):
        encoded = tf.io.parse_single_example(raw, desc)["image"]
        assert np.array_equal(tf.io.decode_image(encoded, channels=3).numpy(), want)
    ds = tfds_dataset(out, "train")
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=len(expected))))
    assert batch["image"].dtype == torch.uint8 and tuple(batch["image"].shape) == (len(expected), 3, 10, 12)
    for k, (got, want) in enumerate(zip(batch["image"].permute(0, 2, 3, 1).numpy(), expected)):
        if folder.samples[k][0].endswith(".png"):  # the 16-bit ones too: exactly the ImageFolder's pixels
            assert np.array_equal(got, want), folder.samples[k][0]
        else:  # this library's JPEG decoder, within a few levels of TensorFlow's on these 10 x 12 JPEGs
            assert np.abs(got.astype(int) - want).max() <= 8, folder.samples[k][0]
    assert batch["label"].tolist() == labels


def test_an_image_folder_of_16_bit_files_only_stays_16_bit(tmp_path):
    from tfrecord_torch import tfds_dataset

    folder = mixed_image_folder(tmp_path / "depth", eight_bit=False)
    exact = []
    for path, _ in folder.samples:
        with PILImage.open(path) as image:
            assert image.mode == "I;16"  # as Pillow opens a 16-bit gray PNG
            exact.append(np.asarray(image).astype(np.uint16))
    out = tmp_path / "records"
    write_dataset(folder, out, name="depth", shuffle=False, execution=Execution(progress=False))
    image = json.loads((out / "features.json").read_text())["featuresDict"]["features"]["image"]["image"]
    assert image["dtype"] == "uint16"
    ours = [item["image"] for item in tfds_dataset(out, "train")]
    assert all(t.dtype == torch.uint16 and np.array_equal(t[0].numpy(), a) for t, a in zip(ours, exact))
    assert max(int(a.max()) for a in exact) > 255  # not clipped


def test_a_dataset_of_8_and_16_bit_arrays_is_refused_before_its_metadata(tmp_path):
    """Samples the converter decodes (no files to copy) of both depths: one dtype cannot
    hold them, and converting would change the dataset's own values, so it is an error."""
    samples = [(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8), 0),
               (rng.integers(0, 65536, (4, 5, 3), dtype=np.uint16), 1)]
    with pytest.raises(TypeError, match="mix 8-bit and 16-bit images"):
        write_dataset(samples, tmp_path, name="m", execution=Execution(progress=False))
    assert not (tmp_path / "features.json").exists()
