import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def _own_folder(var: str, prefix: str) -> None:
    """A folder of this test process's own in ``var``, never the user's
    ``~/.cache``, unless the user set ``var``. An xdist worker inherits the
    controller's environment: with one folder for all, a worker's copy of
    ``s3://bucket/key`` (same key and ETag on another worker's server) or its
    cached index could answer another worker's reads (a test was seen to
    find its indexes cached before it made them)."""
    import atexit
    import shutil
    import tempfile

    marker = f"_{var}_OF_TESTS"  # the pid of the test process that made the folder
    if var in os.environ and marker not in os.environ or os.environ.get(marker) == str(os.getpid()):
        return
    folder, owner = tempfile.mkdtemp(prefix=prefix), os.getpid()
    os.environ[var], os.environ[marker] = folder, str(owner)
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): two test processes per core. Much
    of the suite waits rather than computes -- on DataLoader workers starting
    and exiting, subprocesses (TensorFlow, spawn, the CLI), local S3 and HTTP
    servers -- so a second process per core fills that time; measured in
    tests/README.md."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 * cores


_own_folder("TFRECORD_TORCH_CACHE", "tfrecord-torch-test-cache-")  # index files
_own_folder("TFRECORD_TORCH_SHARD_CACHE", "tfrecord-torch-test-shards-")  # remote shards are copied by default
sys.path.insert(0, os.path.dirname(__file__))  # tests/helpers.py

# torchvision (and the triton it imports with CUDA builds of torch) must load
# before TensorFlow: loading triton after TensorFlow segfaults.
import torchvision  # noqa: E402,F401


def _stop_loader_workers_after_each_test():
    """Every DataLoader iterator a test made stops its workers when the test ends.

    torch stops an iterator's workers in its ``__del__``. When a test keeps the
    exception an iteration raised (``pytest.raises``), the iterator sits in a
    reference cycle, and the cyclic GC that frees it, at some later moment in
    some later test, first runs the finalizers of its index queues (their feeder
    threads stop), so the ``None`` that tells each worker to stop is never sent
    and torch waits 5 s per worker before it kills them (seen: 10-60 s stalls in
    unrelated tests). Stopping the workers here, while the queues still work,
    takes milliseconds; the test's own assertions have run."""
    import weakref

    import pytest
    from torch.utils.data import dataloader

    live = weakref.WeakSet()
    made = dataloader._MultiProcessingDataLoaderIter.__init__

    def __init__(self, *args, **kwargs):
        live.add(self)
        made(self, *args, **kwargs)

    dataloader._MultiProcessingDataLoaderIter.__init__ = __init__

    @pytest.fixture(autouse=True)
    def _loader_workers_stopped():
        yield
        for iterator in list(live):
            iterator._shutdown_workers()
        live.clear()

    return _loader_workers_stopped


_loader_workers_stopped = _stop_loader_workers_after_each_test()
