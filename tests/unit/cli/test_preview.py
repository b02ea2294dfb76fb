"""``tfrecord-torch preview``: the contact sheet's size and cells for images of
every layout (gray, RGBA, 16-bit PNG, palette, varying sizes), gzip files, the
keys it finds or is given, and the errors for records that hold no image."""

import io

import numpy as np
import pytest
from helpers import png_bytes
from PIL import Image as PILImage

from tfrecord_torch import RecordWriter, make_example
from tfrecord_torch.cli import main
from tfrecord_torch.cli.preview import Layout
from tfrecord_torch.example.protos import Example, Feature, Features, Int64List


def centre(sheet: np.ndarray, layout: Layout, index: int) -> np.ndarray:
    """The pixel at the centre of cell ``index``'s image square."""
    x, y = layout.square(index)
    return sheet[y + layout.size // 2, x + layout.size // 2]


def read_sheet(path) -> np.ndarray:
    with PILImage.open(path) as im:
        return np.asarray(im.convert("RGB")).astype(int)


def test_every_image_layout_in_its_cell(tmp_path, capsys):
    """Each image's centre colour appears at its cell's centre: 16-bit
    samples scaled to 8 bits, transparency over gray, palettes expanded."""
    solid = [
        ("RGB", png_bytes(np.full((20, 30, 3), (10, 200, 90), np.uint8)), (10, 200, 90)),
        ("L", png_bytes(np.full((40, 10), 77, np.uint8)), (77, 77, 77)),
        ("RGBA opaque", png_bytes(np.full((16, 16, 4), (200, 10, 10, 255), np.uint8)), (200, 10, 10)),
        ("RGBA clear", png_bytes(np.full((16, 16, 4), (200, 10, 10, 0), np.uint8)), (128, 128, 128)),
        ("I;16", png_bytes(np.full((12, 12), 0xC000, np.uint16)), (191, 191, 191)),
        ("P", png_bytes(np.zeros((8, 8), np.uint8), "GIF"), None),
        ("JPEG", png_bytes(np.full((300, 200, 3), (40, 60, 220), np.uint8), "JPEG", quality=95), (40, 60, 220)),
    ]
    path = tmp_path / "mixed.tfrecord.gz"
    with RecordWriter(path, compression="gzip") as w:
        for i, (_, data, _) in enumerate(solid):
            w.write(make_example({"image": data, "label": i, "caption": f"picture {i}"}))
    out = tmp_path / "sheet.png"
    assert main(["preview", str(path), "-o", str(out), "--size", "64"]) == 0
    text = capsys.readouterr().out
    assert "7 images from 'image', labels from 'label'; 4 columns x 2 rows" in text
    assert f"cell 4: {path} record 4, label 4, PNG 12x12" in text
    layout = Layout(7, 4, 64)
    sheet = read_sheet(out)
    assert sheet.shape == (layout.height, layout.width, 3)
    with PILImage.open(io.BytesIO(solid[5][1])) as im:
        gif = np.asarray(im.convert("RGB"))[4, 4]
    for i, (name, _, colour) in enumerate(solid):
        want = gif if colour is None else colour
        assert np.abs(centre(sheet, layout, i) - np.asarray(want)).max() <= 2, name
    assert (sheet[0, :] == 32).all()  # the background around the cells


def test_given_keys_and_a_text_label(tmp_path, capsys):
    path = tmp_path / "two.tfrecord"
    with RecordWriter(path) as w:
        for i in range(5):
            w.write(make_example({"a": png_bytes(np.full((8, 8, 3), 20 * i, np.uint8)),
                                  "b": png_bytes(np.full((8, 8, 3), 250 - 20 * i, np.uint8)),
                                  "name": f"n{i}", "class": i}))
    out = tmp_path / "b.png"
    assert main(["preview", str(path), "--key", "b", "--label", "name", "--n", "3", "--cols", "2",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 images from 'b', labels from 'name'; 2 columns x 2 rows" in text
    assert "record 2, name n2, PNG 8x8" in text
    layout = Layout(3, 2, 128)
    sheet = read_sheet(out)
    assert [centre(sheet, layout, i).tolist() for i in range(3)] == [[250 - 20 * i] * 3 for i in range(3)]
    assert main(["preview", str(path), "--out", str(out)]) == 0  # 'class' found as the label
    assert "labels from 'class'" in capsys.readouterr().out


def test_a_record_whose_image_does_not_decode_names_the_key(tmp_path, capsys):
    path = tmp_path / "bad.tfrecord"
    good = png_bytes(np.zeros((8, 8, 3), np.uint8))
    with RecordWriter(path) as w:
        w.write(make_example({"image": good, "label": 0}))
        w.write(make_example({"image": good[:40], "label": 1}))  # a truncated PNG
        w.write(make_example({"image": b"not an image", "label": 2}))
    assert main(["preview", str(path), "--out", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert f"{path}: record 1 at byte offset" in err and "feature 'image': holds PNG bytes that do not decode" in err
    assert main(["preview", str(path), "--key", "label", "--out", str(tmp_path / "x.png")]) == 1
    assert "feature 'label': holds int64 values, not encoded image bytes" in capsys.readouterr().err


def test_no_images_lists_the_bytes_features(tmp_path, capsys):
    path = tmp_path / "text.tfrecord"
    with RecordWriter(path) as w:
        for i in range(3):
            w.write(make_example({"text": f"hello {i}", "blob": bytes(100), "label": i}))
    out = tmp_path / "x.png"
    assert main(["preview", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"no JPEG, PNG, GIF or WebP images in the first 3 records of {path}" in err
    assert "'blob' (100 bytes), 'text' (7 bytes)" in err and "--key" in err
    assert not out.exists()
    assert main(["preview", str(path), "--key", "nope", "--out", str(out)]) == 1
    assert "none of the first 3 records holds 'nope'" in capsys.readouterr().err


def test_records_without_the_image_are_left_out(tmp_path, capsys):
    path = tmp_path / "some.tfrecord"
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"label": i, **({"image": png_bytes(np.zeros((4, 4), np.uint8))} if i % 2 else {})}))
        empty = Example(features=Features(feature={"label": Feature(int64_list=Int64List(value=[4])),
                                                   "image": Feature()}))  # present, with no value
        w.write(empty.SerializeToString())
    assert main(["preview", str(path), "--out", str(tmp_path / "s.png")]) == 0
    text = capsys.readouterr().out
    assert "2 images from 'image'" in text and "3 of the first 5 records have no 'image'" in text
    assert "cell 1: " in text and "record 3, label 3" in text


@pytest.mark.parametrize("argv", [["--n", "0"], ["--cols", "0"], ["--size", "4"]])
def test_bad_arguments(tmp_path, capsys, argv):
    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example({"image": png_bytes(np.zeros((4, 4), np.uint8))}))
    assert main(["preview", str(path), *argv]) == 1
    assert "--n and --cols must be at least 1 and --size at least 16" in capsys.readouterr().err


def test_preview_imports_no_torch(tmp_path):
    """Like inspect and head, preview decodes with Pillow alone."""
    import subprocess
    import sys

    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example({"image": png_bytes(np.zeros((4, 4), np.uint8))}))
    code = ("import sys; from tfrecord_torch.cli import main; "
            f"assert main(['preview', {str(path)!r}, '--out', {str(tmp_path / 'p.png')!r}]) == 0; "
            "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


def test_preview_of_a_url(tmp_path, capsys):
    """Files are opened as the other commands open them: URLs too."""
    url = "memory://preview-test/a.tfrecord"
    with RecordWriter(url) as w:
        for i in range(3):
            w.write(make_example({"jpeg": png_bytes(np.full((6, 9, 3), 90, np.uint8), "JPEG"), "label": i}))
    out = tmp_path / "remote.png"
    assert main(["preview", url, "--out", str(out)]) == 0
    assert f"cell 2: {url} record 2, label 2, JPEG 9x6" in capsys.readouterr().out
    assert read_sheet(out).shape == (Layout(3, 3, 128).height, Layout(3, 3, 128).width, 3)
