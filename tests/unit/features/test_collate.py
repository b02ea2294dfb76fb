"""pad_collate: images of different sizes padded into one batch, with their sizes and masks."""

import math

import pytest
import torch
from helpers import image_shards
from torch.utils.data import DataLoader

from tfrecord_torch import TFRecordDataset, pad_collate, presets


def test_pad_collate(tmp_path):
    image_shards(tmp_path, sizes=[(4, 6), (7, 3), (5, 5)])
    loader = DataLoader(TFRecordDataset(tmp_path, features=presets.tfds()), batch_size=3,
                        collate_fn=pad_collate)
    batch = next(iter(loader))
    assert batch["image"].shape == (3, 3, 7, 6)
    assert batch["image_size"].tolist() == [[4, 6], [7, 3], [5, 5]]
    assert batch["image_mask"][1].sum() == 21 and not batch["image_mask"][1, 0, 3]
    assert batch["label"].tolist() == [0, 1, 2]
    assert (batch["image"][1, :, :, 3:] == 0).all()


def _sequences(dtype, shapes, value=0):
    """Records of one sequence key, each step numbered, and the padded batch they make."""
    values = [(torch.arange(math.prod(s)).reshape(s) + 1).to(dtype) for s in shapes]
    longest = max(s[0] for s in shapes)
    want = torch.full((len(shapes), longest, *shapes[0][1:]), value, dtype=dtype)
    for i, v in enumerate(values):
        want[i, :len(v)] = v
    return values, want


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float32, torch.bfloat16, torch.bool])
@pytest.mark.parametrize("threads", [1, 2])
def test_pad_collate_sequences(dtype, threads):
    """Sequences of every dtype (NumPy's and those it lacks) pad at the end
    to the longest, the same under any torch thread setting, which pad_collate
    leaves as it was."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        values, want = _sequences(dtype, [(3, 4), (0, 4), (70000, 4), (1, 4)], value=1)
        batch = pad_collate([{"x": v} for v in values], value=1)
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    assert batch["x"].dtype == dtype and torch.equal(batch["x"], want)
    assert batch["x_length"].tolist() == [3, 0, 70000, 1]


def test_pad_collate_sequences_that_need_grad_or_are_views():
    """Tensors NumPy cannot view (needing grad) and non-contiguous views pad alike."""
    values, want = _sequences(torch.float32, [(2, 3), (5, 3)])
    grads = [v.clone().requires_grad_() for v in values]
    assert torch.equal(pad_collate([{"x": v} for v in grads], sequences=["x"])["x"].detach(), want)
    views = [v.t().contiguous().t() for v in values]
    assert torch.equal(pad_collate([{"x": v} for v in views])["x"], want)


def test_pad_collate_copies_sequences_on_the_calling_thread():
    """Padding sequences runs no torch kernel that torch would spread over its
    OpenMP team (indexed scatters, large copies and fills): with other
    processes busy on the cores, each such fork and join made a batch of 32
    token lists take 20 times as long as with one thread."""
    values, _ = _sequences(torch.int64, [(500,), (40,), (300,)] * 11)
    batch = [{"inputs": v, "frames": v.to(torch.uint8).repeat(1, 1024).reshape(len(v), -1)} for v in values]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        pad_collate(batch)
    spread = [(e.name, e.input_shapes) for e in prof.events()
              if e.name in {"aten::index_put_", "aten::copy_", "aten::fill_", "aten::cat"}
              and e.input_shapes and math.prod(e.input_shapes[0]) > 1]  # a scalar's item() is no copy
    assert not spread
