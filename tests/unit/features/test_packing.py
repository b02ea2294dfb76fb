"""pack_collate against seqio's packing rule written with TensorFlow ops
(benchmarks/seqio_pack.py) on the same examples: the rows, segment ids and
positions, in edge cases too (an example longer than a row, empty lists,
keys of different lengths, groups ending in an empty row)."""

import numpy as np
import pytest
import tensorflow as tf
import torch

from benchmarks.seqio_pack import trim_and_pack
from tfrecord_torch import pack_collate


def seqio_rows(examples, lengths):
    """seqio's rows for ``examples`` (dicts of int lists), stacked per key."""
    keys = list(lengths)
    ds = tf.data.Dataset.from_generator(
        lambda: ({k: np.asarray(e[k], np.int64) for k in keys} for e in examples),
        output_signature={k: tf.TensorSpec([None], tf.int64) for k in keys})
    rows = list(trim_and_pack(ds, lengths).as_numpy_iterator())
    return {name: np.stack([r[name] for r in rows]) for name in rows[0]}


def ours(examples, lengths):
    group = max(lengths.values())  # seqio's group: a DataLoader batch of max(lengths) examples
    batches = [pack_collate([{k: torch.tensor(v, dtype=torch.int64) for k, v in e.items()}
                             for e in examples[a:a + group]], lengths=lengths)
               for a in range(0, len(examples), group)]
    return {name: torch.cat([b[name] for b in batches]).numpy() for name in batches[0]}


def check(examples, lengths):
    want, got = seqio_rows(examples, lengths), ours(examples, lengths)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert got[name].dtype == (np.int64 if name in lengths else np.int32), name
    return got


def random_examples(seed, n, most):
    rng = np.random.default_rng(seed)
    return [{k: rng.integers(1, 1000, int(rng.integers(0, m + 1))).tolist() for k, m in most.items()}
            for _ in range(n)]


def test_seqio_docstring_example():
    got = check([{"inputs": [8, 7, 1], "targets": [4, 1]}, {"inputs": [2, 3, 4, 1], "targets": [5, 6, 1]}],
                {"inputs": 10, "targets": 10})
    assert got["inputs_segment_ids"][0].tolist() == [1, 1, 1, 2, 2, 2, 2, 0, 0, 0]
    assert got["targets_positions"][0].tolist() == [0, 1, 0, 1, 2, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(3))
def test_random_token_lists_of_two_keys(seed):
    """T5's shape: long inputs, short targets, some past the row's length,
    several groups (the last one short)."""
    check(random_examples(seed, 53, {"inputs": 24, "targets": 7}), {"inputs": 16, "targets": 5})


def test_examples_longer_than_a_row_are_cut():
    got = check([{"x": list(range(1, 30))}, {"x": [5]}, {"x": list(range(1, 9))}], {"x": 8})
    assert got["x"][0].tolist() == list(range(1, 9)) and got["x"].shape == (3, 8)


def test_empty_lists():
    """An empty list adds no segment to its key (the other key's ids run
    ahead); a group of empty examples still writes one empty row."""
    check([{"a": [], "b": [1]}, {"a": [2, 3], "b": []}, {"a": [], "b": [4, 5]}, {"a": [6], "b": [7]}],
          {"a": 4, "b": 4})
    got = check([{"a": [], "b": []}] * 4, {"a": 2, "b": 3})  # groups of 3: two rows
    assert got["a"].shape == (2, 2) and not got["a"].any()


def test_one_key_overflowing_starts_a_row_for_all():
    got = check([{"a": [1], "b": [1, 2, 3]}, {"a": [2], "b": [4, 5]}, {"a": [3], "b": [6]}], {"a": 5, "b": 4})
    assert got["a"].tolist() == [[1, 0, 0, 0, 0], [2, 3, 0, 0, 0]]


def test_three_keys_and_a_batch_other_than_seqio_group():
    examples = random_examples(7, 20, {"a": 6, "b": 3, "c": 9})
    batch = pack_collate([{k: torch.tensor(v, dtype=torch.int64) for k, v in e.items()} | {"id": b"x"}
                          for e in examples],
                         lengths={"a": 8, "b": 4, "c": 9})
    assert set(batch) == {f"{k}{s}" for k in "abc" for s in ("", "_segment_ids", "_positions")}
    for k, size in (("a", 8), ("b", 4), ("c", 9)):  # every token once, in order
        assert batch[k].shape[1] == size
        assert batch[k][batch[k] != 0].tolist() == [t for e in examples for t in e[k][:size]]


def test_errors_name_the_example_and_key():
    with pytest.raises(ValueError, match=r"'targets' of example 1 holds token 0 at index 2"):
        pack_collate([{"targets": torch.tensor([1])}, {"targets": torch.tensor([3, 4, 0, 5])}],
                     lengths={"targets": 8})
    with pytest.raises(ValueError, match=r"example 0 of the batch has no 'inputs'"):
        pack_collate([{"targets": torch.tensor([1])}], lengths={"inputs": 4})
    with pytest.raises(ValueError, match=r"'x' of example 0 is a tensor torch.float32 \[2\]"):
        pack_collate([{"x": torch.ones(2)}], lengths={"x": 4})
    with pytest.raises(ValueError, match=r"lengths\['x'\] must be a positive int, got 0"):
        pack_collate([{"x": torch.ones(2, dtype=torch.int64)}], lengths={"x": 0})
    with pytest.raises(ValueError, match="lengths must be a non-empty mapping"):
        pack_collate([], lengths={})
