"""Synthetic photo-like images for the image and conversion cases."""

from __future__ import annotations


def synth_image(seed: int, i: int, size: int):
    """A photo-like uint8 image [size, size, 3]: a two-colour gradient, a soft
    blob, a fine random texture, a few flat shapes and mild sensor noise. At
    256x256, JPEG quality 90 makes ~24 KB of it (a typical ImageNet-sized
    thumbnail); pure noise would be far larger, flat colour far smaller."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng([seed, i])
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    c0, c1, c2 = rng.uniform(0, 255, (3, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    t = np.cos(angle) * xx + np.sin(angle) * yy
    t = ((t - t.min()) / (np.ptp(t) + 1e-6))[..., None]
    img = c0 * (1 - t) + c1 * t
    cx, cy, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.5)
    w = np.clip(1 - np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2) / r, 0, 1)[..., None]
    img = img * (1 - w) + c2 * w
    field = rng.standard_normal((max(size // 4, 2),) * 2 + (3,), dtype=np.float32)
    texture = Image.fromarray(np.clip(field * 40 + 128, 0, 255).astype(np.uint8)).resize(
        (size, size), Image.BICUBIC)
    img += (np.asarray(texture, np.float32) - 128) * (27 / 40)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    scale = size / 256
    for _ in range(int(rng.integers(3, 8))):
        x0, y0 = (int(v) for v in rng.integers(0, size, 2))
        x1, y1 = (x0 + int(rng.integers(10, 120) * scale), y0 + int(rng.integers(10, 120) * scale))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            draw.line([x0, y0, x1, y1], fill=colour, width=max(1, int(rng.integers(2, 8) * scale)))
    arr = np.asarray(im.filter(ImageFilter.GaussianBlur(0.8 * scale)), np.float32)
    arr += rng.standard_normal(arr.shape, dtype=np.float32) * 6.5
    return np.clip(arr, 0, 255).astype(np.uint8)


def _synth_jpeg(job) -> bytes:
    import io

    from PIL import Image

    seed, i, size, quality = job
    buf = io.BytesIO()
    Image.fromarray(synth_image(seed, i, size)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def synth_jpegs(seed: int, n: int, size: int, quality: int):
    """The JPEG bytes of images 0..n-1, in order (made by 2 processes)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    with ctx.Pool(2) as pool:
        yield from pool.imap(_synth_jpeg, ((seed, i, size, quality) for i in range(n)), chunksize=16)




# (height, width) of the photo set and how often each comes: ImageNet's common shapes (500x375 the
# most common, a quarter portrait), a few larger camera-sized ones up to 800 px
PHOTO_SIZES = ((375, 500), (500, 375), (333, 500), (500, 333), (400, 500), (500, 500), (480, 640), (600, 800))
PHOTO_WEIGHTS = (0.45, 0.15, 0.10, 0.05, 0.07, 0.05, 0.08, 0.05)


def photo_image(seed: int, i: int, height: int, width: int):
    """A detailed photo-like uint8 image [height, width, 3]: a two-colour
    gradient under a 1/f texture (five octaves of noise, finest at 2 pixels,
    mostly in luminance as in photos of foliage or gravel), 8-19 hard-edged
    shapes and outlines, a slight blur and sensor noise. JPEG quality 90-95
    makes ~0.5 bytes a pixel of it (~95 KB at 500x375; 107 KB on average over
    PHOTO_SIZES, like ImageNet's photos), where :func:`synth_image` makes
    ~0.33 at quality 90."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng([seed, i, 2])
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32) / max(height, width)
    c0, c1 = rng.uniform(0, 255, (2, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    t = np.cos(angle) * xx + np.sin(angle) * yy
    t = ((t - t.min()) / (np.ptp(t) + 1e-6))[..., None]
    img = c0 * (1 - t) + c1 * t
    for cell, amplitude in ((32, 33), (16, 26), (8, 22), (4, 18), (2, 13)):
        grid = (-(-height // cell), -(-width // cell))
        field = (rng.standard_normal((*grid, 1), dtype=np.float32)
                 + 0.35 * rng.standard_normal((*grid, 3), dtype=np.float32))
        octave = Image.fromarray(np.clip(field * 40 + 128, 0, 255).astype(np.uint8)).resize(
            (width, height), Image.BICUBIC)
        img += (np.asarray(octave, np.float32) - 128) * (amplitude / 40)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    scale = max(height, width) / 256
    for _ in range(int(rng.integers(8, 20))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(6, 100) * scale), y0 + int(rng.integers(6, 100) * scale)
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], outline=colour, width=max(1, int(rng.integers(1, 4) * scale)))
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            draw.line([x0, y0, x1, y1], fill=colour, width=max(1, int(rng.integers(1, 6) * scale)))
    arr = np.asarray(im.filter(ImageFilter.GaussianBlur(0.6)), np.float32)
    arr += rng.standard_normal((height, width, 1), dtype=np.float32) * 6.0
    arr += rng.standard_normal((height, width, 3), dtype=np.float32) * 2.0
    return np.clip(arr, 0, 255).astype(np.uint8)


def photo_jpeg(job) -> bytes:
    """The JPEG of photo ``i`` (``job`` = (seed, i)): its size drawn from
    PHOTO_SIZES, its quality from 90-95, both from the seed."""
    import io

    import numpy as np
    from PIL import Image

    seed, i = job
    rng = np.random.default_rng([seed, i, 1])
    height, width = PHOTO_SIZES[int(rng.choice(len(PHOTO_SIZES), p=PHOTO_WEIGHTS))]
    quality = int(rng.integers(90, 96))
    buf = io.BytesIO()
    Image.fromarray(photo_image(seed, i, height, width)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
