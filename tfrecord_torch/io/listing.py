"""Listing shards: paths, globs and folders, local or remote, expanded to files in one
pass that keeps what the listing saw of each remote object (size, version), so opening the
shards need not ask again."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import NamedTuple

from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import files
from tfrecord_torch.io.files import (
    _os_error,
    changed_object,
    filesystem,
    fresh_size_and_version,
    is_url,
    local,
    unstrip,
    version_of,
)
from tfrecord_torch.io.retry import retrying, status_of
from tfrecord_torch.io.splits import check_one_split

__all__ = ["Listing", "ListingCheck", "changed_since_listed", "expand", "forget_listings", "list_files"]

log = logging.getLogger(__name__)

INDEX_FOLDER = "index"  # where this library's writers keep indexes (records.index.writer_index_path)
SIBLING_FOLDERS = 4  # folders of a glob's matches listed whole to see their index files
_seen: dict[str, tuple[int, str]] = {}  # URL -> (size, version) as this process's latest listing saw it
_unchanged: set[tuple[str, tuple[int, str]]] = set()  # (URL, as listed) found unchanged after a bad record
_seen_lock = threading.Lock()
# Stores whose folder listings are real listings (one request per 1,000 objects on S3/GCS).
_LISTABLE = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "memory")


class Listing(NamedTuple):
    """What one pass of listing found: the matched ``files`` in order, and the size and
    version of every remote object it saw (index files included), so that opening the
    shards need not ask again."""

    files: list[str]
    stats: dict[str, tuple[int, str]]  # URL -> (size, version)
    folders: frozenset[str]  # remote folders listed whole ("s3://bucket/dir")
    globs: tuple[str, ...] = ()  # remote glob patterns listed (URLs)

    def check(self, storage_options: dict | None = None) -> ListingCheck | None:
        """A :class:`ListingCheck` of the remote ``files`` this listing saw
        (None: there are none)."""
        remote = {f: self.stats[f] for f in self.files if is_url(f) and f in self.stats}
        return ListingCheck(remote, storage_options) if remote else None

    def knows(self, url: str) -> bool | None:
        """True if ``url`` was listed, False if a folder listed whole or a glob that would
        match it lacks it, None if unknown."""
        import fnmatch

        if url in self.stats:
            return True
        if url.rsplit("/", 1)[0] in self.folders or any(fnmatch.fnmatchcase(url, g) for g in self.globs):
            return False
        return None


def _is_file(info: dict) -> bool:
    return info.get("type", "file") == "file"


def forget_listings(fs, path: str, *, parent: bool = True) -> None:
    """Drop what ``fs`` remembers of the listings of ``path``, of the folders below it
    and (``parent``) of its folder, so the next listing or ``info`` of them asks the
    store. fsspec keeps one filesystem object per set of options for the life of the
    process, and s3fs or gcsfs answer a glob, an ``ls`` or an ``info`` from that
    object's listing cache: an object another writer has rewritten since would be
    listed with its former size and version, and the shards' copies, cached indexes
    and record counts keyed on those. (``fs.invalidate_cache`` of s3fs drops every
    folder above too: the shards' folder, just listed, when its index folder is.)"""
    listings = getattr(fs, "dircache", None)
    if not listings:
        return
    root = path.rstrip("/")
    above = root.rsplit("/", 1)[0] if parent and "/" in root else None
    for key in [k for k in list(listings) if k == root or k == above or k.startswith(root + "/")]:
        listings.pop(key, None)


def _glob_root(path: str) -> str:
    """The folder a glob's matches lie under: its path up to the folder of the first magic character."""
    import re

    magic = re.search(r"[*?[]", path)
    return path if magic is None else path[: magic.start()].rsplit("/", 1)[0]


def expand(patterns, storage_options: dict | None, skip: tuple) -> list[str]:
    """Files matching paths, globs and folders, local or remote (see shards.expand_paths)."""
    return list_files(patterns, storage_options, skip).files


def _path_items(patterns) -> list[str]:
    """``patterns`` as a list of str, or a TypeError naming ``paths``."""
    if isinstance(patterns, (str, bytes, os.PathLike)):
        patterns = [patterns]
    try:
        items = list(patterns)
    except TypeError:
        raise TypeError(f"paths must be a file path, glob pattern or folder (str or os.PathLike), or a list "
                        f"of them; got {type(patterns).__name__} {patterns!r:.80}") from None
    for item in items:
        if not isinstance(item, (str, bytes, os.PathLike)):
            raise TypeError(f"paths must hold file paths, glob patterns or folders (str or os.PathLike); got "
                            f"{type(item).__name__} {item!r:.80}")
    return [os.fsdecode(item) for item in items]


def list_files(patterns, storage_options: dict | None, skip: tuple) -> Listing:
    """Files matching paths, globs and folders, local or remote, with what the listing
    learned about each remote object. A glob or a folder is one listing; explicit remote
    files in one folder are checked by one listing of that folder, not one request each."""
    items = _path_items(patterns)
    parents = _likely_parents(items)
    if not parents:
        return _list_files(items, storage_options, skip, {})
    # the index folders beside the shards are listed while the shards are (one round trip, not two)
    with OwnedPool(len(parents), "tfrecord_torch-list") as pool:
        early = {parent: pool.submit(_index_entries, parent, storage_options) for parent in parents}
        return _list_files(items, storage_options, skip, early)


def _list_files(items: list[str], storage_options: dict | None, skip: tuple, early: dict[str, Future]) -> Listing:
    """:func:`list_files` of ``items``, given the listings of index folders
    begun beside them (``early``: the shards' likely folder -> its index
    folder's entries)."""
    import glob as globlib

    stats: dict[str, tuple[int, str]] = {}
    folders: set[str] = set()
    globs = tuple(item for item in items if is_url(item) and globlib.has_magic(item))
    explicit = _list_explicit(items, storage_options, stats, folders)
    out: dict[str, str] = {}  # each file, in order, -> the item that named it
    for item in items:
        if item in explicit:
            found = [item]
        elif is_url(item):
            found = _list_remote(item, storage_options, skip, stats, folders)
        else:
            item = local(item)
            if os.path.isdir(item):
                found = sorted(os.path.join(item, f) for f in os.listdir(item)
                               if not f.startswith(".") and not f.endswith(skip)
                               and os.path.isfile(os.path.join(item, f)))
                if not found:
                    raise FileNotFoundError(_empty_folder(item, skip))
                check_one_split(item, found, os.path.join)
            elif os.path.exists(item):  # a real file, even one whose name has glob characters
                found = [item]
            elif globlib.has_magic(item):
                matches = globlib.glob(item, recursive=True)  # "**" spans folders, as users expect
                found = sorted(f for f in matches if not f.endswith(skip) and os.path.isfile(f)
                               and not os.path.basename(f).startswith("."))
                if not found:
                    raise FileNotFoundError(_no_match(item, matches, skip))
            elif os.path.lexists(item):  # a dangling link or a loop
                try:
                    os.stat(item)
                except OSError as e:
                    raise _os_error(item, e) from e
                found = [item]
            else:
                raise FileNotFoundError(f"no such file or directory: {item!r}")
        for file in found:
            if file in out:
                raise ValueError(_named_twice(file, out[file], item))
            out[file] = item
    _list_index_folders(list(out), storage_options, stats, folders, early)
    with _seen_lock:
        _seen.update(stats)
    return Listing(list(out), stats, frozenset(folders), globs)


def changed_since_listed(url: str, storage_options: dict | None) -> str | None:
    """How the remote object ``url`` differs from what this process's latest
    listing of it saw (asked afresh: one stat), for an error met reading it by
    an index made from that listing; None if it is the same, was never listed
    here, or cannot be asked. An object found unchanged is not asked again."""
    with _seen_lock:
        listed = _seen.get(url)
        if listed is None or (url, listed) in _unchanged:
            return None
    try:
        now = fresh_size_and_version(url, storage_options)
    except FileNotFoundError:
        return "the object is gone since it was listed: make the dataset again"
    except Exception:  # the question failed: the error met stands as it is
        return None
    if now != listed:
        return changed_object(listed, now, "since it was listed")
    with _seen_lock:
        _unchanged.add((url, listed))
    return None


class ListingCheck:
    """Whether a dataset's remote objects are still the ones its listing saw,
    asked once per object and iteration (:meth:`fresh` gives the next
    iteration's): an object rewritten since would be read through indexes
    and counts made of its former self, or, with records of the same
    lengths, as its new records in their place, with no error.

    The first object of a folder checked lists that folder once, afresh, for
    all of the dataset's objects in it (a request per 1,000 names on S3);
    one the listing leaves out or gives otherwise, or any object of a folder
    that cannot be listed (or of a store whose folders are not listings,
    HTTP), is asked on its own (a HEAD request).

    Args:
        stats: each remote object's (size, version) as listed; objects not
            in it are not checked.
        storage_options: fsspec options for the URLs.

    Thread-safe. A forked child (a DataLoader worker) starts with nothing
    checked, as does a copy unpickled in a spawned one.
    """

    def __init__(self, stats: Mapping[str, tuple[int, str]], storage_options: dict | None = None) -> None:
        self.stats, self.storage_options = dict(stats), storage_options
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._checked: set[str] = set()  # objects found unchanged since listed
        self._listed: set[str] = set()  # folders listed to check their objects at once
        self._asking: dict[str, threading.Lock] = {}  # held while a folder is listed, or an object asked

    def _state(self) -> None:
        if self._pid != os.getpid():  # forked: this process asks for itself
            self._reset()

    def fresh(self) -> ListingCheck:
        """The same objects, none checked yet (the next iteration's)."""
        return ListingCheck(self.stats, self.storage_options)

    def checked(self, url: str) -> bool:
        """Whether ``url`` was found unchanged (or is not checked at all)."""
        self._state()
        with self._lock:
            return url in self._checked or url not in self.stats

    def confirm(self, url: str) -> None:
        """``url`` was found unchanged by other means (a copy's download)."""
        self._state()
        with self._lock:
            self._checked.add(url)

    def by_listing(self, url: str) -> bool:
        """Whether ``url`` is unchanged by the one listing of its folder this
        iteration makes (made now if not yet, for the dataset's objects of
        the folder not yet checked; only where there are several: for one
        object, its own stat is as cheap). False: ask it on its own."""
        self._state()
        folder = url.rsplit("/", 1)[0]
        with self._lock:
            if url in self._checked or url not in self.stats:
                return True
            if folder in self._listed:
                return False
            asking = self._asking.setdefault(folder, threading.Lock())
        with asking:  # a second thread checking an object of the folder meanwhile waits for this listing
            with self._lock:
                if folder not in self._listed:
                    siblings = [u for u in self.stats if u.rsplit("/", 1)[0] == folder and u not in self._checked]
                else:
                    siblings = []
            found: dict[str, tuple[int, str]] = {}
            if len(siblings) > 1 and folder.split("://", 1)[0] in _LISTABLE:
                try:
                    found = files.listed_versions(siblings, self.storage_options)
                except Exception as e:  # a listing refused (no list permission, say): a stat each
                    log.debug("listing %s to check its objects failed (%s); each is asked when read", folder, e)
            with self._lock:
                self._checked.update(u for u, now in found.items() if now == self.stats.get(u))
                self._listed.add(folder)
                return url in self._checked

    def check(self, url: str) -> None:
        """Make sure ``url`` is the object listed, once this iteration (see
        :meth:`by_listing`, else a fresh stat of it).

        Raises:
            RemoteError: it changed since it was listed, or is gone.
        """
        if self.by_listing(url):
            return
        with self._lock:
            asking = self._asking.setdefault(url, threading.Lock())
        with asking:  # a second thread reading the object meanwhile waits, then needs no stat of its own
            with self._lock:
                if url in self._checked:
                    return
            listed = self.stats[url]
            try:
                now = fresh_size_and_version(url, self.storage_options)
            except FileNotFoundError:
                raise RemoteError(url, "the object is gone since it was listed: make the dataset again") from None
            if now != listed:
                raise RemoteError(url, changed_object(listed, now, "since it was listed"))
            with self._lock:
                self._checked.add(url)

    def __getstate__(self) -> dict:  # a lock does not pickle (spawned DataLoader workers)
        return {"stats": self.stats, "storage_options": self.storage_options}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"ListingCheck({len(self.stats)} objects)"


def _named_twice(file: str, first: str, second: str) -> str:
    how = "twice" if first == second else f"by both {first!r} and {second!r}"
    return (f"paths names {file!r} {how}; tf.data would read its records twice, this dataset reads each shard "
            "once: name each shard once (to read some shards more often than others, make a dataset of them "
            "and combine with tfrecord_torch.mix([...], weights=[...]))")


def _list_index_folders(files: list[str], storage_options: dict | None, stats: dict, folders: set,
                        early: dict[str, Future]) -> None:
    """List the ``index/`` folder beside remote shards (a few folders at most), so that
    opening them asks for no index object that is not there; ``early``: listings of
    such folders begun before the shards were known (used when the shards are there)."""
    parents = sorted({f.rsplit("/", 1)[0] for f in files if is_url(f)})
    if not parents or len(parents) > SIBLING_FOLDERS:
        return
    for parent in parents:
        url = f"{parent}/{INDEX_FOLDER}"
        if url in folders or parent.split("://", 1)[0] not in _LISTABLE:
            continue
        stats.update(early[parent].result() if parent in early else _index_entries(parent, storage_options))
        folders.add(url)


def _index_entries(parent: str, storage_options: dict | None) -> dict[str, tuple[int, str]]:
    """The (size, version) of each object in the ``index/`` folder of remote folder ``parent``."""
    url = f"{parent}/{INDEX_FOLDER}"
    fs, p = filesystem(url, storage_options)
    protocol = url.split("://", 1)[0]
    forget_listings(fs, p, parent=False)
    try:
        entries = retrying("list", url, lambda: fs.ls(p, detail=True))
    except FileNotFoundError:
        entries = []
    return {unstrip(fs, protocol, e["name"]): (int(e.get("size") or 0), version_of(e)) for e in entries if _is_file(e)}


def _likely_parents(items: list[str]) -> list[str]:
    """The remote folders the shards of ``items`` lie in, known before any
    listing, on a store whose folders are listings: the folder of several
    files named in it, of a glob whose magic is in its last part, a folder
    named with a trailing ``/``. (A path named alone may be a folder
    itself.) None when there are more than :data:`SIBLING_FOLDERS`."""
    import glob as globlib

    named: dict[str, int] = {}
    parents = set()
    for item in items:
        if not is_url(item) or item.split("://", 1)[0] not in _LISTABLE:
            continue
        if item.endswith("/"):
            parents.add(item.rstrip("/"))
            continue
        if "/" not in item.split("://", 1)[1]:  # a bucket named alone
            continue
        folder, name = item.rsplit("/", 1)
        if globlib.has_magic(folder):
            continue
        if globlib.has_magic(name):
            parents.add(folder)
        else:
            named[folder] = named.get(folder, 0) + 1
    parents.update(folder for folder, count in named.items() if count > 1)
    return sorted(parents) if len(parents) <= SIBLING_FOLDERS else []


def _empty_folder(folder: str, skip: tuple) -> str:
    """Why a folder gave no shards, and what to pass instead."""
    names = sorted(os.listdir(folder))
    subfolders = [n for n in names if os.path.isdir(os.path.join(folder, n)) and n != INDEX_FOLDER
                  and not n.startswith(".")]
    skipped = [n for n in names if n not in subfolders and n != INDEX_FOLDER]
    if not names:
        return f"{folder!r} is an empty folder: no TFRecord files in it"
    parts = [f"no TFRecord files directly in the folder {folder!r} (folders are not searched recursively)"]
    if subfolders:
        shown = ", ".join(n + "/" for n in subfolders[:5]) + (", ..." if len(subfolders) > 5 else "")
        parts.append(f"it has {len(subfolders)} subfolder{'s' if len(subfolders) != 1 else ''} ({shown}): "
                     f"pass a subfolder, or a recursive glob such as {os.path.join(folder, '**', '*')!r}")
    if skipped:
        shown = ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        parts.append(f"skipped as hidden, index or metadata files ({', '.join(skip)}): {shown}; "
                     "name a file explicitly to read it")
    return "; ".join(parts)


def _no_match(pattern: str, matches: list[str], skip: tuple) -> str:
    folders = [m for m in matches if os.path.isdir(m)]
    others = [m for m in matches if not os.path.isdir(m)]
    if folders and not others:
        return (f"{pattern!r} matches only folders ({', '.join(sorted(folders)[:3])}"
                f"{', ...' if len(folders) > 3 else ''}): add '/*' to match the files in them, "
                "or use '**' to search folders recursively")
    if others:
        return (f"{pattern!r} matches only hidden, index or metadata files ({', '.join(skip)}): "
                f"{', '.join(sorted(others)[:3])}; name a file explicitly to read it")
    return f"no files match {pattern!r}"


def _list_explicit(items: list[str], storage_options: dict | None, stats: dict, folders: set) -> set[str]:
    """The explicit remote files among ``items`` (no glob magic) found by listing their folders,
    when a folder holds several of them; the rest are left to :func:`_list_remote`."""
    import glob as globlib

    groups: dict[str, list[str]] = {}
    for item in items:
        protocol = item.split("://", 1)[0] if is_url(item) else ""
        if protocol in _LISTABLE and not globlib.has_magic(item) and not item.endswith("/"):
            groups.setdefault(item.rsplit("/", 1)[0], []).append(item)
    found: set[str] = set()
    for parent, members in groups.items():
        if len(members) < 2:
            continue
        fs, p = filesystem(parent, storage_options)
        protocol = parent.split("://", 1)[0]
        forget_listings(fs, p)
        try:
            entries = retrying("list", parent, lambda: fs.ls(p, detail=True))
        except FileNotFoundError:
            continue
        listed = {unstrip(fs, protocol, e["name"]): e for e in entries}
        stats.update((url, (int(e.get("size") or 0), version_of(e))) for url, e in listed.items() if _is_file(e))
        folders.add(parent)
        found.update(m for m in members if m in listed and _is_file(listed[m]))
    return found


def _list_siblings(fs, protocol: str, pattern: str, infos: dict, stats: dict, folders: set) -> None:
    """When a glob could not have matched its files' index objects (``*.tfrecord``), list the
    matches' folders (a few at most), so their index objects are known without asking for
    each one."""
    import fnmatch

    parents = {f.rsplit("/", 1)[0] for f, info in infos.items()
               if _is_file(info) and not fnmatch.fnmatchcase(f + ".index", pattern)}
    if not parents or len(parents) > SIBLING_FOLDERS:
        return
    for parent in sorted(parents):
        url = unstrip(fs, protocol, parent)
        entries = retrying("list", url, lambda: fs.ls(parent, detail=True))
        stats.update((unstrip(fs, protocol, e["name"]), (int(e.get("size") or 0), version_of(e)))
                     for e in entries if _is_file(e))
        folders.add(url)


def _missing(fs, protocol: str, path: str, item: str) -> str:
    """Why ``item`` (``path`` on ``fs``) was not found: on S3, its bucket does
    not exist (one HEAD of the bucket, on this error only: a bucket that is
    there but may not be asked, 403, keeps the plain message), or no object or
    prefix has its name."""
    bucket = path.split("/", 1)[0]
    head = getattr(fs, "call_s3", None) if protocol in ("s3", "s3a") and "/" in path.strip("/") else None
    if head is not None:
        try:
            head("head_bucket", Bucket=bucket)
        except Exception as e:  # noqa: BLE001 - only a 404 says something; anything else keeps the plain message
            if isinstance(e, FileNotFoundError) or status_of(e) == 404:
                return (f"no such bucket: {protocol}://{bucket} (in {item!r}); check the bucket's name, and the "
                        "endpoint in storage_options")
    return f"no such file or prefix: {item!r}"


def _list_remote(item: str, storage_options: dict | None, skip: tuple, stats: dict, folders: set) -> list[str]:
    import glob as globlib

    fs, p = filesystem(item, storage_options)
    protocol = item.split("://", 1)[0]
    forget_listings(fs, _glob_root(p) if globlib.has_magic(p) else p)
    whole = False  # a folder (prefix) listed whole, not a glob or a file
    if globlib.has_magic(p):
        infos = retrying("glob", item, lambda: fs.glob(p, detail=True))
        _list_siblings(fs, protocol, p, infos, stats, folders)
    else:
        try:
            info = retrying("stat", item, lambda: fs.info(p))  # a file, or a folder (prefix)
        except FileNotFoundError:
            raise FileNotFoundError(_missing(fs, protocol, p, item)) from None
        if _is_file(info):
            infos = {p: info}
        else:
            infos = retrying("list", item, lambda: fs.find(p, maxdepth=1, detail=True))
            folders.add(item.rstrip("/"))
            whole = True
    urls = {(f if "://" in f else unstrip(fs, protocol, f)): info for f, info in infos.items()
            if _is_file(info)}
    stats.update((url, (int(info.get("size") or 0), version_of(info))) for url, info in urls.items())
    found = sorted(url for url in urls
                   if not os.path.basename(url).startswith(".") and not url.endswith(skip))
    if not found and globlib.has_magic(p):
        raise FileNotFoundError(f"no files match {item!r}")
    if not found:
        subfolders = sorted(os.path.basename(e["name"].rstrip("/"))
                            for e in retrying("list", item, lambda: fs.ls(p, detail=True))
                            if not _is_file(e))
        subfolders = [n for n in subfolders if n != INDEX_FOLDER and not n.startswith(".")]
        hint = (f"; it has subfolders ({', '.join(n + '/' for n in subfolders[:5])}): pass one, or a glob "
                f"such as {item.rstrip('/') + '/**/*'!r}" if subfolders else "")
        raise FileNotFoundError(f"no TFRecord files directly under {item!r} (folders are not searched "
                                f"recursively){hint}")
    if whole:
        check_one_split(item, found, lambda folder, pattern: f"{folder.rstrip('/')}/{pattern}")
    return found
