"""The per-sample path's batches (data/collating.py): from DataLoader
workers, the same batches as in the main process, over shared memory the
workers use again only once the main process let go of a batch; in the main
process, torch.stack's batches, copied without torch's OpenMP team."""

import gc
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import count_fd_receipts, kill_a_worker_mid_epoch, png_bytes
from torch.utils.data import DataLoader, default_collate
from torchvision import tv_tensors
from torchvision.transforms import v2

from tfrecord_torch import (
    Batching,
    Float,
    Image,
    ImageBatching,
    Int64,
    RawTensor,
    RecordWriter,
    TFRecordDataset,
    make_example,
    make_sequence_example,
    pad_collate,
    presets,
)
from tfrecord_torch.data.collating import _stacks_contiguously, stack_on_this_thread
from tfrecord_torch.data.transport.shipped import _MAPPED, SLOTS
from tfrecord_torch.data.transport.stacking import Stacker


def _write(path, n, size=(24, 32), bad=()):
    rng = np.random.default_rng(0)
    with RecordWriter(path) as w:
        for i in range(n):
            data = b"not a jpeg" if i in bad else png_bytes(
                rng.integers(0, 255, (*size, 3), dtype=np.uint8), "JPEG", quality=90)
            w.write(make_example({"image": data, "label": i}))
    return path


def _same(a, b):
    """Equal batches: keys, types, dtypes, shapes, strides and values."""
    assert type(a) is type(b) and list(a) == list(b)
    for key in a:
        x, y = a[key], b[key]
        assert (type(x), x.dtype, x.shape, x.stride()) == (type(y), y.dtype, y.shape, y.stride()), key
        assert torch.equal(x, y), key


class Expected:
    """What the main process's default_collate makes of the items a batch
    holds (found by label): the per-sample path with num_workers=0."""

    def __init__(self, ds):
        self.items = {int(item["label"]): item for item in ds}

    def check(self, batch):
        _same(batch, default_collate([self.items[int(label)] for label in batch["label"]]))


def _masked(item):
    """A tv_tensors.Mask beside the image (a second large key), and a float key."""
    image = item["image"]
    return {"image": image, "mask": tv_tensors.Mask(image[0] > 128), "mean": image.float().mean(0),
            "label": item["label"]}


# spawn: two workers importing torch, about 20 s of CPU, slow
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_worker_batches_equal_the_main_process_batches(tmp_path, context):
    path = _write(tmp_path / "a.tfrecord", 50, size=(64, 64))
    # spawned workers (an interpreter importing torch each) read the masked items only: the image
    # of the plain items is among their keys
    for transform in (None, _masked) if context == "fork" else (_masked,):
        ds = TFRecordDataset(path, features=presets.tfds(), transform=transform)
        expected = Expected(ds)
        alone = list(DataLoader(ds, batch_size=8, num_workers=0))
        assert type(alone[0]["image"]) is torch.Tensor  # default_collate gives plain tensors
        got = list(DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context=context))
        assert sorted(torch.cat([b["label"] for b in got]).tolist()) == list(range(50))
        for b in got:
            expected.check(b)


def test_kept_batches_are_never_written_into(tmp_path, counted):
    path = _write(tmp_path / "a.tfrecord", 240, size=(64, 64))
    ds = TFRecordDataset(path, features=presets.tfds())
    expected = Expected(ds)
    kept = []
    for k, b in enumerate(DataLoader(ds, batch_size=8, num_workers=2)):
        expected.check(b)
        if k % 3 == 0:
            kept.append(b)
    assert k == 29 and len(kept) == 10
    for b in kept:  # after up to 27 later batches over the same workers' segments
        expected.check(b)
    reused, allocated = counted.tolist()
    assert reused >= 5 and reused + allocated == 30  # segments went round; the kept ones were left alone


