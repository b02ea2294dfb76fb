"""The fused crop equals the unfused transform on the CPU it runs on.

torchvision resizes a uint8 image with torch's uint8 kernel on CPUs with AVX2
(or AVX-512, or ARM) and through float32 elsewhere; the two differ by a level
here and there, ColorJitter after the crop makes it several. The parity tests
here run as they are, and again in a process where torch runs as on a CPU
without AVX2 (``ATEN_CPU_CAPABILITY=default``, read when torch is imported).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import png_bytes
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.features.images.crop import (
    Box,
    crop_params,
    crop_params_batch,
    plan_transform,
    resize_into,
)

SPEC = {"image": Image(), "label": Int64()}
JITTER = v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)


def photo(i, h, w):
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def shard(tmp_path, count=24, h=60, w=80):
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as writer:
        for i in range(count):
            image = photo(i, h, w)
            data = png_bytes(image) if i % 4 == 3 else png_bytes(image, "JPEG", quality=90)
            writer.write(make_example({"image": data, "label": i}))
    return path


def test_per_sample_fused_crop_equals_unfused_with_color_jitter(tmp_path):
    """Per record, as a DataLoader(batch_size=...) user reads: fused head vs
    the unfused transform on the full decode, bit for bit."""
    path = shard(tmp_path)
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), JITTER])
    fused = TFRecordDataset(path, features=SPEC, transform=transform)
    plain = TFRecordDataset(path, features=SPEC, transform=transform,
                            batching=Batching(images=ImageBatching(fused=False)))
    assert fused._per_sample()[1] is not transform  # the head is fused
    out = {}
    for name, ds in (("fused", fused), ("plain", plain)):
        torch.manual_seed(3)
        out[name] = [r["image"] for r in ds]
    assert len(out["fused"]) == 24
    for a, b in zip(out["fused"], out["plain"]):
        assert a.shape == (3, 32, 32) and torch.equal(a, b)


def test_batch_fused_resize_equals_unfused_with_color_jitter(tmp_path):
    """Batch mode, a fixed Resize head: the fused batch vs the transform applied
    to each record unfused (which decodes as the per-sample path does: the
    accurate IDCT)."""
    path = shard(tmp_path)
    transform = v2.Compose([v2.Resize((36, 44)), JITTER])
    out = {}
    for name, fused in (("fused", True), ("plain", False)):
        torch.manual_seed(4)
        ds = TFRecordDataset(path, features=SPEC, batch_size=8, transform=transform,
                             batching=Batching(images=ImageBatching(fused=fused, decoder="accurate")))
        out[name] = torch.cat([b["image"] for b in ds])
    assert out["fused"].shape == (24, 3, 36, 44)
    assert torch.equal(out["fused"], out["plain"])


def test_batch_fused_crop_equals_resized_crop_with_color_jitter(tmp_path):
    """Batch mode, RandomResizedCrop + flip + ColorJitter: each image vs
    torchvision's resized_crop, flip and jitter of the full decode, with the
    crop drawn as the batch draws it."""
    path = shard(tmp_path)
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), JITTER])
    torch.manual_seed(5)
    batch, = TFRecordDataset(path, features=SPEC, batch_size=24, transform=transform, seed=5)
    full, = TFRecordDataset(path, features=SPEC, batch_size=24,
                            batching=Batching(images=ImageBatching(fused=False)))
    plan, _ = plan_transform(transform)
    generator = torch.Generator().manual_seed(int(np.random.SeedSequence([5, 0, 0, 0]).generate_state(1)[0]))
    boxes = [crop_params(plan, 60, 80, generator) for _ in range(24)]
    torch.manual_seed(5)
    for i, (top, left, h, w, flip) in enumerate(boxes):
        expected = F.resized_crop(full["image"][i], top, left, h, w, [32, 32], antialias=True)
        expected = F.horizontal_flip(expected) if flip else expected
        expected = JITTER(tv_tensors.Image(expected)).as_subclass(torch.Tensor)
        assert torch.equal(batch["image"][i], expected), i


@pytest.mark.slow  # this module's parity tests again in a process of their own: about 15 s of CPU
def test_parity_holds_on_a_cpu_without_avx2():
    """The parity tests of this module (named "equal") in a process where torch runs as on a CPU
    without AVX2."""
    tests = Path(__file__).resolve()
    code = ("import sys, torch, pytest\n"
            "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT', torch.backends.cpu.get_cpu_capability()\n"
            f"sys.exit(pytest.main(['-n', '0', '-q', '-p', 'no:cacheprovider', {str(tests)!r}, '-k', 'equal']))\n")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tests.parents[4], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "15 passed" in proc.stdout, proc.stdout[-4000:]  # the three above and resize_into's twelve


# many shapes, and two on which every attempt is rejected (torchvision's central fallback)
SIZES = [(375, 500), (500, 375), (1000, 10), (10, 1000), (230, 230), (1, 1), (60, 80)] * 4


@pytest.mark.parametrize("p", [0.5, 0.7, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_batch_of_draws_is_the_transforms_own_per_image(p, dtype):
    """crop_params_batch over images of many shapes vs v2.RandomResizedCrop,
    then v2.RandomHorizontalFlip(p), on each image in turn from torch's
    global RNG seeded alike (under either default float dtype): the same
    windows, the same flips, and the same RNG state after them, drawn from a
    generator or from the global RNG."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        rrc, flip = v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(p)
        plan, rest = plan_transform(v2.Compose([rrc, flip]))
        assert plan is not None and rest == []
        torch.manual_seed(7)
        expected = []
        for height, width in SIZES:
            params = rrc.make_params([torch.zeros(1, height, width)])
            flipped = bool(flip(torch.tensor([[[0, 1]]]))[0, 0, 0] == 1)
            expected.append((params["top"], params["left"], params["height"], params["width"], flipped))
        state = torch.get_rng_state()
        assert {box[2:4] for box in expected} >= {(13, 10), (10, 13)}  # the fallback was taken
        generator = torch.Generator().manual_seed(7)
        assert crop_params_batch(plan, SIZES, generator) == expected
        assert torch.equal(generator.get_state(), state)
        torch.manual_seed(7)
        assert crop_params_batch(plan, SIZES, None) == expected
        assert torch.equal(torch.get_rng_state(), state)
        generator = torch.Generator().manual_seed(7)
        assert [crop_params(plan, h, w, generator) for h, w in SIZES] == expected
    finally:
        torch.set_default_dtype(default)


