"""``tfrecord-torch preview``: a contact sheet of the first images of record
files, each with its record number and label, written as a PNG.

The images are decoded with Pillow alone (no torch), so the command stays as
light as ``inspect``; 16-bit images are scaled to 8 bits and transparency is
laid over gray, for display only. The image key is found by the images' magic
bytes (see :mod:`tfrecord_torch.cli.sniff`) and the label key by its name,
when not given.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

import numpy as np

from tfrecord_torch.cli.sniff import sniff, sniff_image
from tfrecord_torch.errors import ExampleDecodeError, FeatureError
from tfrecord_torch.example.codec import has_feature_lists, parse_example, parse_sequence_example
from tfrecord_torch.example.schema import kind_of
from tfrecord_torch.features.images.limits import check_pixels, read_header
from tfrecord_torch.records.framing import iter_chunks
from tfrecord_torch.records.streams import open_stream

__all__ = ["CAPTION", "PAD", "Layout", "Shown", "run", "to_rgb"]

PAD = 4  # pixels around and between cells
CAPTION = 14  # pixels of caption text under each image square
_BACKGROUND = (32, 32, 32)
_MATTE = (128, 128, 128)  # what transparent pixels show
_LABEL_WORDS = ("label", "class")


@dataclass(frozen=True)
class Layout:
    """Where the cells of a contact sheet lie: ``cols`` x ``rows`` cells, each
    an image square of ``size`` pixels with a caption of CAPTION pixels under
    it, PAD pixels apart and from the edges."""

    count: int
    cols: int
    size: int

    @property
    def rows(self) -> int:
        return math.ceil(self.count / self.cols)

    @property
    def width(self) -> int:
        return self.cols * (self.size + PAD) + PAD

    @property
    def height(self) -> int:
        return self.rows * (self.size + CAPTION + PAD) + PAD

    def square(self, index: int) -> tuple[int, int]:
        """(x, y) of the top-left corner of cell ``index``'s image square."""
        row, col = divmod(index, self.cols)
        return PAD + col * (self.size + PAD), PAD + row * (self.size + CAPTION + PAD)


@dataclass(frozen=True)
class Shown:
    """One image on the sheet: where it came from and what its caption says."""

    path: str
    record: int
    label: str | None
    format: str
    width: int
    height: int

    def caption(self) -> str:
        return f"#{self.record}" if self.label is None else f"{self.label}  #{self.record}"


def run(args) -> int:
    """The ``preview`` subcommand: read, pick the keys, decode, draw, save, report."""
    from tfrecord_torch.cli.commands import expand

    if args.n < 1 or args.cols < 1 or args.size < 16:
        raise ValueError(f"--n and --cols must be at least 1 and --size at least 16, got --n {args.n}, "
                         f"--cols {args.cols}, --size {args.size}")
    records = _first_records(expand(args), args)
    if not records:
        raise ValueError("no records to preview (the files are empty)")
    key = args.key or _image_key(records)
    label_key = args.label or _label_key(records)
    pictures, shown, missing = [], [], 0
    for path, offset, number, features in records:
        if key not in features or kind_of(features[key]) == "empty":  # an empty Feature() holds no image either
            missing += 1
            continue
        picture, fmt = _decode(features[key], key, path, offset, number)
        pictures.append(picture)
        shown.append(Shown(path, number, _label(features, label_key), fmt, *picture.size))
    if not pictures:
        raise ValueError(f"none of the first {len(records)} records holds {key!r}; their keys: "
                         f"{sorted({k for r in records for k in r[3]})}")
    layout = Layout(len(pictures), min(args.cols, len(pictures)), args.size)
    _draw(pictures, shown, layout).save(args.out, format="PNG")
    labels = f", labels from {label_key!r}" if label_key else ", no label key (name one with --label)"
    print(f"{args.out}: {len(pictures)} images from {key!r}{labels}; {layout.cols} columns x {layout.rows} rows "
          f"of {layout.size}-pixel cells, {layout.width}x{layout.height} pixels")
    if missing:
        print(f"  ({missing} of the first {len(records)} records have no {key!r}: left out)")
    for i, s in enumerate(shown):
        label = "" if s.label is None else f", {label_key} {s.label}"
        print(f"  cell {i}: {s.path} record {s.record}{label}, {s.format} {s.width}x{s.height}")
    return 0


def _first_records(paths: list[str], args) -> list[tuple[str, int, int, dict]]:
    """(path, byte offset, record number, features) of the first ``args.n``
    records; a SequenceExample gives its context features."""
    compression = None if args.compression == "none" else args.compression
    out: list[tuple[str, int, int, dict]] = []
    for path in paths:
        with open_stream(path, compression, args.storage_options) as stream:
            for chunk in iter_chunks(stream):
                for payload, offset, number in zip(chunk.payloads(), chunk.offsets.tolist(),
                                                   chunk.numbers.tolist()):
                    try:
                        features = (parse_sequence_example(payload)[0] if has_feature_lists(payload)
                                    else parse_example(payload))
                    except ExampleDecodeError as e:
                        raise FeatureError(args.key, f"record is not a tf.train.Example: {e}",
                                           path, offset, number) from e
                    out.append((path, offset, number, features))
                    if len(out) == args.n:
                        return out
    return out