def test_segments_are_reused_and_passed_to_the_main_process_once(tmp_path, monkeypatch):
    """A batch arrives without a file descriptor once its segment has been
    sent (the image by reference to a segment the main process keeps
    mapped, the labels by value): default_collate's fresh segments cost
    one per tensor per batch."""
    path = _write(tmp_path / "a.tfrecord", 160, size=(64, 64))
    ds = TFRecordDataset(path, features=presets.tfds())
    expected = Expected(ds)
    loader = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True)
    it = iter(loader)  # the workers start
    receipts = count_fd_receipts(monkeypatch)
    for epoch in range(3):
        batches = 0
        for b in it if epoch == 0 else loader:
            expected.check(b)
            batches += 1
        assert batches == 20
        assert len(_MAPPED._segments) <= 2 * SLOTS
    assert 0 < len(receipts) <= 2 * 2 * SLOTS  # a segment and the flags, per segment of a worker
    assert len(receipts) < 60  # 3 epochs x 20 batches: not one a batch


def test_an_epochs_short_last_batch_uses_a_full_batchs_segment(tmp_path, monkeypatch):
    """Each worker's last batch of an epoch is shorter (90 records in batches
    of 16; 10 images are still sent over a segment): it goes into the start
    of a free full-size segment, and the next
    epoch's batches use the same segments again, the main process receiving
    no new one after the first epoch. A segment made for the short batch
    replaced a full one, and each epoch brought new segments to fault in."""
    path = _write(tmp_path / "a.tfrecord", 180, size=(64, 64))
    ds = TFRecordDataset(path, features=presets.tfds())
    expected = Expected(ds)
    loader = DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True)
    it = iter(loader)
    receipts = count_fd_receipts(monkeypatch)
    received = []
    for epoch in range(4):
        sizes = []
        for b in it if epoch == 0 else loader:
            expected.check(b)
            sizes.append(len(b["label"]))
        assert sorted(sizes) == [10, 10] + [16] * 10
        received.append(len(receipts) - sum(received))
    # before: [16, 8, 8, 4]. Under load a worker may still find every segment held by the main
    # process when it starts a batch, and make one more (its descriptor: 2 receipts) in a later epoch
    assert received[0] > 0 and sum(received[1:]) <= 2, received


def test_map_style_batches_from_workers(tmp_path):
    from tfrecord_torch import IndexedTFRecordDataset

    path = _write(tmp_path / "a.tfrecord", 60)
    ds = IndexedTFRecordDataset(path, features=presets.tfds())
    alone = list(DataLoader(ds, batch_size=8, num_workers=0))
    got = list(DataLoader(ds, batch_size=8, num_workers=2))
    assert len(got) == len(alone) == 8
    for a, b in zip(alone, got):  # map-style: the same batches, in the same order
        _same(a, b)


def test_images_of_several_sizes_keep_the_collate_error(tmp_path):
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        for i, size in enumerate([(24, 32), (24, 32), (16, 20), (24, 32)]):
            data = png_bytes(np.zeros((*size, 3), np.uint8), "JPEG")
            w.write(make_example({"image": data, "label": i}))
    ds = TFRecordDataset(path, features=presets.tfds())
    with pytest.raises(RuntimeError, match="cannot stack feature 'image'.*pad_collate"):
        list(DataLoader(ds, batch_size=4, num_workers=1))


def test_a_collate_fn_of_ones_own_gets_the_items(tmp_path):
    path = _write(tmp_path / "a.tfrecord", 16)
    ds = TFRecordDataset(path, features=presets.tfds())
    got = list(DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda items: items))
    assert [len(b) for b in got] == [4, 4, 4, 4]
    assert type(got[0][0]["image"]) is tv_tensors.Image and got[0][0]["image"].shape == (3, 24, 32)


def test_corrupt_images_skipped_per_sample(tmp_path):
    path = _write(tmp_path / "a.tfrecord", 40, size=(64, 64), bad={3, 17, 30})
    ds = TFRecordDataset(path, features={"image": Image(), "label": Int64()}, on_error="skip")
    images = {int(item["label"]): item["image"] for item in ds}
    got = list(DataLoader(ds, batch_size=8, num_workers=2))
    labels = torch.cat([b["label"] for b in got]).tolist()
    assert sorted(labels) == sorted(images) == [i for i in range(40) if i not in (3, 17, 30)]
    for b in got:
        assert type(b["image"]) is torch.Tensor and b["image"].dtype == torch.uint8
        assert all(torch.equal(image, images[int(label)]) for image, label in zip(b["image"], b["label"]))


