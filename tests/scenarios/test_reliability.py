"""Crash safety, concurrent writers and long runs."""

import gc
import os
import random
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from helpers import ids_of, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import TFRecordDataset, read_records, tfds_dataset, write_order
from tfrecord_torch.cli import main as cli

CONVERT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import torch
    from tfrecord_torch import Execution, ShardLayout, write_dataset

    class Slowish(torch.utils.data.Dataset):
        def __len__(self):
            return 400
        def __getitem__(self, i):
            time.sleep(float(sys.argv[2]))
            return np.full((8, 8, 3), i % 251, np.uint8), i % 7

    print("start", flush=True)
    write_dataset(Slowish(), sys.argv[1], name="crash", shards=ShardLayout(size=25),
                  execution=Execution(num_workers=int(sys.argv[3]), progress=False))
    print("done", flush=True)
""")


def visible(folder):
    return sorted(f for f in os.listdir(folder) if not f.startswith("."))


def assert_visible_files_complete(folder):
    """Every shard a reader can see verifies, with its index, and matches the metadata."""
    shards = [f for f in visible(folder) if ".tfrecord-" in f and not f.endswith((".index", ".index.json"))]
    for name in shards:
        assert cli(["verify", str(folder / name)]) == 0
    if "dataset_info.json" in visible(folder):
        ds = tfds_dataset(folder, "train")
        assert len(ds) == 400


# A slow scenario (about 25 s of CPU without workers, more with them): the writing processes it
# kills are covered fast by tests/unit/write/test_convert.py (byte-identical for any process
# count, a kill then a rerun).
@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_sigkill_at_random_points_then_rerun(tmp_path, capsys, workers):
    script = tmp_path / "convert.py"
    script.write_text(CONVERT)
    out = tmp_path / "out"
    # Seeded random kill times over the whole conversion (about 1 s of writing
    # after "start"), its last shards, renames and metadata included.
    rng = random.Random(workers)
    delays = sorted(rng.uniform(0.02, 1.4) for _ in range(5))
    for delay in delays:
        proc = subprocess.Popen([sys.executable, str(script), str(out), "0.002", str(workers)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "start"
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:  # a reader watching the folder during the write
            if out.exists():
                assert_visible_files_complete(out)
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        if out.exists():
            assert_visible_files_complete(out)
    done = subprocess.run([sys.executable, str(script), str(out), "0", str(workers)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not [f for f in os.listdir(out) if f.endswith((".staged", ".partial"))]
    assert_visible_files_complete(out)
    labels = [int(d["label"]) for d in tfds_dataset(out, "train")]
    assert labels == [int(i) % 7 for i in write_order(400)]
    capsys.readouterr()


@pytest.mark.slow  # two converters in processes of their own: about 9 s of CPU
def test_second_converter_into_the_same_folder_fails_clearly(tmp_path):
    script = tmp_path / "convert.py"
    script.write_text(CONVERT)
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, str(script), str(out), "0.5", "0"], stdout=subprocess.PIPE,
                             text=True)  # 200 s of writing: killed below, long before
    try:
        assert first.stdout.readline().strip() == "start"
        deadline = time.monotonic() + 60
        while not (out / ".crash-train.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # it holds the lock from here on
        second = subprocess.run([sys.executable, str(script), str(out), "0", "0"], capture_output=True,
                                text=True)
        assert second.returncode != 0
        assert "another process is writing crash-train" in second.stderr
    finally:
        first.kill()
        first.wait()
        first.stdout.close()


def settled_fds(proc: psutil.Process, limit, wait: float = 5.0) -> int:
    """Open descriptors once the finished epoch's worker pipes are closed
    (DataLoader tears them down asynchronously): a leak never settles."""
    deadline = time.monotonic() + wait
    while True:
        gc.collect()
        n = proc.num_fds()
        if limit is None or n <= limit or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def tree_rss(proc: psutil.Process) -> int:
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


@pytest.mark.slow
def test_soak_twenty_epochs_flat_memory_and_descriptors(tmp_path):
    write_shards(tmp_path, [700, 800, 0, 1000, 500])
    ds = TFRecordDataset(tmp_path, shuffle=True, seed=11)
    loader = DataLoader(ds, batch_size=64, num_workers=2)
    me = psutil.Process()
    rss, fds, orders = [], [], []
    for epoch in range(20):
        ds.set_epoch(epoch)
        got, peak = [], 0
        for i, batch in enumerate(loader):
            got.extend(batch["id"].reshape(-1).tolist())
            if i % 10 == 0:
                peak = max(peak, tree_rss(me))
        assert sorted(got) == list(range(3000)), f"epoch {epoch}"
        orders.append(got)
        rss.append(peak)
        fds.append(settled_fds(me, fds[0] * 1.10 if fds else None))
    assert len({tuple(o) for o in orders}) == 20  # each epoch its own order
    assert max(rss[1:]) <= rss[0] * 1.10, rss
    assert max(fds[1:]) <= fds[0] * 1.10, fds
    assert ids_of(TFRecordDataset(tmp_path)) == list(range(3000))
    assert len(list(read_records(tmp_path / "shard-00000-of-00005.tfrecord"))) == 700
