"""The worker-process tuning (``docs/guide/process.md``) on and off, hook by hook.

The library changes a DataLoader worker process in two ways that are meant to
pay for themselves: ``gc.freeze()`` of what a forked worker inherited, and
glibc's malloc thresholds (the heap kept for the next records and batches).
Each is kept only where this case shows its gain: the same per-sample read
(what most users write: ``num_workers=2``, batches of 64) of the 1024x768
JPEGs, where a batch's samples are 151 MiB of pixels, with every step on (the
default), all off (``TFRECORD_TORCH_WORKER_TUNING=off``) and each step off
alone. The third step (a spawned worker's wait at exit for its queue threads)
is for correctness, not speed: a test covers it
(``tests/unit/data/test_workerexit.py``).

A step is turned off alone by replacing it in this benchmark process before
the DataLoader forks its workers (the workers inherit the replacement); the
switch a user has is the one for all of them.
"""

from __future__ import annotations

import os

from benchmarks.cases.images_large import _per_sample
from benchmarks.harness.registry import case, target, worker

CASE = "worker_tuning"
STEPS = {"gc freeze": "freeze_inherited", "malloc thresholds": "tune_heap"}


def _without(step: str | None):
    """A ``make(path)`` for the per-sample read with ``step`` replaced by a no-op
    (None: the switch turns every step off)."""
    def make(path):
        if step is None:
            os.environ["TFRECORD_TORCH_WORKER_TUNING"] = "off"
        else:
            from tfrecord_torch.data import workersetup

            setattr(workersetup, STEPS[step], lambda: None)
        return _per_sample(path, 2)
    return make


case(CASE, dataset="images_1024_jpeg", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     ref="ours (tuning on)",
     title="Worker tuning on and off: per-sample reads of 1024x768 JPEGs, 2 DataLoader workers, batches of 64",
     short="worker_tuning: per sample, 1024x768, each step off")
worker(CASE, "ours (tuning on)", note="the default: every step on")(lambda p: _per_sample(p, 2))
worker(CASE, "all steps off", note="TFRECORD_TORCH_WORKER_TUNING=off in the workers")(_without(None))
for _step in STEPS:
    worker(CASE, f"{_step} off", note=f"workersetup.{STEPS[_step]} replaced by a no-op before the "
           "workers fork; the other steps on")(_without(_step))
    target(CASE, f"ours (tuning on) >= 1.0x {_step} off", "ours (tuning on)", f"{_step} off", at_least=1.0)
target(CASE, "ours (tuning on) >= 1.0x all steps off", "ours (tuning on)", "all steps off", at_least=1.0)
