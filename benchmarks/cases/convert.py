"""Conversion to TFRecord shards: write_dataset against a TensorFlow writer loop and cp -r."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

from benchmarks.cases.synth import synth_image, synth_jpegs
from benchmarks.harness.registry import SPEC, case, dataset, target, time_ratio, worker
from benchmarks.harness.worker import cpu_total


@dataset("convert_src", folder=True,
         full={"records": 2000, "array_size": 64, "file_size": 256, "quality": 90, "classes": 10, "seed": 1},
         quick={"records": 100, "array_size": 64, "file_size": 256, "quality": 90, "classes": 10, "seed": 1},
         tiny={"records": 12, "array_size": 16, "file_size": 32, "quality": 90, "classes": 3, "seed": 1},
         describe=lambda p: (f"{p['records']:,} in-memory {p['array_size']}x{p['array_size']}x3 uint8 "
                             f"arrays (arrays.npy) and an ImageFolder of {p['records']:,} "
                             f"{p['file_size']}x{p['file_size']} JPEG files in {p['classes']} class folders "
                             "(folder/), both synthetic photo-like, label i % classes"),
         )
def build_convert(path: str, p: dict) -> dict:
    import numpy as np

    n, classes = p["records"], p["classes"]
    os.makedirs(path)
    arrays = np.stack([synth_image(p["seed"], i, p["array_size"]) for i in range(n)])
    np.save(os.path.join(path, "arrays.npy"), arrays)
    folder = os.path.join(path, "folder")
    for c in range(classes):
        os.makedirs(os.path.join(folder, f"class_{c:02d}"))
    for i, data in enumerate(synth_jpegs(p["seed"] + 1, n, p["file_size"], p["quality"])):
        with open(os.path.join(folder, f"class_{i % classes:02d}", f"{i:05d}.jpg"), "wb") as f:
            f.write(data)
    return {"records": n, "checksum": sum(i % classes for i in range(n))}


case("convert", dataset="convert_src", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     ref="ours png",
     title="Conversion to TFRecord shards (timed: the conversion or copy alone, output into a fresh "
           "folder on the same disk, sources in the page cache)",
     short="convert: images to TFRecord shards")


class ArrayImages:
    """A map-style dataset of (uint8 array [H, W, 3], label)."""

    def __init__(self, arrays, num_classes: int) -> None:
        self.arrays, self.num_classes = arrays, num_classes

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i: int):
        return self.arrays[i], i % self.num_classes


def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="convert-", dir=SPEC["scratch"])


def _shards_tally(paths) -> dict:
    """Records and label sum of written shards (checked after the timing)."""
    from tfrecord_torch import parse_example, read_records

    records = checksum = 0
    for path in paths:
        for payload in read_records(path):
            records += 1
            checksum += int(parse_example(payload)["label"][0])
    return {"records": records, "checksum": checksum}


def _timed_conversion(convert) -> Callable[[], dict]:
    """run(): convert(dst) -> shard paths, timed alone; then checked, then removed."""
    import shutil

    def run():
        dst = _scratch()
        try:
            t0, c0 = time.perf_counter(), cpu_total()
            paths = convert(dst)
            seconds, cpu = time.perf_counter() - t0, cpu_total() - c0
            return {**_shards_tally(paths), "seconds": seconds, "cpu_seconds": cpu}
        finally:
            shutil.rmtree(dst, ignore_errors=True)
    return run


def _convert_png(path, workers: int):
    import numpy as np

    from tfrecord_torch import Encoding, Execution, ShardLayout, write_dataset

    data = ArrayImages(np.load(os.path.join(path, "arrays.npy")), SPEC["params"]["classes"])
    # two shards: a shard is one task, so two processes need two
    return _timed_conversion(lambda dst: write_dataset(data, dst, name="bench",
                                                       encoding=Encoding(image_format="png"),
                                                       shards=ShardLayout(count=2),
                                                       execution=Execution(num_workers=workers, progress=False)))


@worker("convert", "ours png",
        note="write_dataset(arrays, image_format='png', num_shards=2, num_workers=2, progress=False): "
             "PNG-encode (Pillow, level 6), two shards + indexes + TFDS metadata")
def convert_ours_png(path):
    return _convert_png(path, 2)


@worker("convert", "ours png num_workers=0",
        note="the same encoding in one process (like the TensorFlow loop below)")
def convert_ours_png0(path):
    return _convert_png(path, 0)


@worker("convert", "tf writer png",
        note="plain loop: tf.io.encode_png(array) (zlib level 6, like ours) + tf.train.Example with "
             "the same features + tf.io.TFRecordWriter, one shard")
def convert_tf_png(path):
    import numpy as np
    import tensorflow as tf

    arrays = np.load(os.path.join(path, "arrays.npy"))
    classes = SPEC["params"]["classes"]
    feature = tf.train.Feature
    as_bytes = lambda v: feature(bytes_list=tf.train.BytesList(value=[v]))
    as_int = lambda v: feature(int64_list=tf.train.Int64List(value=[v]))

    def convert(dst):
        out = os.path.join(dst, "bench-train.tfrecord-00000-of-00001")
        with tf.io.TFRecordWriter(out) as writer:
            for i, array in enumerate(arrays):
                h, w, c = array.shape
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image": as_bytes(tf.io.encode_png(array).numpy()), "format": as_bytes(b"png"),
                    "height": as_int(h), "width": as_int(w), "channels": as_int(c),
                    "label": as_int(i % classes)}))
                writer.write(example.SerializeToString())
        return [out]
    return _timed_conversion(convert)


@worker("convert", "ours ImageFolder copy", ref="ours ImageFolder copy",
        note="write_dataset(torchvision.datasets.ImageFolder(folder), progress=False): the JPEG files' "
             "bytes copied into records, not decoded (ImageFolder's scan included in the time)")
def convert_ours_folder(path):
    from torchvision.datasets import ImageFolder

    from tfrecord_torch import Execution, write_dataset

    folder = os.path.join(path, "folder")
    return _timed_conversion(lambda dst: write_dataset(ImageFolder(folder), dst, name="bench",
                                                       execution=Execution(progress=False)))


@worker("convert", "cp -r", ref="ours ImageFolder copy", yardstick=True,
        note="subprocess cp -r of the same ImageFolder (the yardstick of the at-most-2x-its-time target)")
def convert_cp(path):
    import shutil

    folder = os.path.join(path, "folder")

    def run():
        dst = _scratch()
        try:
            t0, c0 = time.perf_counter(), cpu_total()
            subprocess.run(["cp", "-r", folder, os.path.join(dst, "folder")], check=True)
            seconds, cpu = time.perf_counter() - t0, cpu_total() - c0
            records = checksum = 0
            for cls in os.listdir(os.path.join(dst, "folder")):
                files = len(os.listdir(os.path.join(dst, "folder", cls)))
                records += files
                checksum += int(cls.split("_")[1]) * files
            return {"records": records, "checksum": checksum, "seconds": seconds, "cpu_seconds": cpu}
        finally:
            shutil.rmtree(dst, ignore_errors=True)
    return run




case("convert_scale", dataset="convert_src", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     ref="serial",
     title="Scaling conversion out: the same PNG conversion into 8 shards in this process, in 2 processes "
           "and on a 2-worker Dask cluster (ratios to the serial run; the output is byte-identical)",
     short="convert: serial / processes / Dask")


class NpyImages:
    """(uint8 array [H, W, 3], label) from an .npy file, memory-mapped: a dataset a
    DatasetSource rebuilds cheaply on each Dask worker (benchmarks.cases.convert.NpyImages)."""

    def __init__(self, path: str, num_classes: int) -> None:
        import numpy as np

        self.arrays, self.num_classes = np.load(path, mmap_mode="r"), num_classes

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i: int):
        import numpy as np

        return np.asarray(self.arrays[i]), i % self.num_classes


def _scaled(path: str, **where):
    from tfrecord_torch import DatasetSource, Execution, ShardLayout, write_dataset

    source = DatasetSource(NpyImages, os.path.join(path, "arrays.npy"), SPEC["params"]["classes"])
    shards = min(8, SPEC["params"]["records"])
    return _timed_conversion(lambda dst: write_dataset(source, dst, name="bench",
                                                       shards=ShardLayout(count=shards),
                                                       execution=Execution(**where, progress=False)))


@worker("convert_scale", "serial", note="write_dataset(DatasetSource(NpyImages, 'arrays.npy'), num_shards=8, "
                                        "num_workers=0): PNG-encode in this process")
def scale_serial(path):
    return _scaled(path, num_workers=0)


@worker("convert_scale", "2 processes", note="the same with num_workers=2: a ProcessPoolExecutor of 2 forked "
                                             "processes (started within the timing), one task per shard")
def scale_processes(path):
    return _scaled(path, num_workers=2)


@worker("convert_scale", "dask 2 workers",
        note="the same with executor=Client(LocalCluster(n_workers=2, threads_per_worker=1)).get_executor(): "
             "the cluster is started and its workers import torch before the timing, as a running cluster "
             "would have; each task rebuilds the source from its DatasetSource and writes one shard; point "
             "TFRECORD_BENCH_DASK=tcp://host:8786 at a real cluster (sharing the scratch folder) to time it")
def scale_dask(path):
    from distributed import Client, LocalCluster

    address = os.environ.get("TFRECORD_BENCH_DASK")
    if address:
        client = Client(address)
    else:
        cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0")  # any free port: two clusters at once (xdist) must not clash on 8787
        client = Client(cluster)
    client.run(lambda: __import__("tfrecord_torch.write.task") and __import__("torchvision"))  # warm workers
    return _scaled(path, executor=client.get_executor())


time_ratio("convert", "ours ImageFolder copy", "cp -r")
time_ratio("convert", "ours png", "tf writer png")
target("convert", "ImageFolder conversion takes at most 2x the time of cp -r "
                  "(throughput >= 0.5x cp's)", "ours ImageFolder copy", "cp -r", at_least=0.5)
