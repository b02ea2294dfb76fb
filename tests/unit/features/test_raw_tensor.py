"""RawTensor (array bytes, TFDS's Tensor feature with encoding="bytes") in
batch mode: a fixed shape comes as one tensor [B, *shape], equal to what the
per-sample path's default_collate stacks; a shape with -1 as a list."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_torch import FeatureError, Int64, RawTensor, RecordWriter, TFRecordDataset, make_example

N = 10


def _write(path, arrays, *, compress=False):
    import zlib

    with RecordWriter(path) as w:
        for i, array in enumerate(arrays):
            data = array.tobytes()
            w.write(make_example({"x": zlib.compress(data) if compress else data, "label": i}))
    return str(path)


def _both(path, feature, batch=4):
    """(per-sample batches through default_collate, batch mode's batches)."""
    spec = {"x": feature, "label": Int64()}
    per_sample = list(DataLoader(TFRecordDataset(path, features=spec), batch_size=batch))
    batched = list(TFRecordDataset(path, features=spec, batch_size=batch))
    return per_sample, batched


@pytest.mark.parametrize("dtype", ["uint8", "<f4", ">f4", ">i2", "<i8", "float16", "bool"])
@pytest.mark.parametrize("shape", [(5,), (2, 3), ()])
def test_a_fixed_shape_comes_stacked_as_the_per_sample_collate_stacks_it(tmp_path, dtype, shape):
    rng = np.random.default_rng(0)
    arrays = [np.asarray(rng.standard_normal(shape) * 100).astype(dtype) for _ in range(N)]  # 0-d: its order kept
    per_sample, batched = _both(_write(tmp_path / "a.tfrecord", arrays), RawTensor(dtype=dtype, shape=shape))
    assert len(batched) == len(per_sample) == 3
    for want, got in zip(per_sample, batched):
        assert isinstance(got["x"], torch.Tensor) and got["x"].dtype == want["x"].dtype
        assert got["x"].shape == (len(want["label"]), *shape)
        assert torch.equal(got["x"], want["x"])
    labels = torch.cat([b["label"] for b in batched]).tolist()
    assert torch.equal(torch.cat([b["x"] for b in batched]),
                       torch.from_numpy(np.stack([arrays[i].astype(np.dtype(dtype).newbyteorder("=")) for i in labels])))


def test_compressed_values_of_a_fixed_shape_come_stacked(tmp_path):
    arrays = [np.arange(12, dtype=np.int32).reshape(3, 4) * i for i in range(N)]
    path = _write(tmp_path / "z.tfrecord", arrays, compress=True)
    per_sample, batched = _both(path, RawTensor(dtype="int32", shape=(3, 4), zlib=True))
    for want, got in zip(per_sample, batched):
        assert torch.equal(got["x"], want["x"])


def test_a_shape_with_minus_one_comes_as_a_list(tmp_path):
    arrays = [np.arange(i + 1, dtype=np.uint8) for i in range(N)]
    path = _write(tmp_path / "v.tfrecord", arrays)
    batched = list(TFRecordDataset(path, features={"x": RawTensor(shape=(-1,))}, batch_size=4))
    assert isinstance(batched[0]["x"], list)
    assert [t.tolist() for t in batched[0]["x"]] == [a.tolist() for a in arrays[:4]]


def test_defaults_stack_when_they_are_tensors_of_the_shape_and_else_keep_a_list(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"x": bytes([i, i]), "label": i} if i % 2 else {"label": i}))
    spec = {"label": Int64()}
    stacked = next(iter(TFRecordDataset(path, features={**spec, "x": RawTensor(shape=(2,),
                                                                              default=torch.zeros(2, dtype=torch.uint8))},
                                        batch_size=4)))
    assert stacked["x"].tolist() == [[0, 0], [1, 1], [0, 0], [3, 3]]
    listed = next(iter(TFRecordDataset(path, features={**spec, "x": RawTensor(shape=(2,), default=None)},
                                       batch_size=4)))
    assert listed["x"][0] is None and listed["x"][1].tolist() == [1, 1]


def test_a_value_of_the_wrong_length_is_named_as_per_sample(tmp_path):
    arrays = [np.zeros(6, np.uint8)] * 3 + [np.zeros(5, np.uint8)]
    path = _write(tmp_path / "bad.tfrecord", arrays)
    spec = {"x": RawTensor(shape=(2, 3)), "label": Int64()}
    with pytest.raises(FeatureError) as per_sample:
        list(TFRecordDataset(path, features=spec))
    with pytest.raises(FeatureError) as batched:
        list(TFRecordDataset(path, features=spec, batch_size=4))
    assert "5 values do not fit shape (2, 3)" in str(batched.value)
    assert str(batched.value) == str(per_sample.value)


def test_batches_made_from_eight_threads_at_once_hold_their_own_values(tmp_path):
    """Each thread's batch-mode iteration makes its RawTensor batches in the
    process's reused batch memory: none is handed the memory of a batch
    another thread still holds."""
    import itertools

    from helpers import in_threads

    path = _write(tmp_path / "t.tfrecord", [np.full((50, 40), i, np.uint8) for i in range(64)])
    spec = {"x": RawTensor(shape=(50, 40)), "label": Int64()}
    seeds = itertools.count()
    kept: list = []

    def read():
        ds = TFRecordDataset(path, features=spec, batch_size=8, shuffle=True, seed=next(seeds))
        kept.append([b for _ in range(3) for b in ds])

    assert in_threads(read) == [] and len(kept) == 8
    for batches in kept:  # every batch held until all threads ended
        assert len(batches) == 24
        for b in batches:
            assert torch.equal(b["x"], b["label"].to(torch.uint8).view(-1, 1, 1).expand(-1, 50, 40))
