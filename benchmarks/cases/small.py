"""Small records: parse small tf.train.Examples (int64 label + 32 floats) to numpy."""

from __future__ import annotations

from benchmarks.harness.registry import case, dataset, target, worker


def _small_example(make_example, label: int, x) -> bytes:
    return make_example({"label": label, "x": x})


@dataset("examples_small", full={"records": 200_000, "floats": 32, "label_mod": 1000, "seed": 0},
         quick={"records": 20_000, "floats": 32, "label_mod": 1000, "seed": 0},
         tiny={"records": 2_000, "floats": 32, "label_mod": 1000, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: int64 'label' (i % {p['label_mod']}) "
                             f"+ {p['floats']}-float 'x'"))
def build_examples(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter, make_example

    rng = np.random.default_rng(p["seed"])
    n, mod = p["records"], p["label_mod"]
    xs = rng.standard_normal((n, p["floats"]), dtype=np.float32)
    with RecordWriter(path) as w:
        for i in range(n):
            w.write(_small_example(make_example, i % mod, xs[i]))
        payload = w.offset - 16 * n
    return {"records": n, "bytes": payload, "checksum": sum(i % mod for i in range(n))}



case("parse_small", dataset="examples_small", unit="records/s", repeats=3, quick_repeats=2,
     title="Parse small tf.train.Examples (int64 label + 32 floats) to numpy",
     short="parse_small: small Examples to numpy")

BATCH = 1024


def _record_tally(dicts) -> dict:
    """Per-record dicts: each value an array, label of shape [1]."""
    records = checksum = 0
    for d in dicts:
        records += 1
        checksum += int(d["label"][0])
    return {"records": records, "checksum": checksum}


def _batch_tally(batches) -> dict:
    """Batched dicts: label [B] (or [B, 1]), x [B, 32]."""
    records = checksum = 0
    for b in batches:
        records += len(b["x"])
        checksum += int(b["label"].sum())
    return {"records": records, "checksum": checksum}


@worker("parse_small", "ours", note="read_records + parse_example per record (CRCs verified)")
def parse_ours(path):
    from tfrecord_torch import parse_example, read_records

    return lambda: _record_tally(map(parse_example, read_records(path)))


@worker("parse_small", "ours_batched",
        note="iter_chunks(open_stream(path), verify=True) + parse_example_batch: one batch of "
             "numpy columns per 1 MiB read chunk")
def parse_ours_batched(path):
    from tfrecord_torch import parse_example_batch
    from tfrecord_torch.records.framing import iter_chunks
    from tfrecord_torch.records.streams import open_stream

    def batches():
        with open_stream(path) as stream:
            for chunk in iter_chunks(stream, verify=True):
                yield parse_example_batch(chunk)
    return lambda: _batch_tally(batches())


_TFRECORD_DESC = {"label": "int", "x": "float"}


@worker("parse_small", "tfrecord",
        note='tfrecord.torch.dataset.TFRecordDataset(path, None, {"label": "int", "x": "float"}) '
             "iterated; no CRC check")
def parse_tfrecord(path):
    from tfrecord.torch.dataset import TFRecordDataset

    return lambda: _record_tally(TFRecordDataset(path, None, _TFRECORD_DESC))


@worker("parse_small", "tfrecord + DataLoader",
        note=f"same through torch DataLoader(batch_size={BATCH}, num_workers=0): "
             "batches of torch tensors; no CRC check")
def parse_tfrecord_loader(path):
    import torch.utils.data
    from tfrecord.torch.dataset import TFRecordDataset

    def run():
        loader = torch.utils.data.DataLoader(TFRecordDataset(path, None, _TFRECORD_DESC),
                                             batch_size=BATCH, num_workers=0)
        return _batch_tally(loader)
    return run


def _tf_desc(tf):
    return {"label": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([32], tf.float32)}


@worker("parse_small", "tf.data batch+parse_example",
        note=f"TFRecordDataset.batch({BATCH}).map(tf.io.parse_example).as_numpy_iterator(); "
             "CRCs checked")
def parse_tf_batched(path):
    import tensorflow as tf

    desc = _tf_desc(tf)

    def run():
        ds = tf.data.TFRecordDataset(path).batch(BATCH).map(lambda b: tf.io.parse_example(b, desc))
        return _batch_tally(ds.as_numpy_iterator())
    return run


@worker("parse_small", "tf.data parse_single+batch",
        note=f"TFRecordDataset.map(parse_single_example, AUTOTUNE).batch({BATCH})"
             ".as_numpy_iterator(); CRCs checked")
def parse_tf_single(path):
    import tensorflow as tf

    desc = _tf_desc(tf)

    def run():
        ds = (tf.data.TFRecordDataset(path)
              .map(lambda r: tf.io.parse_single_example(r, desc), num_parallel_calls=tf.data.AUTOTUNE)
              .batch(BATCH))
        return _batch_tally(ds.as_numpy_iterator())
    return run



@worker("parse_small", "tfrecord-lite", python="tfrecord-lite",
        note="tfrecord_lite.tf_record_iterator(path) (nanopb, in C): dicts of numpy arrays; "
             "no CRC check (its docstring says so); own venv")
def parse_tfrecord_lite(path):
    import tfrecord_lite

    return lambda: _record_tally(tfrecord_lite.tf_record_iterator(path))


@worker("parse_small", "rustfrecord", python="rustfrecord",
        note='rustfrecord.Reader(path, compressed=False, features=["label", "x"]) (Rust): dicts of '
             "numpy arrays; no CRC check; own venv (it pins torch 2.2)")
def parse_rustfrecord(path):
    import rustfrecord

    return lambda: _record_tally(rustfrecord.Reader(path, compressed=False, features=["label", "x"]))


target("parse_small", "ours_batched >= 3x tfrecord", "ours_batched", "tfrecord", at_least=3.0)
target("parse_small", "(per-record API) ours >= 3x tfrecord", "ours", "tfrecord", at_least=3.0)
target("parse_small", "(per-record API) ours >= 1.0x tfrecord-lite", "ours", "tfrecord-lite", at_least=1.0)
target("parse_small", "(per-record API) ours >= 1.0x rustfrecord", "ours", "rustfrecord", at_least=1.0)
