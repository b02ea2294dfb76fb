"""Batch mode moves masks and boxes with their image exactly as the per-sample
path does, and gives images and masks one type whatever the data holds.

The oracle is the per-sample path: each record decoded by
``TFRecordDataset(path, features=spec)`` and passed through the same v2
transform with torch's global RNG seeded as the batch-mode process was (the
main process, or each DataLoader worker through ``worker_init_fn``). Batch
mode deals batches w, w + workers, ... to worker w and transforms their
records in order, so the oracle draws in that order too: the comparison is
exact, record by record (the per-sample DataLoader's own split of records
among workers differs, so with workers the oracle applies the transform to
the per-sample items itself).
"""

import numpy as np
import pytest
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from tfrecord_torch import (
    Batching,
    Image,
    ImageBatching,
    Int64,
    MixedSizesError,
    RecordWriter,
    TFRecordDataset,
    make_example,
    presets,
)

SEED = 1234
BATCH = 8
RECORDS = 22  # batches of 8, 8 and 6

TRANSFORMS = {
    "flip-always": lambda: v2.RandomHorizontalFlip(p=1.0),
    "flip-half": lambda: v2.RandomHorizontalFlip(p=0.5),
    "resized-crop": lambda: v2.Compose([v2.RandomResizedCrop(12), v2.RandomHorizontalFlip()]),
    "resized-crop-nearest": lambda: v2.Compose([
        v2.RandomResizedCrop(12, interpolation=v2.InterpolationMode.NEAREST), v2.RandomHorizontalFlip()]),
    "resize": lambda: v2.Resize((16, 18)),
}
RESIZING = ("resized-crop", "resized-crop-nearest", "resize")  # give one size from mixed sizes
BLENDING = ("resized-crop", "resize")  # bilinear for the image, nearest for the mask


def _sizes(name, n=RECORDS):
    """One size in the first batch; mixed sizes after it where the transform
    gives one size."""
    return [(20 + 4 * (i % 3), 24 + 2 * (i % 2)) if name in RESIZING and i >= BATCH else (20, 24)
            for i in range(n)]


def segmentation(path, sizes):
    """The classic raw layout; the mask equals the image's red channel."""
    rng = np.random.default_rng(0)
    with RecordWriter(path) as w:
        for h, width in sizes:
            a = rng.integers(0, 21, (h, width, 3), dtype=np.uint8)
            w.write(make_example({"height": h, "width": width, "image_raw": a.tobytes(),
                                  "mask_raw": np.ascontiguousarray(a[:, :, 0]).tobytes()}))
    return path


def detection(path, sizes):
    """Object Detection API records: a PNG and 1-3 normalised boxes each."""
    rng = np.random.default_rng(1)
    with RecordWriter(path) as w:
        for i, (h, width) in enumerate(sizes):
            boxes = np.sort(rng.random((i % 3 + 1, 2, 2)), axis=1).astype(np.float32)  # [N, (min, max), (y, x)]
            w.write(make_example({
                "image/encoded": png_bytes(rng.integers(0, 256, (h, width, 3), dtype=np.uint8)),
                "image/height": h, "image/width": width,
                "image/object/bbox/ymin": boxes[:, 0, 0], "image/object/bbox/xmin": boxes[:, 0, 1],
                "image/object/bbox/ymax": boxes[:, 1, 0], "image/object/bbox/xmax": boxes[:, 1, 1],
                "image/object/class/label": [int(x) for x in rng.integers(1, 9, i % 3 + 1)],
                "image/object/class/text": [b"cat"] * (i % 3 + 1)}))
    return path


def _seed_worker(worker_id):
    torch.manual_seed(SEED + worker_id)


def per_sample(path, spec, transform, workers):
    """The per-sample path's output for each record, the transform drawing as
    the batch-mode process that handles the record does: in the main process,
    the per-sample DataLoader itself; with workers, each worker's records
    (its batches') in order from its seed."""
    if not workers:
        torch.manual_seed(SEED)
        return list(DataLoader(TFRecordDataset(path, features=spec, transform=transform), batch_size=None))
    items = list(TFRecordDataset(path, features=spec))
    out = [None] * len(items)
    starts = range(0, len(items), BATCH)
    for w in range(workers):
        torch.manual_seed(SEED + w)
        for start in list(starts)[w::workers]:
            for i in range(start, min(start + BATCH, len(items))):
                out[i] = transform(items[i])
    return out


