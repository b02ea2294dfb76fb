#!/usr/bin/env python
"""A JPEG decoded to RGB planes against the same JPEG decoded to [H, W, 3], on one thread.

    .venv/bin/python benchmarks/decode_planes.py PATH [--records N] [--rounds N]

The per-sample path decodes each JPEG straight to the planes [3, H, W] a
tensor image is (``_jpegcrop.decode_planes``), batch mode to [H, W, 3] rows
of one buffer (``_jpegcrop.decode_many``). Both make the same pixels with
the same libjpeg calls; the planes are spread from a row buffer. Over the
first ``--records`` JPEGs of the TFRecord file PATH (Examples with an
``image`` JPEG, all of one size), each round decodes them all both ways,
interleaved; the thread's CPU time per image is the least over ``--rounds``
rounds. Prints both and their ratio (planes / [H, W, 3]). Run it from two
trees (each with its helper built) to compare their helpers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path")
    parser.add_argument("--records", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import numpy as np

    from tfrecord_torch.example import parse_example
    from tfrecord_torch.features.images import _jpegcrop
    from tfrecord_torch.features.images.limits import read_header
    from tfrecord_torch.records.framing import read_records

    images = []
    for record in read_records(args.path):
        images.append(parse_example(record)["image"][0])
        if len(images) == args.records:
            break
    header = read_header(images[0])
    h, w = header.height, header.width
    rows = np.empty((len(images), h, w, 3), np.uint8)
    planes = np.empty((len(images), 3, h, w), np.uint8)
    best = {"rows": float("inf"), "planes": float("inf")}
    for _ in range(args.rounds):
        c0 = time.thread_time()
        _jpegcrop.decode_many(images, rows, h, w, False)
        best["rows"] = min(best["rows"], time.thread_time() - c0)
        c0 = time.thread_time()
        for k, data in enumerate(images):
            _jpegcrop.decode_planes(data, planes[k], h, w, False)
        best["planes"] = min(best["planes"], time.thread_time() - c0)
    if not np.array_equal(rows.transpose(0, 3, 1, 2), planes):
        raise SystemExit("the planes differ from the rows' pixels")
    per = {k: 1e6 * v / len(images) for k, v in best.items()}
    print(f"{len(images)} JPEGs of {w}x{h} from {args.path}; helper {_jpegcrop.__file__}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"[H, W, 3]: {per['rows']:.0f} us an image; planes: {per['planes']:.0f} us an image; "
          f"planes / [H, W, 3]: {per['planes'] / per['rows']:.2f}")


if __name__ == "__main__":
    main()
