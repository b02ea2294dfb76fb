"""parse_example's per-record fast path: a cache of templates by payload length.

The first time a payload length is seen twice, one record of that length is
compiled into a :class:`~tfrecord_torch.example.template.Template`; a later
payload of that length that matches it is decoded by it, with no protobuf
message. Anything a template leaves (another structure, a malformed value
run) returns None and the caller parses with protobuf, which then gives the
value or the error; the tests compare both paths.

The cache is per process, bounded, and safe to share between threads: it maps
a payload length to a tuple of templates, replaced whole when one is added.
"""

from __future__ import annotations

import sys
import threading

from tfrecord_torch.example.template import Template

__all__ = ["RecordLayout", "clear", "decode_cached", "learn"]

RecordLayout = Template  # the name this cache's tests and callers know a template by
_ENABLED = sys.byteorder == "little"  # float bytes are read in place as <f4

_MAX_LENGTHS = 1024  # payload lengths with layouts; the cache is emptied past this
_MAX_SEEN = 4096  # lengths counted before learning; the counts are emptied past this
_PER_LENGTH = 4  # layouts (or failed walks) per length
_RETRY = 1024  # misses after which a length's layouts are learned afresh


_layouts: dict[int, tuple] = {}  # payload length -> layouts
_seen: dict[int, int] = {}  # payload length -> times missed (learning starts at 2)
_lock = threading.Lock()


def decode_cached(payload: bytes) -> dict | None:
    """``payload`` decoded by a cached layout of its length, or None."""
    for layout in _layouts.get(len(payload), ()):
        out = layout.decode(payload)
        if out is not None:
            return out
    return None


def learn(payload: bytes) -> None:
    """Note a payload that missed the cache; learn its layout once its
    length has missed twice (so one-off lengths, such as images, cost a
    dict update and no walk). A length that keeps missing after its tries
    starts over, so the cache follows the data a process reads."""
    if not _ENABLED:
        return
    n = len(payload)
    with _lock:
        if len(_seen) >= _MAX_SEEN:
            _seen.clear()
        tries = _seen[n] = _seen.get(n, 0) + 1
        if tries > _PER_LENGTH + 1:
            if tries >= _RETRY:
                _seen[n] = 1
                _layouts.pop(n, None)
            return
    if tries < 2:
        return
    layout = Template.compile(payload)
    if layout is None or layout.decode(payload) is None:
        return
    with _lock:
        if len(_layouts) >= _MAX_LENGTHS:
            _layouts.clear()
        known = _layouts.get(n, ())
        if len(known) < _PER_LENGTH:
            _layouts[n] = known + (layout,)


def clear() -> None:
    """Forget every learned layout (tests use it; nothing else needs to)."""
    with _lock:
        _layouts.clear()
        _seen.clear()
