"""Feature specs as users pass them to the datasets: images, bytes, text and
variable-length values, v2 transforms, batch mode, one feature under two names."""

import numpy as np
import pytest
import torch
from helpers import image_shards, png_bytes

from tfrecord_torch import (
    Bytes,
    FeatureError,
    Float,
    Image,
    IndexedTFRecordDataset,
    Int64,
    MixedSizesError,
    RecordWriter,
    Text,
    TFRecordDataset,
    make_example,
    parse_example,
    presets,
    read_records,
)
from tfrecord_torch.features.specs import decode_image, image_size


def test_image_modes_and_formats():
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    for fmt in ("PNG", "BMP", "TIFF", "WEBP"):
        data = png_bytes(rgb, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
        out = decode_image(data, "RGB")
        assert out.shape == (3, 6, 7)
        assert np.array_equal(out.permute(1, 2, 0).numpy(), rgb), fmt
    gray = decode_image(png_bytes(rgb), "L")
    assert gray.shape == (1, 6, 7)
    rgba = decode_image(png_bytes(rgb), "RGBA")
    assert rgba.shape == (4, 6, 7) and (rgba[3] == 255).all()
    assert decode_image(png_bytes(rgb[:, :, 0]), "unchanged").shape == (1, 6, 7)
    with pytest.raises(ValueError, match="mode must be one of"):
        Image(mode="CMYK")


def test_image_errors_name_key_and_record(tmp_path):
    good = png_bytes(np.zeros((2, 2, 3), np.uint8))
    with RecordWriter(tmp_path / "bad.tfrecord") as w:
        w.write(make_example({"image": good, "label": 0}))
        w.write(make_example({"image": good[:20], "label": 1}))
        w.write(make_example({"image": b"not an image", "label": 2}))
    it = iter(TFRecordDataset(tmp_path, features=presets.tfds()))
    next(it)
    with pytest.raises(FeatureError) as info:
        next(it)
    assert info.value.key == "image" and info.value.record == 1 and "cannot decode image" in str(info.value)
    with pytest.raises(FeatureError, match="cannot decode image"):
        Image("image").decode({"image": [b"not an image"]})


def test_absurd_image_size_is_refused_before_decoding():
    header = bytearray(png_bytes(np.zeros((1, 1, 3), np.uint8)))
    header[16:24] = (100_000).to_bytes(4, "big") * 2  # IHDR: 100000 x 100000
    assert image_size(bytes(header)) == (100_000, 100_000)
    with pytest.raises(FeatureError, match="exceeds the limit"):
        Image("image").decode({"image": [bytes(header)]})


def test_jpeg_size_from_header():
    data = png_bytes(np.zeros((13, 21, 3), np.uint8), "JPEG")
    assert image_size(data) == (21, 13)


def test_bytes_text_and_varlen(tmp_path):
    with RecordWriter(tmp_path / "t.tfrecord") as w:
        w.write(make_example({"name": "héllo", "tags": [b"a", b"b"], "ids": [1, 2, 3]}))
    spec = {"name": Text(), "tags": Bytes(many=True), "ids": Int64(shape=None),
            "missing": Text(default="none")}
    (item,) = list(TFRecordDataset(tmp_path, features=spec))
    assert item == {"name": "héllo", "tags": [b"a", b"b"], "ids": item["ids"], "missing": "none"}
    assert item["ids"].tolist() == [1, 2, 3]
    with pytest.raises(FeatureError, match="expected 1"):
        list(TFRecordDataset(tmp_path, features={"tags": Bytes()}))


def test_transforms_v2_pipeline(tmp_path):
    from torchvision.transforms import v2

    image_shards(tmp_path)
    pipeline = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)])
    ds = TFRecordDataset(tmp_path, features=presets.tfds(),
                         transform=lambda d: {**d, "image": pipeline(d["image"])})
    plain = list(TFRecordDataset(tmp_path, features=presets.tfds()))
    items = list(ds)
    assert len(items) == len(plain) == 6
    for item, ref in zip(items, plain):
        assert item["image"].dtype == torch.float32
        assert torch.allclose(item["image"], ref["image"].flip(-1).float() / 255)
    # The pipeline itself as the transform: v2 takes the dict, transforms the image, passes the label.
    direct = list(TFRecordDataset(tmp_path, features=presets.tfds(), transform=pipeline))
    assert len(direct) == 6
    for item, ref in zip(direct, items):
        assert torch.equal(item["image"], ref["image"]) and torch.equal(item["label"], ref["label"])


def test_batch_mode_images_stack_or_refuse_mixed_sizes(tmp_path):
    image_shards(tmp_path, sizes=[(4, 6)] * 4 + [(5, 5)] * 4)
    ds = TFRecordDataset(tmp_path, features=presets.tfds(), batch_size=4)
    same = list(ds)[0]
    assert same["image"].shape == (4, 3, 4, 6) and same["label"].tolist() == [0, 1, 2, 3]
    ds = TFRecordDataset(tmp_path, features=presets.tfds(), batch_size=8)
    with pytest.raises(MixedSizesError, match=r"record 4 at byte offset \d+ \(3x5x5\)"):
        next(iter(ds))


def test_png_with_bad_zlib_checksum_is_an_error_not_a_crash():
    # torchvision's PNG decoder segfaults on this (libpng's error path); we use Pillow for PNG.
    import struct
    import zlib

    data = bytearray(png_bytes(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)))
    start = data.index(b"IDAT") - 4
    length = struct.unpack(">I", data[start:start + 4])[0]
    body = start + 8
    data[body + length - 1] ^= 0xFF  # last byte of the zlib adler32
    crc = zlib.crc32(bytes(data[start + 4:body + length])) & 0xFFFFFFFF
    data[body + length:body + length + 4] = struct.pack(">I", crc)  # the chunk CRC stays valid
    with pytest.raises(FeatureError, match="cannot decode image"):
        Image("image").decode({"image": [bytes(data)]})


