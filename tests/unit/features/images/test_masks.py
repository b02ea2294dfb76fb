"""Masks and boxes from records written by TensorFlow, through torchvision v2 transforms."""

import io

import numpy as np
import pytest
import tensorflow as tf
import torch
from PIL import Image as PILImage
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from tfrecord_torch import Boxes, FeatureError, Mask, TFRecordDataset, detection_collate, pad_collate, presets

rng = np.random.default_rng(7)


def feature(value):
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
    if isinstance(value, list) and value and isinstance(value[0], float):
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=value if isinstance(value, list) else [value]))


def write_tf(path, records):
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(tf.train.Example(features=tf.train.Features(
                feature={k: feature(v) for k, v in r.items()})).SerializeToString())


def segmentation_records(path, sizes=((20, 24), (16, 30))):
    """Classic layout; the mask equals the image's red channel, to check alignment."""
    images = [rng.integers(0, 21, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    write_tf(path, [{"height": a.shape[0], "width": a.shape[1], "image_raw": a.tobytes(),
                     "mask_raw": np.ascontiguousarray(a[:, :, 0]).tobytes()} for a in images])
    return images


def test_segmentation_raw_gives_image_and_mask(tmp_path):
    images = segmentation_records(tmp_path / "seg.tfrecord")
    items = list(TFRecordDataset(tmp_path, features=presets.segmentation_raw()))
    assert len(items) == 2
    for item, a in zip(items, images):
        assert type(item["image"]) is tv_tensors.Image and type(item["mask"]) is tv_tensors.Mask
        assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), a)
        assert item["mask"].dtype == torch.uint8 and np.array_equal(item["mask"].numpy(), a[:, :, 0])


def test_v2_transforms_crop_image_and_mask_alike(tmp_path):
    segmentation_records(tmp_path / "seg.tfrecord")
    transform = v2.Compose([v2.RandomResizedCrop(12, interpolation=v2.InterpolationMode.NEAREST),
                            v2.RandomHorizontalFlip(), v2.RandomRotation(30)])
    for seed in range(5):
        torch.manual_seed(seed)
        for item in TFRecordDataset(tmp_path, features=presets.segmentation_raw(), transform=transform):
            assert item["image"].shape == (3, 12, 12) and item["mask"].shape == (12, 12)
            assert torch.equal(item["image"][0], item["mask"])  # same crop, flip and rotation
    # the default (bilinear) resize for the image still resizes the mask with nearest: ids stay ids
    items = list(TFRecordDataset(tmp_path, features=presets.segmentation_raw(),
                                 transform=v2.RandomResizedCrop(40)))
    assert all(set(item["mask"].unique().tolist()) <= set(range(21)) for item in items)


def test_pad_collate_pads_masks_with_the_ignore_value(tmp_path):
    segmentation_records(tmp_path / "seg.tfrecord")
    ds = TFRecordDataset(tmp_path, features=presets.segmentation_raw())
    (batch,) = list(DataLoader(ds, batch_size=2, collate_fn=pad_collate))
    assert batch["image"].shape == (2, 3, 20, 30) and batch["mask"].shape == (2, 20, 30)
    assert (batch["mask"][0, :, 24:] == 255).all() and (batch["mask"][1, 16:] == 255).all()
    assert (batch["image"][0, :, :, 24:] == 0).all() and batch["image_size"].tolist() == [[20, 24], [16, 30]]
    (batch,) = list(DataLoader(ds, batch_size=2, collate_fn=lambda b: pad_collate(b, mask_value=7)))
    assert (batch["mask"][0, :, 24:] == 7).all()


def test_encoded_palette_mask_gives_class_ids(tmp_path):
    ids = rng.integers(0, 5, (9, 11), dtype=np.uint8)
    im = PILImage.fromarray(ids, "P")
    im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0, 0, 0, 128] + [0] * 3 * 251)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    ids16 = rng.integers(0, 60000, (9, 11), dtype=np.uint16)
    write_tf(tmp_path / "m.tfrecord", [{"mask": buf.getvalue(), "inst": tf.io.encode_png(ids16[:, :, None]).numpy()}])
    (item,) = list(TFRecordDataset(tmp_path, features={"mask": Mask(), "inst": Mask()}))
    assert np.array_equal(item["mask"].numpy(), ids)  # indices, where TF's decode_png gives colours
    assert item["inst"].dtype == torch.uint16 and np.array_equal(item["inst"].numpy(), ids16)
    rgb = tf.io.encode_png(np.zeros((3, 3, 3), np.uint8)).numpy()
    with pytest.raises(FeatureError, match="one channel of ids"):
        Mask("m").decode({"m": [rgb]})
    with pytest.raises(FeatureError, match="holds 5 bytes"):
        Mask("m", shape=(2, 2)).decode({"m": [b"12345"]})


