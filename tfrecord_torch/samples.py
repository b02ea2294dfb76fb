"""The small data sets the docs' examples read, written into a folder of your choice::

    python -m tfrecord_torch.samples DIR

writes ``DIR/data/train-*.tfrecord``, ``DIR/seq.tfrecord``, ``DIR/photos`` and
the rest of :data:`SAMPLES` (about 600 KB), so every example of the README and the
docs runs as written from ``DIR``. They are written by this library's own
writers from fixed random seeds (no TensorFlow needed), and the docs' test
suite runs the examples on the same data. ``--only PATH ...`` writes some of them.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torchvision
from PIL import Image

from tfrecord_torch._types import PathLike
from tfrecord_torch.example.codec import make_example, make_sequence_example
from tfrecord_torch.records.writer import RecordWriter
from tfrecord_torch.write.convert import write_dataset
from tfrecord_torch.write.options import Execution

__all__ = ["SAMPLES", "Sample", "main", "write_samples"]


class Sample(NamedTuple):
    """One data set the docs read."""

    path: str
    """How the docs name it (a file, a folder or a glob), relative to the folder it is written in."""
    about: str
    """What it holds."""
    write: Callable[[Path], None]
    """Writes it into the folder given."""


def _jpeg(rng: np.random.Generator, height: int, width: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


def _image_shards(root: Path) -> None:
    rng = np.random.default_rng(0)
    (root / "data").mkdir(parents=True, exist_ok=True)
    for s in range(2):
        with RecordWriter(root / "data" / f"train-{s:05d}-of-00002.tfrecord") as w:
            for i in range(40):
                size = rng.integers(24, 64, 2)
                w.write(make_example({"image": _jpeg(rng, *size), "label": (40 * s + i) % 10}))


def _described_records(root: Path) -> None:
    rng = np.random.default_rng(1)
    (root / "data").mkdir(parents=True, exist_ok=True)
    with RecordWriter(root / "data" / "part-0.tfrecord") as w:
        for i in range(40):
            n = int(rng.integers(1, 5))
            fields = {
                "vec": rng.random(3, dtype=np.float32),
                "var": rng.integers(0, 100, n),
                "words": [f"w{j}".encode() for j in range(n)],
                "steps": rng.random(2 * n, dtype=np.float32),
                "idx": rng.choice(6, n, replace=False),
                "val": rng.random(n, dtype=np.float32),
            }
            if i % 3:
                fields["label"] = i
            w.write(make_example(fields))


def _sequence_records(root: Path) -> None:
    rng = np.random.default_rng(2)
    root.mkdir(parents=True, exist_ok=True)
    with RecordWriter(root / "seq.tfrecord") as w:
        for i in range(20):
            steps = int(rng.integers(1, 7))
            w.write(make_sequence_example(
                context={"label": i % 4},
                feature_lists={"tokens": [int(t) for t in rng.integers(0, 50, steps)],
                               "frames": [rng.random(3, dtype=np.float32) for _ in range(steps)]}))


def _frame_records(root: Path) -> None:
    """YouTube-8M's frame-level layout: one bytes value per frame under rgb and audio."""
    rng = np.random.default_rng(6)
    root.mkdir(parents=True, exist_ok=True)
    with RecordWriter(root / "frames.tfrecord") as w:
        for i in range(12):
            frames = int(rng.integers(3, 30))
            w.write(make_sequence_example(
                context={"id": f"vid{i:03d}".encode(), "labels": [int(t) for t in rng.integers(0, 3862, 1 + i % 3)]},
                feature_lists={"rgb": [rng.integers(0, 256, 1024, dtype=np.uint8).tobytes() for _ in range(frames)],
                               "audio": [rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
                                         for _ in range(frames)]}))


def _token_records(root: Path) -> None:
    """T5's layout: int64 token lists under inputs and targets, each ending in EOS (1), no 0 (padding)."""
    rng = np.random.default_rng(7)
    root.mkdir(parents=True, exist_ok=True)
    with RecordWriter(root / "tokens.tfrecord") as w:
        for _ in range(40):
            inputs = [*rng.integers(2, 32000, int(rng.integers(3, 60))).tolist(), 1]
            targets = [*rng.integers(2, 32000, int(rng.integers(1, 12))).tolist(), 1]
            w.write(make_example({"inputs": inputs, "targets": targets}))


def _segmentation_records(root: Path) -> None:
    rng = np.random.default_rng(3)
    root.mkdir(parents=True, exist_ok=True)
    with RecordWriter(root / "seg.tfrecord") as w:
        for _ in range(16):
            h, wd = (int(v) for v in rng.integers(40, 80, 2))
            w.write(make_example({
                "height": h, "width": wd,
                "image_raw": rng.integers(0, 256, (h, wd, 3), dtype=np.uint8).tobytes(),
                "mask_raw": rng.integers(0, 5, (h, wd), dtype=np.uint8).tobytes(),
            }))