def test_pillow_size_limit_is_a_feature_error():
    bmp = bytearray(png_bytes(np.zeros((2, 2, 3), np.uint8), "BMP"))
    bmp[18:26] = (16000).to_bytes(4, "little") * 2  # header claims 16000 x 16000
    with pytest.raises(FeatureError, match="cannot decode image"):
        Image("image").decode({"image": [bytes(bmp)]})


def _reference(folder, key):
    """A plain reference read: ``key``'s values from parse_example, record by record."""
    return [parse_example(p).get(key).tolist() for p in read_records(folder / "s.tfrecord")]


def _shard_of(folder, records):
    folder.mkdir()
    with RecordWriter(folder / "s.tfrecord") as w:
        for fields in records:
            w.write(make_example(fields))
    return folder


@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset, "batch"])
def test_one_feature_under_two_names_reads_both_keys(tmp_path, dataset):
    """One Feature instance under two output names reads each name's own key,
    and the caller's instance is left as it was (no key filled in)."""
    folder = _shard_of(tmp_path / "d", [{"a": i, "b": 100 + i} for i in range(5)])
    f = Int64()
    spec = {"a": f, "b": f}
    if dataset == "batch":
        (batch,) = list(TFRecordDataset(folder, features=spec, batch_size=5))
        items = [{k: v[i] for k, v in batch.items()} for i in range(5)]
    else:
        ds = dataset(folder, features=spec)
        items = [ds[i] for i in range(len(ds))] if dataset is IndexedTFRecordDataset else list(ds)
    assert [int(x["a"]) for x in items] == [v[0] for v in _reference(folder, "a")]
    assert [int(x["b"]) for x in items] == [v[0] for v in _reference(folder, "b")]
    assert f.key is None and spec == {"a": f, "b": f}


def test_spec_dict_reused_for_two_datasets(tmp_path):
    """A spec dict given to two datasets over different files gives each the
    values a plain read of its own files gives."""
    one = _shard_of(tmp_path / "one", [{"label": i, "tags": [i, i + 1], "more": [-i]} for i in range(4)])
    two = _shard_of(tmp_path / "two", [{"label": 50 + i, "tags": np.full(i, 7, np.int64), "more": [i] * 3}
                                     for i in range(3)])
    tags = Int64(shape=None)
    spec = {"label": Int64(), "tags": tags, "more": tags}
    first = TFRecordDataset(one, features=spec)
    second = IndexedTFRecordDataset(two, features=spec)
    for ds, folder in ((first, one), (second, two)):
        items = list(ds) if ds is first else [ds[i] for i in range(len(ds))]
        assert [x["label"].tolist() for x in items] == [v[0] for v in _reference(folder, "label")]
        assert [x["tags"].tolist() for x in items] == _reference(folder, "tags")
        assert [x["more"].tolist() for x in items] == _reference(folder, "more")
    assert list(spec) == ["label", "tags", "more"] and tags.key is None and spec["label"].key is None


def test_cast_gives_the_dtype_on_every_read_path(tmp_path):
    path = str(tmp_path / "flags.tfrecord")
    with RecordWriter(path) as w:
        for i in range(6):
            w.write(make_example({"flag": i % 2, "small": [i, -i], "x": [0.5 * i]}))
    features = {"flag": Int64(cast=torch.bool), "small": Int64(shape=(2,), cast=torch.int32),
                "x": Float(cast=torch.float64)}
    per_record = list(TFRecordDataset(path, features=features))
    batched = next(iter(TFRecordDataset(path, features=features, batch_size=6)))
    mapped = IndexedTFRecordDataset(path, features=features)
    for got in (per_record[3], mapped[3], {k: v[3] for k, v in batched.items()}):
        assert got["flag"].dtype == torch.bool and bool(got["flag"]) is True
        assert got["small"].dtype == torch.int32 and got["small"].tolist() == [3, -3]
        assert got["x"].dtype == torch.float64 and got["x"].tolist() == 1.5


def test_cast_refuses_values_that_do_not_fit(tmp_path):
    path = str(tmp_path / "big.tfrecord")
    with RecordWriter(path) as w:
        w.write(make_example({"n": 300}))
    with pytest.raises(FeatureError, match="300 does not fit torch.uint8"):
        list(TFRecordDataset(path, features={"n": Int64(cast=torch.uint8)}))
    with pytest.raises(TypeError, match="cast must be a torch.dtype"):
        Int64(cast="bool")
    assert repr(Int64("n")) == "Int64('n', shape=())"
    assert Int64(default=0, cast=torch.bool).default.dtype == torch.bool


def test_a_kind_answers_for_itself_in_sequences_and_plans():
    """A kind of one's own is one class: its decode_steps serves
    sequence_features, and a numeric subclass that decodes its own way is
    never read past its code by the compiled reader."""
    from tfrecord_torch import make_sequence_example, parse_sequence_example
    from tfrecord_torch.features.specs import Int64, bind, item_plan

    class Count(Int64):
        def decode_steps(self, lists, *, has_lists):
            return len(lists.get(self.key) or [])

    class Doubled(Int64):
        def convert(self, value):
            return super().convert(value) * 2

    class Named(Int64):  # decodes as Int64 does
        names = ("a", "b")

    payload = make_sequence_example({}, {"t": [[1], [2], [3]]})
    assert parse_sequence_example(payload, None, {"t": Count()}) == ({}, {"t": 3})
    assert item_plan(bind({"x": Doubled()})) is None
    assert item_plan(bind({"x": Named()})) == (("x", b"x", False, ()),)
