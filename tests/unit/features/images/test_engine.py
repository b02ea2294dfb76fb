"""The batch image fast path: pixels, fused crops, bad images, threads and workers."""

import itertools
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from tfrecord_torch import (
    Batching,
    CorruptRecordError,
    FeatureError,
    Image,
    ImageBatching,
    Int64,
    MixedSizesError,
    RecordWriter,
    TFRecordDataset,
    build_index,
    make_example,
)
from tfrecord_torch.data.transport import BatchBuffers
from tfrecord_torch.features.images.crop import CropPlan, crop_params, plan_transform
from tfrecord_torch.features.images.engine import DecodeEngine
from tfrecord_torch.features.images.jpeg import decode_jpeg

SPEC = {"image": Image(), "label": Int64()}
CROP = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()])


def photo(i, h, w):
    """A smooth image with some texture (JPEG's IDCT choices show on it)."""
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def jpeg(i, h=40, w=56, **kw):
    return png_bytes(photo(i, h, w), "JPEG", quality=90, **kw)


def write(path, images):
    with RecordWriter(path) as w:
        for i, data in enumerate(images):
            w.write(make_example({"image": data, "label": i}))
    return path


def test_pixels_equal_tensorflow_default_and_accurate(tmp_path):
    images = [jpeg(i) for i in range(6)] + [jpeg(9, subsampling=0), png_bytes(photo(3, 40, 56))]
    images.append(png_bytes(photo(4, 40, 56)[..., 0], "JPEG", quality=90))  # gray JPEG -> RGB
    path = write(tmp_path / "a.tfrecord", images)
    fast, = TFRecordDataset(path, features=SPEC, batch_size=16)
    accurate, = TFRecordDataset(path, features=SPEC, batch_size=16,
                                batching=Batching(images=ImageBatching(decoder="accurate")))
    assert fast["image"].shape == (9, 3, 40, 56) and fast["image"].is_contiguous(memory_format=torch.channels_last)
    for i, data in enumerate(images):
        tf_fast = tf.io.decode_image(data, channels=3).numpy()  # decode_jpeg's default: the fast IDCT
        tf_accurate = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy() \
            if data[:2] == b"\xff\xd8" else tf_fast
        assert np.array_equal(fast["image"][i].permute(1, 2, 0).numpy(), tf_fast), i
        assert np.array_equal(accurate["image"][i].permute(1, 2, 0).numpy(), tf_accurate), i
    assert fast["label"].tolist() == list(range(9))


def test_nhwc_and_normalize(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(4)])
    plain, = TFRecordDataset(path, features=SPEC, batch_size=4)
    nhwc, = TFRecordDataset(path, features=SPEC, batch_size=4,
                            batching=Batching(images=ImageBatching(layout="NHWC")))
    assert nhwc["image"].shape == (4, 40, 56, 3) and nhwc["image"].is_contiguous()
    assert torch.equal(nhwc["image"].permute(0, 3, 1, 2), plain["image"])
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    normed, = TFRecordDataset(path, features=SPEC, batch_size=4,
                              batching=Batching(images=ImageBatching(normalize=(mean, std))))
    expected = F.normalize(plain["image"].float() / 255, mean, std)
    assert normed["image"].dtype == torch.float32
    torch.testing.assert_close(normed["image"], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(40))
def test_crop_parameters_are_torchvisions(seed):
    """The same calls on a generator seeded as torch's global one: the same crops."""
    rrc, flip = v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()
    plan, rest = plan_transform(v2.Compose([rrc, flip]))
    assert plan is not None and rest == []
    height, width = [(375, 500), (500, 375), (100, 1000), (230, 230)][seed % 4]
    torch.manual_seed(seed)
    p = rrc.make_params([torch.zeros(3, height, width)])
    flipped = bool(torch.rand(1) < 0.5)
    ours = crop_params(plan, height, width, torch.Generator().manual_seed(seed))
    assert ours == (p["top"], p["left"], p["height"], p["width"], flipped)


