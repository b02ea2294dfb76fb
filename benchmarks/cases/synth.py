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