def od_records(path, n=3):
    out = []
    for i in range(n):
        h, w = 40 + 8 * i, 60 - 4 * i
        boxes = np.sort(rng.random((i + 1, 2, 2)), axis=1).astype(np.float32)  # [N, (min, max), (y, x)]
        out.append({"image/encoded": tf.io.encode_jpeg(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).numpy(),
                    "image/format": b"jpeg", "image/height": h, "image/width": w,
                    "image/object/bbox/ymin": boxes[:, 0, 0].tolist(), "image/object/bbox/xmin": boxes[:, 0, 1].tolist(),
                    "image/object/bbox/ymax": boxes[:, 1, 0].tolist(), "image/object/bbox/xmax": boxes[:, 1, 1].tolist(),
                    "image/object/class/label": [int(x) for x in rng.integers(1, 9, i + 1)],
                    "image/object/class/text": [b"cat"] * (i + 1)})
    write_tf(path, out)


def tf_boxes(path):
    """Absolute XYXY boxes computed from TensorFlow's own parse of the records."""
    keys = [f"image/object/bbox/{k}" for k in ("xmin", "ymin", "xmax", "ymax")]
    desc = {k: tf.io.VarLenFeature(tf.float32) for k in keys}
    desc.update({"image/height": tf.io.FixedLenFeature([], tf.int64), "image/width": tf.io.FixedLenFeature([], tf.int64),
                 "image/object/class/label": tf.io.VarLenFeature(tf.int64)})
    out = []
    for raw in tf.data.TFRecordDataset(str(path)):
        p = tf.io.parse_single_example(raw, desc)
        h, w = int(p["image/height"]), int(p["image/width"])
        cols = [tf.sparse.to_dense(p[k]).numpy() for k in keys]
        out.append((np.stack(cols, 1) * np.array([w, h, w, h], np.float32), (h, w),
                    tf.sparse.to_dense(p["image/object/class/label"]).numpy()))
    return out


def test_object_detection_preset_matches_tensorflow(tmp_path):
    od_records(tmp_path / "od.tfrecord")
    items = list(TFRecordDataset(tmp_path, features=presets.object_detection()))
    expected = tf_boxes(tmp_path / "od.tfrecord")
    assert len(items) == len(expected) == 3
    for item, (boxes, size, labels) in zip(items, expected):
        assert type(item["boxes"]) is tv_tensors.BoundingBoxes and item["boxes"].format == tv_tensors.BoundingBoxFormat.XYXY
        assert tuple(item["boxes"].canvas_size) == size == tuple(item["image"].shape[1:])
        assert np.array_equal(item["boxes"].numpy(), boxes)
        assert item["labels"].dtype == torch.int64 and item["labels"].tolist() == labels.tolist()
        assert item["text"] == ["cat"] * len(labels)


def test_v2_transforms_move_boxes_with_the_image(tmp_path):
    od_records(tmp_path / "od.tfrecord")
    flip = v2.RandomHorizontalFlip(p=1.0)
    plain = list(TFRecordDataset(tmp_path, features=presets.object_detection()))
    flipped = list(TFRecordDataset(tmp_path, features=presets.object_detection(), transform=flip))
    for a, b in zip(plain, flipped):
        w = a["image"].shape[2]
        assert torch.equal(b["image"], a["image"].flip(-1))
        assert torch.allclose(b["boxes"][:, [2, 0]], w - a["boxes"][:, [0, 2]])
        assert torch.equal(b["labels"], a["labels"])
    resized = list(TFRecordDataset(tmp_path, features=presets.object_detection(), transform=v2.Resize((20, 20))))
    assert all(tuple(r["boxes"].canvas_size) == (20, 20) and (r["boxes"] <= 20).all() for r in resized)


def test_detection_collate_keeps_per_image_boxes(tmp_path):
    od_records(tmp_path / "od.tfrecord")
    loader = DataLoader(TFRecordDataset(tmp_path, features=presets.object_detection()), batch_size=3,
                        collate_fn=detection_collate)
    (images, targets) = next(iter(loader))
    assert len(images) == len(targets) == 3
    assert [len(t["boxes"]) for t in targets] == [1, 2, 3] == [len(t["labels"]) for t in targets]


