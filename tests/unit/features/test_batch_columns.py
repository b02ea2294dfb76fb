"""Numeric features in batch mode: a fixed shape stacks into [B, *shape];
a shape with -1, ``shape=None`` or a default that is not a tensor of the
shape gives a list of B values -- never a torch error from the stack."""

from __future__ import annotations

import torch

from tfrecord_torch import Float, Int64, RecordWriter, TFRecordDataset, make_example


def _write(path, rows):
    with RecordWriter(path) as w:
        for row in rows:
            w.write(make_example(row))
    return str(path)


def test_a_shape_with_minus_one_gives_a_list_when_the_sizes_differ_and_when_they_do_not(tmp_path):
    """TFDS's Tensor(shape=(None, 3)) reads as Float(shape=(-1, 3)): the batch
    came stacked while its records happened to hold as many points, and
    raised torch's "stack expects each tensor to be equal size" otherwise."""
    path = _write(tmp_path / "p.tfrecord", [{"points": [float(i)] * (3 * (i % 3 + 1)), "label": i} for i in range(8)])
    spec = {"points": Float(shape=(-1, 3)), "label": Int64()}
    for size in (4, 1):
        batches = list(TFRecordDataset(path, features=spec, batch_size=size))
        for b in batches:
            assert isinstance(b["points"], list) and isinstance(b["label"], torch.Tensor)
            for label, points in zip(b["label"].tolist(), b["points"]):
                assert points.shape == (label % 3 + 1, 3) and bool((points == label).all())


def test_a_missing_value_with_a_default_of_none_keeps_the_column_a_list(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [{"x": [1.0, 2.0], "label": 0}, {"label": 1}])
    batch = next(iter(TFRecordDataset(path, features={"x": Float(shape=(2,), default=None), "label": Int64()},
                                      batch_size=2)))
    assert batch["x"][0].tolist() == [1.0, 2.0] and batch["x"][1] is None
    stacked = next(iter(TFRecordDataset(path, features={"x": Float(shape=(2,), default=torch.zeros(2)),
                                                        "label": Int64()}, batch_size=2)))
    assert stacked["x"].tolist() == [[1.0, 2.0], [0.0, 0.0]]
