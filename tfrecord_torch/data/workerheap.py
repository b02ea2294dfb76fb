"""The C heap of a DataLoader worker (glibc's malloc).

A worker that decodes images allocates and frees a buffer of hundreds of KiB
to a few MiB per record (a 512 x 512 RGB image is 768 KiB). glibc serves a
buffer above its mmap threshold with a mapping of its own, and gives the free
top of its heap back to the kernel once it exceeds the trim threshold; both
thresholds start low (128 KiB) and rise only as the process frees mapped
buffers, up to 32 and 64 MiB. Until they have risen, or where the order of
allocations keeps the top free, every such buffer's pages are faulted in and
zeroed again: in a shuffled read of 512 x 512 JPEGs from a shard cache being
filled, a worker's heap grew by 768 KiB per image and was cut back every ten
or so (``strace``), 67-100 page faults per image against 15 for the same
pipeline on local disk, and 10-15% of the worker's CPU.

:func:`tune_heap`, at a worker's first item, sets both thresholds to where
glibc's own adaptation ends (:data:`MMAP_THRESHOLD`, :data:`TRIM_THRESHOLD`):
buffers under 32 MiB come from the heap and up to 64 MiB of freed heap stay
with the worker for its next records. The cost: a worker's memory stays near
its high-water mark (at most 64 MiB above what it holds, per malloc arena)
rather than shrinking between records; measured here, the largest peak RSS of
a worker went 937 -> 953 MB (the shuffled read above).

Only a DataLoader worker process is tuned (the main process is the user's),
only under glibc, and not at all when the user tuned malloc for the process
(``GLIBC_TUNABLES`` naming ``glibc.malloc``, or the ``MALLOC_*_`` variables);
``TFRECORD_TORCH_WORKER_TUNING=off`` turns this off with the other worker
steps (:mod:`.workersetup`).

A per-sample batch holds all its samples until the collate has stacked them:
64 RGB images of 1024x768 are 151 MiB of heap, freed at once after each
batch, and with a trim threshold of 64 MiB glibc gives the part above it back
to the kernel every batch, to be faulted in again by the next one's decodes
(530 faults per image against 9, about a quarter of a worker's time per
image here). :func:`keep_for_batches`, called by the worker's collate with
the bytes it stacked, raises the trim threshold of a heap
:func:`tune_heap` set to that much above the base (at most
:data:`BATCH_TRIM_CAP`): the memory kept is what the worker held for the
batch just made, so its peak RSS does not grow; it only no longer shrinks
between batches.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os

import torch.utils.data

from tfrecord_torch.features.reused import malloc_keeps_memory

__all__ = ["BATCH_TRIM_CAP", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_for_batches", "tune_heap"]

MMAP_THRESHOLD = 32 << 20  # glibc's own upper bound for its adapted mmap threshold (64-bit)
TRIM_THRESHOLD = 64 << 20  # twice it, as glibc's adaptation sets it
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
# glibc's environment names of its glibc.malloc tunables (any of those in GLIBC_TUNABLES counts too)
_USER_MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                          "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "MALLOC_PERTURB_", "MALLOC_CHECK_")
BATCH_TRIM_CAP = 1 << 30  # the trim threshold keep_for_batches sets at most
_tuned_in = -1  # the pid that decided
_owned_in = -1  # the pid whose thresholds tune_heap set
_trim = TRIM_THRESHOLD  # the trim threshold set there


def tune_heap() -> bool:
    """In a DataLoader worker process under glibc, once: the malloc
    thresholds above (``mallopt``); elsewhere, or when the user tuned
    malloc, nothing. Whether this call set them."""
    global _tuned_in
    pid = os.getpid()
    if _tuned_in == pid:
        return False
    _tuned_in = pid
    if multiprocessing.parent_process() is None or torch.utils.data.get_worker_info() is None:
        return False  # the main process (or one that only looks like a worker): the user's
    if not _ours_to_set(os.environ):
        return False
    mallopt = _mallopt()
    mapped = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trimmed = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if not (mapped and trimmed):
        return False
    global _owned_in, _trim
    _owned_in, _trim = pid, TRIM_THRESHOLD
    malloc_keeps_memory()
    return True


def keep_for_batches(nbytes: int) -> bool:
    """In a worker whose heap :func:`tune_heap` set: keep ``nbytes`` (a
    batch's samples, freed together) of freed heap above the base trim
    threshold, up to :data:`BATCH_TRIM_CAP`; elsewhere nothing. Whether
    this call raised the threshold."""
    global _trim
    if _owned_in != os.getpid():
        return False
    want = min(TRIM_THRESHOLD + max(int(nbytes), 0), BATCH_TRIM_CAP)
    if want <= _trim:
        return False
    if not _mallopt()(_M_TRIM_THRESHOLD, want):
        return False
    _trim = want
    return True


def _mallopt():
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def _ours_to_set(env) -> bool:
    """Whether the heap is glibc's and left untuned by the user."""
    if not _glibc():
        return False
    if "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        return False
    return not any(env.get(name) for name in _USER_MALLOC_VARIABLES)


def _glibc() -> bool:
    """Whether this process runs on glibc, from glibc's own answer: elsewhere
    (musl, macOS) ``platform.libc_ver()`` reads and scans the whole Python
    executable instead, and raises when it cannot be opened."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc ")
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name: not glibc
        return False