def test_boxes_size_from_the_image_header_and_bad_lists():
    image = tf.io.encode_png(np.zeros((10, 20, 3), np.uint8)).numpy()
    record = {"image/encoded": [image]}
    for k, v in zip(("xmin", "ymin", "xmax", "ymax"), (0.5, 0.5, 1.0, 1.0)):
        record[f"image/object/bbox/{k}"] = np.array([v], np.float32)
    boxes = Boxes().decode(record)
    assert boxes.tolist() == [[10.0, 5.0, 20.0, 10.0]] and tuple(boxes.canvas_size) == (10, 20)
    assert Boxes().decode({"image/encoded": [image]}).shape == (0, 4)  # an image without objects
    record["image/object/bbox/xmax"] = np.array([1.0, 1.0], np.float32)
    with pytest.raises(FeatureError, match="differ in length"):
        Boxes().decode(record)


def test_plain_tensors_where_torchvision_cannot_be_imported(tmp_path, monkeypatch):
    """With TensorFlow imported first (simulated), no tv_tensors: plain tensors, same values."""
    from tfrecord_torch.features.images import decode as images

    segmentation_records(tmp_path / "seg.tfrecord")
    od_records(tmp_path / "od.tfrecord")
    wrapped = list(TFRecordDataset(tmp_path / "seg.tfrecord", features=presets.segmentation_raw()))
    boxes = [i["boxes"] for i in TFRecordDataset(tmp_path / "od.tfrecord", features=presets.object_detection())]
    monkeypatch.setattr(images, "_torchvision_usable", lambda: False)
    plain = list(TFRecordDataset(tmp_path / "seg.tfrecord", features=presets.segmentation_raw()))
    plain_boxes = [i["boxes"] for i in TFRecordDataset(tmp_path / "od.tfrecord", features=presets.object_detection())]
    for p, w in zip(plain, wrapped):
        assert type(p["image"]) is torch.Tensor and type(p["mask"]) is torch.Tensor
        assert torch.equal(p["image"], w["image"].as_subclass(torch.Tensor))
    assert all(type(b) is torch.Tensor and torch.equal(b, w.as_subclass(torch.Tensor))
               for b, w in zip(plain_boxes, boxes))


def test_batch_mode_moves_boxes_with_a_resized_image(tmp_path):
    """A fusable head (Resize) must not resize the image alone: boxes follow it
    in batch mode too (the image fast path is not taken with boxes)."""
    od_records(tmp_path / "od.tfrecord")
    per_sample = list(TFRecordDataset(tmp_path, features=presets.object_detection(), transform=v2.Resize((20, 20))))
    batch, = TFRecordDataset(tmp_path, features=presets.object_detection(), batch_size=len(per_sample),
                             transform=v2.Resize((20, 20)))
    assert batch["image"].shape == (len(per_sample), 3, 20, 20)
    for i, record in enumerate(per_sample):
        assert tuple(batch["boxes"][i].canvas_size) == (20, 20)
        assert torch.equal(batch["boxes"][i], record["boxes"]) and torch.equal(batch["image"][i], record["image"])


@pytest.mark.parametrize("tensor", [torch.arange(24, dtype=torch.uint8).reshape(2, 3, 4),
                                    torch.arange(24, dtype=torch.uint8).reshape(3, 4, 2).permute(2, 0, 1),
                                    torch.zeros(2, 3, 4, 5), torch.zeros(3, 4, requires_grad=True),
                                    torch.zeros(3, 4, 5, requires_grad=True)])
def test_as_image_gives_what_tv_tensors_image_gives(tensor):
    """The image wrapper vs tv_tensors.Image of the same tensor: type, shape,
    strides, values, gradient flag and the memory it views."""
    from tfrecord_torch.features.images.wrap import as_image

    got, expected = as_image(tensor), tv_tensors.Image(tensor)
    assert type(got) is tv_tensors.Image
    assert got.shape == expected.shape and got.stride() == expected.stride()
    assert got.requires_grad == expected.requires_grad and got.data_ptr() == expected.data_ptr()
    assert torch.equal(got.as_subclass(torch.Tensor).detach(), expected.as_subclass(torch.Tensor).detach())
