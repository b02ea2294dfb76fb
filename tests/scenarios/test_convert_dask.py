"""Conversion on a local Dask cluster (2 worker processes), to a folder and to
S3 (moto): TFDS loads it, the files equal a serial run's byte for byte, and a
worker killed mid-shard leaves no partial shard behind."""

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torchvision
from helpers import assert_same_files, import_tfds
from helpers import listing as visible

from tfrecord_torch import DatasetSource, Execution, ShardLayout, tfds_dataset, write_dataset
from tfrecord_torch.cli import main

from .test_remote import s3  # noqa: F401  (the moto S3 fixture, shared)

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # a cluster of 2 processes importing torch: tens of seconds on 2 cores

FAKE = dict(size=24, image_size=(3, 8, 6), num_classes=5, random_offset=11)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0")  # any free port: two clusters at once (xdist) must not clash on 8787
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()




@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """Serial references: FakeData and an ImageFolder, 8 shards each."""
    root = tmp_path_factory.mktemp("serial")
    rng = np.random.default_rng(3)
    from PIL import Image

    for i in range(16):
        folder = root / "images" / f"class{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (5 + i % 4, 7, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    fake = torchvision.datasets.FakeData(**FAKE)
    write_dataset(fake, root / "fake", name="fake", shards=ShardLayout(count=8),
                  execution=Execution(num_workers=0, progress=False))
    folder = torchvision.datasets.ImageFolder(str(root / "images"))
    write_dataset(folder, root / "folder", name="folder", shards=ShardLayout(count=8),
                  execution=Execution(num_workers=0, progress=False))
    return root


def test_dask_conversion_equals_a_serial_one_and_tfds_loads_it(client, serial, tmp_path):
    tfds = import_tfds()

    executor = client.get_executor()
    fake = torchvision.datasets.FakeData(**FAKE)  # sent as FakeData(**its arguments)
    write_dataset(fake, tmp_path / "fake", name="fake", shards=ShardLayout(count=8),
                  execution=Execution(executor=executor, progress=False))
    folder = torchvision.datasets.ImageFolder(str(serial / "images"))
    write_dataset(folder, tmp_path / "folder", name="folder", shards=ShardLayout(count=8),
                  execution=Execution(executor=executor, progress=False))
    for name in ("fake", "folder"):
        assert len([f for f in visible(tmp_path / name) if f.endswith(".index")]) == 8
        assert_same_files(serial / name, tmp_path / name)
        builder = tfds.builder_from_directory(str(tmp_path / name))
        assert builder.info.splits["train"].num_examples == (24 if name == "fake" else 16)
        assert len(list(builder.as_dataset(split="train"))) == builder.info.splits["train"].num_examples


def test_dask_conversion_to_s3_equals_the_serial_files(client, serial, s3):  # noqa: F811 (a fixture)
    executor = client.get_executor()
    for name, source in (("fake", DatasetSource(torchvision.datasets.FakeData, **FAKE)),
                         ("folder", torchvision.datasets.ImageFolder(str(serial / "images")))):
        url = f"s3://bucket/dask/{name}"
        paths = write_dataset(source, url, name=name,
                              storage_options=s3.options, shards=ShardLayout(count=8),
                              execution=Execution(executor=executor, progress=False))
        assert len(paths) == 8
        fs = s3.fs()
        prefix = f"bucket/dask/{name}/"
        remote = {p[len(prefix):]: p for p in fs.find(prefix)}  # every object, hidden ones (markers) too
        assert sorted(remote) == visible(serial / name)  # the serial output: shards, index/, metadata
        for base, key in remote.items():
            assert fs.cat_file(key) == (serial / name / base).read_bytes(), base
        assert len(tfds_dataset(url, "train", storage_options=s3.options)) == (24 if name == "fake" else 16)


class KillOnce:
    """FakeData whose worker process is SIGKILLed at sample ``at`` the first time (a marker file)."""

    def __init__(self, marker, at):
        self.marker, self.at = str(marker), at
        self.data = torchvision.datasets.FakeData(**FAKE)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        if i == self.at and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)  # mid-shard: earlier samples are in its partial file
        return self.data[i]


def test_a_worker_killed_mid_shard_leaves_no_partial_shard(client, serial, tmp_path):
    from tfrecord_torch import write_order

    at = int(write_order(24)[13])  # the second record of shard 4 (3 records a shard)
    source = DatasetSource(KillOnce, tmp_path / "killed", at)
    write_dataset(source, tmp_path / "out", name="fake", shards=ShardLayout(count=8),
                  execution=Execution(executor=client.get_executor(), progress=False))
    assert (tmp_path / "killed").exists()  # a worker did die mid-task
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith(".partial")]
    assert_same_files(serial / "fake", tmp_path / "out")
    info = json.loads((tmp_path / "out" / "dataset_info.json").read_text())
    assert info["splits"][0]["shardLengths"] == ["3"] * 8


def test_cli_convert_on_a_dask_scheduler(client, serial, tmp_path, capsys):
    address = client.scheduler.address
    args = ["convert", "FakeData", "--size", "24", "--num-shards", "8", "-q", "--name", "fake"]
    assert main([*args, str(tmp_path / "dask"), "--dask-scheduler", address]) == 0
    assert main([*args, str(tmp_path / "serial"), "--workers", "0"]) == 0
    assert "24 records in 8 shards" in capsys.readouterr().out
    assert_same_files(tmp_path / "serial", tmp_path / "dask")
    with pytest.raises(SystemExit):
        main([*args, str(tmp_path / "x"), "--dask-scheduler", address, "--workers", "2"])
    assert "not allowed with argument" in capsys.readouterr().err
