"""The C heap of a DataLoader worker (data/workerheap.py): under glibc a
worker serves buffers under 32 MiB from its heap and keeps what it freed
there; the main process, and a process whose malloc the user tuned or whose
user turned this off, are left alone.

glibc's thresholds adapt as a process frees mapped buffers, and a forked
worker inherits them, so the workers are forked from a process of known
state: a subprocess that first sets glibc's starting thresholds itself."""

import ctypes
import json
import os
import platform
import subprocess
import sys
import types

import pytest
import torch

from tfrecord_torch.data import workerheap, workersetup

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

PROBE = 24 << 20  # above glibc's starting mmap threshold (128 KiB), under the tuned one
CASES = {
    "tuned": {},
    "off": {workersetup.ENV: "off"},
    "GLIBC_TUNABLES": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"},
    "MALLOC_": {"MALLOC_MMAP_THRESHOLD_": "131072"},
}


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc():
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = Mallinfo2
    libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return libc


def _heap_probe(batch):
    """In the worker, after the dataset gave its items: bytes mapped for a
    24 MiB buffer, and bytes of the heap given back once it was freed."""
    libc = _libc()
    before = libc.mallinfo2()
    buffer = libc.malloc(PROBE)
    during = libc.mallinfo2()
    libc.free(buffer)
    after = libc.mallinfo2()
    from tfrecord_torch.features import reused

    return {"mapped": during.hblkhd - before.hblkhd, "given back": during.arena - after.arena, "n": len(batch),
            "pools step aside": reused._MALLOC_KEEPS == os.getpid()}


def _probe_workers(folder: str) -> dict:
    """Run in a subprocess: glibc's starting thresholds set here, then each
    case's environment, and the probe in a forked worker of each dataset."""
    from torch.utils.data import DataLoader

    from tfrecord_torch import IndexedTFRecordDataset, RecordWriter, TFRecordDataset, make_example

    libc = _libc()
    assert libc.mallopt(-3, 128 << 10) and libc.mallopt(-1, 128 << 10)  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    path = os.path.join(folder, "a.tfrecord")
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"id": i}))
    out = {}
    for case, env in CASES.items():
        os.environ.update(env)
        for kind, ds in (("iterable", TFRecordDataset(path)), ("map-style", IndexedTFRecordDataset(path))):
            loader = DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context="fork",
                                collate_fn=_heap_probe)
            out[f"{case} {kind}"] = list(loader)
        for name in env:
            del os.environ[name]
    return out


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("heap"))
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    env.pop(workersetup.ENV, None)
    run = subprocess.run([sys.executable, __file__, folder], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
@pytest.mark.parametrize("kind", ["iterable", "map-style"])
def test_a_worker_serves_large_buffers_from_its_heap_and_keeps_them(probes, kind):
    got = probes[f"tuned {kind}"]
    assert [p["n"] for p in got] == [2, 2]
    assert all(p["mapped"] == 0 and p["given back"] == 0 for p in got), got
    assert all(p["pools step aside"] for p in got)  # features/reused.py: malloc keeps memory here itself


@pytest.mark.parametrize("case", ["off", "GLIBC_TUNABLES", "MALLOC_"])
@pytest.mark.parametrize("kind", ["iterable", "map-style"])
def test_a_worker_whose_malloc_the_user_tuned_or_turned_off_is_left_alone(probes, case, kind):
    got = probes[f"{case} {kind}"]
    assert [p["n"] for p in got] == [2, 2]
    assert all(p["mapped"] >= PROBE for p in got), got
    assert not any(p["pools step aside"] for p in got)


def test_the_main_process_and_one_that_only_looks_like_a_worker_are_left_alone(monkeypatch):
    monkeypatch.setattr(workerheap, "_tuned_in", -1)
    assert workerheap.tune_heap() is False
    monkeypatch.setattr(workerheap, "_tuned_in", -1)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=1))
    assert workerheap.tune_heap() is False


