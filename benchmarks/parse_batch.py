#!/usr/bin/env python
"""Batch parsing of Examples of one length: the template (a byte matrix read
out with numpy) against the compiled decoder one record at a time, by record
length and by how many numeric features sit beside one bytes value -- the
measurement behind ``_VALUE_BYTES_PER_NUMERIC`` in
``tfrecord_torch/example/batch.py`` (a group of records whose bytes values
outweigh their numeric features is decoded one by one), and that rule's pick.

    .venv/bin/python benchmarks/parse_batch.py [--batch 64] [--repeats 30]

Each cell is the best of ``--repeats`` calls of ``parse_example_batch`` on
``--batch`` records, in microseconds per record, with the faster path
marked, then what ``parse_example_batch`` takes by its rule. Both paths give
the same columns (the batch parser's tests).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _best_us(call, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="records per call")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--lengths", default="1024,2048,4096,6144,8192,16384,65536,262144",
                        help="bytes of the value in each record")
    parser.add_argument("--numeric", default="0,2,8,32", help="float features (4 values each) beside it")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    import numpy as np

    import tfrecord_torch as tt
    from tfrecord_torch.example import batch

    rng = np.random.default_rng(0)
    numeric = [int(v) for v in args.numeric.split(",")]
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores; Python {platform.python_version()}; "
          f"load {os.getloadavg()[0]:.2f}")
    print("Command: `" + " ".join([".venv/bin/python benchmarks/parse_batch.py", *sys.argv[1:]]) + "`")
    print(f"Batches of {args.batch} records: a bytes value, an int64 label, N float features of 4 values; "
          f"us per record (best of {args.repeats}): template / one by one (the faster) / the rule's pick\n")
    print("| value bytes | " + " | ".join(f"N={n}" for n in numeric) + " |")
    print("|---:|" + "---|" * len(numeric))
    rule = batch._worth_a_template
    try:
        for length in map(int, args.lengths.split(",")):
            cells = []
            for n in numeric:
                payloads = [tt.make_example({"label": i, "data": rng.integers(0, 256, length, np.uint8).tobytes(),
                                             **{f"f{k}": [float(i)] * 4 for k in range(n)}})
                            for i in range(args.batch)]
                times = {}
                for path, worth in (("template", lambda _: True), ("one by one", lambda _: False), ("rule", rule)):
                    batch._worth_a_template = worth
                    times[path] = _best_us(lambda: batch.parse_example_batch(payloads), args.repeats) / args.batch
                batch._worth_a_template = rule
                faster = min(("template", "one by one"), key=times.__getitem__)
                cells.append(f"{times['template']:.1f} / {times['one by one']:.1f} ({faster}) / {times['rule']:.1f}")
            print(f"| {length:,} | " + " | ".join(cells) + " |", flush=True)
    finally:
        batch._worth_a_template = rule


if __name__ == "__main__":
    main()