@pytest.mark.slow  # 2,000 crops each way: about 7 s of CPU; the parameters equal torchvision's fast above
def test_crop_distribution_matches_torchvision():
    """Area fraction and aspect ratio of 2,000 crops: same distribution (two-sample KS)."""
    rrc = v2.RandomResizedCrop(224)
    plan, _ = plan_transform(rrc)
    gen, torch_crops = torch.Generator().manual_seed(1), []
    torch.manual_seed(2)
    ours = np.array([crop_params(plan, 375, 500, gen)[2:4] for _ in range(2000)], float)
    for _ in range(2000):
        p = rrc.make_params([torch.zeros(3, 375, 500)])
        torch_crops.append((p["height"], p["width"]))
    theirs = np.array(torch_crops, float)
    for stat in (lambda a: a[:, 0] * a[:, 1], lambda a: a[:, 1] / a[:, 0]):
        a, b = np.sort(stat(ours)), np.sort(stat(theirs))
        grid = np.concatenate([a, b])
        d = np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)).max()
        assert d < 1.95 * np.sqrt(2 / 2000)  # the KS critical value at alpha = 0.001


def test_fused_crop_matches_decode_crop_resize(tmp_path):
    """Per pixel: fused output vs torchvision resized_crop of the full decode."""
    images = [jpeg(i, 120, 90) for i in range(8)]
    path = write(tmp_path / "a.tfrecord", images)
    transform = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()])
    batch, = TFRecordDataset(path, features=SPEC, batch_size=8, transform=transform, seed=5)
    plan, _ = plan_transform(transform)
    assert batch["image"].shape == (8, 3, 48, 48)
    gen = _batch_generator((5, 0, 0), 0)
    diffs = []
    for i, data in enumerate(images):
        top, left, h, w, flip = crop_params(plan, 120, 90, gen)
        full = torch.from_numpy(tf.io.decode_jpeg(data, channels=3).numpy()).permute(2, 0, 1)
        expected = F.resized_crop(full, top, left, h, w, [48, 48], antialias=True)
        if flip:
            expected = F.horizontal_flip(expected)
        diffs.append((batch["image"][i].int() - expected.int()).abs())
    assert max(int(d.max()) for d in diffs) == 0  # bit for bit


def _batch_generator(seed, number):
    return torch.Generator().manual_seed(int(np.random.SeedSequence([*seed, number]).generate_state(1)[0]))


def test_each_image_gets_its_own_crop_and_flip(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(0, 120, 90)] * 16)  # one picture 16 times
    batch, = TFRecordDataset(path, features=SPEC, batch_size=16, transform=CROP)
    distinct = {batch["image"][i].numpy().tobytes() for i in range(16)}
    assert len(distinct) == 16


def test_resize_head_gives_fixed_size_from_mixed_sizes(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(0, 40, 56), jpeg(1, 64, 30), png_bytes(photo(2, 20, 20))])
    batch, = TFRecordDataset(path, features=SPEC, batch_size=3, transform=v2.Resize((32, 32)))
    assert batch["image"].shape == (3, 3, 32, 32)


def test_size_mismatch_is_a_clear_error_unless_padding(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(0, 40, 56), jpeg(1, 30, 56), jpeg(2, 40, 56)])
    with pytest.raises(MixedSizesError, match=r"record 1 .*\(3x30x56\).*ImageBatching\(pad=True\)"):
        list(TFRecordDataset(path, features=SPEC, batch_size=3))  # no fixed size: never a list
    with pytest.raises(FeatureError, match=r"record 1 .*30x56, but the batch's size is 40x56"):
        list(TFRecordDataset(path, features=SPEC, batch_size=3,
                             batching=Batching(images=ImageBatching(size=(40, 56)))))
    padded, = TFRecordDataset(path, features=SPEC, batch_size=3,
                              batching=Batching(images=ImageBatching(pad=True)))
    assert padded["image"].shape == (3, 3, 40, 56)
    assert padded["image_size"].tolist() == [[40, 56], [30, 56], [40, 56]]
    assert padded["image"][1, :, 30:].eq(0).all()