def test_a_worker_off_glibc_is_left_alone_without_reading_the_executable(monkeypatch, tmp_path):
    """Under musl, confstr has no CS_GNU_LIBC_VERSION (EINVAL); on macOS
    there is no such name. The worker is left alone and its first item
    still read, even when sys.executable cannot be opened (platform.libc_ver
    would open and scan it)."""
    def no_gnu_libc(name):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(workerheap, "_tuned_in", -1)
    monkeypatch.setattr(workerheap.multiprocessing, "parent_process", lambda: object())
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=1))
    monkeypatch.setattr(os, "confstr", no_gnu_libc)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "gone" / "python3"))
    assert workerheap.tune_heap() is False


@pytest.mark.parametrize("env, ours", [
    ({}, True),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, False),
    ({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}, True),
    ({"MALLOC_ARENA_MAX": "1"}, False),
    ({"MALLOC_ARENA_TEST": "2"}, False),
    ({"MALLOC_PERTURB_": "165"}, False),
    ({"GLIBC_TUNABLES": "glibc.malloc.perturb=165"}, False),
    ({"MALLOC_TRIM_THRESHOLD_": ""}, True),
])
def test_whose_malloc_it_is_to_tune(env, ours):
    assert workerheap._ours_to_set(env) is ours


STACKED = 40 << 20  # each item's tensor: a batch of two stacks 80 MiB


def _big_items(item):
    """Each item gets a 40 MiB tensor; the first item of the second batch
    also reports how much heap a worker kept when it freed 96 MiB of 12 MiB
    buffers (under the mmap threshold: from the heap)."""
    item["x"] = torch.zeros(STACKED // 4)
    if int(item["id"][0]) == 2:
        libc = _libc()
        before = libc.mallinfo2()
        buffers = [libc.malloc(12 << 20) for _ in range(8)]
        for b in buffers:
            libc.free(b)
        item["kept"] = torch.tensor(libc.mallinfo2().arena - before.arena)
    else:
        item["kept"] = torch.tensor(0)
    return item


def _probe_batches(folder: str) -> list[int]:
    """Run in a subprocess: a worker's heap after a batch of 80 MiB was stacked."""
    from torch.utils.data import DataLoader

    from tfrecord_torch import RecordWriter, TFRecordDataset, make_example

    libc = _libc()
    assert libc.mallopt(-3, 128 << 10) and libc.mallopt(-1, 128 << 10)
    path = os.path.join(folder, "b.tfrecord")
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"id": i}))
    loader = DataLoader(TFRecordDataset(path, transform=_big_items), batch_size=2, num_workers=1,
                        multiprocessing_context="fork")
    return [int(b["kept"].max()) for b in loader]


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_worker_keeps_the_heap_of_a_batch_of_samples_for_the_next(tmp_path):
    """The samples of a per-sample batch are freed together after the
    collate; glibc would give the part above the 64 MiB trim threshold
    back, and the next batch's decodes fault it in again."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    env.pop(workersetup.ENV, None)
    run = subprocess.run([sys.executable, __file__, "batches", str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    kept = json.loads(run.stdout.strip().splitlines()[-1])  # by the second batch's first item
    assert kept[1] >= 90 << 20, kept


def test_only_a_heap_tune_heap_set_is_kept_for_batches(monkeypatch):
    monkeypatch.setattr(workerheap, "_owned_in", -1)
    assert workerheap.keep_for_batches(1 << 30) is False


if __name__ == "__main__":
    if sys.argv[1] == "batches":
        print(json.dumps(_probe_batches(sys.argv[2])))
    else:
        print(json.dumps(_probe_workers(sys.argv[1])))


@pytest.mark.parametrize("value, on", [("", True), ("on", True), ("OFF", False), (" off ", False), ("0", False),
                                       ("false", False), ("no", False), ("none", False)])
def test_one_switch_turns_every_worker_step_off(value, on):
    assert workersetup.tuning_on({workersetup.ENV: value}) is on
    assert workersetup.tuning_on({}) is True
