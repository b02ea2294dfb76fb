"""The pixels a model trained in TensorFlow saw: a detection team's records
(the Object Detection API's keys, written by tf.io.TFRecordWriter) and a TFDS
Image feature (tfds' own serializer) read with ``decoder="fast"`` as the
images guide shows it, per sample, in batch mode (an image-only spec and
``presets.object_detection()``), at random (``IndexedTFRecordDataset``), with
0 and 2 DataLoader workers, and through the fused crop; the JPEGs
progressive, 4:2:0, 4:4:4, gray and CMYK.

TensorFlow is the oracle: ``tf.io.decode_jpeg``'s default ``dct_method`` and
``tf.io.decode_image`` for "fast", ``dct_method="INTEGER_ACCURATE"`` for the
default ("accurate"), TFDS's own decode for its records."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
import torch
from helpers import import_tfds
from PIL import Image as PILImage
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from tfrecord_torch import (
    Batching,
    Image,
    ImageBatching,
    IndexedTFRecordDataset,
    Int64,
    TFRecordDataset,
    detection_collate,
    presets,
)
from tfrecord_torch.features.images import jpeg as jpeg_module

H, W = 48, 64


def _photo(seed: int) -> np.ndarray:
    """Smooth gradients with noise: JPEG's two IDCTs differ on it by several levels."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    base = np.stack([xx * 255 / W, yy * 255 / H, ((xx + yy) % 40) * 6], -1)
    return np.clip(base + rng.normal(0, 14, (H, W, 3)), 0, 255).astype(np.uint8)


def _pil(image: PILImage.Image, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", **kw)
    return buf.getvalue()


def _jpegs() -> dict[str, bytes]:
    """The variants, encoded by TensorFlow where it can (its encoder writes no CMYK)."""
    return {
        "4:2:0 (tf.io.encode_jpeg)": tf.io.encode_jpeg(_photo(0), quality=95).numpy(),
        "4:4:4": tf.io.encode_jpeg(_photo(1), quality=95, chroma_downsampling=False).numpy(),
        "progressive": tf.io.encode_jpeg(_photo(2), quality=90, progressive=True).numpy(),
        "gray": tf.io.encode_jpeg(_photo(3)[:, :, :1], quality=95).numpy(),
        "CMYK": _pil(PILImage.fromarray(_photo(4)).convert("CMYK"), quality=95),
        "progressive 4:2:0 (Pillow)": _pil(PILImage.fromarray(_photo(5)), quality=90, progressive=True),
    }


JPEGS = _jpegs()
NAMES = list(JPEGS)


def _feature(value):
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, list) and value and isinstance(value[0], float):
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=value if isinstance(value, list) else [value]))


@pytest.fixture(scope="module")
def od_records(tmp_path_factory):
    """One shard as the Object Detection API's create_*_tf_record scripts
    write it: record i holds JPEG variant i and one box whose label is i."""
    path = tmp_path_factory.mktemp("od") / "train-00000-of-00001"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, data in enumerate(JPEGS.values()):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": _feature(data), "image/format": _feature(b"jpeg"),
                "image/height": _feature(H), "image/width": _feature(W), "image/class/label": _feature(i),
                "image/object/bbox/xmin": _feature([0.1]), "image/object/bbox/xmax": _feature([0.6]),
                "image/object/bbox/ymin": _feature([0.2]), "image/object/bbox/ymax": _feature([0.9]),
                "image/object/class/label": _feature([i]), "image/object/class/text": _feature([b"thing"]),
            })).SerializeToString())
    return path


def _tf_pixels(dct_method: str = "") -> list[np.ndarray]:
    """TF's decode of each variant, [H, W, 3]; for the default dct_method,
    checked equal to tf.io.decode_image's (what the OD API and TFDS run)."""
    out = []
    for data in JPEGS.values():
        pixels = tf.io.decode_jpeg(data, channels=3, dct_method=dct_method).numpy()
        if not dct_method:
            assert np.array_equal(pixels, tf.io.decode_image(data, channels=3).numpy())
        out.append(pixels)
    return out


FAST, ACCURATE = _tf_pixels(), _tf_pixels("INTEGER_ACCURATE")


def test_the_oracles_differ_so_each_check_below_can_fail():
    for i, name in enumerate(NAMES):
        if name != "gray":  # a gray JPEG's two IDCTs can agree on a smooth image
            assert not np.array_equal(FAST[i], ACCURATE[i]), name


def _hwc(image: torch.Tensor) -> np.ndarray:
    return image.permute(1, 2, 0).numpy()


def _check(images_by_label: dict[int, torch.Tensor], want: list[np.ndarray]) -> None:
    assert sorted(images_by_label) == list(range(len(NAMES)))
    for label, image in images_by_label.items():
        assert np.array_equal(_hwc(image), want[label]), NAMES[label]


