"""Retries with backoff for remote calls.

Each failure is classified from its HTTP status (found on the exception or
its causes, whichever network stack raised it: aiohttp, botocore, s3fs's
translated OSErrors):

- final, raised at once without retrying: 4xx answers. A missing key or
  bucket (404) is a ``FileNotFoundError`` naming the URL; access denied (403)
  and the other 4xx are a :class:`RemoteError` naming the URL. No
  credentials to sign with (botocore's) is final too, saying where to give them.
- transient, retried with exponential backoff: 5xx answers (503 SlowDown
  included), throttling, timeouts and dropped connections. fsspec's HTTP
  ``info`` reports any failure as ``FileNotFoundError``; when its cause is
  transient it is retried like the rest.

After the retries a :class:`RemoteError` names the URL and what failed.
"""

from __future__ import annotations

import errno
import logging
import time

from tfrecord_torch.errors import RemoteError, TFRecordError

__all__ = ["BACKOFF", "RETRIES", "is_final", "retrying", "status_of"]

log = logging.getLogger(__name__)
RETRIES = 4  # attempts after the first
BACKOFF = 0.2  # seconds before the first retry; doubles each time

# s3fs turns S3 error codes into OSErrors with these errnos (s3fs/errors.py)
_FINAL_ERRNOS = {errno.EINVAL, errno.EPERM, errno.EACCES, errno.ENOSYS, errno.ENAMETOOLONG,
                 errno.EMSGSIZE, errno.ENOENT}
_THROTTLED = ("SlowDown", "Throttl", "RequestLimitExceeded", "TooManyRequests", "ServiceUnavailable")
# botocore found no credentials (or half of them) to sign with: asking again finds none either
_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError")
# no connection made at all (botocore, aiohttp, the socket layer): a wrong endpoint or a server that is down
_UNREACHED = ("EndpointConnectionError", "ClientConnectorError", "ConnectionRefusedError", "gaierror")


def _chain(e: BaseException):
    seen = 0
    while e is not None and seen < 8:
        yield e
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
        seen += 1


def status_of(e: BaseException) -> int | None:
    """The HTTP status behind an exception (or its causes), if one is known."""
    for x in _chain(e):
        status = getattr(x, "status", None)  # aiohttp.ClientResponseError
        if isinstance(status, int) and 100 <= status < 600:
            return status
        response = getattr(x, "response", None)  # botocore ClientError
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
    return None


def is_final(e: BaseException) -> bool:
    """True if retrying cannot help: a 4xx answer or a local cause."""
    if isinstance(e, TFRecordError) or _no_credentials(e):
        return True
    status = status_of(e)
    text = " ".join(str(x) for x in _chain(e))
    if status is not None:
        return 400 <= status < 500 and status not in (408, 429) and not any(t in text for t in _THROTTLED)
    if any(t in text for t in _THROTTLED):
        return False
    if isinstance(e, FileNotFoundError):
        # fsspec's HTTP info says FileNotFoundError for any failure: only a cause-less one is final
        return e.__cause__ is None or isinstance(e.__cause__, FileNotFoundError)
    if isinstance(e, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return True
    if type(e) is OSError and e.errno in _FINAL_ERRNOS:  # s3fs's translation of a 4xx code
        return True
    return False


def _final(url: str, what: str, e: BaseException) -> BaseException:
    """The error to raise for a final failure: naming the URL, keeping the type
    callers test for (FileNotFoundError stays one)."""
    status = status_of(e)
    said = f" (HTTP {status})" if status else ""
    if isinstance(e, TFRecordError):
        return e
    if _no_credentials(e):
        return RemoteError(url, f"{what}: no credentials to sign the request with ({type(e).__name__}: {e}); "
                                "give them in storage_options ({'key': ..., 'secret': ...}, or {'profile': ...}) "
                                "or the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or read a "
                                "public bucket with storage_options={'anon': True}")
    if isinstance(e, FileNotFoundError) or status == 404:
        return FileNotFoundError(errno.ENOENT, f"{url}: no such object or bucket{said}: {e}", url)
    if isinstance(e, PermissionError) or status in (401, 403):
        return RemoteError(url, f"{what}: access denied{said}; not retried: {type(e).__name__}: {e}")
    return RemoteError(url, f"{what} refused{said}; not retried: {type(e).__name__}: {e}")


def _no_credentials(e: BaseException) -> bool:
    return any(type(x).__name__ in _NO_CREDENTIALS for x in _chain(e))


def _unreached(e: BaseException) -> str:
    """What to check when no connection to the server could be made, else ''."""
    if not any(type(x).__name__ in _UNREACHED for x in _chain(e)):
        return ""
    return ("; no connection to the server could be made: check that it is up and reachable, and the "
            "endpoint in storage_options (S3-compatible storage: {'client_kwargs': {'endpoint_url': ...}})")


def retrying(what: str, url: str, call, *, retries: int = RETRIES):
    """Run ``call()``, retrying transient failures with backoff; a final one
    (see the module docstring) is raised at once, naming ``url``."""
    delay = BACKOFF
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as e:  # network stacks raise many types (aiohttp, botocore, OSError)
            if is_final(e):
                error = _final(url, what, e)
                if error is e:
                    raise
                raise error from e
            if attempt == retries:
                raise RemoteError(url, f"{what} failed after {retries + 1} attempts: "
                                       f"{type(e).__name__}: {e}{_unreached(e)}") from e
            log.warning("%s: %s failed (%s: %s); retrying in %.1fs", url, what, type(e).__name__, e, delay)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")
