"""files.filesystem: one filesystem object per protocol and options in a process, also
when the options ask fsspec for a new object on every call (``skip_instance_cache``),
never the caller's own object, and never one a forked child inherited."""

import multiprocessing

import fsspec
import pytest

from tfrecord_torch.io import files

SKIP = {"skip_instance_cache": True}


def test_options_that_skip_fsspecs_instance_cache_build_one_object_per_process():
    first, path = files.filesystem("memory://a/b.tfrecord", SKIP)
    again, other = files.filesystem("memory://c.tfrecord", dict(SKIP))
    assert again is first and (path, other) == ("/a/b.tfrecord", "/c.tfrecord")
    assert fsspec.filesystem("memory", **SKIP) is not first  # the caller's objects stay the caller's
    assert files.filesystem("memory://a", {**SKIP, "extra": 1})[0] is not first  # other options, other object


def test_fsspecs_own_cache_is_left_to_it():
    assert files.filesystem("memory://a", None)[0] is fsspec.filesystem("memory")


def _same_in_child(parent, queue) -> None:
    queue.put(files.filesystem("memory://a", SKIP)[0] is parent)


@pytest.mark.parametrize("paths", [("memory://x.tfrecord", "/x.tfrecord"), ("s3://bucket/k/x.tfrecord", "bucket/k/x.tfrecord")])
def test_the_path_is_fsspecs_whether_the_object_is_new_or_kept(paths):
    pytest.importorskip("s3fs")
    url, path = paths
    options = {**SKIP, "anon": True} if url.startswith("s3://") else SKIP
    assert files.filesystem(url, options)[1] == path == files.filesystem(url, options)[1]


def test_a_forked_child_builds_its_own():
    parent = files.filesystem("memory://a", SKIP)[0]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_same_in_child, args=(parent, queue))
    child.start()
    same = queue.get(timeout=60)
    child.join(60)
    assert same is False and files.filesystem("memory://a", SKIP)[0] is parent
