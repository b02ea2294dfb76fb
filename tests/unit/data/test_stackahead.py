"""Batches stacked on the decode threads (data/stackahead.py): with
``num_workers=0``, DataLoader(ds, batch_size=B) gets each batch's images as
one buffer the decode threads wrote, not copied on the loop's thread; the
batches equal torch.stack of the items, whatever lines up or not (a skipped
record, a PNG among JPEGs, a transform, a kept batch, 8 threads)."""

import gc

import numpy as np
import pytest
import torch
from helpers import in_threads, png_bytes
from torch.utils.data import DataLoader
from torchvision import tv_tensors

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.data import collating, stackahead
from tfrecord_torch.features import reused
from tfrecord_torch.features.images.jpeg import decode_jpeg_planes, planes_into
from tfrecord_torch.features.images.limits import read_header
from tfrecord_torch.features.reused import Reused

N = 100
SIZE = (160, 200)  # 96,000 bytes of planes: over PLACED_BYTES


def _write(path, bad=(), png=()):
    rng = np.random.default_rng(0)
    with RecordWriter(path) as w:
        for i in range(N):
            pixels = rng.integers(0, 255, (*SIZE, 3), dtype=np.uint8)
            data = b"not a jpeg" if i in bad else png_bytes(pixels, "PNG" if i in png else "JPEG", quality=90)
            w.write(make_example({"image": data, "label": i}))
    return str(path)


def _dataset(path, **kwargs):
    # two decode threads whatever the machine's cores (one thread decodes on the iterating thread)
    return TFRecordDataset(path, features={"image": Image(), "label": Int64()},
                           batching=Batching(images=ImageBatching(threads=2)), **kwargs)


@pytest.fixture
def copied(monkeypatch):
    """The batches whose images the loop's thread stacked (counted by their size)."""
    sizes = []
    stack = collating.stack_on_this_thread

    def counting(key, values):
        if key == "image":
            sizes.append(len(values))
        return stack(key, values)

    monkeypatch.setattr(collating, "stack_on_this_thread", counting)
    return sizes


def _expected(ds):
    """Every item's image, in order (the per-sample path, no DataLoader), and the labels."""
    items = list(ds)
    return torch.stack([i["image"] for i in items]), torch.tensor([int(i["label"]) for i in items])


@pytest.mark.parametrize("batch", [16, 7])
def test_batches_come_stacked_by_the_decode_threads(tmp_path, copied, batch):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    images, labels = _expected(ds)
    for epoch in range(2):
        copied.clear()
        got = list(DataLoader(ds, batch_size=batch))
        for b in got:
            assert type(b["image"]) is torch.Tensor and b["image"].is_contiguous()
            assert b["image"].shape[1:] == (3, *SIZE) and b["image"].dtype == torch.uint8
        assert torch.equal(torch.cat([b["image"] for b in got]), images)
        assert torch.equal(torch.cat([b["label"] for b in got]), labels)
        if epoch == 1:  # the batch size known from the start: only a last, shorter batch is stacked here
            assert copied == ([N % batch] if N % batch else [])
    # the first epoch learned the size from its first batch, and stacked most of the rest ahead
    assert len(copied) <= 1


def test_a_skipped_record_is_stacked_here_until_the_slots_line_up_again(tmp_path, copied):
    path = _write(tmp_path / "a.tfrecord", bad=(37,))
    ds = _dataset(path, on_error="skip")
    images, labels = _expected(ds)
    assert len(labels) == N - 1 and 37 not in labels.tolist()
    list(DataLoader(ds, batch_size=8))  # the batch size learned
    copied.clear()
    got = list(DataLoader(ds, batch_size=8))
    assert torch.equal(torch.cat([b["image"] for b in got]), images)
    assert torch.equal(torch.cat([b["label"] for b in got]), labels)
    # the batch with the skipped record's place and those handed over before it came out are
    # stacked here; then the slots line up again
    assert 1 <= len(copied) < len(got) - 2


def test_a_png_among_the_jpegs_is_copied_into_its_slot(tmp_path, copied):
    path = _write(tmp_path / "a.tfrecord", png=(3, 50))
    ds = _dataset(path)
    images, _ = _expected(ds)
    list(DataLoader(ds, batch_size=10))
    copied.clear()
    got = list(DataLoader(ds, batch_size=10))
    assert torch.equal(torch.cat([b["image"] for b in got]), images)
    assert copied == []