@pytest.mark.parametrize("bad", [b"\xff\xd8\xff\xe0 not a jpeg", "truncated"])
def test_corrupt_image_in_a_batch_follows_on_error(tmp_path, bad):
    good = [jpeg(i) for i in range(5)]
    bad = good[0][:len(good[0]) // 2] if bad == "truncated" else bad
    path = write(tmp_path / "a.tfrecord", good[:2] + [bad] + good[2:])
    with pytest.raises(FeatureError, match=r"record 2 at byte offset \d+: feature 'image'"):
        list(TFRecordDataset(path, features=SPEC, batch_size=6))
    ds = TFRecordDataset(path, features=SPEC, batch_size=6, on_error="skip")
    batch, = ds
    assert batch["label"].tolist() == [0, 1, 3, 4, 5]
    whole, = TFRecordDataset(write(tmp_path / "g.tfrecord", good), features=SPEC, batch_size=5)
    assert torch.equal(batch["image"], whole["image"])  # the rest kept, no stray pixels
    assert ds.errors()["total"] == 1


def test_a_failed_jpeg_is_named_by_its_record_among_images_of_other_kinds(tmp_path):
    """The threads decode a batch's whole JPEGs as a list of their own, which a PNG leaves out:
    an error found in that list is the record's at its place in the batch, not at its place in
    the list (record 2 here is the list's second JPEG)."""
    good = [jpeg(i) for i in range(4)]
    images = [png_bytes(photo(7, 40, 56)), good[0], good[1][:len(good[1]) // 2], good[2], good[3]]
    path = write(tmp_path / "a.tfrecord", images)
    with pytest.raises(FeatureError, match=r"record 2 at byte offset \d+: feature 'image'"):
        list(TFRecordDataset(path, features=SPEC, batch_size=5))
    ds = TFRecordDataset(path, features=SPEC, batch_size=5, on_error="skip")
    batch, = ds
    assert batch["label"].tolist() == [0, 1, 3, 4]
    assert torch.equal(batch["image"][0], torch.from_numpy(photo(7, 40, 56)).permute(2, 0, 1))
    for k, i in ((1, 0), (2, 2), (3, 3)):
        assert torch.equal(batch["image"][k], torch.from_numpy(decode_jpeg(good[i])).permute(2, 0, 1)), k


def test_a_decode_thread_that_raises_leaves_no_other_thread_writing(monkeypatch):
    """A decode thread that raises (not an image's error: out of memory, say) fails the batch only
    once every other thread of the batch is done with its buffer, which the caller may reuse."""
    engine = DecodeEngine(ImageBatching(threads=2))
    submit, order, done = engine._pool.submit, itertools.count(), []

    def share_or_raise(k, fn, *args):
        if k == 0:  # the batch's first thread: the one its result waits for first
            raise MemoryError("a decode thread ran out of memory")
        time.sleep(0.2)  # still decoding into the buffer when the first has raised
        try:
            return fn(*args)
        finally:
            done.append(k)

    monkeypatch.setattr(engine._pool, "submit", lambda fn, *args: submit(share_or_raise, next(order), fn, *args))
    try:
        with pytest.raises(MemoryError, match="ran out of memory"):
            engine.start([jpeg(i) for i in range(4)]).result()
        assert done == [1]  # the other thread had finished before the error came out
    finally:
        engine.close()


def test_decode_pool_is_thread_safe():
    images = [jpeg(i) for i in range(12)]
    plan = CropPlan((24, 24), (0.08, 1.0), (3 / 4, 4 / 3), 0.5, "bilinear")
    engine = DecodeEngine(ImageBatching(threads=2), buffers=BatchBuffers())
    expected = engine.decode(images, plan=plan, generator=torch.Generator().manual_seed(0))[0].clone()
    results, errors = [], []

    def run():
        try:
            for _ in range(3):
                out = engine.decode(images, plan=plan, generator=torch.Generator().manual_seed(0))[0]
                results.append(torch.equal(out, expected))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.close()
    assert not errors and len(results) == 24 and all(results)


@pytest.mark.parametrize("crop", [False, True])
def test_the_threads_of_a_batch_take_its_images_until_none_is_left(monkeypatch, crop):
    """No thread is dealt a fixed share: while one thread is held by a slow image, the other takes
    every other image of the batch (a share of half the batch would leave it idle). PNGs, and crops,
    go one image at a time; whole JPEGs through JpegClaims (tests/unit/features/images/test_jpeg.py)."""
    images = [png_bytes(photo(i, 40, 56)) for i in range(16)]
    slow, started = images[0], threading.Event()
    done_by: dict[int, list[int]] = {}
    one = DecodeEngine._one

    def tracked(self, data, header, job, plan, slot):
        if data is slow:
            started.set()
            # held until every other image is decoded (at most 10 s: then the assertion below fails)
            for _ in range(1000):
                if sum(map(len, done_by.values())) == len(images) - 1:
                    break
                threading.Event().wait(0.01)
        else:
            assert started.wait(10)  # the slow image is taken first
        done_by.setdefault(threading.get_ident(), []).append(images.index(data))
        return one(self, data, header, job, plan, slot)

    monkeypatch.setattr(DecodeEngine, "_one", tracked)
    plan = CropPlan((24, 24), (0.08, 1.0), (3 / 4, 4 / 3), 0.5, "bilinear") if crop else None
    with DecodeEngine(ImageBatching(threads=2)) as engine:
        pixels, _, failures = engine.decode(images, plan=plan)
    assert not failures and pixels.shape[0] == 16
    assert sorted(map(sorted, done_by.values())) == [[0], list(range(1, 16))]


def test_forked_workers_give_the_same_batches(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(i, 60, 70) for i in range(20)])
    ds = TFRecordDataset(path, features=SPEC, batch_size=4, transform=CROP, seed=3)
    alone = list(DataLoader(ds, batch_size=None, num_workers=0))
    workers = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(alone) == len(workers) == 5
    for a, b in zip(alone, workers):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])


