"""Decoded images: C-contiguous planes with torchvision's pixels, from the
libjpeg path and from every fallback; the channels-last view ahead of a
transform that resizes first."""

import io
import warnings

import numpy as np
import pytest
import torch
import torchvision.io as tvio
from PIL import Image as PILImage
from torch.utils._pytree import tree_flatten
from torchvision import tv_tensors
from torchvision.transforms import v2

from tfrecord_torch import IndexedTFRecordDataset, RecordWriter, TFRecordDataset, make_example, presets
from tfrecord_torch.data.imagebatch import laid_out_for
from tfrecord_torch.features.images import Image, decode_image
from tfrecord_torch.features.images import decode as images

rng = np.random.default_rng(5)


def smooth(h, w, c):
    """A photo-like image (JPEG-friendly blocks with noise)."""
    base = np.kron(rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, c)), np.ones((8, 8, 1)))[:h, :w]
    return np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)


def encode(array_or_image, fmt="JPEG", **kw):
    im = array_or_image if isinstance(array_or_image, PILImage.Image) else PILImage.fromarray(array_or_image)
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


JPEGS = {
    "4:2:0 odd size": encode(smooth(51, 67, 3), quality=75, subsampling=2),
    "4:2:2": encode(smooth(40, 57, 3), subsampling=1),
    "4:4:4": encode(smooth(33, 30, 3), quality=95, subsampling=0),
    "progressive": encode(smooth(48, 64, 3), quality=90, progressive=True),
    "gray": encode(smooth(35, 45, 1)[:, :, 0]),
    "cmyk": encode(PILImage.fromarray(smooth(20, 30, 3)).convert("CMYK")),
}
TV_MODES = {"RGB": tvio.ImageReadMode.RGB, "L": tvio.ImageReadMode.GRAY}


def torchvision_decode(data, mode):
    with warnings.catch_warnings():  # torchvision 0.29 announces a move to torchcodec
        warnings.simplefilter("ignore", DeprecationWarning)
        return tvio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=TV_MODES[mode])


