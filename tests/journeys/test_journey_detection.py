"""A detection team's records, as the TF Object Detection API writes them, into a detection batch.

TensorFlow writes the records (``image/encoded`` JPEG, ``image/height``/``width``, normalised
boxes, ``class/label``, ``class/text``, ``is_crowd``, ``area``, ``source_id``) with the instance
masks in each of the OD API's two encodings: a PNG per object, and N x H x W floats. The oracle is
the OD API's ``TfExampleDecoder`` mask logic written with TF ops, record by record; the reads are
written as docs/guide/detection.md shows them, per sample and in batch mode, with 0 and 2 workers.
Every per-object value is distinct, so an object's values paired with another's box would show.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import torch
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

import tfrecord_torch as tt

# (height, width, boxes as normalised (ymin, xmin, ymax, xmax)) of each record; record 2 has no objects
LAYOUTS = [
    (48, 64, [(0.05, 0.05, 0.45, 0.40), (0.10, 0.55, 0.60, 0.95), (0.55, 0.10, 0.95, 0.50)]),
    (40, 56, [(0.20, 0.20, 0.80, 0.70)]),
    (56, 48, []),
    (48, 64, [(0.00, 0.00, 1.00, 0.50), (0.25, 0.50, 0.75, 1.00)]),
    (64, 40, [(0.10, 0.10, 0.30, 0.90), (0.40, 0.10, 0.60, 0.90), (0.70, 0.10, 0.95, 0.90)]),
    (40, 56, [(0.30, 0.30, 0.60, 0.60)]),
]


def _feature(value) -> tf.train.Feature:
    """A feature of the kind the value's type says: bytes, a list of bytes (``Texts``), floats
    (float32 arrays) or ints; an empty list keeps its kind, as the OD API's writers keep it."""
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, Texts):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(value)))
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return tf.train.Feature(float_list=tf.train.FloatList(value=value.ravel()))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value] if isinstance(value, int) else value))


class Texts(list):
    """A bytes list feature's values."""


def _masks(rng, h: int, w: int, boxes: list) -> np.ndarray:
    """One mask per object: its box's pixels, some with values above 1, and a few holes."""
    masks = np.zeros((len(boxes), h, w), np.uint8)
    for k, (y0, x0, y1, x1) in enumerate(boxes):
        region = masks[k, int(y0 * h):int(np.ceil(y1 * h)), int(x0 * w):int(np.ceil(x1 * w))]
        region[...] = rng.choice([0, 1, 1, 1, 200], region.shape)
    return masks


def write_od_records(path, encoding: str) -> None:
    """The records as the OD API's writers make them, masks as ``encoding`` ("png" or "numerical")."""
    rng = np.random.default_rng(39)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for r, (h, w, boxes) in enumerate(LAYOUTS):
            b = np.asarray(boxes, np.float32).reshape(-1, 4)
            masks = _masks(rng, h, w, boxes)
            n = len(boxes)
            if encoding == "png":
                mask = Texts(tf.io.encode_png(m[:, :, None]).numpy() for m in masks)
            else:  # floats, some negative (``> 0.0`` makes them background)
                mask = np.where(masks > 0, rng.uniform(0.1, 1.0, masks.shape),
                                rng.uniform(-1.0, 0.0, masks.shape)).astype(np.float32)
            features = {
                "image/encoded": tf.io.encode_jpeg(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).numpy(),
                "image/format": b"jpeg", "image/height": h, "image/width": w,
                "image/source_id": str(r).encode(),
                "image/object/bbox/ymin": b[:, 0], "image/object/bbox/xmin": b[:, 1],
                "image/object/bbox/ymax": b[:, 2], "image/object/bbox/xmax": b[:, 3],
                "image/object/class/label": [10 * r + k + 1 for k in range(n)],
                "image/object/class/text": Texts(f"object {r}.{k}".encode() for k in range(n)),
                "image/object/is_crowd": [(r + k) % 2 for k in range(n)],
                "image/object/area": np.array([100 * r + k for k in range(n)], np.float32),
                "image/object/mask": mask,
            }
            example = tf.train.Example(features=tf.train.Features(
                feature={k: _feature(v) for k, v in features.items()}))
            writer.write(example.SerializeToString())


@pytest.fixture(scope="module")
def od_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("od")
    folders = {}
    for encoding in ("png", "numerical"):
        (root / encoding).mkdir()
        write_od_records(root / encoding / "train-00000-of-00001.tfrecord", encoding)
        folders[encoding] = root / encoding
    return folders