def test_a_flip_probability_between_two_floats_decides_as_the_transform():
    """A flip probability just above a draw, closer to it than a float32 step:
    v2.RandomHorizontalFlip compares in float32, where the two are the same
    number, and does not flip; the batch's draw decides alike."""
    torch.manual_seed(3)
    draw = torch.rand(1).item()
    p = draw + 1e-12
    flip = v2.RandomHorizontalFlip(p)
    plan, _ = plan_transform(v2.Compose([v2.Resize((8, 8)), flip]))
    torch.manual_seed(3)
    flipped = bool(flip(torch.tensor([[[0, 1]]]))[0, 0, 0] == 1)
    assert not flipped
    assert crop_params_batch(plan, [(8, 8)], torch.Generator().manual_seed(3))[0].flip is flipped


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("box, size", [((5, 7, 41, 53), (32, 24)),  # a window resized
                                       ((3, 2, 32, 24), (32, 24)),  # a window already the output's size
                                       ((0, 0, 230, 200), (230, 200))])  # more rows than one flip chunk holds
@pytest.mark.parametrize("slot", [False, True])
def test_resize_into_equals_torchvision_resized_crop_and_flip(flip, box, size, slot):
    """resize_into vs F.resized_crop (+ F.horizontal_flip) of the whole image,
    into a fresh array and into one slot of a batch buffer."""
    image = photo(1, 240, 210)
    top, left, h, w = box
    expected = F.resized_crop(torch.from_numpy(image).permute(2, 0, 1), top, left, h, w, list(size), antialias=True)
    expected = F.horizontal_flip(expected) if flip else expected
    buffer = np.full((3, *size, 3), 7, np.uint8)
    out = buffer[1] if slot else np.empty((*size, 3), np.uint8)
    resize_into(image, Box(*box), flip, "bilinear", out)
    assert torch.equal(torch.from_numpy(out).permute(2, 0, 1), expected)
    if slot:
        assert (buffer[0] == 7).all() and (buffer[2] == 7).all()


def test_a_flip_of_rows_wider_than_a_chunk():
    """A flip whose rows hold more values than one serial torch call takes
    (one row a call), against NumPy's reversal."""
    image = photo(2, 3, 11_000)
    out = np.empty_like(image)
    resize_into(image, Box(0, 0, 3, 11_000), True, "bilinear", out)
    assert np.array_equal(out, image[:, ::-1])


