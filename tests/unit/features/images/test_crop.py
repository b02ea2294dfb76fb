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
import torch
from helpers import png_bytes
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.features.images.crop import crop_params, plan_transform

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


def test_parity_holds_on_a_cpu_without_avx2():
    """The tests above in a process where torch runs as on a CPU without AVX2."""
    tests = Path(__file__).resolve()
    code = ("import sys, torch, pytest\n"
            "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT', torch.backends.cpu.get_cpu_capability()\n"
            f"sys.exit(pytest.main(['-n', '0', '-q', '-p', 'no:cacheprovider', {str(tests)!r}, '-k', 'equal']))\n")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tests.parents[4], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "3 passed" in proc.stdout, proc.stdout[-4000:]
