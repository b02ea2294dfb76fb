"""Pixel limits read from the header of every format, frames included, before decoding."""

import io
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image as PILImage

from tfrecord_torch import FeatureError, Image
from tfrecord_torch.features.images import decode as images
from tfrecord_torch.features.images import limits
from tfrecord_torch.features.images.decode import decode_image
from tfrecord_torch.features.images.limits import read_header

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def gif_bomb(frames=2000, size=2000):
    """A GIF of ``frames`` frames on a size x size canvas, each frame a 1x1 patch:
    46 KB on disk, 24 GB if every frame is decoded to a full canvas."""
    head = b"GIF89a" + size.to_bytes(2, "little") * 2 + bytes([0x80, 0, 0]) + b"\x00\x00\x00\xff\xff\xff"
    frame = (b"\x21\xf9\x04\x00\x01\x00\x00\x00"  # graphic control extension: 10 ms
             + b"\x2c" + bytes(4) + (1).to_bytes(2, "little") * 2 + b"\x00"  # a 1x1 frame
             + b"\x02\x02\x44\x01\x00")  # LZW: clear, pixel 0, end
    return head + frame * frames + b"\x3b"


def encoded(fmt, size=(40, 30), **kw):
    buf = io.BytesIO()
    PILImage.fromarray(np.zeros(size[::-1] + (3,), np.uint8)).save(buf, format=fmt, **kw)
    return buf.getvalue()


def test_gif_header_counts_frames_without_decoding():
    data = gif_bomb()
    assert len(data) < 47_000
    header = read_header(data)
    assert (header.format, header.width, header.height, header.frames) == ("gif", 2000, 2000, 2000)


DECODERS = ("torchvision", "pillow")


@pytest.fixture(scope="module")
def gif_bomb_child():
    """Each decoder's answer (``"ok"`` or its failure) from one child whose address space is
    capped at 1 GiB over what torch's import takes: one child for both decoders, as each
    child imports torch."""
    return _per_decoder_in_a_capped_child("from unit.features.images.test_limits import gif_bomb", "gif_bomb()", """
        def check(decoder):
            start = time.perf_counter()
            first = images.decode_image(data, "RGB")
            assert tuple(first.shape) == (3, 2000, 2000), first.shape
            del first
            try:
                images.decode_image(data, "RGB", frames="all")
                raise SystemExit("all frames decoded")
            except ValueError as e:
                assert "2000 frames of 2000x2000" in str(e), e
            assert time.perf_counter() - start < 30
            return "ok"
    """, timeout=120)