def test_decode_threads_stop_when_the_iterator_is_dropped(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(8)])
    it = iter(TFRecordDataset(path, features=SPEC, batch_size=2))
    next(it)
    assert any(t.name.startswith("tfrecord-decode") for t in threading.enumerate())
    del it
    assert not any(t.name.startswith("tfrecord-decode") for t in threading.enumerate())


def test_switches_turn_the_fused_path_off(tmp_path):
    """images=False and fused=False apply the transform per image, as torchvision does."""
    images = [jpeg(i, 60, 70) for i in range(6)]
    path = write(tmp_path / "a.tfrecord", images)
    for options in (False, ImageBatching(fused=False)):
        torch.manual_seed(7)
        batch, = TFRecordDataset(path, features=SPEC, batch_size=6, transform=CROP,
                                 batching=Batching(images=options))
        torch.manual_seed(7)
        expected = [CROP(x["image"]) for x in TFRecordDataset(path, features=SPEC)]
        assert batch["image"].shape == (6, 3, 48, 48)
        if options is False:  # decoded with the per-sample decoder too: exactly equal
            assert torch.equal(batch["image"], torch.stack(expected))
        else:  # the fast path's decoder (TF's default IDCT) differs from the accurate one by a little
            assert (batch["image"].int() - torch.stack(expected).int()).abs().float().mean() < 2