@pytest.mark.parametrize("decoder", ["accurate", "fast"])
def test_an_rgb_jpeg_decodes_to_planes_holding_one_image_of_memory(decoder):
    """An RGB JPEG goes straight to its planes: the interleaved [H, W, 3]
    image is never made beside them (twice the memory, fresh pages each, and
    one more pass over the pixels), whichever IDCT. NumPy's buffers are
    traced by tracemalloc."""
    import tracemalloc

    from tfrecord_torch.features.images import jpeg

    if not jpeg.crop_decoding_available():
        pytest.skip("the compiled helper is not built")
    data = encode(smooth(384, 512, 3), quality=90)
    decode_image(data, decoder=decoder)  # imports and first-call caches, outside the count
    tracemalloc.start()
    try:
        got = decode_image(data, decoder=decoder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = 3 * 384 * 512
    assert got.shape == (3, 384, 512) and got.is_contiguous()
    assert size <= peak < 1.25 * size, peak


@pytest.mark.parametrize("case", [c for c in JPEGS if c != "cmyk"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_jpeg_planes_equal_torchvisions_decode(case, mode):
    got = decode_image(JPEGS[case], mode)
    assert got.is_contiguous() and got.dtype == torch.uint8
    assert torch.equal(got, torchvision_decode(JPEGS[case], mode))


@pytest.mark.parametrize("case", list(JPEGS))
@pytest.mark.parametrize("mode", ["RGB", "L", "unchanged"])
def test_the_libjpeg_path_and_the_fallback_give_the_same_planes(case, mode, monkeypatch):
    """CMYK takes torchvision's decoder either way; the rest are decoded by
    simplejpeg unless it is turned off."""
    fast = decode_image(JPEGS[case], mode)
    monkeypatch.setattr(images, "_libjpeg", lambda data, gray: None)
    fallback = decode_image(JPEGS[case], mode)
    assert fast.is_contiguous() and fallback.is_contiguous()
    assert torch.equal(fast, fallback)


def test_a_jpeg_libjpeg_decodes_with_a_warning_decodes_as_torchvision_does():
    """Corrupt entropy data libjpeg papers over (a warning, an error to
    simplejpeg): the pixels torchvision and TensorFlow give, not an error."""
    data = bytearray(JPEGS["4:2:0 odd size"])
    middle = len(data) * 2 // 3
    data[middle:middle + 2] = b"\xff\xd3"  # a restart marker where none belongs
    data = bytes(data)
    assert images._libjpeg(data, False) is None
    want = torchvision_decode(data, "RGB")
    got = decode_image(data)
    assert got.is_contiguous() and torch.equal(got, want)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("option", [{"mode": "l"}, {"mode": "gray"}, {"frames": "last"}])
def test_a_mode_or_frames_not_offered_is_refused_for_every_format(fmt, option):
    """decode_image(data, "l") is a typo for "L", not a request for RGB: JPEGs
    (libjpeg's path) are refused as PNGs are, naming the argument."""
    name, value = next(iter(option.items()))
    with pytest.raises(ValueError, match=f"{name} must be one of .*, got '{value}'"):
        decode_image(encode(smooth(16, 16, 3), fmt), **option)


@pytest.mark.parametrize("attribute, value", [("mode", "l"), ("frames", "last"), ("decoder", "integer_fast")])
def test_an_image_features_option_set_after_it_was_made_is_still_refused(attribute, value):
    """An Image feature checks its options when made, not fully per record;
    one set on it since still fails the record, naming the option, rather
    than decoding to something else (a JPEG's libjpeg path takes any mode)."""
    from tfrecord_torch.errors import FeatureError

    feature = Image("image")
    setattr(feature, attribute, value)
    with pytest.raises(FeatureError, match=f"{attribute} must be one of .*, got '{value}'"):
        feature.decode({"image": [JPEGS["4:2:2"]]})


def test_a_truncated_jpeg_is_an_error():
    data = JPEGS["progressive"]
    with pytest.raises(RuntimeError, match="truncated"):
        decode_image(data[:len(data) // 2])


@pytest.mark.parametrize("case", ["rgb", "rgba", "gray", "16-bit"])
def test_other_formats_give_planes_too(case):
    a = rng.integers(0, 256, (9, 11, 4), dtype=np.uint8)
    data = {"rgb": encode(a[:, :, :3], "PNG"), "rgba": encode(a, "PNG"), "gray": encode(a[:, :, 0], "PNG"),
            "16-bit": encode(a[:, :, 0].astype(np.uint16) * 257, "PNG")}[case]
    got = decode_image(data, "unchanged")
    want = {"rgb": a[:, :, :3], "rgba": a, "gray": a[:, :, :1],
            "16-bit": a[:, :, :1].astype(np.uint16) * 257}[case]
    assert got.is_contiguous() and np.array_equal(got.permute(1, 2, 0).numpy(), want)


def test_all_frames_of_a_gif_stack_as_planes():
    frames = [PILImage.fromarray(rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)).convert("P") for _ in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=10)
    got = decode_image(buf.getvalue(), frames="all")
    assert got.shape == (3, 3, 6, 7) and got.is_contiguous()
    for frame, image in zip(got, frames):
        assert np.array_equal(frame.permute(1, 2, 0).numpy(), np.asarray(image.convert("RGB")))


def write_jpegs(path):
    with RecordWriter(path) as w:
        for i, data in enumerate(JPEGS.values()):
            w.write(make_example({"image": data, "label": i}))
    return list(JPEGS.values())


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_per_sample_items_are_planes_with_torchvisions_pixels(tmp_path, mode):
    """The README's spelling: each item's image stacks with plain copies and
    holds torchvision's decode of the record's JPEG (a CMYK one's luma is
    TensorFlow's arithmetic, tests/scenarios/tensorflow/test_image_parity.py)."""
    encoded = write_jpegs(tmp_path / "j.tfrecord")
    items = list(TFRecordDataset(tmp_path / "j.tfrecord", features=presets.tfds(mode=mode)))
    assert len(items) == len(encoded)
    for item, data, case in zip(items, encoded, JPEGS):
        assert item["image"].is_contiguous()
        if not (case == "cmyk" and mode == "L"):
            assert torch.equal(item["image"].as_subclass(torch.Tensor), torchvision_decode(data, mode))


@pytest.mark.parametrize("first", [v2.Resize(20), v2.RandomResizedCrop(16), v2.RandomShortestSize([20, 24])])
def test_a_transform_that_resizes_first_gets_the_channels_last_view(first):
    given = presets.tfds()
    spec = laid_out_for(given, v2.Compose([v2.Compose([first]), v2.ToDtype(torch.float32)]))
    data = JPEGS["4:2:0 odd size"]
    view = spec["image"].decode({"image": [data]})
    assert view.stride() == (1, 67 * 3, 3)
    assert torch.equal(view, decode_image(data))
    assert spec["label"] is given["label"] and repr(spec["image"]) == repr(Image("image"))
    assert given["image"].decode({"image": [data]}).is_contiguous()  # the caller's feature is left as it was


@pytest.mark.parametrize("transform", [v2.CenterCrop(16), v2.RandomHorizontalFlip(),
                                       v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Resize(20)])])
def test_other_transforms_get_planes(transform):
    spec = presets.tfds()
    assert laid_out_for(spec, transform) is spec
    assert spec["image"].decode({"image": [JPEGS["4:4:4"]]}).is_contiguous()


def note(inputs):
    SeenResize.seen.extend(x.stride() for x in tree_flatten(inputs)[0] if isinstance(x, tv_tensors.Image))


class SeenResize(v2.Resize):
    """v2.Resize, noting the strides of each image it is given."""

    seen: list = []

    def forward(self, *inputs):
        note(inputs)
        return super().forward(*inputs)


class SeenCrop(v2.CenterCrop):
    """v2.CenterCrop, noting the strides of each image it is given."""

    def forward(self, *inputs):
        note(inputs)
        return super().forward(*inputs)


@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset])
@pytest.mark.parametrize("head", [SeenResize, SeenCrop])
def test_each_dataset_lays_images_out_for_its_transform(tmp_path, dataset, head):
    """A transform that resizes first receives the channels-last view, any
    other planes; the values are the unfused transform's of the planes."""
    path = tmp_path / "j.tfrecord"
    encoded = write_jpegs(path)
    tail = v2.Compose([head(24), v2.CenterCrop(20)])
    SeenResize.seen = []
    ds = dataset(path, features=presets.tfds(), transform=tail)
    items = [ds[i] for i in range(len(encoded))] if dataset is IndexedTFRecordDataset else list(ds)
    sizes = [decode_image(data).shape for data in encoded]
    channels_last = [(1, w * c, c) for c, _, w in sizes]
    planes = [torch.empty(size).stride() for size in sizes]
    assert SeenResize.seen == (channels_last if head is SeenResize else planes)
    for item, data in zip(items, encoded):
        assert torch.equal(item["image"], tail(decode_image(data)))