def tf_expected(path, encoding: str) -> dict:
    """Each record as TensorFlow decodes it, by source_id: the OD API's TfExampleDecoder's
    parse and mask logic (load_instance_masks=True, PNG_MASKS or NUMERICAL_MASKS) in TF ops."""
    coords = [f"image/object/bbox/{c}" for c in ("xmin", "ymin", "xmax", "ymax")]
    description = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string), "image/source_id": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64), "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64), "image/object/area": tf.io.VarLenFeature(tf.float32),
        "image/object/mask": tf.io.VarLenFeature(tf.string if encoding == "png" else tf.float32),
        **{c: tf.io.VarLenFeature(tf.float32) for c in coords},
    }
    out = {}
    for raw in tf.data.TFRecordDataset(str(path)):
        p = tf.io.parse_single_example(raw, description)
        h, w = p["image/height"], p["image/width"]
        dense = {k: tf.sparse.to_dense(v).numpy() for k, v in p.items() if isinstance(v, tf.SparseTensor)
                 and k != "image/object/mask"}
        masks = (_tf_png_masks if encoding == "png" else _tf_numerical_masks)(p["image/object/mask"], h, w)
        boxes = np.stack([dense[c] for c in coords], 1).reshape(-1, 4) * np.array([w, h, w, h], np.float32)
        image = tf.io.decode_jpeg(p["image/encoded"], channels=3, dct_method="INTEGER_ACCURATE").numpy()
        out[p["image/source_id"].numpy().decode()] = {
            "image": image, "boxes": boxes.astype(np.float32), "masks": masks.numpy(),
            "labels": dense["image/object/class/label"], "is_crowd": dense["image/object/is_crowd"],
            "area": dense["image/object/area"], "text": [t.decode() for t in dense["image/object/class/text"]]}
    return out


def _tf_png_masks(sparse, height, width):
    """The OD API's ``_decode_png_instance_masks``."""
    png_masks = tf.sparse.to_dense(sparse, default_value="")

    def decode_png_mask(image_buffer):
        image = tf.squeeze(tf.image.decode_image(image_buffer, channels=1), axis=2)
        image.set_shape([None, None])
        return tf.cast(tf.greater(image, 0), dtype=tf.uint8)

    return tf.cond(tf.greater(tf.size(png_masks), 0),
                   lambda: tf.map_fn(decode_png_mask, png_masks, fn_output_signature=tf.uint8),
                   lambda: tf.zeros(tf.cast(tf.stack([0, height, width]), dtype=tf.int32), dtype=tf.uint8))


def _tf_numerical_masks(sparse, height, width):
    """The OD API's ``_reshape_instance_masks``."""
    to_shape = tf.cast(tf.stack([-1, height, width]), tf.int32)
    masks = tf.sparse.to_dense(sparse)
    return tf.reshape(tf.cast(tf.greater(masks, 0.0), dtype=tf.float32), to_shape)


def detection_spec(**options) -> dict:
    """The docs' spec: the preset with masks, is_crowd and area, and the record's id."""
    return {**tt.presets.object_detection(masks=True, objects=("is_crowd", "area"), **options),
            "source_id": tt.Text("image/source_id")}


def assert_matches_tf(sample: dict, expected: dict) -> None:
    assert type(sample["masks"]) is tv_tensors.Mask and sample["masks"].dtype == torch.uint8
    h, w = expected["image"].shape[:2]
    assert sample["masks"].shape == expected["masks"].shape == (len(expected["labels"]), h, w)
    assert np.array_equal(sample["masks"].numpy(), expected["masks"].astype(np.uint8))
    assert np.array_equal(sample["image"].permute(1, 2, 0).numpy(), expected["image"])
    assert type(sample["boxes"]) is tv_tensors.BoundingBoxes and tuple(sample["boxes"].canvas_size) == (h, w)
    assert np.array_equal(sample["boxes"].numpy(), expected["boxes"])
    assert sample["labels"].tolist() == expected["labels"].tolist()
    assert sample["is_crowd"].tolist() == expected["is_crowd"].tolist()
    assert sample["area"].tolist() == expected["area"].tolist()
    assert sample["text"] == expected["text"]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("encoding", ["png", "numerical"])
def test_per_sample_detection_batches_match_tensorflow(od_folders, encoding, workers):
    expected = tf_expected(od_folders[encoding] / "train-00000-of-00001.tfrecord", encoding)
    ds = tt.TFRecordDataset(od_folders[encoding], features=detection_spec())
    loader = DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=tt.detection_collate)
    seen = []
    for images, targets in loader:
        for image, target in zip(images, targets):
            assert_matches_tf({"image": image, **target}, expected[target["source_id"]])
            seen.append(target["source_id"])
    assert sorted(seen) == sorted(expected)
    assert expected["2"]["masks"].shape == (0, 56, 48)  # the record without objects: [0, H, W] on both sides


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("encoding", ["png", "numerical"])
def test_batch_mode_gives_the_per_sample_records(od_folders, encoding, workers):
    """Batch mode transforms each record whole (masks and boxes are spatial): with a resize to
    one size its batches hold exactly the per-sample records' values, masks as a list of [N, H, W]."""
    resize = v2.Resize((32, 32))
    per_sample = {s["source_id"]: s for s in tt.TFRecordDataset(od_folders[encoding], features=detection_spec(),
                                                                transform=resize)}
    ds = tt.TFRecordDataset(od_folders[encoding], features=detection_spec(), transform=resize, batch_size=4)
    seen = []
    for batch in DataLoader(ds, batch_size=None, num_workers=workers):
        assert batch["image"].shape[1:] == (3, 32, 32)
        for i, source_id in enumerate(batch["source_id"]):
            one = per_sample[source_id]
            assert torch.equal(batch["image"][i], one["image"])
            for key in ("boxes", "masks", "labels", "is_crowd", "area"):
                assert type(batch[key][i]) is type(one[key]) and torch.equal(batch[key][i], one[key]), key
            assert batch["text"][i] == one["text"] and batch["masks"][i].shape[1:] == (32, 32)
            seen.append(source_id)
    assert sorted(seen) == sorted(per_sample)