def batch_mode(path, spec, transform, workers, images):
    ds = TFRecordDataset(path, features=spec, batch_size=BATCH, transform=transform,
                         batching=Batching(images=images))
    torch.manual_seed(SEED)
    loader = DataLoader(ds, batch_size=None, num_workers=workers,
                        worker_init_fn=_seed_worker if workers else None)
    return list(loader)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])  # 2: the grid in workers
@pytest.mark.parametrize("images", [True, False], ids=["images-on", "images-off"])
@pytest.mark.parametrize("name", TRANSFORMS)
def test_masks_follow_their_image_as_per_sample(tmp_path, name, images, workers):
    path = segmentation(tmp_path / "seg.tfrecord", _sizes(name))
    spec = presets.segmentation_raw()
    expected = per_sample(path, spec, TRANSFORMS[name](), workers)
    batches = batch_mode(path, spec, TRANSFORMS[name](), workers, images)
    assert [len(b["image"]) for b in batches] == [8, 8, 6]
    rows = [(b["image"][i], b["mask"][i]) for b in batches for i in range(len(b["image"]))]
    for r, ((image, mask), want) in enumerate(zip(rows, expected, strict=True)):
        assert torch.equal(image, want["image"].as_subclass(torch.Tensor)), r
        assert torch.equal(mask, want["mask"].as_subclass(torch.Tensor)), r
        if name not in BLENDING:  # the mask is the red channel: moved alike
            assert torch.equal(image[0], mask), r


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("images", [True, False], ids=["images-on", "images-off"])
@pytest.mark.parametrize("name", TRANSFORMS)
def test_boxes_follow_their_image_as_per_sample(tmp_path, name, images, workers):
    path = detection(tmp_path / "od.tfrecord", _sizes(name))
    spec = presets.object_detection()
    expected = per_sample(path, spec, TRANSFORMS[name](), workers)
    batches = batch_mode(path, spec, TRANSFORMS[name](), workers, images)
    rows = [{k: b[k][i] for k in b} for b in batches for i in range(len(b["image"]))]
    for r, (row, want) in enumerate(zip(rows, expected, strict=True)):
        assert torch.equal(row["image"], want["image"].as_subclass(torch.Tensor)), r
        assert type(row["boxes"]) is tv_tensors.BoundingBoxes, r
        assert tuple(row["boxes"].canvas_size) == tuple(want["boxes"].canvas_size) == tuple(row["image"].shape[1:])
        assert torch.equal(row["boxes"], want["boxes"]), r
        assert torch.equal(row["labels"], want["labels"]) and row["text"] == want["text"], r


def test_batch_mode_equals_the_per_sample_dataloader(tmp_path):
    """As users write both: the same seed and transform give the same rows."""
    path = segmentation(tmp_path / "seg.tfrecord", [(20, 24)] * 16)
    transform = v2.RandomHorizontalFlip()
    plain = list(TFRecordDataset(path, features=presets.segmentation_raw()))
    torch.manual_seed(0)
    per_sample = list(DataLoader(TFRecordDataset(path, features=presets.segmentation_raw(), transform=transform),
                                 batch_size=8))
    torch.manual_seed(0)
    batched = list(DataLoader(TFRecordDataset(path, features=presets.segmentation_raw(), transform=transform,
                                              batch_size=8), batch_size=None))
    for a, b in zip(per_sample, batched, strict=True):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["mask"], b["mask"])
    rows = torch.cat([b["mask"] for b in batched])
    flipped = [not torch.equal(row, item["mask"]) for row, item in zip(rows, plain, strict=True)]
    assert 0 < sum(flipped) < 16  # p=0.5 flipped some and kept some


SPEC = {"image": Image(), "label": Int64()}


def _mixed_heights(path, n=24, odd=(9, 20)):
    """JPEG-free images of 20x24, except records ``odd`` (16x24): batch 0 of 8
    is one size, batches 1 and 2 are mixed."""
    rng = np.random.default_rng(2)
    with RecordWriter(path) as w:
        for i in range(n):
            a = rng.integers(0, 256, (16 if i in odd else 20, 24, 3), dtype=np.uint8)
            w.write(make_example({"image": png_bytes(a), "label": i}))
    return path


