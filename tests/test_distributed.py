"""A real two-process torch.distributed (gloo, CPU) run."""

import json
import subprocess
import sys
import textwrap

from helpers import write_shards

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    from tfrecord_torch import TFRecordDataset, Int64

    rank, world, init, data, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    ds = TFRecordDataset(data, features={"id": Int64()}, shuffle=True, seed=3, even="pad")
    assert (ds.rank, ds.world_size) == (rank, world), "rank detected from torch.distributed"
    ids = [int(i) for b in DataLoader(ds, batch_size=4, num_workers=2) for i in b["id"]]
    gathered = [None] * world
    dist.all_gather_object(gathered, ids)
    if rank == 0:
        json.dump({"per_rank": gathered, "len": len(ds)}, open(out, "w"))
    dist.barrier()
    dist.destroy_process_group()
""")


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