# the DataLoader's own SIGCHLD handler may raise again while its iterator is collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_worker_killed_mid_epoch_fails_loudly_and_the_next_epoch_is_whole(tmp_path):
    path = _write(tmp_path / "a.tfrecord", 160, size=(64, 64))
    ds = TFRecordDataset(path, features=presets.tfds())
    expected = Expected(ds)
    it = iter(DataLoader(ds, batch_size=8, num_workers=2))
    first = [next(it) for _ in range(6)]
    kill_a_worker_mid_epoch(it)
    del it
    for b in first:
        expected.check(b)
    again = list(DataLoader(ds, batch_size=8, num_workers=2))
    assert sorted(torch.cat([b["label"] for b in again]).tolist()) == list(range(160))
    for b in again:
        expected.check(b)


def _shared_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum("/torch_" in line for line in f)


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_breaking_early_leaves_no_segment_behind(tmp_path):
    """Epochs left after a few batches: the segments the main process keeps
    mapped are those of the last workers only, however many epochs broke."""
    path = _write(tmp_path / "a.tfrecord", 160, size=(64, 64))
    ds = TFRecordDataset(path, features=presets.tfds())
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    counts = []
    for _ in range(8):
        for k, _ in enumerate(loader):
            if k == 3:
                break
        gc.collect()
        counts.append((_shared_mappings(), len(_MAPPED._segments)))
    assert all(segments <= 2 * SLOTS for _, segments in counts), counts
    assert max(m for m, _ in counts[1:]) <= counts[1][0] + 2, counts  # flat, not growing with the epochs
    list(loader)  # a whole epoch lets go of the broken ones' segments
    gc.collect()
    assert len(_MAPPED._segments) <= 2 * SLOTS


def test_the_stacker_leaves_what_it_does_not_handle_to_default_collate():
    stacker = Stacker(slots=2)  # outside a worker, as a worker would use it
    image = tv_tensors.Image(torch.zeros(3, 128, 128, dtype=torch.uint8))
    assert stacker.stack("strings", ["a", "b"]) is None
    assert stacker.stack("sizes", [torch.zeros(3, 4), torch.zeros(3, 5)]) is None
    assert stacker.stack("dtypes", [torch.zeros(3), torch.zeros(3, dtype=torch.int64)]) is None
    assert stacker.stack("bf16", [torch.zeros(64, 512, dtype=torch.bfloat16)] * 2) is None
    assert stacker.stack("grad", [torch.zeros(64, 512, requires_grad=True)] * 2) is None
    assert stacker.stack("sparse", [torch.zeros(64, 512).to_sparse()] * 2) is None
    assert stacker.stack("tv grad", [tv_tensors.Image(torch.zeros(3, 64, 64, requires_grad=True))] * 2) is None
    assert stacker.stack("tv sizes", [image, tv_tensors.Image(torch.zeros(3, 128, 127, dtype=torch.uint8))]) is None
    big = stacker.stack("image", [image, image + 1])
    assert type(big).__name__ == "Shipped" and big.shape == (2, 3, 128, 128) and big.is_contiguous()
    assert torch.equal(big.as_subclass(torch.Tensor), torch.stack([image, image + 1]))
    small = stacker.stack("label", [torch.tensor(1), torch.tensor(2)])
    assert type(small).__name__ == "Inline" and small.tolist() == [1, 2]


def test_a_tv_tensor_kept_by_stack_is_left_to_default_collate():
    """With tv_tensors' return type set to keep subclasses, torch.stack
    gives an Image; default_collate's own result is kept then."""
    stacker = Stacker(slots=2)
    image = tv_tensors.Image(torch.zeros(3, 128, 128, dtype=torch.uint8))
    with tv_tensors.set_return_type("TVTensor"):
        assert stacker.stack("image", [image, image]) is None
    assert stacker.stack("image", [image, image]) is not None