@pytest.mark.parametrize("workers", [0, 2])
def test_per_sample_detection_records(od_records, workers):
    """``presets.object_detection(decoder="fast")`` through a DataLoader with
    detection_collate: TF's default pixels; the default stays INTEGER_ACCURATE's."""
    for decoder, want in (("fast", FAST), (None, ACCURATE)):
        ds = TFRecordDataset(od_records, features=presets.object_detection(decoder=decoder))
        loader = DataLoader(ds, batch_size=2, num_workers=workers, collate_fn=detection_collate)
        got = {int(t["labels"][0]): image for images, targets in loader for image, t in zip(images, targets)}
        _check(got, want)


def test_per_sample_on_the_main_processs_decode_threads(od_records):
    """``num_workers=0`` on 2 decode threads (the default on 2 cores): the
    records decode ahead on the threads, with the same pixels, in order."""
    for decoder, want in (("fast", FAST), (None, ACCURATE)):
        ds = TFRecordDataset(od_records, features=presets.object_detection(decoder=decoder),
                             batching=Batching(images=ImageBatching(threads=2)))
        loader = DataLoader(ds, batch_size=2, collate_fn=detection_collate)
        labels = [int(t["labels"][0]) for _, targets in loader for t in targets]
        assert labels == list(range(len(NAMES)))
        got = {int(t["labels"][0]): image for images, targets in loader for image, t in zip(images, targets)}
        _check(got, want)


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_mode_with_an_image_only_spec(od_records, workers):
    """Batch mode's fast path: "fast" by default (as before), or asked for
    on the Image; ImageBatching(decoder="accurate") gives INTEGER_ACCURATE's."""
    spec = {"image": Image("image/encoded", decoder="fast"), "label": Int64("image/class/label")}
    runs = [(spec, None, FAST), (presets.slim(), None, FAST),
            (presets.slim(), Batching(images=ImageBatching(decoder="accurate")), ACCURATE)]
    for features, batching, want in runs:
        ds = TFRecordDataset(od_records, features=features, batch_size=3,
                             **({"batching": batching} if batching else {}))
        got = {int(label): image for batch in DataLoader(ds, batch_size=None, num_workers=workers)
               for label, image in zip(batch["label"], batch["image"])}
        _check(got, want)


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_mode_with_presets_object_detection(od_records, workers):
    """A spec with boxes, labels and text beside the image: the decoder asked
    for on the preset or in ImageBatching is honoured, no longer ignored."""
    runs = [(presets.object_detection(decoder="fast"), {}),
            (presets.object_detection(), {"batching": Batching(images=ImageBatching(decoder="fast"))})]
    for features, options in runs:
        ds = TFRecordDataset(od_records, features=features, batch_size=3, **options)
        got = {int(labels[0]): image for batch in DataLoader(ds, batch_size=None, num_workers=workers)
               for labels, image in zip(batch["labels"], batch["image"])}
        _check(got, FAST)
    with pytest.raises(ValueError, match=r"ImageBatching\(decoder='accurate'\) disagrees with "
                                         r"features\['image'\] = Image\(decoder='fast'\)"):
        next(iter(TFRecordDataset(od_records, features=presets.object_detection(decoder="fast"), batch_size=3,
                                  batching=Batching(images=ImageBatching(decoder="accurate")))))


@pytest.mark.parametrize("workers", [0, 2])
def test_map_style(od_records, workers):
    ds = IndexedTFRecordDataset(od_records, features=presets.object_detection(decoder="fast"))
    assert np.array_equal(_hwc(ds[4]["image"]), FAST[4])  # CMYK, at random
    loader = DataLoader(ds, batch_size=2, num_workers=workers, collate_fn=detection_collate, shuffle=True)
    _check({int(t["labels"][0]): image for images, targets in loader for image, t in zip(images, targets)}, FAST)


CROP = v2.Compose([v2.RandomResizedCrop((24, 32), antialias=True), v2.RandomHorizontalFlip()])


def test_the_fused_crop_per_sample_decodes_its_window_with_the_fast_idct(od_records):
    """A leading RandomResizedCrop is fused into decoding (only the window is
    decoded): with decoder="fast" the result is TF's default decode, cropped
    and flipped by the transform with the same draws."""
    torch.manual_seed(11)
    want = [CROP(tv_tensors.Image(torch.from_numpy(p).permute(2, 0, 1))) for p in FAST]
    ds = TFRecordDataset(od_records, features=presets.slim(decoder="fast"), transform=CROP)
    torch.manual_seed(11)
    got = [item["image"] for item in ds]
    for i, (image, expected) in enumerate(zip(got, want)):
        assert torch.equal(image.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor)), NAMES[i]


