"""Index files at scale: build, load and len() of one shard of many tiny records.

    python -m benchmarks.index_scale                  # 25,000,000 records (400 MB shard)
    python -m benchmarks.index_scale --records 1000000 --json

Writes a shard of empty records (16 bytes each, written in bulk with numpy),
then times ``build_index`` (scan + write the text index), ``load_index`` and
``len(TFRecordDataset(path))`` (which loads and checks the index), each in
this one process, and reports the process's peak resident memory (VmHWM,
torch's import included). Run it in a fresh process: the peak is the
process's whole life.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def peak_mb() -> int:
    """Peak resident memory of this process in MB (VmHWM; ru_maxrss would carry a parent's over exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) // 1024


def make_shard(path: str, records: int) -> None:
    import numpy as np

    from tfrecord_torch.records.writer import frame

    block = np.frombuffer(frame(b"") * 1_000_000, np.uint8)
    with open(path, "wb") as f:
        left = records
        while left:
            n = min(left, 1_000_000)
            f.write(block[:16 * n].tobytes())
            left -= n


def run(records: int, folder: str) -> dict:
    import torch  # noqa: F401  (counted in the peak, as in a training job)

    from tfrecord_torch import TFRecordDataset, build_index, load_index

    path = os.path.join(folder, "scale.tfrecord")
    make_shard(path, records)
    out: dict = {"records": records, "shard_mb": os.path.getsize(path) >> 20}
    t = time.perf_counter()
    index_path = build_index(path)
    out["build_s"] = time.perf_counter() - t
    out["index_mb"] = os.path.getsize(index_path) >> 20
    t = time.perf_counter()
    n = len(load_index(index_path))
    out["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    length = len(TFRecordDataset(path))
    out["dataset_len_s"] = time.perf_counter() - t
    assert n == length == records, (n, length, records)
    out["peak_mb"] = peak_mb()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=25_000_000)
    parser.add_argument("--dir", default=None, help="folder for the shard (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        out = run(args.records, folder)
    if args.json:
        print(json.dumps(out))
        return
    print("| records | shard | index file | build_index | load_index | len(TFRecordDataset) | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {out['records']:,} | {out['shard_mb']} MB | {out['index_mb']} MB | {out['build_s']:.1f} s | "
          f"{out['load_s']:.1f} s | {out['dataset_len_s']:.1f} s | {out['peak_mb']} MB |")


if __name__ == "__main__":
    main()