def test_a_transform_per_sample_through_workers(tmp_path):
    """The crop idiom of the docs: RandomResizedCrop + flip per sample, seeded."""
    path = _write(tmp_path / "a.tfrecord", 32, size=(40, 48))
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()])
    ds = TFRecordDataset(path, features=presets.tfds(), transform=transform)
    got = list(DataLoader(ds, batch_size=8, num_workers=2, generator=torch.Generator().manual_seed(0)))
    assert [b["image"].shape for b in got] == [(8, 3, 16, 16)] * 4
    assert type(got[0]["image"]) is torch.Tensor and got[0]["image"].is_contiguous()


@pytest.fixture
def two_torch_threads():
    """torch with two intra-op threads (the default on two cores), as the user left it after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("transform", [None, "crop", _masked])
def test_main_process_batches_equal_torch_stack(tmp_path, transform, two_torch_threads):
    """Per sample with num_workers=0, each key's batch is torch.stack of the
    items' values (default_collate's own call): type, dtype, shape, strides
    and values; images decoded as strided views (no transform) or contiguous
    planes (the fused crop)."""
    path = _write(tmp_path / "a.tfrecord", 24, size=(64, 80))
    if transform == "crop":
        transform = v2.Compose([v2.RandomResizedCrop(72), v2.RandomHorizontalFlip()])
    ds = TFRecordDataset(path, features=presets.tfds(), transform=transform)
    torch.manual_seed(3)
    chunks = list(DataLoader(ds, batch_size=8, num_workers=0, collate_fn=list))  # the same draws
    torch.manual_seed(3)
    batches = list(DataLoader(ds, batch_size=8, num_workers=0))
    assert len(batches) == 3
    for batch, chunk in zip(batches, chunks):
        _same(batch, {key: torch.stack([item[key] for item in chunk]) for key in chunk[0]})
    assert torch.get_num_threads() == 2


def test_the_main_process_stack_leaves_what_torch_keeps_or_stacks_alone(two_torch_threads):
    image = tv_tensors.Image(torch.zeros(3, 128, 128, dtype=torch.uint8))
    assert stack_on_this_thread("sizes", [torch.zeros(3, 4), torch.zeros(3, 5)]) is None
    assert stack_on_this_thread("bf16", [torch.zeros(64, 512, dtype=torch.bfloat16)] * 2) is None
    assert stack_on_this_thread("small", [torch.zeros(3, 4)] * 8) is None  # torch.stack copies it serially
    with tv_tensors.set_return_type("TVTensor"):
        assert stack_on_this_thread("image", [image, image]) is None
    stacked = stack_on_this_thread("image", [image, image + 1])
    assert type(stacked) is torch.Tensor and torch.equal(stacked, torch.stack([image, image + 1]))
    torch.set_num_threads(1)  # no team to spare; the batch still goes into memory used again
    stacked = stack_on_this_thread("image", [image, image + 1])
    assert type(stacked) is torch.Tensor and torch.equal(stacked, torch.stack([image, image + 1]))


@pytest.mark.parametrize("threads", [1, 2])
def test_main_process_batches_reuse_their_memory_once_let_go_and_never_while_held(tmp_path, monkeypatch, threads):
    """Per sample with num_workers=0, a batch whose tensors are all gone
    gives its memory to a later batch (a fresh 36 MiB batch of photos
    faults every page in, zeroed, before the copy); a batch still held, or a
    view of one, is never written over. One decode thread: batches stacked
    on the loop's thread; two: by the decode threads (data/stackahead.py),
    into buffers the batches held ahead keep too."""
    from tfrecord_torch.data import collating
    from tfrecord_torch.features.reused import Reused

    monkeypatch.setattr(collating, "_STACKED", Reused(keep=2, largest=256 << 20))  # not memory other tests hold
    path = _write(tmp_path / "a.tfrecord", 48, size=(224, 400))  # batches of 2.1 MB: buffers of their own
    ds = TFRecordDataset(path, features=presets.tfds(), batching=Batching(images=ImageBatching(threads=threads)))
    expected = Expected(ds)
    addresses = set()
    for batch in DataLoader(ds, batch_size=8, num_workers=0):
        expected.check(batch)
        addresses.add(batch["image"].data_ptr())
        del batch
    if threads == 1:
        assert 1 <= len(addresses) <= 2  # the batch the loop holds while the next is made, at most
    held, views = [], []
    for k, batch in enumerate(DataLoader(ds, batch_size=8, num_workers=0)):
        if k % 2:
            held.append(batch)
        else:  # a view keeps its batch's memory too
            views.append(([int(label) for label in batch["label"][1:3]], batch["image"][1:3]))
    assert len({b["image"].data_ptr() for b in held} | {v.data_ptr() for _, v in views}) == 6
    for batch in held:
        expected.check(batch)
    for labels, view in views:
        assert torch.equal(view, torch.stack([expected.items[label]["image"] for label in labels]))


def _layouts(shape):
    """Tensors of ``shape`` in every order of their dimensions in memory, each
    also as a crop of a larger one, and channels-last ones."""
    for order in itertools.permutations(range(len(shape))):
        back = [order.index(k) for k in range(len(shape))]
        yield torch.empty([shape[k] for k in order]).permute(back)
        bigger = torch.empty([shape[k] + 2 for k in order]).permute(back)
        yield bigger[tuple(slice(1, 1 + n) for n in shape)]
    if len(shape) == 4:
        yield torch.empty(shape).contiguous(memory_format=torch.channels_last)
    if len(shape) == 3:
        yield torch.empty((1, *shape)).contiguous(memory_format=torch.channels_last)[0]


@pytest.mark.parametrize("shape", [(6,), (4, 5), (3, 4, 5), (1, 4, 5), (3, 1, 5), (3, 4, 1), (1, 1, 5),
                                   (2, 3, 4, 5), (2, 1, 4, 5), (2, 3, 1, 1), (2, 1, 3, 4, 5)])
def test_the_main_process_stack_knows_which_layouts_stack_contiguously(shape):
    """Where the main process's stack says a layout stacks contiguously,
    torch.stack's result is contiguous (its own copy then has the same
    strides); 1-3-d values are told exactly."""
    for value in _layouts(shape):
        stacked = torch.stack([value, value])
        contiguous = stacked.stride() == torch.empty(stacked.shape).stride()
        said = _stacks_contiguously(tuple(value.shape), value.stride())
        assert said <= contiguous, (shape, value.stride())
        if len(shape) <= 3:
            assert said == contiguous, (shape, value.stride())


def test_the_main_process_stack_imports_no_compiler():
    """The first batch of a process collated on its own thread imports no
    torch._dynamo (the meta device's torch.stack would: seconds of imports
    before the first batch), and still equals torch.stack, strides included."""
    script = textwrap.dedent("""
        import sys
        import torch
        torch.set_num_threads(2)
        from tfrecord_torch.data.collating import _stacks_contiguously, stack_on_this_thread
        hwc = [torch.full((64, 80, 3), i, dtype=torch.uint8).permute(2, 0, 1) for i in range(4)]
        chw = [torch.full((3, 64, 80), i, dtype=torch.float32) for i in range(4)]
        last = [torch.full((2, 3, 64, 80), i).contiguous(memory_format=torch.channels_last) for i in range(4)]
        assert stack_on_this_thread("last", last) is None  # torch.stack keeps their layout: left to it
        for values in (hwc, chw):
            got = stack_on_this_thread("values", values)
            assert got.stride() == torch.stack(values).stride() and torch.equal(got, torch.stack(values))
        print("torch._dynamo" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


_THREADS = textwrap.dedent("""
    import os, sys, threading, time
    import torch
    torch.set_num_threads(2)
    import torchvision  # noqa: F401
    from torch.utils.data import DataLoader
    from tfrecord_torch import TFRecordDataset, presets

    def foreign():  # threads of the process that Python did not start: an OpenMP team's among them
        return set(map(int, os.listdir("/proc/self/task"))) - {t.native_id for t in threading.enumerate()}

    ds = TFRecordDataset(sys.argv[1], features=presets.tfds())
    before = foreign()
    batches = list(DataLoader(ds, batch_size=8, num_workers=0))
    for _ in range(100):  # a Python thread that just ended may linger a moment as an OS thread
        if not foreign() - before:
            break
        time.sleep(0.02)
    ours = len(foreign() - before)
    torch.stack(list(batches[0]["image"]))  # torch's own stack of the same images, the control
    print(len(batches), ours, len(foreign() - before), torch.get_num_threads())
""")


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the threads in /proc")
def test_main_process_batches_start_no_openmp_team(tmp_path):
    """Per sample with num_workers=0 and two torch threads, the batches are
    stacked without starting torch's OpenMP team (whose threads spin
    between the images' copies); the user's thread setting stays as it was."""
    path = _write(tmp_path / "a.tfrecord", 24, size=(128, 128))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    out = subprocess.run([sys.executable, "-c", _THREADS, str(path)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    batches, ours, control, threads = map(int, out.stdout.split())
    if control == 0:
        pytest.skip("torch.stack starts no thread of its own here (torch without OpenMP threads)")
    assert (batches, ours, threads) == (3, 0, 2)


def _sequences(path, n=64):
    rng = np.random.default_rng(1)
    with RecordWriter(path) as w:
        for i in range(n):
            t = int(rng.integers(3, 41))
            rgb = rng.integers(0, 256, (t, 16), dtype=np.uint8)
            w.write(make_sequence_example({"label": i}, {"rgb": [f.tobytes() for f in rgb],
                                                        "audio": rng.random((t, 2), dtype=np.float32)}))
    return TFRecordDataset(path, features={"label": Int64()},
                           sequence_features={"rgb": RawTensor(dtype="uint8", shape=(16,)), "audio": Float(shape=(2,))})


def test_pad_collate_in_workers_pads_into_reused_segments(tmp_path, monkeypatch):
    """pad_collate in a DataLoader worker pads each batch into a shared-memory
    segment the worker uses again (a batch's length differs from the last
    one's) and sends the lengths by value: the batches equal the main
    process's, plain tensors, and the main process receives a file descriptor
    per segment, not one per tensor per batch."""
    import functools

    ds = _sequences(tmp_path / "s.tfrecord")
    collate = functools.partial(pad_collate, sequences=["rgb", "audio"])
    alone = list(DataLoader(ds, batch_size=4, collate_fn=collate))
    assert len(alone) == 16 and len({b["rgb"].shape[1] for b in alone}) > 5
    loader = DataLoader(ds, batch_size=4, collate_fn=collate, num_workers=2, persistent_workers=True)
    it = iter(loader)  # the workers start
    receipts = count_fd_receipts(monkeypatch)
    received: list[int] = []
    for epoch in range(3):
        wanted = {int(b["label"][0]): b for b in alone}  # the workers' batches interleave
        firsts = []
        for batch in it if epoch == 0 else loader:  # each compared, then let go
            firsts.append(int(batch["label"][0]))
            want = wanted[firsts[-1]]
            assert want.keys() == batch.keys()
            for key, value in want.items():
                assert type(batch[key]) is torch.Tensor, key
                assert (batch[key].dtype, batch[key].shape) == (value.dtype, value.shape), key
                assert torch.equal(batch[key], value), key
        assert sorted(firsts) == sorted(wanted)
        received.append(len(receipts) - sum(received))
    assert received[0] <= 2 * 2 * 2 * SLOTS  # 2 workers x 2 keys: the segments, each with its flags
    # then mostly the same segments again (a short one of the first batches may still be replaced):
    # fewer descriptors than batches, where torch passes one per tensor per batch
    assert sum(received) < 3 * 16


def test_a_subclass_of_the_users_is_asked_what_a_stack_gives_every_time():
    """What torch.stack gives is kept for torch's tensor and tv_tensors' types
    only: another subclass's __torch_function__ may change its answer (here
    with a flag of its own), and the collate must stack as torch.stack would."""
    from tfrecord_torch.data.transport.stacking import stacks_to_plain

    keep = {"on": False}

    class Flagged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            out = super().__torch_function__(func, types, args, kwargs)
            if func is torch.stack and not keep["on"]:
                return out.as_subclass(torch.Tensor)
            return out

    value = torch.zeros(3, 4, 4).as_subclass(Flagged)
    assert stacks_to_plain(value)
    keep["on"] = True
    assert type(torch.stack([value])) is Flagged
    assert not stacks_to_plain(value)
