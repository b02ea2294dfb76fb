"""What a file that is not a TFRecord file looks like, from its first bytes.

A file whose first record header fails its CRC is named by its format when
its first bytes are a known signature (a JPEG, a Parquet file, a tar
archive, ...), so the reader can say "not a TFRecord file: it looks like a
JPEG image" rather than "length CRC mismatch". Unknown bytes give None: the
corrupt-record message stands.
"""

from __future__ import annotations

from tfrecord_torch.records.crc import masked_crc32c

__all__ = ["foreign_format", "not_tfrecord"]

# leading bytes -> what the file is
_SIGNATURES = (
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"PAR1", "a Parquet file"),
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "a zip archive (empty)"),
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"ARROW1", "an Arrow IPC file"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an executable (ELF)"),
)


def foreign_format(head: bytes) -> str | None:
    """The format ``head`` (a file's first bytes, 512 or more to see a tar
    header) announces, or None when it is not one this module knows."""
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return what
    if head[:4] == b"RIFF" and head[8:12] in (b"WEBP", b"WAVE", b"AVI "):
        return {b"WEBP": "a WebP image", b"WAVE": "a WAV audio file", b"AVI ": "an AVI video"}[head[8:12]]
    if head[4:8] == b"ftyp":
        return "an MP4/HEIF media file"
    if head[257:262] == b"ustar":
        return "a tar archive"
    text = head[:256]
    if text and b"\x00" not in text:
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError:  # cut inside a character at byte 256, or not text
            decoded = text[:252].decode("utf-8", "ignore") if len(text) == 256 else ""
        if decoded and all(c.isprintable() or c in "\t\r\n" for c in decoded):
            first = decoded.splitlines()[0] if decoded.strip() else decoded
            return f"a text file (its first line: {first[:60]!r})"
    return None


def not_tfrecord(head: bytes, compression: str | None) -> str | None:
    """The reason to give when a file's first record header (at the start
    of ``head``, the decompressed stream's first bytes for a compressed file)
    is no TFRecord header and the bytes are a known format; else None."""
    if len(head) >= 12 and masked_crc32c(head[:8]) == int.from_bytes(head[8:12], "little"):
        return None  # a sound first header: whatever is wrong is further on
    what = foreign_format(head)
    if what is None:
        return None
    if compression is not None:
        return (f"not a TFRecord file: its {compression} data holds {what}, not TFRecords; check the "
                f"paths (a pattern such as 'data/*.tfrecord.gz' keeps other files out)")
    if what == "gzip data":
        return ("not a TFRecord file as read: it is gzip data; if it holds TFRecords, read it with "
                "compression='gzip' (or 'auto')")
    return (f"not a TFRecord file: it looks like {what}; check the paths (a pattern such as "
            f"'data/*.tfrecord' keeps other files out)")
