"""InstanceMasks: one tv_tensors.Mask [N, H, W] from the OD API's PNG or numerical masks,
and a clear error for every mask it cannot read as the OD API does.
(TensorFlow as the oracle: tests/journeys/test_journey_detection.py.)"""

import io

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torchvision import tv_tensors

from tfrecord_torch import FeatureError, InstanceMasks, Mask


def png(array: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(array, mode).save(buf, format="PNG")
    return buf.getvalue()


def record(masks, h=4, w=5, objects=None) -> dict:
    n = len(masks) if objects is None else objects
    return {"image/height": np.array([h]), "image/width": np.array([w]), "image/object/mask": masks,
            "image/object/bbox/xmin": np.zeros(n, np.float32)}


def test_png_masks_are_binary_and_stacked():
    a = np.array([[0, 1, 2, 255, 0]] * 4, np.uint8)
    bits = png(np.eye(4, 5, dtype=bool))  # a 1-bit PNG
    gray_alpha = png(np.dstack([a, np.full_like(a, 7)]), "LA")
    masks = InstanceMasks().decode(record([png(a), bits, gray_alpha]))
    assert type(masks) is tv_tensors.Mask and masks.dtype == torch.uint8 and masks.shape == (3, 4, 5)
    assert masks[0].tolist() == [[0, 1, 1, 1, 0]] * 4 and masks[2].tolist() == masks[0].tolist()
    assert masks[1].tolist() == np.eye(4, 5, dtype=np.uint8).tolist()


def test_numerical_masks_and_no_objects():
    values = np.array([-1.0, 0.0, 0.5] * 20, np.float32)
    masks = InstanceMasks().decode(record(values, objects=3))
    assert masks.shape == (3, 4, 5) and masks.flatten().tolist() == [0, 0, 1] * 20
    for empty in (None, [], np.zeros(0, np.float32)):
        r = record(empty, objects=0)
        if empty is None:
            del r["image/object/mask"]
        assert InstanceMasks().decode(r).shape == (0, 4, 5)


def test_the_size_from_the_image_header_without_height_and_width():
    image = png(np.zeros((4, 5, 3), np.uint8))
    masks = InstanceMasks().decode({"image/encoded": [image], "image/object/bbox/xmin": np.zeros(0, np.float32)})
    assert masks.shape == (0, 4, 5)


@pytest.mark.parametrize("masks, objects, message", [
    ([png(np.zeros((4, 5, 3), np.uint8))], None, "gray PNG, got a PNG of 3 channels"),
    ([png(np.zeros((4, 5), np.uint8), "P")], None, "gray PNG, got a PNG of 3 channels"),
    ([png(np.zeros((4, 5), np.uint16))], None, "16-bit"),
    ([b"\xff\xd8\xff\xe0 not a png"], None, "object 0's mask"),
    ([png(np.zeros((3, 5), np.uint8))], None, "mask is 3x5, the image 4x5"),
    ([png(np.zeros((4, 5), np.uint8))], 2, "holds 1 masks but 'image/object/bbox/xmin' 2 objects"),
    (np.zeros(21, np.float32), 1, "not a whole number of 4x5 masks"),
    (np.zeros(2, np.int64), 2, "holds int64 values"),
])
def test_masks_it_cannot_read_as_the_od_api_raise(masks, objects, message):
    with pytest.raises(FeatureError, match=message) as err:
        InstanceMasks().decode(record(masks, objects=objects))
    assert "image/object/mask" in str(err.value)


def test_count_none_skips_the_box_count_check():
    masks = InstanceMasks(count=None).decode(record([png(np.ones((4, 5), np.uint8))], objects=3))
    assert masks.shape == (1, 4, 5)


def test_mask_points_a_list_of_masks_to_instance_masks():
    with pytest.raises(FeatureError, match=r"holds 2 masks, expected 1; .*InstanceMasks\(\)"):
        Mask("m").decode({"m": [png(np.zeros((4, 5), np.uint8))] * 2})
