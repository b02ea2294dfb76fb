"""ShardTask (tfrecord_torch/write/task.py): built by keyword only."""

import pickle

import pytest

from tfrecord_torch.write.plan import plan_conversion
from tfrecord_torch.write.task import ShardTask


def test_shard_task_is_built_by_keyword_only(tmp_path):
    spec = plan_conversion(40, tmp_path, name="d", split="train", num_shards=4).shards[1]
    fields = dict(spec=spec, length=40, seed=0, shuffle=True, compression=None, options={"format": "png"},
                  fingerprint="f" * 64, files_digest=None, source=None)
    with pytest.raises(TypeError):
        ShardTask(*fields.values())  # ten values in a row are too easy to misplace
    task = ShardTask(**fields)
    assert (task.spec, task.shuffle, task.compression, task.attempt) == (spec, True, None, 0)
    assert pickle.loads(pickle.dumps(task)) == task