def test_with_a_transform_nothing_is_stacked_ahead(tmp_path, copied):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path, transform=lambda item: {**item, "image": item["image"][:, ::2, ::2].contiguous()})
    images, _ = _expected(ds)
    for _ in range(2):
        copied.clear()
        got = list(DataLoader(ds, batch_size=10))
        assert torch.equal(torch.cat([b["image"] for b in got]), images)
        assert len(copied) == len(got)


def test_kept_batches_and_items_are_never_written_over(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    images, _ = _expected(ds)
    kept, items = [], []
    for epoch in range(4):
        for k, b in enumerate(DataLoader(ds, batch_size=10)):
            if (epoch + k) % 3 == 0:
                kept.append((k, b))
        items.extend((k, item) for k, item in enumerate(ds) if k % 9 == epoch)
    for k, b in kept:  # after later epochs' batches were decoded into the buffers let go
        assert torch.equal(b["image"], images[10 * k:10 * k + 10])
        b["image"].zero_()  # a batch written into by the user: no later batch sees it
    for k, item in items:
        assert torch.equal(item["image"], images[k])
    got = list(DataLoader(ds, batch_size=10))
    assert torch.equal(torch.cat([b["image"] for b in got]), images)


@pytest.fixture
def memory(monkeypatch):
    """The slabs' memory of this test alone (the process's is shared by its
    iterations), with the buffers it makes counted."""
    pool = Reused(slab=1 << 20, keep=stackahead.KEPT, largest=stackahead.LARGEST)
    made = []
    empty = reused.np.empty

    class Counting:  # reused's NumPy, with np.empty counted
        def __getattr__(self, name):
            return getattr(np, name)

        def empty(self, *args, **kwargs):
            made.append(args[0])
            return empty(*args, **kwargs)

    monkeypatch.setattr(stackahead, "_MEMORY", pool)
    monkeypatch.setattr(reused, "np", Counting())
    pool.made = made
    return pool


def test_the_next_iteration_stacks_into_the_slabs_the_last_one_let_go_of(tmp_path, memory):
    """Each pass over a dataset is a new iteration: it decodes into the
    buffers the last one let go of (their pages mapped already), making
    none; a batch of the last pass still held is not among them."""
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    images, _ = _expected(ds)
    list(DataLoader(ds, batch_size=10))  # the batch size learned (this file is read ahead whole before it)
    second = list(DataLoader(ds, batch_size=10))
    assert len(memory._large) == len(second)  # a slab for each batch held
    held = second[5]["image"]
    held_address = held.data_ptr()
    del second
    gc.collect()
    memory.made.clear()
    third = list(DataLoader(ds, batch_size=10))
    assert len(memory.made) == 1  # one buffer for the batch still held, none for the others
    assert torch.equal(torch.cat([b["image"] for b in third]), images)
    assert held_address not in {b["image"].data_ptr() for b in third}
    assert torch.equal(held, images[50:60])


def test_what_an_iteration_leaves_the_next_is_bounded(tmp_path, memory, monkeypatch):
    """Ended, an iteration leaves at most KEPT_BETWEEN bytes of its slabs'
    buffers to the next one."""
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    list(DataLoader(ds, batch_size=10))  # the batch size learned
    monkeypatch.setattr(stackahead, "KEPT_BETWEEN", 2_500_000)  # two slabs of 10 images (1.2 MB each)
    for _ in range(2):
        list(DataLoader(ds, batch_size=10))
        assert len(memory._large) == 2
    assert {b.nbytes for b in memory._large} == {10 * 96_000 * 5 // 4}


def test_tv_tensors_return_type_is_kept(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    list(DataLoader(ds, batch_size=10))
    tv_tensors.set_return_type("TVTensor")
    try:
        got = list(DataLoader(ds, batch_size=10))
    finally:
        tv_tensors.set_return_type("Tensor")
    assert all(type(b["image"]) is tv_tensors.Image for b in got)  # as torch.stack gives them


def test_from_8_threads_each_loader_gets_its_own_batches(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    images, labels = _expected(ds)

    def work():
        for batch in (10, 16, 10):
            got = list(DataLoader(ds, batch_size=batch))
            assert torch.equal(torch.cat([b["image"] for b in got]), images)
            assert torch.equal(torch.cat([b["label"] for b in got]), labels)

    assert in_threads(work, 8) == []


def test_planes_go_where_asked_once(tmp_path):
    data = png_bytes(np.random.default_rng(1).integers(0, 255, (*SIZE, 3), dtype=np.uint8), "JPEG", quality=90)
    header = read_header(data)
    expected = decode_jpeg_planes(data, header, decoder="accurate")
    if expected is None:
        pytest.skip("the compiled helper was not built")
    into = np.zeros((2, 3, *SIZE), np.uint8)
    asked = []

    def take(shape):
        asked.append(shape)
        return into[len(asked) - 1]

    planes_into(take)
    try:
        first = decode_jpeg_planes(data, header, decoder="accurate")
        second = decode_jpeg_planes(data, header, decoder="accurate")
    finally:
        planes_into(None)
    assert asked == [(3, *SIZE)]  # once: the second image got memory of its own
    assert first.ctypes.data == into[0].ctypes.data and np.array_equal(into[0], expected)
    assert np.array_equal(second, expected) and not np.shares_memory(second, into)
    planes_into(lambda shape: None)  # no memory given: its own
    try:
        assert np.array_equal(decode_jpeg_planes(data, header, decoder="accurate"), expected)
    finally:
        planes_into(None)


def test_planes_into_refuses_memory_of_another_shape(tmp_path):
    data = png_bytes(np.zeros((*SIZE, 3), np.uint8), "JPEG", quality=90)
    header = read_header(data)
    if decode_jpeg_planes(data, header, decoder="accurate") is None:
        pytest.skip("the compiled helper was not built")
    for wrong in (np.zeros((3, SIZE[0], SIZE[1] - 1), np.uint8), np.zeros((3, *SIZE), np.float32),
                  np.zeros((3, SIZE[1], SIZE[0]), np.uint8).transpose(0, 2, 1)):
        planes_into(lambda shape, wrong=wrong: wrong)
        try:
            with pytest.raises(ValueError, match=r"writeable, C-contiguous uint8 array of shape \(3, 160, 200\)"):
                decode_jpeg_planes(data, header, decoder="accurate")
        finally:
            planes_into(None)


def test_items_iterated_without_a_dataloader_hold_no_slabs_of_their_own(tmp_path):
    """After a DataLoader told the batch size, an iteration of the items
    themselves (no collate) lets go of each slab once its items came out:
    the iteration holds no memory of the items the loop let go."""
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    images, _ = _expected(ds)
    list(DataLoader(ds, batch_size=10))  # the batch size learned
    held = []
    for k, item in enumerate(ds):
        assert torch.equal(item["image"], images[k])
        held.append(len(item.stacking._slabs))
        del item
    assert max(held[50:]) <= 1 + 64 // 10  # the slabs of the records decoded ahead, and the last one out


def test_a_torch_function_mode_sees_the_batch_as_torch_stack_gives_it(tmp_path):
    """What torch.stack gives is kept per type and tv_tensors' setting, but not
    under a torch function mode, which may change it: here a mode that marks
    every stack's result, as default_collate of the items would get it."""

    class Marked(torch.Tensor):
        pass

    class Marking(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out.as_subclass(Marked) if func is torch.stack else out

    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    plain = list(DataLoader(ds, batch_size=10))  # the answer for a plain stack is kept
    assert all(type(b["image"]) is torch.Tensor for b in plain)
    with Marking():
        got = list(DataLoader(ds, batch_size=10))
    assert all(type(b["image"]) is Marked for b in got)
    assert torch.equal(torch.cat([b["image"] for b in got]), torch.cat([b["image"] for b in plain]))


@pytest.mark.parametrize("change", [
    lambda image: image[:, : SIZE[0] // 2],  # a view at the slot's address, of another shape
    lambda image: image.as_strided_(image.shape, (1, 3 * SIZE[1], 3)),  # the same shape, other strides, in place
    lambda image: image.view(torch.int8),  # the same address and shape, another type
])
def test_a_value_changed_at_its_slots_address_is_stacked_as_torch_stack_gives_it(tmp_path, change):
    """A collate_fn of one's own that changes the values (in place, or into
    views at the same address) before default_collate gets what torch.stack
    gives of the values it was handed, never the batch's buffer as the
    decode threads wrote it."""
    from torch.utils.data import default_collate

    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path)
    seen = []

    def collate(batch):
        for item in batch:
            item["image"] = change(item["image"])
        expected = torch.stack([item["image"] for item in batch])
        got = default_collate(batch)
        seen.append(got["image"].data_ptr() == batch[0]["image"].data_ptr())  # the buffer itself?
        assert (got["image"].shape, got["image"].dtype) == (expected.shape, expected.dtype)
        assert torch.equal(got["image"], expected)
        return got

    list(DataLoader(ds, batch_size=10))  # the batch size learned: the next epoch's records get slots
    for _ in DataLoader(ds, batch_size=10, collate_fn=collate):
        pass
    assert len(seen) == N // 10 and not any(seen)


def test_images_too_small_to_place_take_no_slab_memory(tmp_path, memory, copied):
    """Planes under PLACED_BYTES (64x64 RGB: 12 KB) are stacked on the loop's
    thread as before, and no slab buffer is made for them."""
    rng = np.random.default_rng(0)
    path = str(tmp_path / "small.tfrecord")
    with RecordWriter(path) as w:
        for i in range(40):
            pixels = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
            w.write(make_example({"image": png_bytes(pixels, "JPEG", quality=90), "label": i}))
    ds = _dataset(path)
    images, _ = _expected(ds)
    for _ in range(2):
        got = list(DataLoader(ds, batch_size=8))
        assert torch.equal(torch.cat([b["image"] for b in got]), images)
    assert len(copied) == 10  # every batch stacked here
    assert memory._slabs == [] and memory._large == []  # the slabs' memory never asked


def test_two_images_of_one_size_each_keep_their_own_pixels(tmp_path):
    """A record with two images of the batch's size ("left", "right"), whose
    first is now a JPEG, now a PNG: the one JPEG decoded straight into the
    record's slot may be in the other key's buffer, and each image still
    comes out as it decodes alone, never the other's pixels."""
    from tfrecord_torch.features.images.decode import decode_image

    rng = np.random.default_rng(0)
    path = str(tmp_path / "pairs.tfrecord")
    expected = {"left": [], "right": []}
    with RecordWriter(path) as w:
        for i in range(40):
            encoded = {"left": png_bytes(rng.integers(0, 255, (*SIZE, 3), dtype=np.uint8),
                                         "PNG" if i % 3 == 1 else "JPEG", quality=90),
                       "right": png_bytes(rng.integers(0, 255, (*SIZE, 3), dtype=np.uint8), "JPEG", quality=90)}
            for key, data in encoded.items():
                expected[key].append(decode_image(data))
            w.write(make_example({**encoded, "label": i}))
    ds = TFRecordDataset(path, features={"left": Image(), "right": Image(), "label": Int64()},
                         batching=Batching(images=ImageBatching(threads=2)))
    for _ in range(3):  # the first epoch learns the batch size; the next ones decode into slots
        got = list(DataLoader(ds, batch_size=8))
        labels = torch.cat([b["label"] for b in got]).tolist()
        assert labels == list(range(40))
        for key in ("left", "right"):
            assert torch.equal(torch.cat([b[key] for b in got]), torch.stack(expected[key])), key


@pytest.mark.parametrize("mode", ["per-sample", "batch-mode"])
def test_arrays_of_a_batch_moved_into_shared_memory_are_never_written_over(tmp_path, mode):
    """``num_workers=0``: a batch over memory used again (a slab, batch mode's
    pool) moved into shared memory by ``share_memory_()`` lets go of that
    memory, but the NumPy arrays taken of it before still point there; no
    later batch is decoded into it while the batch's storage lives."""
    path = _write(tmp_path / "a.tfrecord")
    if mode == "per-sample":
        ds, kwargs = _dataset(path), {"batch_size": 10}
    else:
        ds = TFRecordDataset(path, features={"image": Image(decoder="accurate"), "label": Int64()}, batch_size=10,
                             batching=Batching(images=ImageBatching(threads=2)))
        kwargs = {"batch_size": None}
    images, _ = _expected(_dataset(path))
    list(DataLoader(ds, **kwargs))  # the batch size learned
    kept = []
    for _ in range(2):
        for b in DataLoader(ds, **kwargs):
            kept.append((b["image"].numpy(), b["label"]))
            b["image"].share_memory_()
    assert len(kept) == 2 * N // 10
    assert [k for k, (array, labels) in enumerate(kept) if not np.array_equal(array, images[labels].numpy())] == []
