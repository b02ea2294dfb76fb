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
