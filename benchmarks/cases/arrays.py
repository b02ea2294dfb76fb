"""Arrays: records holding one large array's bytes (TFDS's Tensor feature
with ``encoding="bytes"``, ``ndarray.tobytes()``) and a label, to batches of
tensors, every spelling of ours beside tf.data's parse_example + decode_raw."""

from __future__ import annotations

from benchmarks.harness.registry import case, dataset, target, worker

BATCH = 64
SHAPE = (100, 1000)  # 100,000 bytes a record


@dataset("examples_arrays", full={"records": 3200, "seed": 0}, quick={"records": 1600, "seed": 0},
         tiny={"records": 128, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: 'x' the bytes of a uint8 array "
                             f"{SHAPE[0]}x{SHAPE[1]} (100 KB), int64 'label'"))
def build_arrays(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter, make_example

    rng = np.random.default_rng(p["seed"])
    blobs = [rng.integers(0, 256, SHAPE, dtype=np.uint8) for _ in range(16)]
    checksum = 0
    with RecordWriter(path) as w:
        for i in range(p["records"]):
            w.write(make_example({"x": blobs[i % 16].tobytes(), "label": i}))
            checksum += i + int(blobs[i % 16][-1, -1])
        payload = w.offset - 16 * p["records"]
    return {"records": p["records"], "bytes": payload, "checksum": checksum}


def _tally(batches) -> dict:
    """Batches: x [B, 100, 1000] uint8, label [B] (torch or numpy)."""
    records = checksum = 0
    for b in batches:
        records += len(b["label"])
        checksum += int(b["label"].sum()) + int(b["x"][:, -1, -1].sum())
    return {"records": records, "checksum": checksum}


case("arrays_loader", dataset="examples_arrays", unit="records/s", repeats=3, quick_repeats=2, probe=False,
     title=f"Records of one 100 KB array (uint8 {SHAPE[0]}x{SHAPE[1]}) and a label to batches of {BATCH} "
           "tensors",
     short=f"arrays_loader: 100 KB arrays to batches of {BATCH}", ref="ours batch mode")

_SPEC = f'features={{"x": RawTensor(shape={SHAPE}), "label": Int64()}}'


def _loader(path: str, *, batch_mode: bool, workers: int, persistent: bool = False):
    from torch.utils.data import DataLoader

    from tfrecord_torch import Int64, RawTensor, TFRecordDataset

    ds = TFRecordDataset(path, features={"x": RawTensor(shape=SHAPE), "label": Int64()},
                         batch_size=BATCH if batch_mode else None)
    size = None if batch_mode else BATCH
    if persistent:
        loader = DataLoader(ds, batch_size=size, num_workers=workers, persistent_workers=True)
        return lambda: _tally(loader)
    return lambda: _tally(DataLoader(ds, batch_size=size, num_workers=workers))


@worker("arrays_loader", "ours batch mode",
        note=f"TFRecordDataset(path, {_SPEC}, batch_size={BATCH}) through DataLoader(batch_size=None, "
             "num_workers=0): x one tensor [64, 100, 1000]; CRCs verified")
def arrays_batch_mode(path):
    return _loader(path, batch_mode=True, workers=0)


@worker("arrays_loader", "ours batch mode, 2 workers",
        note="the same with num_workers=2 (forked each pass): each batch made in shared memory the worker "
             "uses again")
def arrays_batch_mode_workers(path):
    return _loader(path, batch_mode=True, workers=2)


@worker("arrays_loader", "ours batch mode, 2 persistent workers",
        note="the same DataLoader made once with persistent_workers=True, iterated each pass (no fork and join "
             "a pass)")
def arrays_batch_mode_persistent(path):
    return _loader(path, batch_mode=True, workers=2, persistent=True)


@worker("arrays_loader", "ours per sample",
        note=f"TFRecordDataset(path, {_SPEC}) through DataLoader(batch_size={BATCH}, num_workers=0)")
def arrays_per_sample(path):
    return _loader(path, batch_mode=False, workers=0)


@worker("arrays_loader", "ours per sample, 2 workers", note="the same with num_workers=2 (forked each pass)")
def arrays_per_sample_workers(path):
    return _loader(path, batch_mode=False, workers=2)


@worker("arrays_loader", "tf.data batch+parse_example+decode_raw",
        note=f"TFRecordDataset.batch({BATCH}).map(parse_example + decode_raw + reshape)"
             ".as_numpy_iterator(); CRCs checked")
def arrays_tf(path):
    import tensorflow as tf

    desc = {"x": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, desc)
        return {"x": tf.reshape(tf.io.decode_raw(parsed["x"], tf.uint8), [-1, *SHAPE]), "label": parsed["label"]}

    def run():
        ds = tf.data.TFRecordDataset(path).batch(BATCH).map(parse)
        return _tally(ds.as_numpy_iterator())
    return run


target("arrays_loader", "ours batch mode >= 1.0x tf.data batch+parse_example+decode_raw", "ours batch mode",
       "tf.data batch+parse_example+decode_raw", at_least=1.0)
target("arrays_loader", "ours batch mode, 2 workers >= 0.9x ours batch mode", "ours batch mode, 2 workers",
       "ours batch mode", at_least=0.9)
