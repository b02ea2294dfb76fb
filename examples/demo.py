"""The main job on built-in sample data: no download needed.

Writes a few shards of sample tf.train.Examples (a small generated image as
PNG bytes, a label, a float vector, a caption), one of them GZIP-compressed,
then indexes, verifies and inspects them with the ``tfrecord-torch`` command
line, and reads records back by index.

Run it with ``bash dev.sh demo`` (or ``python examples/demo.py [OUTPUT_DIR]``).
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
from PIL import Image

import tfrecord_torch as tt
from tfrecord_torch.cli import main as cli


def sample_example(i: int, rng: np.random.Generator) -> bytes:
    pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format="PNG")
    return tt.make_example({
        "image": png.getvalue(),
        "label": i % 10,
        "embedding": rng.standard_normal(8).astype(np.float32),
        "caption": f"sample {i}",
    })


def main(out: str = "demo-output") -> int:
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    shards = []
    for s, compression in enumerate([None, None, "gzip"]):
        suffix = ".gz" if compression else ""
        path = os.path.join(out, f"sample-{s:05d}-of-00003.tfrecord{suffix}")
        with tt.RecordWriter(path, compression=compression) as writer:
            for i in range(s * 100, (s + 1) * 100):
                writer.write(sample_example(i, rng))
        shards.append(path)
    print(f"wrote {len(shards)} shards of 100 records to {out}/\n")

    plain = [p for p in shards if not p.endswith(".gz")]
    steps = [["index", *plain], ["verify", *shards], ["inspect", *shards], ["head", "-n", "2", "--bytes", "length", shards[0]]]
    for argv in steps:
        print("$ tfrecord-torch " + " ".join(argv))
        status = cli(argv)
        print()
        if status:
            return status

    reader = tt.IndexedReader(plain[1])
    record = tt.parse_example(reader[42])
    print(f"random access: record 42 of {plain[1]} has label {record['label'].tolist()} "
          f"and caption {record['caption'][0].decode()!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
