"""Per-object values of a detection item: ObjectLabels as SanitizeBoundingBoxes' labels_getter,
and the check that no per-object value is left with the old count when boxes drop."""

import pickle

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from tfrecord_torch import ObjectLabels
from tfrecord_torch.features.images.objects import transform_objects


def item(text=True) -> dict:
    boxes = tv_tensors.BoundingBoxes([[0, 0, 4, 4], [2, 2, 2, 2], [1, 1, 6, 6]], format="XYXY", canvas_size=(8, 8))
    out = {"image": tv_tensors.Image(torch.zeros(3, 8, 8)), "boxes": boxes, "labels": torch.tensor([1, 2, 3]),
           "is_crowd": torch.tensor([0, 1, 0]), "area": torch.tensor([16.0, 0.0, 25.0]),
           "masks": tv_tensors.Mask(torch.arange(3).view(3, 1, 1).expand(3, 8, 8).clone()), "size": torch.tensor([8, 8, 3])}
    if text:
        out["text"] = ["a", "b", "c"]
    return out


def test_object_labels_drop_every_per_object_tensor_with_its_box():
    sanitize = v2.SanitizeBoundingBoxes(labels_getter=pickle.loads(pickle.dumps(ObjectLabels())))
    out = transform_objects(sanitize, item(text=False), "here")
    assert out["labels"].tolist() == [1, 3] and out["is_crowd"].tolist() == [0, 0]
    assert out["area"].tolist() == [16.0, 25.0] and out["masks"][:, 0, 0].tolist() == [0, 2]
    assert out["size"].tolist() == [8, 8, 3]  # not a per-object name: left alone
    assert repr(ObjectLabels(["labels"])) == "ObjectLabels(['labels'])"


@pytest.mark.parametrize("sanitize, key, fix", [
    (v2.SanitizeBoundingBoxes(), "'is_crowd'", "labels_getter=tfrecord_torch.ObjectLabels()"),
    (v2.SanitizeBoundingBoxes(labels_getter=ObjectLabels()), "'text'", "text=False"),
])
def test_a_per_object_value_left_behind_raises(sanitize, key, fix):
    with pytest.raises(ValueError, match="here: the transform left 2 of 3 boxes but") as err:
        transform_objects(sanitize, item(), "here")
    assert key in str(err.value) and fix in str(err.value)


def test_nothing_dropped_nothing_checked():
    out = transform_objects(v2.RandomHorizontalFlip(p=1.0), item(), "here")
    assert out["text"] == ["a", "b", "c"] and len(out["boxes"]) == 3


def test_object_labels_refuse_a_list_and_a_string_of_keys():
    with pytest.raises(ValueError, match="'text' holds a list"):
        ObjectLabels(["labels", "text"])(item())
    with pytest.raises(ValueError, match="sequence of names"):
        ObjectLabels("labels")
