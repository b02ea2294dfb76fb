#!/usr/bin/env python
"""Per sample with ``num_workers=0``: what runs off the loop's thread, switched off and on, in one process.

    .venv/bin/python benchmarks/stackahead_ab.py PATH [--switch stack|read|keep] [--rounds N] [--loop]

Reads the TFRecord file PATH (Examples with an ``image`` JPEG and a
``label``, ``features=presets.tfds()``) through ``DataLoader(ds,
batch_size=64, num_workers=0)`` with one thing switched off (as before its
change) and on, in turn over ``--rounds`` rounds (the order reversed every
other round). ``--switch stack`` (the default): the decode-ahead built
without its :class:`~tfrecord_torch.data.stackahead.StackAhead` (each
batch's images copied on the loop's thread) and with it. ``--switch read``:
the local file's records read on the iterating thread (record mode's
read-ahead told no group is worth a thread) and on the read-ahead thread.
``--switch keep``: each iteration's stacking buffers a pool of its own, let
go of when it ends, and the process's pool, which the next iteration (the
next pass) takes over. Each
round times one epoch alone after one not counted; with ``--loop``, also one
epoch under ``benchmarks/loop.py``'s step at 80% of the epoch's rate, and
its stall. Prints the images/s per round, the median of the rounds' on/off
ratios and the pooled ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path")
    parser.add_argument("--switch", choices=("stack", "read", "keep"), default="stack")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--loop", action="store_true", help="also an epoch under the loop's step, and its stall")
    args = parser.parse_args()
    import torch.utils.data
    import torchvision.io  # noqa: F401 - imported as the other benchmarks do

    from benchmarks.loop import run_epoch, step_for
    from tfrecord_torch import TFRecordDataset, presets
    from tfrecord_torch.data import decodeahead, recordmode, stackahead
    from tfrecord_torch.data.readahead import fetch_ahead
    from tfrecord_torch.features.reused import Reused

    built = decodeahead.StackAhead

    def own_pool() -> stackahead.StackAhead:  # as before the pool was the process's: one per iteration
        stack = built()
        stack._memory = Reused(slab=1 << 20, keep=stackahead.KEPT, largest=stackahead.LARGEST)
        return stack

    def here(units, fetch, *, remote, weight, limit):  # no group read ahead: each where it is decoded
        return fetch_ahead(units, fetch, remote=lambda unit: False, weight=weight, limit=limit)

    def switch(on: bool) -> None:
        if args.switch == "stack":
            decodeahead.StackAhead = built if on else (lambda: None)  # type: ignore[assignment,misc]
        elif args.switch == "keep":
            decodeahead.StackAhead = built if on else own_pool  # type: ignore[assignment,misc]
        else:
            recordmode.fetch_ahead = fetch_ahead if on else here  # type: ignore[assignment]
    ds = TFRecordDataset(args.path, features=presets.tfds())

    def epoch():
        return torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=0)

    rates: dict[str, list[float]] = {"off": [], "on": []}
    stalls: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(args.rounds):
        for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
            switch(name == "on")
            run_epoch(epoch, None)
            alone = run_epoch(epoch, None)
            rates[name].append(alone.images_per_s)
            if args.loop:
                stalls[name].append(run_epoch(epoch, step_for(alone.images_per_s)).stall)
    switch(True)
    ratios = [on / off for on, off in zip(rates["on"], rates["off"])]
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f}")
    for name in ("off", "on"):
        line = f"{name}: img/s " + ", ".join(f"{x:,.0f}" for x in rates[name])
        if stalls[name]:
            line += "; stall " + ", ".join(f"{100 * x:.1f}%" for x in stalls[name])
        print(line)
    print(f"on/off: median of rounds {statistics.median(ratios):.3f}, pooled {sum(rates['on']) / sum(rates['off']):.3f}")


if __name__ == "__main__":
    main()