def test_a_decoder_not_offered_is_refused_naming_the_allowed_values():
    with pytest.raises(ValueError, match=r"decoder must be one of \('fast', 'accurate'\), got 'integer_fast'"):
        Image("image", decoder="integer_fast")
    with pytest.raises(ValueError, match=r"decoder must be one of \('fast', 'accurate'\), got 'INTEGER_ACCURATE'"):
        decode_image(JPEGS["4:2:2"], decoder="INTEGER_ACCURATE")
    assert Image("image").decoder is None and Image("image").jpeg_decoder == "accurate"
    assert "decoder='fast'" in repr(Image("image", decoder="fast"))


def test_image_fast_without_simplejpeg_fails_when_made_not_per_record(monkeypatch):
    """The error comes from Image(), before any record is read (under
    on_error="skip" a per-record error would drop every image)."""
    from tfrecord_torch.features.images import jpeg
    from tfrecord_torch.features.images.jpeg import FastDecoderUnavailable

    monkeypatch.setattr(jpeg, "simplejpeg_available", lambda: False)
    with pytest.raises(FastDecoderUnavailable, match="pip install simplejpeg"):
        Image("image", decoder="fast")
    Image("image", decoder="accurate")


def test_fast_gives_the_fast_idct_for_every_jpeg_and_leaves_other_formats_alone():
    """Each JPEG differs between the decoders (so the option is not ignored);
    a PNG decodes the same either way."""
    for name, data in JPEGS.items():
        fast, accurate = decode_image(data, decoder="fast"), decode_image(data, decoder="accurate")
        assert fast.shape == accurate.shape and fast.is_contiguous(), name
        assert not torch.equal(fast, accurate), name
    png = encode(smooth(9, 11, 3), "PNG")
    assert torch.equal(decode_image(png, decoder="fast"), decode_image(png))
