"""Messages for the datasets' common misuses: the calls of other libraries'
readers (the ``tfrecord`` package's positional arguments), random access
on the streaming dataset, and the option each dataset takes in the other's
place (the map-style dataset's ``cache=``, the streaming one's ``source=``)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_positional", "no_flat_cache", "no_random_access"]


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


def no_flat_cache(name: str, cache: Any) -> TypeError:
    """The error for the map-style dataset's ``cache=`` given to the streaming
    dataset, which takes it in its :class:`~tfrecord_torch.data.options.Source`."""
    return TypeError(f"{name}() takes the shard cache in its source: {name}(paths, source=Source(cache={cache!r})) "
                     f"(cache= is IndexedTFRecordDataset's)")
