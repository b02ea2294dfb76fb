"""How far TensorFlow's default JPEG decode is from ``Image()``'s, in levels (0-255).

``tf.io.decode_jpeg(data, channels=3)`` uses libjpeg's fast integer IDCT by
default; ``Image()`` decodes as ``dct_method="INTEGER_ACCURATE"`` does (libjpeg's
accurate integer IDCT, also torchvision's and Pillow's). This encodes the same
images several ways, reads them back through ``TFRecordDataset(...,
features={"image": Image()})`` and prints, per encoder, the largest difference
from TF's default decode, the 99.9th percentile and the mean over every pixel
and channel, and (as a check) the largest difference from ``INTEGER_ACCURATE``::

    PYTHONPATH=. python benchmarks/jpeg_idct.py

The images: matplotlib's sample photograph (``grace_hopper.jpg``,
512x600), as it ships and decoded to pixels, and its 2x downscale and 2x
upscale; and matplotlib's sample elevation model of the Jacksboro fault
rendered as a shaded-relief colour image (natural texture, 403x344, and its
2x upscale). The encoders: Pillow at quality 75, 90 and 95 (4:2:0), and
TFDS's ``Image(encoding_format="jpeg")`` (``tf.image.encode_jpeg``'s defaults:
quality 95, 4:2:0), which is what TFDS datasets hold (``write_dataset``'s default
is Pillow at quality 95).
"""

from __future__ import annotations

import io
import os
import sys
import tempfile

import numpy as np
import torchvision  # noqa: F401  (before TensorFlow, as the library's docs say)
from PIL import Image as PILImage

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfrecord_torch import Image, RecordWriter, TFRecordDataset, make_example  # noqa: E402


def images() -> dict[str, np.ndarray]:
    """The source pixels, uint8 [H, W, 3], by name."""
    from matplotlib import cbook
    from matplotlib.colors import LightSource

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = PILImage.open(f).convert("RGB")
    dem = cbook.get_sample_data("jacksboro_fault_dem.npz")  # an NpzFile already
    elevation = dem["elevation"].astype(np.float64)
    import matplotlib

    relief = LightSource(azdeg=315, altdeg=45).shade(elevation, cmap=matplotlib.colormaps["gist_earth"],
                                                     vert_exag=0.05, blend_mode="soft")
    terrain = PILImage.fromarray((relief[..., :3] * 255).round().astype(np.uint8))
    w, h = hopper.size
    return {
        "hopper": np.asarray(hopper),
        "hopper /2": np.asarray(hopper.resize((w // 2, h // 2), PILImage.LANCZOS)),
        "hopper x2": np.asarray(hopper.resize((w * 2, h * 2), PILImage.BICUBIC)),
        "terrain": np.asarray(terrain),
        "terrain x2": np.asarray(terrain.resize((terrain.width * 2, terrain.height * 2), PILImage.BICUBIC)),
    }


def pillow(pixels: np.ndarray, quality: int) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(pixels).save(buf, format="JPEG", quality=quality, subsampling=2)  # 2: 4:2:0
    return buf.getvalue()


def encoders():
    import tensorflow_datasets as tfds

    tfds_image = tfds.features.Image(encoding_format="jpeg")
    return {
        "Pillow q75 4:2:0": lambda p: pillow(p, 75),
        "Pillow q90 4:2:0": lambda p: pillow(p, 90),
        "Pillow q95 4:2:0": lambda p: pillow(p, 95),
        "TFDS Image() (tf.image.encode_jpeg q95 4:2:0)": tfds_image.encode_example,
    }


def ours(jpegs: list[bytes]) -> list[np.ndarray]:
    """The images as ``Image()`` decodes them through a dataset, uint8 [H, W, 3]."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "images.tfrecord")
        with RecordWriter(path) as w:
            for data in jpegs:
                w.write(make_example({"image": data}))
        return [item["image"].permute(1, 2, 0).numpy() for item in
                TFRecordDataset(path, features={"image": Image()})]


def compare(name: str, jpegs: list[bytes]) -> str:
    import tensorflow as tf

    fast, accurate = [], []
    for data, mine in zip(jpegs, ours(jpegs)):
        mine = mine.astype(np.int16)
        fast.append(np.abs(mine - tf.io.decode_jpeg(data, channels=3).numpy()).ravel())
        accurate.append(np.abs(mine - tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy()))
    diff = np.concatenate(fast)
    return (f"| {name} | {len(jpegs)} | {diff.max()} | {np.percentile(diff, 99.9):.0f} | {diff.mean():.2f} | "
            f"{max(int(a.max()) for a in accurate)} |")


def main() -> None:
    import tensorflow as tf

    sources = images()
    print(f"TensorFlow {tf.__version__}; images: " + ", ".join(f"{k} {v.shape[1]}x{v.shape[0]}"
                                                              for k, v in sources.items()))
    print("| encoder | images | max vs TF default | 99.9th pct | mean | max vs INTEGER_ACCURATE |")
    print("|---|---|---|---|---|---|")
    from matplotlib import cbook

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        print(compare("grace_hopper.jpg as it ships", [f.read()]))
    for name, encode in encoders().items():
        print(compare(name, [encode(pixels) for pixels in sources.values()]))


if __name__ == "__main__":
    main()