def _per_decoder_in_a_capped_child(imports: str, data: str, check: str, timeout: int) -> dict:
    """``check(decoder)`` (defined by ``check``, given ``data`` and ``images``)
    for each decoder path, in a child whose address space is capped at 1 GiB
    over what torch's import takes: decoder -> its answer, or its traceback."""
    code = textwrap.dedent(f"""
        import json, os, resource, sys, time, traceback
        sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
        import torch, torchvision.io
        {imports}
        from tfrecord_torch.features.images import decode as images
        status = open(f"/proc/{{os.getpid()}}/status").read()
        vm = int(status.split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
        data = {data}
        usable = images._torchvision_usable
    """) + textwrap.dedent(check) + textwrap.dedent(f"""
        answers = {{}}
        for decoder in {DECODERS!r}:
            images._torchvision_usable = usable if decoder == "torchvision" else (lambda: False)
            try:
                answers[decoder] = check(decoder)
            except BaseException:
                answers[decoder] = traceback.format_exc()
        print(json.dumps(answers))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# a child importing torch under a capped address space: about 10 s of CPU, slow; the limits read
# from the header (frames x pixels included) are checked fast above and below
@pytest.mark.slow
@pytest.mark.parametrize("decoder", DECODERS)
def test_gif_bomb_first_frame_in_bounded_memory_all_frames_refused(gif_bomb_child, decoder):
    """In a child whose address space is capped at 1 GiB over what torch's import
    takes: the first frame decodes, all frames are refused from the header."""
    assert gif_bomb_child[decoder] == "ok", gif_bomb_child[decoder][-2000:]


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_jpeg_frame_behind_a_restart_marker_is_refused_before_any_decoder_allocates():
    """restart_bomb(16500, 16500): 66 KB that libjpeg decodes to 16500x16500 (817 MB as RGB, about
    2.1 GB at torchvision's peak) while a walk reading a length after its RST0 sees 1x1. In a child
    whose address space is capped at 1 GiB over what torch's import takes, decode_image refuses it
    by the pixel limit from its header, on torchvision's path and on Pillow's."""
    answers = _per_decoder_in_a_capped_child("from helpers import restart_bomb", "restart_bomb(16500, 16500)", """
        def check(decoder):
            try:
                images.decode_image(data, "RGB")
                return "decoded"
            except ValueError as e:
                return str(e)
    """, timeout=300)
    for decoder in DECODERS:
        assert answers[decoder] == ("jpeg image of 16500x16500 pixels exceeds the limit of "
                                    f"{limits.MAX_IMAGE_PIXELS} pixels (MAX_IMAGE_PIXELS)"), answers[decoder][-2000:]


@pytest.mark.parametrize("fmt,kw", [("PNG", {}), ("JPEG", {}), ("GIF", {}), ("WEBP", {}),
                                    ("WEBP", {"lossless": True}), ("BMP", {}), ("TIFF", {})])
@pytest.mark.parametrize("decoder", ["torchvision", "pillow"])
def test_pixel_limit_checked_from_every_header(fmt, kw, decoder, monkeypatch):
    if decoder == "pillow":
        monkeypatch.setattr(images, "_torchvision_usable", lambda: False)
    data = encoded(fmt, **kw)
    assert (read_header(data).width, read_header(data).height) == (40, 30)
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 40 * 30 - 1)
    with pytest.raises(ValueError, match="exceeds the limit"):
        decode_image(data)
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 40 * 30)
    assert decode_image(data).shape == (3, 30, 40)


@pytest.mark.parametrize("fmt", ["GIF", "WEBP"])
def test_frame_count_times_pixels_is_limited(fmt, monkeypatch):
    frames = [PILImage.fromarray(np.full((30, 40, 3), i * 60, np.uint8)) for i in range(4)]
    buf = io.BytesIO()
    frames[0].save(buf, format=fmt, save_all=True, append_images=frames[1:], duration=10, loop=0)
    data = buf.getvalue()
    assert read_header(data).frames == 4
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 40 * 30 * 3)
    assert decode_image(data).shape == (3, 30, 40)  # the first frame fits
    with pytest.raises(ValueError, match="4 frames of 40x30"):
        decode_image(data, frames="all")
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 40 * 30 * 4)
    assert decode_image(data, frames="all").shape == (4, 3, 30, 40)


def test_rgba_from_jpeg_names_the_key_and_cause():
    with pytest.raises(FeatureError) as info:
        Image("image/encoded", mode="RGBA").decode({"image/encoded": [encoded("JPEG")]})
    assert info.value.key == "image/encoded" and "JPEG has no alpha channel" in str(info.value)


def test_rgba_from_jpeg_in_a_dataset_names_file_record_and_key(tmp_path):
    from tfrecord_torch import RecordWriter, TFRecordDataset, make_example

    path = tmp_path / "j.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example({"image/encoded": encoded("PNG")}))
        w.write(make_example({"image/encoded": encoded("JPEG")}))
    ds = TFRecordDataset(path, features={"image": Image("image/encoded", mode="RGBA")})
    with pytest.raises(FeatureError) as info:
        list(ds)
    message = str(info.value)
    assert info.value.record == 1 and str(path) in message and "image/encoded" in message
    assert "JPEG has no alpha channel" in message and "mode='RGB'" in message


@pytest.mark.slow  # 1,800 decodes of mutated images in a child process
def test_mutated_images_never_crash_or_balloon():
    """Bit flips, byte overwrites and truncations of every format, decoded in every
    mode in a child capped at 1 GiB over torch's import: each gives a tensor or a
    Python exception (which Image turns into a FeatureError), never a crash."""
    code = textwrap.dedent(f"""
        import io, os, resource, sys
        sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
        import numpy as np, torch, torchvision.io
        from PIL import Image as PILImage
        from unit.features.images.test_limits import gif_bomb
        from tfrecord_torch.features.images.decode import decode_image
        from tfrecord_torch.features.images.masks import decode_mask
        status = open(f"/proc/{{os.getpid()}}/status").read()
        vm = int(status.split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
        rng = np.random.default_rng(14)
        def save(a, fmt, **kw):
            buf = io.BytesIO(); PILImage.fromarray(a).save(buf, format=fmt, **kw); return buf.getvalue()
        a = rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)
        frames = [PILImage.fromarray(np.roll(a, k, 0)) for k in range(3)]
        buf = io.BytesIO(); frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
        seeds = [save(a, "PNG"), save(a, "JPEG"), save(a, "JPEG", progressive=True), buf.getvalue(),
                 save(a, "WEBP"), save(a, "WEBP", lossless=True), save(a, "BMP"), gif_bomb(4, 30),
                 save(a[:, :, 0], "PNG"), save((a.astype(np.uint16) * 257)[:, :, 0], "PNG")]
        outcomes = {{"ok": 0, "error": 0}}
        for seed in seeds:
            for trial in range(60):
                data = bytearray(seed)
                kind = trial % 3
                if kind == 0:
                    for _ in range(1 + trial % 4):
                        data[int(rng.integers(0, len(data)))] ^= 1 << int(rng.integers(0, 8))
                elif kind == 1:
                    pos = int(rng.integers(0, len(data)))
                    data[pos:pos + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
                else:
                    data = data[:int(rng.integers(0, len(data)))]
                for mode, frames in (("RGB", "first"), ("unchanged", "all"), ("L", "first")):
                    try:
                        decode_image(bytes(data), mode, frames=frames)
                        outcomes["ok"] += 1
                    except Exception:
                        outcomes["error"] += 1
                try:
                    decode_mask(bytes(data))
                except Exception:
                    pass
        print(outcomes)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert "'ok'" in out.stdout and "'error'" in out.stdout


def _outcome(data):
    """read_header's answer for ``data``: the header, or the error's type and message."""
    try:
        return read_header(data)
    except Exception as e:  # noqa: BLE001 - compared, not raised
        return _error(e)


def _error(e):
    return type(e), re.sub(r"0x[0-9a-f]+", "0x...", str(e))  # Pillow's messages name a BytesIO's address


def _batch_outcomes(images):
    return [_error(h) if isinstance(h, Exception) else h for h in limits.read_headers(images)]


def _header_corpus():
    rng = np.random.default_rng(3)
    photo = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    base = encoded("JPEG", (64, 48))
    out = {
        "baseline": base,
        "progressive": _save(photo, "JPEG", progressive=True),
        "gray": _save(photo[..., 0], "JPEG"),
        "cmyk": _save(PILImage.fromarray(photo).convert("CMYK"), "JPEG"),
        "exif": _save(photo, "JPEG", exif=b"Exif\x00\x00" + bytes(3000)),
        "fill bytes": base[:2] + b"\xff" * 7 + base[2:],
        "65000x1": b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x01\xfd\xe8\x03" + bytes(20),
        "sof after a marker of length 0": b"\xff\xd8\xff\xe0\x00\x00\xff\xc2\x00\x11\x0c\x01\x02\x03\x04\x01" + bytes(8),
        "marker length past the end": b"\xff\xd8\xff\xe0\xff\xff" + bytes(30),
        "no marker after SOI": b"\xff\xd8\xff" + bytes(40),
        "DHT and DAC are not frames": b"\xff\xd8\xff\xc4\x00\x02\xff\xcc\x00\x02\xff\xc8\x00\x02" + bytes(12),
        "png": encoded("PNG"),
        "palette png": _save(PILImage.fromarray(photo).convert("P"), "PNG", transparency=0),
        "gif": encoded("GIF"),
        "webp": encoded("WEBP"),
        "bmp": encoded("BMP"),
        "garbage": bytes(rng.integers(0, 256, 200, dtype=np.uint8)),
        "empty": b"",
        "jpeg magic only": b"\xff\xd8\xff",
    }
    for cut in (3, 4, 10, 20, 100, len(base) // 2):
        out[f"jpeg cut at {cut}"] = base[:cut]
    return out


def _save(image, fmt, **kw):
    buf = io.BytesIO()
    (image if isinstance(image, PILImage.Image) else PILImage.fromarray(image)).save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("compiled", [True, False])
def test_batch_headers_equal_read_header_on_each_image(compiled, monkeypatch):
    """A batch of valid, odd, truncated and corrupt JPEGs, other formats and
    garbage: read_headers gives each image read_header's header, or its error
    with the same type and message, with and without the compiled scan."""
    if compiled and limits._HELPER is None:
        pytest.skip("the compiled helper is not built")
    if not compiled:
        monkeypatch.setattr(limits, "_HELPER", None)
    corpus = _header_corpus()
    images = list(corpus.values())
    expected = [_outcome(data) for data in images]
    assert expected[0] == limits.Header("jpeg", 64, 48, 1, 3, 8)
    assert expected[list(corpus).index("cmyk")].channels == 4
    assert isinstance(expected[list(corpus).index("jpeg cut at 100")], tuple)
    for name, got, want in zip(corpus, _batch_outcomes(images), expected):
        assert got == want, name


def test_batch_headers_of_every_truncation_equal_read_header():
    """Every prefix of a JPEG with an EXIF block: the same header or error as read_header."""
    data = _save(np.zeros((20, 30, 3), np.uint8), "JPEG", exif=b"Exif\x00\x00" + bytes(100))
    prefixes = [data[:n] for n in range(len(data) + 1)]
    assert _batch_outcomes(prefixes) == [_outcome(p) for p in prefixes]


def test_batch_headers_read_objects_other_than_bytes_in_python():
    """A bytearray or memoryview takes read_header's own path: the same answer."""
    data = encoded("JPEG")
    images = [bytearray(data), memoryview(data), data]
    assert _batch_outcomes(images) == [_outcome(d) for d in images]


@pytest.mark.parametrize("compiled", [True, False])
def test_batch_headers_of_a_generator_and_of_one_image_given_alone(compiled, monkeypatch):
    """A generator of images gets the headers of their list (once, [] where the helper is built);
    one image given where a batch is expected is refused alike, with or without the helper."""
    if compiled and limits._HELPER is None:
        pytest.skip("the compiled helper is not built")
    if not compiled:
        monkeypatch.setattr(limits, "_HELPER", None)
    images = list(_header_corpus().values())
    assert _batch_outcomes(data for data in images) == [_outcome(data) for data in images]
    for one in (images[0], bytearray(images[0])):
        with pytest.raises(TypeError, match=r"images must be a sequence of images, got (bytes|bytearray)"):
            limits.read_headers(one)


def test_bytes_of_no_image_format_are_named_by_their_first_bytes():
    """Pillow's own message names only the BytesIO object it was given (an
    address); the error says what the bytes begin with instead."""
    from tfrecord_torch.features.images.limits import read_header

    with pytest.raises(ValueError) as e:
        read_header(b"not a jpeg at all")
    assert "begin b'not a jp'" in str(e.value) and "0x" not in str(e.value)
