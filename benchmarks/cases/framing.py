"""Framing throughput: iterate 1 MiB records from the page cache, CRCs verified where supported."""

from __future__ import annotations

from benchmarks.harness.registry import case, dataset, target, worker


@dataset("blobs_1mib", full={"records": 1000, "record_bytes": 1 << 20, "seed": 0},
         quick={"records": 64, "record_bytes": 1 << 20, "seed": 0},
         tiny={"records": 4, "record_bytes": 1 << 20, "seed": 0},
         describe=lambda p: (f"{p['records']} records x {p['record_bytes'] >> 20} MiB of random bytes "
                             f"({p['records'] * p['record_bytes'] / 1e9:.2f} GB of payload)"))
def build_blobs(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter

    rng = np.random.default_rng(p["seed"])
    n, size = p["records"], p["record_bytes"]
    with RecordWriter(path) as w:
        for i in range(n):
            # The record number in the first 8 bytes: the checksum workers compute.
            w.write(i.to_bytes(8, "little") + rng.bytes(size - 8))
    return {"records": n, "bytes": n * size, "checksum": n * (n - 1) // 2}



case("framing_1mib", dataset="blobs_1mib", unit="GB/s", repeats=5, quick_repeats=2,
     title="Framing: iterate 1 MiB records from the page cache, CRCs verified where supported",
     short="framing_1mib: 1 MiB records from the page cache")


def _blob_tally(payloads) -> dict:
    records = nbytes = checksum = 0
    for p in payloads:
        records += 1
        nbytes += len(p)
        checksum += int.from_bytes(p[:8], "little")
    return {"records": records, "bytes": nbytes, "checksum": checksum}


@worker("framing_1mib", "ours", note="read_records(path, verify=True); yields bytes")
def framing_ours(path):
    from tfrecord_torch import read_records

    return lambda: _blob_tally(read_records(path, verify=True))


@worker("framing_1mib", "ours verify=False",
        note="read_records(path, verify=False): same reader, CRC checks off (like tfrecord)")
def framing_ours_noverify(path):
    from tfrecord_torch import read_records

    return lambda: _blob_tally(read_records(path, verify=False))


@worker("framing_1mib", "tfrecord",
        note="tfrecord.reader.tfrecord_iterator; reads both CRC fields and never checks them; "
             "yields a memoryview into one reused buffer")
def framing_tfrecord(path):
    from tfrecord.reader import tfrecord_iterator

    return lambda: _blob_tally(tfrecord_iterator(path))


@worker("framing_1mib", "tf.data",
        note="tf.data.TFRecordDataset(path).as_numpy_iterator() (default buffer); "
             "TF checks both CRCs; yields bytes")
def framing_tf(path):
    import tensorflow as tf

    def run():
        return _blob_tally(tf.data.TFRecordDataset(path).as_numpy_iterator())
    return run


@worker("framing_1mib", "tf.data in-graph",
        note="the same reader with no per-record Python: Dataset.reduce summing records, "
             "lengths and the record numbers in TF ops (TF's best case; bytes never reach Python)")
def framing_tf_graph(path):
    import tensorflow as tf

    def step(acc, x):
        number = tf.io.decode_raw(tf.strings.substr(x, 0, 8), tf.int64)[0]
        return (acc[0] + 1, acc[1] + tf.cast(tf.strings.length(x), tf.int64), acc[2] + number)

    zero = tf.constant(0, tf.int64)

    @tf.function
    def total():
        return tf.data.TFRecordDataset(path).reduce((zero, zero, zero), step)

    def run():
        records, nbytes, checksum = (int(v) for v in total())
        return {"records": records, "bytes": nbytes, "checksum": checksum}
    return run


@worker("framing_1mib", "baseline: readinto", yardstick=True,
        note="ceiling, not a peer: file.readinto one reused 1 MiB buffer, no framing, no CRC")
def framing_baseline(path):
    def run():
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        nbytes = 0
        with open(path, "rb", buffering=0) as f:
            while True:
                got = f.readinto(view)
                if not got:
                    break
                nbytes += got
        return {"file_bytes": nbytes}
    return run




target("framing_1mib", "ours >= 2 GB/s with CRCs verified", "ours", at_least=2.0)
