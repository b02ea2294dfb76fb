"""Small records to batched tensors through a DataLoader."""

from __future__ import annotations

import os

from benchmarks.cases.small import (
    _TFRECORD_DESC,
    BATCH,
    _batch_tally,
    parse_tf_batched,
    parse_tfrecord_loader,
)
from benchmarks.harness.registry import CASES, case, target, worker

case("small_loader", dataset="examples_small", unit="records/s", repeats=3, quick_repeats=1,
     title=f"Small Examples (int64 label + 32 floats) to batches of {BATCH} tensors through a DataLoader",
     short=f"small_loader: small Examples to batches of {BATCH} tensors")

_SMALL_SPEC = 'features={"label": Int64(), "x": Float(shape=(32,))}'


def _small_loader_ours(path, workers: int, shuffle: bool = False):
    import torch.utils.data

    from tfrecord_torch import Float, Int64, TFRecordDataset

    ds = TFRecordDataset(path, features={"label": Int64(), "x": Float(shape=(32,))}, batch_size=BATCH,
                         shuffle=shuffle)
    epochs = iter(range(1 << 30))

    def run():
        ds.set_epoch(next(epochs))  # a new order each pass, as a training loop's epochs
        return _batch_tally(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))
    return run


@worker("small_loader", "ours",
        note=f"TFRecordDataset(path, {_SMALL_SPEC}, batch_size={BATCH}) through DataLoader(batch_size=None, "
             "num_workers=0): label [1024], x [1024, 32], decoded in the main process like tf.data's "
             "in-process batch; CRCs verified")
def small_loader_ours(path):
    return _small_loader_ours(path, 0)


@worker("small_loader", "ours num_workers=2",
        note="the same with num_workers=2: each worker decodes whole batches, which then cross to the "
             "main process through shared memory")
def small_loader_ours2(path):
    return _small_loader_ours(path, 2)


@worker("small_loader", "ours shuffled",
        note=f"TFRecordDataset(path, {_SMALL_SPEC}, batch_size={BATCH}, shuffle=True), set_epoch each pass, "
             "through DataLoader(batch_size=None, num_workers=0): every record once per pass in a global "
             "permutation (its records read where they lie in the file)")
def small_loader_ours_shuffled(path):
    return _small_loader_ours(path, 0, shuffle=True)


@worker("small_loader", "ours shuffled num_workers=2",
        note="the same with num_workers=2 (the permutation dealt over the workers, each record once)")
def small_loader_ours_shuffled2(path):
    return _small_loader_ours(path, 2, shuffle=True)


@worker("small_loader", "tf.data shuffle+batch+parse_example",
        note=f"TFRecordDataset.shuffle(10_000).batch({BATCH}).map(tf.io.parse_example).as_numpy_iterator(): "
             "tf.data's usual shuffle, a buffer of 10,000 records over the file read in order (not a "
             "permutation of the file); CRCs checked")
def small_shuffled_tf(path):
    import tensorflow as tf

    from benchmarks.cases.small import _tf_desc

    desc = _tf_desc(tf)

    def run():
        ds = tf.data.TFRecordDataset(path).shuffle(10_000).batch(BATCH).map(lambda b: tf.io.parse_example(b, desc))
        return _batch_tally(ds.as_numpy_iterator())
    return run


worker("small_loader", "tf.data batch+parse_example",
       note=CASES["parse_small"].impls["tf.data batch+parse_example"].note)(parse_tf_batched)
worker("small_loader", "tfrecord + DataLoader",
       note=CASES["parse_small"].impls["tfrecord + DataLoader"].note)(parse_tfrecord_loader)


@worker("small_loader", "tfrecord + DataLoader workers=2",
        note='tfrecord.torch.dataset.TFRecordDataset(path, index, {"label": "int", "x": "float"}) '
             f"through DataLoader(batch_size={BATCH}, num_workers=2); the index (ours, same format) "
             "splits the file between the workers; no CRC check")
def parse_tfrecord_loader2(path):
    import torch.utils.data
    from tfrecord.torch.dataset import TFRecordDataset

    from tfrecord_torch import build_index

    index = path + ".index"
    if not os.path.exists(index):
        build_index(path)

    def run():
        loader = torch.utils.data.DataLoader(TFRecordDataset(path, index, _TFRECORD_DESC),
                                             batch_size=BATCH, num_workers=2)
        return _batch_tally(loader)
    return run




target("small_loader", "ours >= 1.0x tf.data batch+parse_example", "ours",
       "tf.data batch+parse_example", at_least=1.0)
target("small_loader", "(for comparison) ours num_workers=2 >= 1.0x tf.data batch+parse_example",
       "ours num_workers=2", "tf.data batch+parse_example", at_least=1.0)
target("small_loader", "ours >= 10x tfrecord + DataLoader", "ours", "tfrecord + DataLoader", at_least=10)
target("small_loader", "ours >= 10x tfrecord + DataLoader workers=2", "ours",
       "tfrecord + DataLoader workers=2", at_least=10)
