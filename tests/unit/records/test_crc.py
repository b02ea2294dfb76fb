"""Masked CRC32C, as TensorFlow frames records: the standard test vector."""

from tfrecord_torch.records.crc import masked_crc32c


def unmask_crc(masked: int) -> int:
    """The plain CRC32C behind a masked one, undoing the mask as TensorFlow's crc32c::Unmask does."""
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def test_crc_test_vector():
    from crc32c import crc32c

    assert crc32c(b"123456789") == 0xE3069283
    assert masked_crc32c(b"123456789") == 0xC78AB0E5
    assert unmask_crc(0xC78AB0E5) == 0xE3069283
