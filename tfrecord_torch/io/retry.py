"""Retries with backoff for remote calls: transient failures are retried a
bounded number of times, then a :class:`RemoteError` names the URL."""

from __future__ import annotations

import logging
import time

from tfrecord_torch.errors import RemoteError, TFRecordError

__all__ = ["BACKOFF", "RETRIES", "retrying"]

log = logging.getLogger(__name__)
RETRIES = 4  # attempts after the first
BACKOFF = 0.2  # seconds before the first retry; doubles each time


def retrying(what: str, url: str, call, *, retries: int = RETRIES):
    """Run ``call()``, retrying transient failures; then RemoteError(url, what)."""
    delay = BACKOFF
    for attempt in range(retries + 1):
        try:
            return call()
        except (FileNotFoundError, PermissionError, IsADirectoryError, TFRecordError):
            raise
        except Exception as e:  # network stacks raise many types (aiohttp, botocore, OSError)
            if attempt == retries:
                raise RemoteError(url, f"{what} failed after {retries + 1} attempts: "
                                       f"{type(e).__name__}: {e}") from e
            log.warning("%s: %s failed (%s: %s); retrying in %.1fs", url, what, type(e).__name__, e, delay)
            time.sleep(delay)
            delay *= 2