def test_every_per_object_value_stays_with_its_box_after_iou_crops(od_folders):
    """RandomIoUCrop then SanitizeBoundingBoxes(labels_getter=ObjectLabels()): the kept boxes'
    masks, labels, is_crowd and area are the ones that belonged to them, as the labels tell
    (each object's are distinct); the masks lie inside their boxes."""
    folder = od_folders["png"]
    original = {s["source_id"]: s for s in tt.TFRecordDataset(folder, features=detection_spec(text=False))}
    transform = v2.Compose([v2.RandomIoUCrop(), v2.SanitizeBoundingBoxes(labels_getter=tt.ObjectLabels())])
    ds = tt.TFRecordDataset(folder, features=detection_spec(text=False), transform=transform)
    dropped = 0
    for seed in range(12):
        torch.manual_seed(seed)
        for sample in ds:
            before = original[sample["source_id"]]
            n = len(sample["boxes"])
            assert len(sample["masks"]) == len(sample["labels"]) == len(sample["is_crowd"]) == len(sample["area"]) == n
            dropped += len(before["boxes"]) - n
            for k, label in enumerate(sample["labels"].tolist()):
                j = before["labels"].tolist().index(label)
                assert sample["is_crowd"][k] == before["is_crowd"][j] and sample["area"][k] == before["area"][j]
                ys, xs = torch.nonzero(sample["masks"][k], as_tuple=True)
                x0, y0, x1, y1 = sample["boxes"][k].tolist()
                assert len(ys) and xs.min() >= x0 - 1 and xs.max() <= x1 and ys.min() >= y0 - 1 and ys.max() <= y1
    assert dropped > 0  # the crops did drop objects


@pytest.mark.parametrize("batch_size", [None, 3])
def test_per_object_values_left_behind_raise(od_folders, batch_size):
    """Where torchvision cannot move a per-object value with its boxes -- the text list, or
    is_crowd without labels_getter=ObjectLabels() -- dropping a box raises, naming the key and
    the fix, per sample and in batch mode, instead of pairing values with the wrong objects."""
    crop = v2.RandomCrop((12, 12))
    cases = [(detection_spec(), v2.SanitizeBoundingBoxes(labels_getter=tt.ObjectLabels()), "'text'", "text=False"),
             (detection_spec(text=False), v2.SanitizeBoundingBoxes(), "'is_crowd'", "ObjectLabels()")]
    for spec, sanitize, key, fix in cases:
        torch.manual_seed(0)
        ds = tt.TFRecordDataset(od_folders["png"], features=spec, transform=v2.Compose([crop, sanitize]),
                                batch_size=batch_size)
        with pytest.raises(ValueError, match="boxes but") as err:
            list(ds)
        assert key in str(err.value) and fix in str(err.value)


def test_objectlabels_refuses_the_text_list(od_folders):
    ds = tt.TFRecordDataset(od_folders["png"], features=detection_spec(),
                            transform=v2.SanitizeBoundingBoxes(labels_getter=tt.ObjectLabels(["labels", "text"])))
    with pytest.raises(ValueError, match="'text' holds a list, not a tensor"):
        next(iter(ds))


def test_a_compose_starting_with_the_users_decoder(od_folders):
    """Read without a spec, a v2.Compose whose first step is the user's own decoder gets the
    encoded bytes (a one-object record's mask list holds one PNG) and is not refused; what
    reaches torchvision's own first step is what is checked, with a hint that fits masks."""

    def decode(record: dict) -> dict:
        h, w = int(record["image/height"][0]), int(record["image/width"][0])
        image = tv_tensors.Image(torch.from_numpy(tf_free_decode(record["image/encoded"][0])).permute(2, 0, 1))
        return {"image": image, "masks": tt.InstanceMasks().decode(record), "size": (h, w)}

    ds = tt.TFRecordDataset(od_folders["png"], transform=v2.Compose([decode, v2.RandomHorizontalFlip(p=1.0)]))
    samples = list(ds)
    assert [len(s["masks"]) for s in samples] == [len(boxes) for _, _, boxes in LAYOUTS]
    leave_masks = tt.TFRecordDataset(od_folders["png"], transform=v2.Compose(
        [lambda r: {"masks": r["image/object/mask"]}, v2.RandomHorizontalFlip(p=1.0)]))
    with pytest.raises(TypeError) as err:
        next(iter(leave_masks))
    assert "feature 'masks' holds encoded PNG images" in str(err.value)
    assert "InstanceMasks()" in str(err.value) and "presets.object_detection(masks=True)" in str(err.value)


def tf_free_decode(data: bytes) -> np.ndarray:
    import io

    from PIL import Image as PILImage

    return np.array(PILImage.open(io.BytesIO(data)).convert("RGB"))