def test_bad_options_are_refused():
    for bad in ({"layout": "CHW"}, {"decoder": "islow"}, {"threads": 0}, {"normalize": ((0,), (1,))},
                {"size": (0, 5)}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ImageBatching(**bad)
    with pytest.raises(ValueError, match="images must be"):
        TFRecordDataset([], batching=Batching(images="yes"))


def test_per_sample_fused_crop_equals_unfused(tmp_path):
    """DataLoader(batch_size=...) as users write it: the fused head gives the
    unfused transform's pixels and leaves torch's RNG where it would be."""
    gray = png_bytes(photo(8, 70, 96)[..., 0], "JPEG", quality=90)
    images = [jpeg(i, 120, 90) for i in range(6)] + [png_bytes(photo(7, 64, 80)), gray]
    path = write(tmp_path / "a.tfrecord", images)
    fused = TFRecordDataset(path, features=SPEC, transform=CROP)
    plain = TFRecordDataset(path, features=SPEC, transform=CROP,
                            batching=Batching(images=ImageBatching(fused=False)))
    assert fused._per_sample()[1] is None and plain._per_sample()[1] is CROP
    out = {}
    for name, ds in (("fused", fused), ("plain", plain)):
        torch.manual_seed(3)
        images_out = [r["image"] for r in ds]
        out[name] = (images_out, torch.get_rng_state())
    for a, b in zip(out["fused"][0], out["plain"][0]):
        assert a.shape == (3, 48, 48) and torch.equal(a, b)
    assert torch.equal(out["fused"][1], out["plain"][1])
    loaders = {}
    for name, ds in (("fused", fused), ("plain", plain)):
        torch.manual_seed(4)
        loaders[name] = [b["image"] for b in DataLoader(ds, batch_size=4, num_workers=2)]
    assert all(torch.equal(a, b) for a, b in zip(loaders["fused"], loaders["plain"]))


@pytest.mark.parametrize("default", ["image", "tensor", "gray", None])
def test_per_sample_fused_crop_crops_a_default_as_unfused(tmp_path, default):
    """A record that lacks its image takes Image(default=...) through the
    fused head as the unfused transform takes it: cropped, flipped and drawn
    for (it came uncropped, [3, 40, 50] among [3, 48, 48], and every later
    record's crop and flip shifted by the draws it did not make)."""
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        for i in range(8):
            w.write(make_example({"label": i} if i in (2, 5) else {"image": jpeg(i, 60, 70), "label": i}))
    pixels = torch.randint(0, 256, (1 if default == "gray" else 3, 40, 50), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    value = {"image": tv_tensors.Image(pixels), "tensor": pixels, "gray": pixels, None: None}[default]
    spec = {"image": Image(default=value), "label": Int64()}
    transform = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(), v2.RandomGrayscale(0.3)])
    out = {}
    for fused in (True, False):
        ds = TFRecordDataset(path, features=spec, transform=transform,
                             batching=Batching(images=ImageBatching(fused=fused)))
        if fused:  # an RGB uint8 default is fused; any other goes to the transform unfused
            assert (ds._per_sample()[1] is transform) is (default not in ("image", "tensor"))
        torch.manual_seed(3)
        try:
            out[fused] = ([(type(r["image"]), r["image"]) for r in ds], torch.get_rng_state())
        except Exception as e:  # noqa: BLE001 - the unfused transform's own error, the same both ways
            out[fused] = (type(e), str(e))
    assert type(out[True][0]) is type(out[False][0])
    if isinstance(out[False][0], list):
        for (kind, a), (want, b) in zip(out[True][0], out[False][0]):
            assert kind is want and a.shape == b.shape and torch.equal(a, b)
        assert torch.equal(out[True][1], out[False][1])
    else:
        assert out[True] == out[False]


def test_per_sample_fusion_keeps_the_rest_and_refuses_bad_images(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(0, 60, 70), b"\xff\xd8\xff\xe0 not a jpeg", jpeg(2, 60, 70)])
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32,
                                                                                           scale=True)])
    ds = TFRecordDataset(path, features=SPEC, transform=transform, on_error="skip")
    items = list(ds)
    assert [int(r["label"]) for r in items] == [0, 2] and ds.errors()["total"] == 1
    assert items[0]["image"].dtype == torch.float32 and items[0]["image"].shape == (3, 32, 32)
    with pytest.raises(FeatureError, match=r"record 1 .*feature 'image'.*cannot decode image"):
        list(TFRecordDataset(path, features=SPEC, transform=transform))
    ds.transform = v2.Resize((16, 16))  # reassigned: the per-sample path follows it
    assert [tuple(r["image"].shape) for r in ds] == [(3, 16, 16)] * 2


