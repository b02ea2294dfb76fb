"""Case B on photos: case B's rows (images_crop) over larger, more detailed JPEGs of varied sizes,
~107 KB on average, the size of ImageNet's photos, where the entropy decoding weighs more than on
images_crop's 61 KB ones."""

from __future__ import annotations

from benchmarks.cases.image_peers import peer_targets
from benchmarks.cases.images_crop import CROP
from benchmarks.harness.registry import CASES, case, dataset, target, worker


@dataset("images_photo_jpeg", full={"records": 2000, "seed": 3},
         quick={"records": 256, "seed": 3},
         tiny={"records": 16, "seed": 3},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: 'image' = an RGB JPEG of a synthetic "
                             "detailed photo (gradient under a 1/f texture, hard-edged shapes, sensor noise), "
                             "quality 90-95, sized like ImageNet's: 45% 500x375, 15% 375x500, the rest "
                             "500x333, 333x500, 500x400, 500x500, 640x480, 800x600 + int64 'label' (i % 1000)"))
def build_photos(path: str, p: dict) -> dict:
    import multiprocessing

    from benchmarks.cases.synth import photo_jpeg
    from tfrecord_torch import RecordWriter, make_example

    n, jpeg_bytes = p["records"], 0
    with multiprocessing.get_context("fork").Pool(2) as pool, RecordWriter(path) as w:
        for i, data in enumerate(pool.imap(photo_jpeg, ((p["seed"], i) for i in range(n)), chunksize=8)):
            w.write(make_example({"image": data, "label": i % 1000}))
            jpeg_bytes += len(data)
        payload = w.offset - 16 * n
    return {"records": n, "bytes": payload, "checksum": sum(i % 1000 for i in range(n)),
            "pixels": n * 3 * CROP * CROP, "about": f"mean JPEG {jpeg_bytes / n / 1e3:.1f} KB"}


case("images_photo", dataset="images_photo_jpeg", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     ref="tf.data",
     title="ImageNet training idiom on photo-sized JPEGs (~107 KB, 500x375 to 800x600): "
           "RandomResizedCrop(224) + flip, batches of 64, on 2 cores",
     short="images_photo: ~107 KB photos, RandomResizedCrop(224) + flip -> [64, 3, 224, 224]")

for _impl in CASES["images_crop"].impls.values():  # case B's rows, each as images_crop runs it
    worker("images_photo", _impl.name, note=_impl.note, ref=_impl.ref, python=_impl.python,
           yardstick=_impl.yardstick)(_impl.make)

target("images_photo", "ours batch mode (workers=0) >= 1.3x tf.data", "ours batch mode (workers=0)", "tf.data",
       at_least=1.3)
target("images_photo", "ours batch mode >= 1.3x tf.data", "ours batch mode", "tf.data", at_least=1.3)
peer_targets("images_photo")
