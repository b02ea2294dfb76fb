"""S3 sessions whose botocore data a forked DataLoader worker inherits
instead of parsing it again.

s3fs makes a botocore session for each ``S3FileSystem``, and fsspec drops its
filesystems in a forked process, so each DataLoader worker's first request
would wait for a new session to parse botocore's JSON files (the S3 service
model, its endpoint rules, the partitions): about 0.1 s of CPU on a quiet
machine, several times that on a busy one, before the request leaves. The sessions made
here share one botocore data loader per process tree: the one the parent
filled when it first listed or read the bucket is, in a forked worker, the
worker's too (forked memory). A data loader holds parsed files and nothing
bound to a process (no connection, event loop or lock), so sharing it is
safe; each filesystem still gets a session of its own, as s3fs makes it.
"""

from __future__ import annotations

import inspect
import os
import threading
from typing import Any

__all__ = ["with_shared_data"]

_loaders: dict[str, Any] = {}  # botocore data path -> its loader, shared by this process and its forks
_sessions: dict[str, Any] = {}  # the options' token -> the session of their filesystems, in this process
_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # forked: the parent's sessions are not this process's
    os.register_at_fork(after_in_child=_sessions.clear)


def with_shared_data(options: dict) -> dict:
    """s3fs ``options`` with a ``session`` whose botocore data loader is
    shared (see the module docstring); ``options`` as they are when they give
    a session or an event loop, or arguments s3fs would make its session with
    (the session made here could differ), or without s3fs."""
    if "session" in options or "loop" in options or options.get("asynchronous"):
        return options
    try:
        import fsspec
        import s3fs
        from aiobotocore.session import AioSession
        from botocore.loaders import create_loader
    except ImportError:
        return options
    named = _named_parameters(s3fs.S3FileSystem) | _NOT_THE_SESSIONS
    if not set(options) <= named or not set(fsspec.config.conf.get("s3", {})) <= named:
        return options  # s3fs passes the others to the session it makes
    token = fsspec.utils.tokenize(options)
    with _lock:
        session = _sessions.get(token)
        if session is None:
            session = AioSession()
            path = session.get_config_variable("data_path")
            loader = _loaders.get(path)
            if loader is None:
                loader = _loaders[path] = create_loader(path)
            session.register_component("data_loader", loader)
            _sessions[token] = session
    return {**options, "session": session}


_named: dict[type, frozenset[str]] = {}
# options fsspec (and s3fs, for its listings cache) take out before s3fs makes its session
_NOT_THE_SESSIONS = frozenset({"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"})


def _named_parameters(cls: type) -> frozenset[str]:
    """The keyword arguments ``cls()`` takes by name (not through ``**kwargs``)."""
    if cls not in _named:
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        params = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
        _named[cls] = frozenset(p.name for p in params if p.kind in kinds) - {"self"}
    return _named[cls]
