"""Shared test helpers: small shards with a unique id per record."""

import filecmp
import io
import os
import signal

import numpy as np
from PIL import Image as PILImage

from tfrecord_torch import RecordWriter, make_example


def write_shards(folder, counts, *, compression=None, prefix="shard", extra=None):
    """Write shards holding records with ids 0..N-1 in order; returns paths."""
    paths, next_id = [], 0
    for s, n in enumerate(counts):
        suffix = ".gz" if compression == "gzip" else ""
        path = folder / f"{prefix}-{s:05d}-of-{len(counts):05d}.tfrecord{suffix}"
        with RecordWriter(path, compression=compression) as w:
            for _ in range(n):
                fields = {"id": next_id, "x": np.full(3, next_id, np.float32)}
                if extra:
                    fields.update(extra(next_id))
                w.write(make_example(fields))
                next_id += 1
        paths.append(path)
    return paths


def png_bytes(array, fmt="PNG", **kw):
    buf = io.BytesIO()
    PILImage.fromarray(array).save(buf, format=fmt, **kw)
    return buf.getvalue()



def restart_bomb(height, width):
    """A JPEG of height x width that a marker walk reading RST0 as a segment with a length sees as 1x1.

    SOI, then RST0 (no length, to libjpeg), then an APP0 whose 16-bit length field (FF E0) such a
    walk takes for RST0's length: it lands 65,508 bytes on, inside the APP0's body, on a 1x1 frame
    header planted there. libjpeg skips the APP0 and reads the real frame after it: an 8x8 JPEG's
    segments with their frame rewritten to height x width (its scan far too short: libjpeg pads it).
    66 KB for any size up to 65500 x 65500."""
    real = bytearray(png_bytes(np.zeros((8, 8, 3), np.uint8), "JPEG"))
    sof = real.index(b"\xff\xc0")
    real[sof + 5:sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    decoy = b"\xff\xc0\x00\x11\x08\x00\x01\x00\x01\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01"  # 1x1, 3 components
    lands = 2 + 2 + 0xFFE0  # RST0 at 2, its "length" FF E0 read at 4
    body = bytearray(lands + len(decoy) - 8)  # the APP0's body starts at byte 8
    body[lands - 8:] = decoy
    return b"\xff\xd8\xff\xd0" + b"\xff\xe0" + (len(body) + 2).to_bytes(2, "big") + bytes(body) + bytes(real[2:])

def ids_of(items):
    """Record ids from dataset items (dicts of raw values or tensors, or batches)."""
    out = []
    for item in items:
        value = item["id"]
        out.extend(np.asarray(value).reshape(-1).tolist())
    return out


STAMP = ".index.json"  # an index's stamp: it holds its shard's modification time, so it differs run to run


def listing(folder):
    """The names in ``folder`` a reader can see (hidden files and index stamps aside), sorted; the
    indexes a writer keeps in ``index/`` as ``index/<name>``."""
    names = [f for f in os.listdir(folder) if not f.startswith(".") and not f.endswith(STAMP) and f != "index"]
    indexes = os.path.join(folder, "index")
    if os.path.isdir(indexes):
        names += [f"index/{f}" for f in os.listdir(indexes) if not f.startswith(".") and not f.endswith(STAMP)]
    return sorted(names)


def stamps(folder):
    """The index stamps in ``folder`` and its ``index/``."""
    found = [f for f in os.listdir(folder) if f.endswith(STAMP)]
    if os.path.isdir(os.path.join(folder, "index")):
        found += [f"index/{f}" for f in os.listdir(os.path.join(folder, "index")) if f.endswith(STAMP)]
    return sorted(found)


def assert_same_files(a, b):
    """Folders ``a`` and ``b`` hold the same visible files, byte for byte, and stamps of the same indexes."""
    names = listing(a)
    assert names == listing(b)
    assert stamps(a) == stamps(b)
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert mismatch == [] and errors == [], (mismatch, errors)


def in_threads(work, n=8):
    """Run ``work()`` on ``n`` threads at once; the exceptions they raised."""
    import threading

    errors = []

    def run():
        try:
            work()
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def image_shards(tmp_path, keys=("image", "label"), fmt="PNG", sizes=((8, 10),) * 6, mode="RGB"):
    rng = np.random.default_rng(0)
    arrays = []
    path = tmp_path / "img.tfrecord"
    with RecordWriter(path) as w:
        for i, (h, wd) in enumerate(sizes):
            shape = (h, wd, 3) if mode == "RGB" else (h, wd)
            a = rng.integers(0, 256, shape, dtype=np.uint8)
            arrays.append(a)
            w.write(make_example({keys[0]: png_bytes(a, fmt), keys[1]: i, "id": i}))
    return path, arrays


def import_tfds():
    """``import tensorflow_datasets``, after collecting garbage. While TFDS is first imported, etils'
    ``lazy_imports`` replaces ``builtins.__import__``; a DataLoader iterator an earlier test left
    for the garbage collector, collected meanwhile, imports ``multiprocessing.connection.wait`` in
    its ``__del__``, gets a LazyModule and fails (a PytestUnraisableExceptionWarning in whichever
    test imports TFDS)."""
    import gc

    gc.collect()
    import tensorflow_datasets

    return tensorflow_datasets


def kill_a_worker_mid_epoch(it):
    """SIGKILL worker 1 of the DataLoader iterator ``it`` and read on: the
    loader must fail loudly (its SIGCHLD handler raises, or a shared-memory
    segment's descriptor was on its way from the worker: multiprocessing's
    descriptor transfer then ends in ConnectionError or EOFError)."""
    import pytest

    with pytest.raises((RuntimeError, ConnectionError, EOFError)):
        os.kill(it._workers[1].pid, signal.SIGKILL)
        for _ in it:
            pass


def count_fd_receipts(monkeypatch):
    """Storages this process receives as file descriptors from now on (a
    socket round trip with the sender each). Workers forked before keep the
    plain function to name in what they send."""
    import torch.multiprocessing.reductions as reductions

    calls = []
    rebuild = reductions.rebuild_storage_fd

    def counting(*args):
        calls.append(args)
        return rebuild(*args)

    monkeypatch.setattr(reductions, "rebuild_storage_fd", counting)
    return calls