def test_batch_buffers_are_reused_only_once_let_go(tmp_path):
    """In this process the engine hands a batch's buffer out again only when
    nothing refers to it: batches kept by the caller are never overwritten."""
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(40)])
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    kept = list(ds)  # every batch held
    assert len({b["image"].data_ptr() for b in kept}) == 10
    again = list(ds)
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(kept, again))
    views = [b["image"][1:].numpy() for b in ds]  # only a NumPy view of part of each batch survives
    assert all(np.array_equal(v, b["image"][1:].numpy()) for v, b in zip(views, kept))
    # each batch let go before the next but one; besides it and the one being taken, prefetch (2) started
    pointers = [b["image"].data_ptr() for b in ds]
    assert len(set(pointers)) <= 4


def test_batch_read_ahead_keeps_order_and_errors_in_place(tmp_path):
    """The next batch is read while one decodes: a corrupt record in batch 2
    still comes out as an error after batch 1, and every batch in order."""
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(12)])
    data = bytearray(path.read_bytes())
    offsets = [o for o, _ in _frames(bytes(data))]
    data[offsets[5] + 20] ^= 0xFF  # inside record 5's payload: a CRC error in batch 2 of 4
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    build_index(bad, on_error="skip")  # the lengths are intact: an index, so batches are read by position
    seen = []
    with pytest.raises(CorruptRecordError, match="record 5"):
        for batch in TFRecordDataset(bad, features=SPEC, batch_size=4):
            seen.append(batch["label"].tolist())
    assert seen == [[0, 1, 2, 3]]
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    assert [b["label"].tolist() for b in ds] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def _frames(data):
    """(offset, length) of each record in a TFRecord file's bytes."""
    import struct

    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        out.append((at, length))
        at += 16 + length
    return out


def test_python_calls_per_batch_do_not_grow_with_its_images():
    """The header checks and the choice of decoder are made once per distinct
    header, not per image: the decode threads hold the GIL against the thread
    that reads and parses for as long as their Python runs."""
    import sys

    def calls(n):
        images = [jpeg(i) for i in range(n)]
        seen = []

        def count(frame, event, arg):
            if event == "call" and "tfrecord_torch" in frame.f_code.co_filename:  # not the pool's waits
                seen.append(frame.f_code.co_name)

        with DecodeEngine(ImageBatching(threads=1)) as engine:
            threading.setprofile(count)  # the decode thread starts with the first batch
            sys.setprofile(count)
            try:
                pixels, _, failures = engine.decode(images)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]
        assert not failures and pixels.shape == (n, 3, 40, 56)
        return seen

    few, many = calls(4), calls(32)
    assert "check_pixels" in few and "fast_jpeg" in few  # the profile sees both threads
    assert sorted(many) == sorted(few)


def test_a_batch_waiting_for_a_decode_thread_holds_no_buffer():
    """A batch started ahead takes its buffer when its decoding starts, so
    batches queued behind a busy thread hold no shared-memory segment; the
    pixels are those of a plain decode."""
    from tfrecord_torch.features.images.engine import FreshBuffers

    first_taken, go = threading.Event(), threading.Event()

    class Slow(FreshBuffers):
        takes = 0

        def take(self, shape, dtype, zero):
            Slow.takes += 1
            if Slow.takes == 1:
                first_taken.set()
                go.wait(10)  # holds the only decode thread (or, taken too early, the caller)
            return super().take(shape, dtype, zero)

    images = [jpeg(i) for i in range(3)]
    with DecodeEngine(ImageBatching(threads=1), buffers=Slow()) as engine:
        plain = [torch.from_numpy(decode_jpeg(data)).permute(2, 0, 1) for data in images]
        one = engine.start(images)
        assert first_taken.wait(10)
        two = engine.start(images[::-1])
        assert Slow.takes == 1  # the second batch waits for the thread, with no buffer yet
        go.set()
        a, b = one.result().pixels, two.result().pixels
    assert Slow.takes == 2
    assert torch.equal(a, torch.stack(plain)) and torch.equal(b, torch.stack(plain[::-1]))


