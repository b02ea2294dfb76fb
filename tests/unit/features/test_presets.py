"""Presets for the common key layouts (TFDS, slim, raw pixels) decode their images exactly."""

import numpy as np
import pytest
import torch
from helpers import image_shards

from tfrecord_torch import FeatureError, RecordWriter, TFRecordDataset, make_example, presets


@pytest.mark.parametrize("preset, keys", [(presets.tfds, ("image", "label")),
                                          (presets.slim, ("image/encoded", "image/class/label"))])
def test_presets_decode_png_exactly(tmp_path, preset, keys):
    _, arrays = image_shards(tmp_path, keys)
    items = list(TFRecordDataset(tmp_path, features=preset()))
    for i, item in enumerate(items):
        assert item["image"].dtype == torch.uint8 and item["image"].shape == (3, 8, 10)
        assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), arrays[i])
        assert item["label"].item() == i


def test_raw_preset(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    with RecordWriter(tmp_path / "raw.tfrecord") as w:
        w.write(make_example({"image_raw": a.tobytes(), "height": 4, "width": 5, "depth": 3, "label": 9}))
        w.write(make_example({"image_raw": a.tobytes(), "height": 4, "width": 4, "depth": 3, "label": 9}))
    ds = TFRecordDataset(tmp_path, features=presets.raw())
    it = iter(ds)
    item = next(it)
    assert torch.equal(item["image"], torch.from_numpy(a).permute(2, 0, 1))
    with pytest.raises(FeatureError, match="needs 48"):
        next(it)


def test_presets_pass_the_jpeg_decoder_to_their_image_and_refuse_it_for_raw_pixels():
    for spec in (presets.tfds(decoder="fast"), presets.slim(decoder="fast"), presets.converted(decoder="fast"),
                 presets.object_detection(decoder="fast")):
        assert spec["image"].decoder == "fast"
    assert presets.object_detection()["image"].decoder is None
    with pytest.raises(ValueError, match=r"decoder must be one of \('fast', 'accurate'\), got 'slow'"):
        presets.tfds(decoder="slow")
    with pytest.raises(ValueError, match="raw pixels are not decoded"):
        presets.converted(raw=True, decoder="fast")


def _od_record(labels, **more) -> bytes:
    """An OD API record of three boxes on a 6x8 image, with ``labels`` and ``more`` per-object lists."""
    import io

    from PIL import Image as PILImage

    out = io.BytesIO()
    PILImage.fromarray(np.zeros((6, 8, 3), np.uint8)).save(out, "PNG")
    coords = {f"image/object/bbox/{c}": np.array(v, np.float32)
              for c, v in (("xmin", [0.1, 0.2, 0.3]), ("ymin", [0.1, 0.2, 0.3]),
                           ("xmax", [0.5, 0.6, 0.7]), ("ymax", [0.5, 0.6, 0.7]))}
    record = {"image/encoded": out.getvalue(), "image/height": 6, "image/width": 8, **coords, **more}
    if labels is not None:
        record["image/object/class/label"] = labels
    return make_example(record)


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("key, record", [
    ("image/object/class/label", _od_record([1, 2])),
    ("image/object/class/label", _od_record(None)),
    ("image/object/class/text", _od_record([1, 2, 3], **{"image/object/class/text": [b"a", b"b"]})),
    ("image/object/class/text", _od_record([1, 2, 3])),
    ("image/object/is_crowd", _od_record([1, 2, 3], **{"image/object/class/text": [b"a", b"b", b"c"],
                                                        "image/object/is_crowd": [0, 1, 0, 1]})),
    ("image/object/area", _od_record([1, 2, 3], **{"image/object/class/text": [b"a", b"b", b"c"],
                                                    "image/object/is_crowd": [0, 1, 0],
                                                    "image/object/area": np.ones(2, np.float32)})),
])
def test_object_detection_refuses_per_object_lists_of_another_length(tmp_path, key, record, batch_size):
    """3 boxes with 2 labels (or none, or 4 is_crowd, 2 texts...) raise naming the record and the
    key, instead of giving per-object values that pair with the wrong boxes."""
    with RecordWriter(tmp_path / "od.tfrecord") as w:
        w.write(_od_record([1, 2, 3], **{"image/object/class/text": [b"a", b"b", b"c"],
                                          "image/object/is_crowd": [0, 1, 0],
                                          "image/object/area": np.ones(3, np.float32)}))
        w.write(record)
    spec = presets.object_detection(objects=("is_crowd", "area"))
    with pytest.raises(FeatureError) as err:
        list(TFRecordDataset(tmp_path, features=spec, batch_size=batch_size))
    assert key in str(err.value) and "3 boxes" in str(err.value) and "od.tfrecord" in str(err.value)
    if batch_size is None:
        assert "record 1" in str(err.value)


@pytest.mark.parametrize("batch_size", [None, 2])
def test_object_detection_places_boxes_on_the_decoded_image(tmp_path, batch_size):
    """Normalised boxes are fractions of the image the record holds (as the OD API scales them by the
    decoded image): a record whose image/height and image/width are swapped or stale still gives
    boxes on the 6x8 image, so a flip moves them with its pixels."""
    from torchvision.transforms import v2

    with RecordWriter(tmp_path / "od.tfrecord") as w:
        w.write(_od_record([1, 2, 3], **{"image/height": 8, "image/width": 6,
                                          "image/object/class/text": [b"a", b"b", b"c"]}))
        w.write(_od_record([1, 2, 3], **{"image/object/class/text": [b"a", b"b", b"c"]}))
    for transform in (None, v2.RandomHorizontalFlip(p=1.0)):
        ds = TFRecordDataset(tmp_path, features=presets.object_detection(), transform=transform, batch_size=batch_size)
        items = list(ds) if batch_size is None else [{k: v[i] for k, v in b.items()} for b in ds for i in range(2)]
        wrong, right = items
        assert tuple(wrong["image"].shape) == (3, 6, 8) and tuple(wrong["boxes"].canvas_size) == (6, 8)
        assert torch.equal(wrong["boxes"], right["boxes"])
