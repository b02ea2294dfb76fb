"""Main-thread CPU of batch mode's producer per batch: header scans and crop draws.

Batch mode reads headers and draws crop parameters on the producer thread,
holding the GIL against the training loop's Python. This times, with
``time.thread_time`` on that thread, a batch of 256x256 JPEGs under a v2
``RandomResizedCrop(224)`` + ``RandomHorizontalFlip()`` head: the batch calls
(``read_headers``, ``crop_params_batch``, ``DecodeEngine.start``) against the
same work done one image at a time (``read_header`` + ``check_pixels``,
``crop_params``), interleaved over rounds::

    PYTHONPATH=. python benchmarks/producer_cpu.py [--batch 64 --rounds 7 --exif]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from PIL import Image as PILImage  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from tfrecord_torch.features.images.crop import crop_params, crop_params_batch, plan_transform  # noqa: E402
from tfrecord_torch.features.images.engine import DecodeEngine, ImageBatching  # noqa: E402
from tfrecord_torch.features.images.limits import check_pixels, read_header, read_headers  # noqa: E402


def jpegs(count: int, exif: bool) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        image = PILImage.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).resize((256, 256))
        buf = io.BytesIO()
        extra = {"exif": b"Exif\x00\x00" + bytes(6000), "icc_profile": bytes(3000)} if exif else {}
        image.save(buf, format="JPEG", quality=90, **extra)
        out.append(buf.getvalue())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20, help="batches per timing")
    parser.add_argument("--exif", action="store_true", help="camera-like headers (EXIF and ICC blocks)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    images = jpegs(args.batch, args.exif)
    plan, _ = plan_transform(v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]))
    assert plan is not None
    sizes = [(256, 256)] * len(images)
    generator = torch.Generator().manual_seed(0)
    engine = DecodeEngine(ImageBatching(threads=1))

    def headers_each() -> None:
        for data in images:
            check_pixels(read_header(data))

    def headers_batch() -> None:
        for header in read_headers(images):
            check_pixels(header)  # type: ignore[arg-type] - valid images

    cases = {
        "headers, one image at a time": headers_each,
        "headers, read_headers": headers_batch,
        "crops, one image at a time": lambda: [crop_params(plan, h, w, generator) for h, w in sizes],
        "crops, crop_params_batch": lambda: crop_params_batch(plan, sizes, generator),
        "DecodeEngine.start (decode not counted)": lambda: engine.start(images, plan=plan, generator=generator),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, run in cases.items():
            pending = []
            start = time.thread_time()
            for _ in range(args.repeat):
                pending.append(run())
            times[name].append((time.thread_time() - start) / args.repeat * 1e3)
            for p in pending:
                if hasattr(p, "result"):
                    p.result()
    engine.close()
    print(f"main-thread CPU per batch of {args.batch} 256x256 JPEGs (median of {args.rounds} rounds)")
    for name, values in times.items():
        print(f"  {name:42s} {np.median(values):7.3f} ms")


if __name__ == "__main__":
    main()
