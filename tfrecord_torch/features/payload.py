"""Records read as they are, not as Examples: ``features=Payload()``.

A TFRecord file frames any bytes; tf.train.Example is only the usual
payload. Apache Beam's ``WriteToTFRecord`` writes whatever its coder gives,
and teams store JSON or protocol buffers of their own. ``Payload`` stands in
the place of a feature spec and says: yield each record's payload (``bytes``),
or what a decode hook makes of it, without parsing it as an Example.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfrecord_torch.errors import CorruptRecordError

__all__ = ["Payload"]


@dataclass(frozen=True)
class Payload:
    """Read each record's payload as it is (``TFRecordDataset(paths, features=Payload())``).

    Items are the payloads, ``bytes``, or ``decode(payload)`` with a hook;
    ``transform=`` applies on top, as to Examples. Splitting, shuffling,
    resuming, ``on_error`` and batch mode work as for Examples; in batch mode
    (``batch_size=``) a batch is a list of the items.

    Attributes:
        decode: a callable applied to each payload (``bytes``), e.g.
            ``json.loads`` or a protobuf message's ``FromString``; None yields
            the bytes. An exception it raises is a bad record: a
            :class:`~tfrecord_torch.CorruptRecordError` naming the file, byte
            offset and record, which ``on_error`` raises or skips.
    """

    decode: Callable[[bytes], Any] | None = None

    def __post_init__(self) -> None:
        if self.decode is not None and not callable(self.decode):
            raise TypeError(f"Payload.decode must be a callable taking the payload's bytes (json.loads, "
                            f"a message's FromString, ...) or None, got {type(self.decode).__name__} "
                            f"{self.decode!r:.80}")

    def __repr__(self) -> str:
        if self.decode is None:
            return "Payload()"
        name = getattr(self.decode, "__qualname__", None) or type(self.decode).__name__
        module = getattr(self.decode, "__module__", None)
        return f"Payload(decode={module}.{name})" if module else f"Payload(decode={name})"

    def read(self, payload: bytes, path: str, offset: int, record: int) -> Any:
        """The item of one record's ``payload`` (``path``, ``offset`` and ``record`` locate it).

        Raises:
            CorruptRecordError: the decode hook raised (chained as the cause).
        """
        if self.decode is None:
            return payload
        try:
            return self.decode(payload)
        except Exception as e:  # the hook's own error type is the user's: located and put under on_error
            raise self.failed(e, path, offset, record) from e

    def failed(self, error: Exception, path: str, offset: int, record: int) -> CorruptRecordError:
        """The located error for the decode hook's ``error`` on a record."""
        return CorruptRecordError(path, offset, record,
                                  f"the payload does not decode: {self!r} raised {type(error).__name__}: "
                                  f"{error}"[:2000])
