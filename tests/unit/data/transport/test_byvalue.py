"""Per-sample tensors sent inside a worker's message (data/transport/byvalue.py):
they arrive as the same type, attributes and values, without a file
descriptor each; detection_collate sends its batches so."""

import io
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
import torch.multiprocessing  # noqa: F401 - registers torch's reductions with ForkingPickler
import torch.utils.data
from PIL import Image as PILImage
from torch.utils.data import DataLoader
from torchvision import tv_tensors

from tfrecord_torch import RecordWriter, TFRecordDataset, detection_collate, make_example, presets
from tfrecord_torch.data.transport.byvalue import BY_VALUE_BYTES, by_value


def send(value, shared_memory=True):
    """What a DataLoader worker's queue does to a batch, in this process;
    ``shared_memory=False``: asserting that no storage went by shared memory
    (a file descriptor, or a file name, the receiver maps)."""
    message = ForkingPickler.dumps(value)
    assert shared_memory or b"rebuild_storage" not in bytes(message)
    return pickle.loads(message)


def sample(k):
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[1.0, 2.0, 5.0, 6.0]] * k), format="XYXY", canvas_size=(8, 9))
    return {"image": tv_tensors.Image(torch.full((3, 8, 9), k, dtype=torch.uint8)), "boxes": boxes,
            "labels": torch.arange(k), "masks": tv_tensors.Mask(torch.ones((k, 8, 9), dtype=torch.uint8)),
            "text": ["a"] * k}


def test_tensors_arrive_as_their_type_with_attributes_and_no_descriptor(monkeypatch):
    """A collate_fn that takes detection_collate's lists out of its tuple still
    sends each tensor inside the message (the tuple itself: packed.py)."""
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())  # as in a worker
    batch = [sample(1), sample(2)]
    images, targets = send(tuple(detection_collate(batch)), shared_memory=False)
    for image, target, item in zip(images, targets, batch):
        assert type(image) is tv_tensors.Image and torch.equal(image, item["image"])
        assert image.numpy().flags.writeable
        for key in ("boxes", "labels", "masks"):
            assert type(target[key]) is type(item[key]) and torch.equal(target[key], item[key])
            assert target[key].stride() == item[key].stride()
        assert target["boxes"].canvas_size == (8, 9) and target["boxes"].format == tv_tensors.BoundingBoxFormat.XYXY
        assert target["text"] == item["text"]


def test_marked_tensors_work_as_before_in_the_worker():
    boxes = sample(2)["boxes"]
    marked = by_value(boxes)
    assert isinstance(marked, tv_tensors.BoundingBoxes) and marked.canvas_size == (8, 9)
    assert torch.equal(marked + 1, boxes + 1)
    assert type(send(marked.clone())) is tv_tensors.BoundingBoxes  # a copy sends its own values
    assert torch.equal(send(marked.clone()), boxes)


@pytest.mark.parametrize("value", [
    torch.zeros(BY_VALUE_BYTES + 1, dtype=torch.uint8),  # large: torch's shared memory
    torch.zeros((4, 6)).t(),  # not contiguous: its strides kept by torch
    torch.zeros(3, requires_grad=True),
    torch.zeros(3, dtype=torch.bfloat16),  # no NumPy view
])
def test_other_tensors_are_left_to_torch(value):
    assert by_value(value) is value


def _mask_png(mask):
    out = io.BytesIO()
    PILImage.fromarray(mask, "L").save(out, format="PNG")
    return out.getvalue()


def write_od(path, n=12):
    rng = np.random.default_rng(0)
    with RecordWriter(path) as w:
        for i in range(n):
            k = 1 + i % 3
            jpeg = io.BytesIO()
            PILImage.fromarray(rng.integers(0, 256, (16, 20, 3), dtype=np.uint8)).save(jpeg, format="JPEG")
            masks = [_mask_png((rng.random((16, 20)) > 0.5).astype(np.uint8)) for _ in range(k)]
            w.write(make_example({
                "image/encoded": jpeg.getvalue(), "image/height": 16, "image/width": 20,
                **{f"image/object/bbox/{c}": np.full(k, 0.25 + 0.5 * (c[1:] == "max"), np.float32)
                   for c in ("xmin", "ymin", "xmax", "ymax")},
                "image/object/class/label": np.arange(k) + i, "image/object/class/text": [b"x"] * k,
                "image/object/mask": np.array(masks, object)}))


def test_worker_batches_equal_the_main_process_ones(tmp_path):
    write_od(tmp_path / "od.tfrecord")
    ds = TFRecordDataset(tmp_path, features=presets.object_detection(masks=True))

    def items(workers):
        loader = DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=detection_collate)
        out = [(image, target) for images, targets in loader for image, target in zip(images, targets)]
        return sorted(out, key=lambda p: int(p[1]["labels"][0]))

    alone = items(0)
    workers = items(2)
    assert len(alone) == len(workers) == 12
    for (image, target), (image2, target2) in zip(alone, workers):
        assert type(image2) is type(image) and torch.equal(image2, image)
        assert target2.keys() == target.keys() and target2["text"] == target["text"]
        for key in ("boxes", "labels", "masks"):
            assert type(target2[key]) is type(target[key]) and torch.equal(target2[key], target[key])
        assert target2["boxes"].canvas_size == target["boxes"].canvas_size == (16, 20)


@pytest.mark.parametrize("cls", [torch.Tensor, tv_tensors.Mask])
def test_arrays_of_a_tensor_torch_moved_into_shared_memory_stay_as_they_were(cls):
    """A tensor that came by value is over the message's bytes, not torch's
    shared memory: ``share_memory_()`` (or sending it on) moves it, and the
    NumPy arrays taken of it before still hold its values, never memory
    freed and given to the next arrays."""
    value = torch.full((60_000,), 7, dtype=torch.uint8).as_subclass(cls)
    got = send(by_value(value))
    assert type(got) is cls and not got.is_shared()
    array = got.numpy()
    got.share_memory_()
    assert got.is_shared()
    later = [np.full(60_000, 9, np.uint8) for _ in range(32)]  # malloc's chunks of that size, freed ones first
    assert (array == 7).all() and all((a == 9).all() for a in later)