@pytest.mark.parametrize("images", [True, False], ids=["images-on", "images-off"])
@pytest.mark.parametrize("workers", [0, 2])
def test_mixed_sizes_without_a_fixed_size_are_refused_by_name(tmp_path, images, workers):
    """Never a tensor for one batch and a list for the next: the first batch
    of mixed sizes is an error naming two of its records and the fixes."""
    path = _mixed_heights(tmp_path / "a.tfrecord")
    ds = TFRecordDataset(path, features=SPEC, batch_size=8, batching=Batching(images=images))
    seen = []
    with pytest.raises(MixedSizesError) as raised:
        for batch in DataLoader(ds, batch_size=None, num_workers=workers):
            seen.append(type(batch["image"]))
    assert seen == [torch.Tensor]  # the batches before the mixed one come out first
    message = str(raised.value)
    assert "a.tfrecord: record 8 at byte offset" in message and "(3x20x24)" in message
    assert "a.tfrecord: record 9 at byte offset" in message and "(3x16x24)" in message
    assert "v2.Resize((h, w))" in message and "pad_collate" in message
    if images:
        assert "ImageBatching(pad=True)" in message


@pytest.mark.parametrize("workers", [0, 2])
def test_a_fixed_size_gives_tensors_from_mixed_sizes(tmp_path, workers):
    path = _mixed_heights(tmp_path / "a.tfrecord")
    for kw in ({"batching": Batching(images=ImageBatching(pad=True))}, {"transform": v2.Resize((20, 24))},
               {"batching": Batching(images=False), "transform": v2.Resize((20, 24))}):
        ds = TFRecordDataset(path, features=SPEC, batch_size=8, **kw)
        shapes = [tuple(b["image"].shape) for b in DataLoader(ds, batch_size=None, num_workers=workers)]
        assert shapes == [(8, 3, 20, 24)] * 3, kw


def test_masks_of_mixed_sizes_after_the_transform_are_refused(tmp_path):
    """A flip keeps each record's size: mixed sizes stay mixed, and are named."""
    path = segmentation(tmp_path / "seg.tfrecord", [(20, 24), (20, 24), (16, 30)])
    ds = TFRecordDataset(path, features=presets.segmentation_raw(), batch_size=3, transform=v2.RandomHorizontalFlip())
    with pytest.raises(MixedSizesError, match=r"feature 'image_raw' \('image'\).* record 2 at byte offset "
                                              r"\d+ \(3x16x30\).*v2.Resize"):
        list(ds)


@pytest.mark.parametrize("options", [{"pad": True}, {"size": (20, 24)}, {"layout": "NHWC"},
                                     {"normalize": ((0.5,) * 3, (0.2,) * 3)}])
def test_fast_path_options_where_the_fast_path_is_not_taken_are_refused(tmp_path, options):
    """Padding, a fixed size, NHWC or normalisation would not be applied to
    records decoded whole (masks beside the image, or an unfused v2
    transform): refused, not ignored."""
    seg = segmentation(tmp_path / "seg.tfrecord", [(20, 24)] * 3)
    ds = TFRecordDataset(seg, features=presets.segmentation_raw(), batch_size=3,
                         batching=Batching(images=ImageBatching(**options)))
    with pytest.raises(ValueError, match=r"images=ImageBatching\(.*\) applies to the image fast path only.*"
                                         r"'image', 'mask'"):
        list(ds)
    path = _mixed_heights(tmp_path / "a.tfrecord", n=3, odd=())
    ds = TFRecordDataset(path, features=SPEC, batch_size=3, transform=v2.RandomHorizontalFlip(),
                         batching=Batching(images=ImageBatching(**options)))
    with pytest.raises(ValueError, match="runs on each record whole"):
        list(ds)
    ds.transform = None  # not a v2 transform: the fast path, which applies them
    assert len(list(ds)) == 1


def test_a_transform_after_the_fused_head_that_mixes_sizes_is_refused(tmp_path):
    """A rotation with expand=True after a fused crop gives each image its
    own size: refused by name, not a list."""
    path = _mixed_heights(tmp_path / "a.tfrecord", n=8, odd=())
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomRotation(40, expand=True)])
    torch.manual_seed(0)
    with pytest.raises(MixedSizesError, match=r"feature 'image'.*record 0 at byte offset 0 .*end the transform"):
        list(TFRecordDataset(path, features=SPEC, batch_size=8, transform=transform))


def test_a_fixed_size_that_disagrees_with_the_fused_head_is_refused(tmp_path):
    path = _mixed_heights(tmp_path / "a.tfrecord", n=4, odd=())
    crop = v2.RandomResizedCrop(16)
    with pytest.raises(ValueError, match=r"size=\(20, 24\)\) disagrees with .* \(16, 16\)"):
        list(TFRecordDataset(path, features=SPEC, batch_size=4, transform=crop,
                             batching=Batching(images=ImageBatching(size=(20, 24)))))
    batch, = TFRecordDataset(path, features=SPEC, batch_size=4, transform=crop,
                             batching=Batching(images=ImageBatching(size=(16, 16))))
    assert batch["image"].shape == (4, 3, 16, 16)