def _detection_records(root: Path) -> None:
    rng = np.random.default_rng(4)
    root.mkdir(parents=True, exist_ok=True)
    with RecordWriter(root / "od.tfrecord") as w:
        for _ in range(16):
            h, wd = (int(v) for v in rng.integers(40, 80, 2))
            n = int(rng.integers(1, 4))
            lo = rng.uniform(0.0, 0.5, (n, 2)).astype(np.float32)
            hi = (lo + rng.uniform(0.2, 0.5, (n, 2))).clip(0, 1).astype(np.float32)
            labels = rng.integers(1, 4, n)
            w.write(make_example({
                "image/encoded": _jpeg(rng, h, wd), "image/format": b"jpeg",
                "image/height": h, "image/width": wd,
                "image/object/bbox/xmin": lo[:, 0], "image/object/bbox/ymin": lo[:, 1],
                "image/object/bbox/xmax": hi[:, 0], "image/object/bbox/ymax": hi[:, 1],
                "image/object/class/label": labels,
                "image/object/class/text": [f"class{k}".encode() for k in labels],
                "image/object/is_crowd": np.zeros(n, np.int64),
                "image/object/area": ((hi - lo)[:, 0] * wd * (hi - lo)[:, 1] * h).astype(np.float32),
                "image/object/mask": [_box_mask(h, wd, box) for box in np.hstack([lo, hi])],
            }))


def _box_mask(height: int, width: int, box: np.ndarray) -> bytes:
    """An object's mask as the OD API's create_coco_tf_record writes it: a gray PNG of 0/1, here
    the ellipse inside its normalised (xmin, ymin, xmax, ymax) box."""
    y, x = np.mgrid[0:height, 0:width]
    cx, cy = (box[0] + box[2]) / 2 * width, (box[1] + box[3]) / 2 * height
    rx, ry = max((box[2] - box[0]) / 2 * width, 1), max((box[3] - box[1]) / 2 * height, 1)
    buf = io.BytesIO()
    Image.fromarray((((x + 0.5 - cx) / rx) ** 2 + ((y + 0.5 - cy) / ry) ** 2 <= 1).astype(np.uint8), "L").save(
        buf, format="PNG")
    return buf.getvalue()


def _photo_folder(root: Path) -> None:
    rng = np.random.default_rng(5)
    for c in ("cat", "dog"):
        (root / "photos" / c).mkdir(parents=True, exist_ok=True)
        for i in range(6):
            (root / "photos" / c / f"{i}.jpg").write_bytes(_jpeg(rng, *rng.integers(24, 64, 2)))


def _converted_photos(root: Path) -> None:
    source = root / ".photos-source"
    _photo_folder(source)
    try:
        write_dataset(torchvision.datasets.ImageFolder(source / "photos"), root / "records" / "photos",
                      name="photos", execution=Execution(progress=False))
    finally:
        shutil.rmtree(source)


SAMPLES: tuple[Sample, ...] = (
    Sample("data/train-*.tfrecord", "2 shards of 40 TFDS-style records: `image` (JPEG, 24-63 pixels a side), "
           "`label` 0-9", _image_shards),
    Sample("data/part-*.tfrecord", "40 records of the Reading guide's TF feature description (`label` missing "
           "from every third)", _described_records),
    Sample("seq.tfrecord", "20 SequenceExamples: context `label`, feature lists `tokens` (int64) and `frames` "
           "(3 floats a step)", _sequence_records),
    Sample("seg.tfrecord", "16 records of raw pixels: `height`, `width`, `image_raw` (HWC uint8), `mask_raw` "
           "(HW uint8)", _segmentation_records),
    Sample("od.tfrecord", "16 records of the TF Object Detection API's keys, 1-3 boxes each, with `is_crowd`, "
           "`area` and a PNG mask per object", _detection_records),
    Sample("frames.tfrecord", "12 YouTube-8M frame-level SequenceExamples: context `id`, `labels`; per frame "
           "`rgb` (1,024 bytes) and `audio` (128 bytes), 3-29 frames", _frame_records),
    Sample("tokens.tfrecord", "40 T5-style Examples: `inputs` (4-60) and `targets` (2-12) int64 token lists",
           _token_records),
    Sample("photos", "an ImageFolder: 6 JPEG files in each of `cat/` and `dog/`", _photo_folder),
    Sample("records/photos", "the `photos` folder as write_dataset converts it (a TFDS folder)", _converted_photos),
)


def write_samples(folder: PathLike, paths: Sequence[str] | None = None) -> list[Sample]:
    """Write the samples named by ``paths`` (each a :attr:`Sample.path`; default:
    all of :data:`SAMPLES`) into ``folder``, made if missing. Returns those written.

    Raises:
        ValueError: a path that names no sample (the message lists them).
    """
    known = {s.path: s for s in SAMPLES}
    unknown = [p for p in paths or () if p not in known]
    if unknown:
        raise ValueError(f"no sample is named {', '.join(map(repr, unknown))}; the samples are "
                         f"{', '.join(known)}")
    chosen = [known[p] for p in paths] if paths else list(SAMPLES)
    root = Path(os.fspath(folder))
    root.mkdir(parents=True, exist_ok=True)
    for sample in chosen:
        sample.write(root)
    return chosen


def main(argv: list[str] | None = None) -> int:
    """``python -m tfrecord_torch.samples DIR [--only PATH ...]``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tfrecord_torch.samples",
                                     description="Write the small data sets the docs' examples read into DIR.")
    parser.add_argument("folder", metavar="DIR", help="where to write them (made if missing)")
    parser.add_argument("--only", nargs="+", metavar="PATH", choices=[s.path for s in SAMPLES],
                        help="write only these samples")
    args = parser.parse_args(argv)
    for sample in write_samples(args.folder, args.only):
        print(f"{os.path.join(args.folder, sample.path)}: {sample.about}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
