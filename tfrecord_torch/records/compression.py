"""Compression of record files, in one place: the names (None, "gzip",
"zlib", "auto"), the file-name suffixes, the zlib window bits, and detection.

Compression detection (``compression="auto"``), in order:

1. An uncompressed TFRecord starts with a 12-byte header whose last 4 bytes
   are the masked CRC32C of the first 8. If the first 12 bytes pass that
   check, the file is uncompressed (a compressed file passes it with
   probability 2**-32).
2. Otherwise the first bytes decide: ``1f 8b`` is GZIP, a valid zlib header
   (``78 xx`` with the header checksum) is ZLIB.
3. Otherwise the suffix decides: ``.gz``/``.gzip`` is GZIP, ``.zz``/``.zlib``
   is ZLIB; anything else is read as uncompressed (and a bad header is then
   reported as a corrupt record). An empty file is an empty, uncompressed file.

Suffixes written: ``.gz`` for GZIP; ZLIB files get no suffix of their own
(TFDS knows none, and detection reads the zlib header). Only uncompressed
files can be indexed (a compressed stream cannot be entered at an offset).

How the writer deflates (:class:`CompressionOptions`) takes TensorFlow's
defaults, so a file written with the same options has the same bytes as
``tf.io.TFRecordWriter``'s.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

from tfrecord_torch._args import check_choice, check_int
from tfrecord_torch.io.pool import read_at
from tfrecord_torch.records.crc import masked_crc32c

__all__ = ["COMPRESSIONS", "Compression", "CompressionOptions", "WBITS", "check_compression", "check_compression_options", "compression_from_name",
           "compression_of", "detect_compression", "is_compressed", "suffix"]


class Compression(str, enum.Enum):
    """The compressions a record file can have (values as TensorFlow spells them)."""

    NONE = ""
    GZIP = "GZIP"
    ZLIB = "ZLIB"

    @property
    def key(self) -> str | None:
        """The spelling this library's arguments use: None, "gzip", "zlib"."""
        return self.value.lower() or None


COMPRESSIONS = (None, "gzip", "zlib")
STRATEGIES = {"default": zlib.Z_DEFAULT_STRATEGY, "filtered": zlib.Z_FILTERED, "huffman_only": zlib.Z_HUFFMAN_ONLY,
              "rle": zlib.Z_RLE, "fixed": zlib.Z_FIXED}


@dataclass(frozen=True)
class CompressionOptions:
    """How a GZIP or ZLIB record file is deflated (zlib's ``deflateInit2`` settings).

    The defaults are TensorFlow's (``tf.io.TFRecordOptions``), so with the same
    values :class:`~tfrecord_torch.RecordWriter` writes the very bytes
    ``tf.io.TFRecordWriter`` writes. Any value gives a standard stream that
    TensorFlow, ``gzip``/``zlib`` and this library read; they trade size
    against speed and memory only.

    Args:
        level: 0 (stored, no compression) to 9 (smallest, slowest); -1 is
            zlib's default, the same as 6. TensorFlow: ``compression_level``.
        window_bits: 8 to 15, the log2 of the history window (zlib raises 8
            to 9). Smaller windows need less memory to read and compress worse.
            TensorFlow: ``window_bits`` (GZIP adds the 16 itself, as here).
        mem_level: 1 to 9, memory for the compressor's state (9 is fastest).
            TensorFlow: ``mem_level``; its default 9 is not zlib's 8.
        strategy: "default", "filtered", "huffman_only", "rle" or "fixed"
            (or the ``zlib.Z_*`` constant). TensorFlow: ``compression_strategy``.

    Raises:
        ValueError: naming the field and its valid values.
    """

    level: int = -1
    window_bits: int = zlib.MAX_WBITS
    mem_level: int = 9
    strategy: str | int = "default"

    def __post_init__(self) -> None:
        check_int("level", self.level, minimum=-1, maximum=9)
        check_int("window_bits", self.window_bits, minimum=8, maximum=zlib.MAX_WBITS)
        check_int("mem_level", self.mem_level, minimum=1, maximum=9)
        check_choice("strategy", self.strategy, (*STRATEGIES, *STRATEGIES.values()))
        if isinstance(self.strategy, int):  # the zlib constant: kept by its name, as repr shows it
            object.__setattr__(self, "strategy", {v: k for k, v in STRATEGIES.items()}[self.strategy])

    def compressor(self, compression: str) -> zlib._Compress:
        """A zlib compressor writing a ``compression`` ("gzip" or "zlib") stream."""
        wbits = self.window_bits
        if compression == "gzip":  # zlib takes 8 as 9 but refuses it outright with a GZIP wrapper
            wbits = max(wbits, 9) + 16
        return zlib.compressobj(self.level, zlib.DEFLATED, wbits, self.mem_level, STRATEGIES[str(self.strategy)])


WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}
_SUFFIXES = {"gzip": (".gz", ".gzip"), "zlib": (".zz", ".zlib")}  # read
_WRITTEN_SUFFIX = {None: "", "gzip": ".gz", "zlib": ""}


def suffix(compression: str | None) -> str:
    """The suffix appended to names of files written with ``compression``."""
    return _WRITTEN_SUFFIX[check_compression(compression, allow_auto=False)]


def check_compression(compression, *, allow_auto: bool) -> str | None:
    """Normalize a ``compression`` argument (None, "gzip", "zlib", "auto", a
    :class:`Compression`, or TensorFlow's "GZIP"/"ZLIB"/""), raising ValueError for bad ones."""
    if isinstance(compression, Compression):
        return compression.key
    if compression == "":
        compression = None
    if isinstance(compression, str):
        compression = compression.lower()
        if compression == "none":
            compression = None
    valid = COMPRESSIONS + (("auto",) if allow_auto else ())
    if compression not in valid:
        raise ValueError(f"compression must be one of {valid!r}, got {compression!r}")
    return compression


def check_compression_options(compression: str | None, options) -> None:
    """Refuse ``options`` that are not a :class:`CompressionOptions`, or that
    come without a compression to apply them to (``compression`` normalized)."""
    if options is None:
        return
    if not isinstance(options, CompressionOptions):
        raise TypeError(f"compression_options must be a CompressionOptions, got {type(options).__name__}")
    if compression is None:
        raise ValueError("compression_options needs compression='gzip' or 'zlib', got compression=None")


def detect_compression(head: bytes, name: str) -> str | None:
    """Guess the compression of a record file from its first bytes and name."""
    if not head:
        return None  # an empty file holds no records, whatever its name
    if len(head) >= 12:
        length_crc = struct.unpack_from("<I", head, 8)[0]
        if masked_crc32c(head[:8]) == length_crc:
            return None
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return compression_from_name(name)


def compression_from_name(name: str) -> str | None:
    """The compression a file's name suggests (its suffix), reading nothing."""
    lowered = name.lower()
    for compression, suffixes in _SUFFIXES.items():
        if lowered.endswith(suffixes):
            return compression
    return None


def compression_of(path: str, compression, storage_options: dict | None = None) -> str | None:
    """A file's compression (None, "gzip", "zlib"): ``compression`` says, or with
    "auto" its first 12 bytes do (one small range read, so a remote file is not
    fetched whole)."""
    compression = check_compression(compression, allow_auto=True)
    if compression != "auto":
        return compression
    return detect_compression(read_at(path, 0, 12, storage_options), path)


def is_compressed(path: str, compression, storage_options: dict | None = None) -> bool:
    """True when ``path`` is compressed (and so can only be streamed, not indexed)."""
    return compression_of(path, compression, storage_options) is not None