def test_an_engine_dropped_goes_at_once_with_its_buffers():
    """Nothing of the engine refers back to it (its thread pool's size comes
    from the options alone): dropped, it goes without the garbage collector,
    and a batch mode reader's shared-memory segments with it."""
    import gc
    import weakref

    engine = DecodeEngine(ImageBatching(size=(8, 8), threads=2))
    engine.decode([png_bytes(np.zeros((8, 8, 3), np.uint8))])
    gone = weakref.ref(engine)
    gc.disable()
    try:
        engine.close()
        del engine
        assert gone() is None
    finally:
        gc.enable()


def test_the_decoder_option_is_honoured_or_refused_on_every_spec(tmp_path):
    """ImageBatching(decoder=...) reaches every Image a batch decodes (the
    fast path and the per-record path of a spec with two images), and the per-
    sample path; where nothing would honour it, or an Image says otherwise,
    the dataset refuses it. The defaults stay: "fast" on the fast path,
    "accurate" elsewhere."""
    images = [jpeg(i) for i in range(4)]
    path = write(tmp_path / "a.tfrecord", images)
    tf_fast = np.stack([tf.io.decode_jpeg(d, channels=3).numpy() for d in images])
    tf_accurate = np.stack([tf.io.decode_jpeg(d, channels=3, dct_method="INTEGER_ACCURATE").numpy()
                            for d in images])
    fast = Batching(images=ImageBatching(decoder="fast"))
    boxed = {"image": Image(), "label": Int64(), "again": Image("image")}  # not the fast path: two images

    def pixels(**kw):
        got = list(TFRecordDataset(path, **kw))
        stacked = got[0]["image"] if "batch_size" in kw else torch.stack([g["image"] for g in got])
        return stacked.permute(0, 2, 3, 1).numpy()

    assert np.array_equal(pixels(features=SPEC, batch_size=4), tf_fast)  # the fast path's default
    assert np.array_equal(pixels(features=boxed, batch_size=4), tf_accurate)  # per record: Image's default
    assert np.array_equal(pixels(features=boxed, batch_size=4, batching=fast), tf_fast)
    assert np.array_equal(pixels(features=SPEC), tf_accurate)
    assert np.array_equal(pixels(features=SPEC, batching=fast), tf_fast)
    assert np.array_equal(pixels(features={"image": Image(decoder="fast")}), tf_fast)
    assert np.array_equal(pixels(features={"image": Image(decoder="accurate")}, batch_size=4), tf_accurate)
    with pytest.raises(ValueError, match=r"ImageBatching\(decoder='fast'\) disagrees with features\['image'\] = "
                                         r"Image\(decoder='accurate'\)"):
        list(TFRecordDataset(path, features={"image": Image(decoder="accurate")}, batch_size=4, batching=fast))
    with pytest.raises(ValueError, match=r"ImageBatching\(decoder='fast'\) sets the JPEG decoder .* a dict with "
                                         r"no Image"):
        list(TFRecordDataset(path, features={"label": Int64()}, batching=fast))
    with pytest.raises(ValueError, match=r"ImageBatching.decoder must be one of \('fast', 'accurate'\)"):
        ImageBatching(decoder="ifast")


