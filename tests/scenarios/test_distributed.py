"""A real two-process torch.distributed (gloo, CPU) run."""

import json
import subprocess
import sys
import textwrap

import pytest
from helpers import write_shards

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from tfrecord_torch import Int64, Sharding, TFRecordDataset

    rank, world, init, data, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    ds = TFRecordDataset(data, features={"id": Int64()}, shuffle=True, seed=3,
                         sharding=Sharding(even="pad"))
    assert (ds.rank, ds.world_size) == (rank, world), "rank detected from torch.distributed"
    ids = [int(i) for b in DataLoader(ds, batch_size=4, num_workers=2) for i in b["id"]]
    gathered = [None] * world
    dist.all_gather_object(gathered, ids)
    if rank == 0:
        json.dump({"per_rank": gathered, "len": len(ds)}, open(out, "w"))
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.slow  # two processes importing torch: about 10 s of CPU
def test_two_process_gloo_run(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_shards(data, [7, 0, 8])  # 15 records over 2 ranks: padded to 8 each
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    out = tmp_path / "out.json"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2", init, str(data), str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    result = json.loads(out.read_text())
    per_rank = result["per_rank"]
    assert [len(r) for r in per_rank] == [8, 8] and result["len"] == 8
    assert set(per_rank[0]) | set(per_rank[1]) == set(range(15))
    assert len(set(per_rank[0]) & set(per_rank[1])) <= 1  # one record repeats as padding


CONVERTED = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from tfrecord_torch import tfds_dataset

    rank, world, init, data, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    ds = tfds_dataset(data, "train", shuffle=True, seed=5)
    ids = [int(i) for b in DataLoader(ds, batch_size=4, num_workers=2) for i in b["label"]]
    gathered = [None] * world
    dist.all_gather_object(gathered, ids)
    if rank == 0:
        json.dump(gathered, open(out, "w"))
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.slow  # two ranks x two DataLoader workers, each importing torch
def test_two_ranks_read_a_converted_dataset_exactly_once(tmp_path):
    """What the README's "Scaling out" promises: a split written by write_dataset,
    read by 2 gloo ranks x 2 DataLoader workers, gives every record to exactly one."""
    import numpy as np

    from tfrecord_torch import Execution, ShardLayout, write_dataset

    samples = [(np.full((2, 2, 1), i, np.uint8), i) for i in range(22)]  # label = the sample's id
    write_dataset(samples, tmp_path / "data", name="ids", shards=ShardLayout(count=3),
                  execution=Execution(progress=False))
    script = tmp_path / "worker.py"
    script.write_text(CONVERTED)
    init, out = f"file://{tmp_path / 'rendezvous'}", tmp_path / "out.json"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2", init, str(tmp_path / "data"), str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    per_rank = json.loads(out.read_text())
    assert sorted(per_rank[0] + per_rank[1]) == list(range(22))  # each record once, no padding
    assert [len(r) for r in per_rank] == [11, 11]
