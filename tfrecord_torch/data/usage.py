"""Messages for the datasets' common misuses: the calls of other libraries'
readers (the ``tfrecord`` package's positional arguments) and random access
on the streaming dataset."""

from __future__ import annotations

__all__ = ["check_positional", "no_random_access"]


def check_positional(name: str, args: tuple) -> None:
    """TypeError for more than one positional argument, with the keyword form.

    The ``tfrecord`` package's readers take ``(data_path, index_path,
    description)`` positionally; here the options are keyword-only.
    """
    if len(args) <= 1:
        return
    raise TypeError(
        f"{name}() takes one positional argument (the paths), got {len(args)}; the rest are "
        f"keywords. The tfrecord package's {name}(data_path, index_path, description) is "
        f"{name}(data_path, index=[index_path], features=description) here (index= is optional: "
        f"uncompressed shards are indexed, and the index cached, on first use)")


def no_random_access(name: str) -> TypeError:
    """The error for ``ds[i]`` on a streaming (iterable) dataset."""
    return TypeError(f"{name} is an IterableDataset: it has no ds[i]; iterate it (for item in ds, "
                     f"or a DataLoader), or read records by position with "
                     f"IndexedTFRecordDataset(paths, features=...) (uncompressed shards), whose ds[i] "
                     f"gives record i")