@pytest.mark.parametrize("helper", [True, False], ids=["compiled helper", "no helper"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_fused_resize_in_batch_mode_with_and_without_the_compiled_helper(od_records, workers, helper,
                                                                            monkeypatch):
    """Batch mode's fused head decodes each JPEG through the crop-window
    decoder (the compiled helper, or simplejpeg where it was not built): the
    fast IDCT either way, TF's default pixels resized as v2.Resize does."""
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    resize = v2.Resize((24, 32), antialias=True)
    want = [resize(torch.from_numpy(p).permute(2, 0, 1)).permute(1, 2, 0).numpy() for p in FAST]
    ds = TFRecordDataset(od_records, features=presets.slim(), batch_size=3, transform=resize)
    got = {int(label): image for batch in DataLoader(ds, batch_size=None, num_workers=workers)
           for label, image in zip(batch["label"], batch["image"])}
    _check(got, want)


def test_a_tfds_image_feature_reads_as_tfds_decodes_it(tmp_path):
    """Records serialized by TFDS's own FeaturesDict (its Image feature encodes
    with TF's JPEG encoder): presets.tfds(decoder="fast") gives what TFDS's
    own decode gives, in both modes."""
    tfds = import_tfds()
    features = tfds.features.FeaturesDict({"image": tfds.features.Image(shape=(None, None, 3),
                                                                        encoding_format="jpeg"),
                                           "label": tfds.features.ClassLabel(num_classes=4)})
    serialized = [features.serialize_example({"image": _photo(10 + i), "label": i}) for i in range(4)]
    path = tmp_path / "tfds-train.tfrecord-00000-of-00001"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in serialized:
            writer.write(record)
    want = [features.deserialize_example(record)["image"].numpy() for record in serialized]
    accurate = [tf.io.decode_jpeg(tf.train.Example.FromString(r).features.feature["image"].bytes_list.value[0],
                                  dct_method="INTEGER_ACCURATE").numpy() for r in serialized]
    assert not any(np.array_equal(a, b) for a, b in zip(want, accurate))
    per_sample = list(TFRecordDataset(path, features=presets.tfds(decoder="fast")))
    batch, = TFRecordDataset(path, features=presets.tfds(decoder="fast"), batch_size=4)
    for i in range(4):
        assert per_sample[i]["label"] == i and np.array_equal(_hwc(per_sample[i]["image"]), want[i])
        assert np.array_equal(_hwc(batch["image"][i]), want[i])
    assert all(np.array_equal(_hwc(item["image"]), accurate[i])
               for i, item in enumerate(TFRecordDataset(path, features=presets.tfds())))


def _large_photo(seed: int, h: int = 160, w: int = 208) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, ((xx + yy) % 40) * 6], -1)
    return np.clip(base + rng.normal(0, 14, (h, w, 3)), 0, 255).astype(np.uint8)


def test_per_sample_batches_in_the_main_process_are_tfs_pixels(tmp_path):
    """``DataLoader(ds, batch_size=4)`` with ``num_workers=0`` over a TF
    team's Examples of 160x208 photos (large enough that the decode threads
    write each into its batch's buffer): 4:2:0, 4:4:4 and progressive JPEGs
    and a PNG, all by TensorFlow's encoders, two epochs (the second stacked
    ahead from its first batch). Each batch is TF's decode of its records,
    INTEGER_ACCURATE by default and the default dct_method with
    ``decoder="fast"``."""
    photos = [_large_photo(10 + i) for i in range(12)]
    encoded = []
    for i, photo in enumerate(photos):
        kind = i % 4
        if kind == 3:
            encoded.append(tf.io.encode_png(photo).numpy())
        else:
            encoded.append(tf.io.encode_jpeg(photo, quality=92, chroma_downsampling=kind != 1,
                                             progressive=kind == 2).numpy())
    path = str(tmp_path / "photos.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i, data in enumerate(encoded):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            })).SerializeToString())
    for decoder, dct_method in ((None, "INTEGER_ACCURATE"), ("fast", "")):
        want = torch.stack([torch.from_numpy(tf.io.decode_image(d, channels=3).numpy() if i % 4 == 3 else
                                             tf.io.decode_jpeg(d, channels=3, dct_method=dct_method).numpy())
                            for i, d in enumerate(encoded)]).permute(0, 3, 1, 2)
        ds = TFRecordDataset(path, features={"image": Image(decoder=decoder), "label": Int64()},
                             batching=Batching(images=ImageBatching(threads=2)))
        for _ in range(2):
            batches = list(DataLoader(ds, batch_size=4))
            assert [b["label"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
            assert all(type(b["image"]) is torch.Tensor for b in batches)
            assert torch.equal(torch.cat([b["image"] for b in batches]), want), decoder
