"""Masked CRC32C, as TensorFlow frames records: the standard test vector."""

from tfrecord_torch.records.crc import masked_crc32c, unmask_crc


def test_crc_test_vector():
    from crc32c import crc32c

    assert crc32c(b"123456789") == 0xE3069283
    assert masked_crc32c(b"123456789") == 0xC78AB0E5
    assert unmask_crc(0xC78AB0E5) == 0xE3069283
