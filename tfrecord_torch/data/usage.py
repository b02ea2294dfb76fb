"""Messages for the datasets' common misuses: the calls of other libraries'
readers (the ``tfrecord`` package's positional arguments), random access
on the streaming dataset, and the option each dataset takes in the other's
place (the map-style dataset's ``cache=``, the streaming one's ``source=``),
and ``len()`` of a dataset that streams shards."""

from __future__ import annotations

from typing import Any

from tfrecord_torch.data.options import MOVED, refuse_moved_keywords

__all__ = ["check_call", "check_positional", "no_flat_cache", "no_random_access", "unknown_length"]


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


def check_call(name: str, args: tuple, kwargs: dict) -> None:
    """The streaming dataset's call checked before Python's own errors (its
    "takes 2 positional arguments", "unexpected keyword argument"): one
    positional argument, no map-style ``cache=``, no keyword that moved into
    an option object."""
    check_positional(name, args)
    if "cache" in kwargs:
        raise no_flat_cache(name, kwargs["cache"])
    refuse_moved_keywords(name, {k: v for k, v in kwargs.items() if k in MOVED})


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


def unknown_length(paths: list[str], indexes: list, indexed_off: bool) -> str:
    """The error for ``len()`` of a dataset that streams some shards (their
    records are not counted before they are read)."""
    if indexed_off:
        return ("len() is unknown: Source(index=False) streams every shard, so no record is counted "
                "before it is read; leave index= out to index (and count) the uncompressed shards")
    streamed = [p for p, i in zip(paths, indexes) if i is None]
    shown = streamed if len(streamed) <= 3 else [*streamed[:2], "..."]
    files = " ".join(streamed) if len(streamed) <= 3 else "FILES"
    return (f"len() is unknown: {len(streamed)} of {len(paths)} shards "
            f"{'is' if len(streamed) == 1 else 'are'} compressed ({', '.join(shown)}), and a compressed "
            "shard is streamed, not indexed, so its records are not counted before they are read. Count "
            f"them with `tfrecord-torch verify {files}` (it reads each file once and prints its record "
            "count); or decompress the shards once (`tfrecord-torch decompress IN OUT`) and read the "
            "uncompressed copies, which are indexed and counted")