@pytest.mark.parametrize("decoder", ["fast", "accurate"])
def test_a_jpeg_libjpeg_only_warns_about_decodes_in_batch_mode_as_tensorflow_decodes_it(tmp_path, decoder):
    """A restart marker where none belongs: libjpeg warns and fills in, TF
    decodes it, and so does Image; the batch decoders (which make warnings
    errors) decode it whole instead of dropping it, whole and fused."""
    data = bytearray(jpeg(3))
    middle = len(data) * 2 // 3
    data[middle:middle + 2] = b"\xff\xd3"
    images = [jpeg(1), bytes(data), jpeg(2)]
    path = write(tmp_path / "a.tfrecord", images)
    dct = "" if decoder == "fast" else "INTEGER_ACCURATE"
    want = [tf.io.decode_jpeg(d, channels=3, dct_method=dct).numpy() for d in images]
    options = Batching(images=ImageBatching(decoder=decoder))
    batch, = TFRecordDataset(path, features=SPEC, batch_size=3, batching=options)
    resize = v2.Resize((20, 28), antialias=True)
    fused, = TFRecordDataset(path, features=SPEC, batch_size=3, batching=options, transform=resize)
    per_sample = [x["image"] for x in TFRecordDataset(path, features=SPEC, batching=options, transform=resize)]
    for i, pixels in enumerate(want):
        assert np.array_equal(batch["image"][i].permute(1, 2, 0).numpy(), pixels), i
        resized = resize(torch.from_numpy(pixels).permute(2, 0, 1))
        assert torch.equal(fused["image"][i], resized) and torch.equal(per_sample[i].as_subclass(torch.Tensor),
                                                                        resized), i


def test_a_record_without_its_image_takes_the_default_on_the_fast_path(tmp_path):
    """Image(default=...) on batch mode's image fast path gives a record that
    lacks the image its default, as the per-sample path does, with the fast
    path's layout, padding and fused crop (it raised "required feature is
    missing", or under on_error="skip" dropped the record); a default of
    another size is refused as images of mixed sizes are."""
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        for i in range(6):
            w.write(make_example({"label": i} if i in (2, 4, 5) else {"image": png_bytes(photo(i, 40, 56)), "label": i}))
    default = torch.randint(0, 256, (3, 40, 56), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    spec = {"image": Image(default=default), "label": Int64()}
    per = torch.stack([item["image"] for item in TFRecordDataset(path, features=spec)])
    for size in (6, 2):  # (2: the last batch holds only defaults)
        batches = list(TFRecordDataset(path, features=spec, batch_size=size))
        assert torch.cat([b["label"] for b in batches]).tolist() == [0, 1, 2, 3, 4, 5]
        assert torch.equal(torch.cat([b["image"] for b in batches]), per)
    nhwc, = TFRecordDataset(path, features=spec, batch_size=6, batching=Batching(images=ImageBatching(layout="NHWC")))
    assert torch.equal(nhwc["image"].permute(0, 3, 1, 2), per)
    cropped, = TFRecordDataset(path, features=spec, batch_size=6, transform=CROP)
    assert cropped["image"].shape == (6, 3, 48, 48) and cropped["label"].tolist() == [0, 1, 2, 3, 4, 5]
    small = {"image": Image(default=torch.zeros(3, 8, 8, dtype=torch.uint8)), "label": Int64()}
    with pytest.raises(MixedSizesError, match=r"record 2 .*\(3x8x8\)"):
        list(TFRecordDataset(path, features=small, batch_size=6))
    padded, = TFRecordDataset(path, features=small, batch_size=6, batching=Batching(images=ImageBatching(pad=True)))
    assert padded["image_size"].tolist() == [[40, 56], [40, 56], [8, 8], [40, 56], [8, 8], [8, 8]]
    bad = {"image": Image(default=None), "label": Int64()}
    with pytest.raises(FeatureError, match=r"record 2 at byte offset \d+: feature 'image': .*default \(NoneType\)"
                                           r".*uint8 tensor \[3, H, W\]"):
        list(TFRecordDataset(path, features=bad, batch_size=6))