def _image_key(records: list) -> str:
    """The bytes feature holding encoded images in most of ``records``
    (a name with "image" in it wins a tie); ValueError listing the bytes
    features seen when none does."""
    votes: dict[str, int] = {}
    seen: dict[str, str] = {}
    for *_, features in records:
        for key, value in features.items():
            if kind_of(value) != "bytes":
                continue
            if sniff_image(value[0]) is not None:
                votes[key] = votes.get(key, 0) + 1
            elif key not in seen:
                found = sniff(value[0])
                seen[key] = f"{len(value[0])} bytes" + (f", {found.name}" if found else "")
    if not votes:
        listed = ", ".join(f"{k!r} ({v})" for k, v in sorted(seen.items())) or "none"
        files = ", ".join(dict.fromkeys(r[0] for r in records))
        raise ValueError(f"no JPEG, PNG, GIF or WebP images in the first {len(records)} records of {files}; "
                         f"bytes features seen: {listed}; name the image key with --key")
    return max(sorted(votes), key=lambda k: (votes[k], "image" in k.lower()))


def _label_key(records: list) -> str | None:
    """An int64 scalar feature named like a label ("label", "image/class/label",
    "class", ...) in every record, or None."""
    scalars = set.intersection(*({k for k, v in r[3].items() if kind_of(v) == "int64" and len(v) == 1}
                                 for r in records))

    def rank(key: str) -> tuple:
        name = key.lower().rsplit("/", 1)[-1]
        return (name != "label", not name.endswith("label"), "label" not in key.lower(), key)

    named = [k for k in scalars if any(w in k.lower() for w in _LABEL_WORDS)]
    return min(named, key=rank) if named else None


def _label(features: dict, key: str | None) -> str | None:
    if key is None:
        return None
    value = features.get(key)
    if value is None or len(value) == 0:
        return "-"
    if kind_of(value) == "bytes":
        text = value[0].decode("utf-8", "replace")
        return text if len(text) <= 24 else text[:21] + "..."
    shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in value[:3].tolist()]
    return ",".join(shown) + ("..." if len(value) > 3 else "")


def _decode(value, key: str, path: str, offset: int, number: int):
    """The first image of a record's ``key`` as an RGB Pillow image, and its format."""
    from PIL import Image as PILImage

    if kind_of(value) != "bytes":
        raise FeatureError(key, f"holds {kind_of(value)} values, not encoded image bytes; name the image "
                                "key with --key", path, offset, number)
    data = value[0]
    try:
        header = read_header(data)
        check_pixels(header)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning: check_pixels decided
            im = PILImage.open(io.BytesIO(data))
            im.load()
    except Exception as e:  # Pillow and the header reader raise many types for bytes that are no image
        found = sniff(data)
        if found is None or found.what != "images":
            what = f"{found.name} {found.what}" if found else f"bytes starting {data[:12]!r}"
            reason = f"holds {what} ({len(data)} bytes), not an image; name the image key with --key"
        else:
            reason = f"holds {found.name} bytes that do not decode ({len(data)} bytes): {type(e).__name__}: {e}"
        raise FeatureError(key, reason, path, offset, number) from e
    return to_rgb(im), (im.format or header.format).upper()


def to_rgb(im):
    """An 8-bit RGB Pillow image for display: 16-bit and float samples scaled
    to 0-255, transparency laid over gray, palettes expanded."""
    from PIL import Image as PILImage

    if im.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        array = np.asarray(im, dtype=np.float64)
        if im.mode == "F":  # float samples have no fixed range: stretch what is there
            low, high = float(array.min()), float(array.max())
            array = (array - low) * (255 / (high - low)) if high > low else np.zeros_like(array)
        else:
            array = array / 257  # 0-65535 onto 0-255
        return PILImage.fromarray(np.clip(np.rint(array), 0, 255).astype(np.uint8)).convert("RGB")
    if im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        matte = PILImage.new("RGBA", rgba.size, (*_MATTE, 255))
        return PILImage.alpha_composite(matte, rgba).convert("RGB")
    return im.convert("RGB")


def _draw(pictures: list, shown: list[Shown], layout: Layout):
    from PIL import Image as PILImage
    from PIL import ImageDraw, ImageFont, ImageOps

    sheet = PILImage.new("RGB", (layout.width, layout.height), _BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    plain = not isinstance(font, ImageFont.FreeTypeFont)  # Pillow without FreeType: a Latin-1 bitmap font
    for i, (picture, item) in enumerate(zip(pictures, shown)):
        x, y = layout.square(i)
        smaller = picture.width <= layout.size and picture.height <= layout.size
        # small images grow by whole pixels so they stay sharp; large ones shrink smoothly
        resample = PILImage.Resampling.NEAREST if smaller else PILImage.Resampling.BICUBIC
        thumb = ImageOps.contain(picture, (layout.size, layout.size), method=resample)
        sheet.paste(thumb, (x + (layout.size - thumb.width) // 2, y + (layout.size - thumb.height) // 2))
        text = item.caption()
        if plain:
            text = text.encode("latin-1", "replace").decode("latin-1")
        while len(text) > 3 and draw.textlength(text, font=font) > layout.size:
            text = text[:-4] + "..."
        draw.text((x, y + layout.size + 1), text, fill=(230, 230, 230), font=font)
    return sheet