def test_per_sample_fused_crop_follows_the_default_dtype(tmp_path):
    """The draws' constants are worked out once per dtype: reading with
    float32, then float64 as torch's default dtype, each equals the unfused
    transform's pixels and leaves torch's RNG where the transform leaves it."""
    path = shard(tmp_path, count=12)
    transform = v2.Compose([v2.RandomResizedCrop(32, ratio=(0.3, 3.1)), v2.RandomHorizontalFlip(0.3)])
    fused = TFRecordDataset(path, features=SPEC, transform=transform)
    plain = TFRecordDataset(path, features=SPEC, transform=transform,
                            batching=Batching(images=ImageBatching(fused=False)))
    default = torch.get_default_dtype()
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            out = {}
            for name, ds in (("fused", fused), ("plain", plain)):
                torch.manual_seed(6)
                out[name] = ([r["image"] for r in ds], torch.get_rng_state())
            assert all(torch.equal(a, b) for a, b in zip(out["fused"][0], out["plain"][0]))
            assert torch.equal(out["fused"][1], out["plain"][1])
    finally:
        torch.set_default_dtype(default)


def test_per_sample_fused_items_are_laid_out_as_unfused(tmp_path):
    """Fused per record, the image is what the unfused transform gives: a
    tv_tensors.Image, contiguous [3, H, W] with the same strides and values."""
    path = shard(tmp_path, count=8)
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip()])
    fused = TFRecordDataset(path, features=SPEC, transform=transform)
    plain = TFRecordDataset(path, features=SPEC, transform=transform,
                            batching=Batching(images=ImageBatching(fused=False)))
    out = {}
    for name, ds in (("fused", fused), ("plain", plain)):
        torch.manual_seed(7)
        out[name] = [r["image"] for r in ds]
    for a, b in zip(out["fused"], out["plain"]):
        assert type(a) is type(b) is tv_tensors.Image
        assert a.is_contiguous() and a.stride() == b.stride() and torch.equal(a, b)


_THREADS = """
import os, sys, threading, time
python_threads = set()  # every thread Python started, by its OS id: one that ended may linger a moment
_bootstrap = threading.Thread._bootstrap_inner
def _noted(self):
    python_threads.add(threading.get_native_id())
    _bootstrap(self)
threading.Thread._bootstrap_inner = _noted
import torch
torch.set_num_threads(2)
from torch.utils.data import DataLoader
from torchvision.transforms import v2
from tfrecord_torch import TFRecordDataset, presets

def foreign():  # threads of the process that Python did not start: an OpenMP team's among them
    return set(map(int, os.listdir("/proc/self/task"))) - {t.native_id for t in threading.enumerate()} - python_threads

transform = v2.Compose([v2.RandomResizedCrop(112, interpolation=v2.InterpolationMode[sys.argv[2]]),
                        v2.RandomHorizontalFlip()])
before = foreign()
per_sample = list(DataLoader(TFRecordDataset(sys.argv[1], features=presets.tfds(), transform=transform),
                             batch_size=8, num_workers=0))
def started():
    for _ in range(100):  # a thread that just ended may linger a moment as an OS thread
        if not foreign() - before:
            break
        time.sleep(0.02)
    return len(foreign() - before)

ours = started()
batches = iter(TFRecordDataset(sys.argv[1], features=presets.tfds(), transform=transform, batch_size=8))
batched = [next(batches)]
ours += started()  # while the decode threads are alive (a team of theirs ends with them)
batched += list(batches)
v2.Resize(200)(per_sample[0]["image"])  # torchvision's own resize of the same images, the control
print(len(per_sample), len(batched), ours, len(foreign() - before), torch.get_num_threads())
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the threads in /proc")
# a process importing torch for each mode, about 10 s of CPU each: slow; the main process's batch
# stack starting no team is checked fast in tests/unit/data/test_collating.py
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["BILINEAR", "BICUBIC"])
def test_fused_resize_starts_no_openmp_team_without_avx2(tmp_path, mode):
    """On a CPU where torch's resize kernels split each image over its
    OpenMP team, the fused crop -- per sample with num_workers=0, and in
    batch mode on the decode threads -- resizes on the calling thread alone
    and starts no team; the user's torch thread setting stays as it was."""
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        for i in range(16):
            w.write(make_example({"image": png_bytes(photo(i, 150, 170), "JPEG", quality=90), "label": i}))
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(Path(__file__).resolve().parents[4])}
    out = subprocess.run([sys.executable, "-c", _THREADS, str(path), mode], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    per_sample, batched, ours, control, threads = map(int, out.stdout.split())
    if control == 0:
        pytest.skip("torch's resize starts no thread of its own here (torch without OpenMP threads)")
    assert (per_sample, batched, ours, threads) == (2, 2, 0, 2)
