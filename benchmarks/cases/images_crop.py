"""Case B, the ImageNet training idiom: ~500x375 JPEGs, RandomResizedCrop(224) + flip, batches of 64."""

from __future__ import annotations

from benchmarks.cases.image_peers import add_image_peers
from benchmarks.cases.images import IMAGE_BATCH, _image_tally, jpegs_in_memory, on_threads
from benchmarks.harness.registry import SPEC, case, dataset, target, worker

CROP = 224


def _crop_jpeg(job) -> bytes:
    import io

    from PIL import Image

    from benchmarks.cases.synth import synth_image

    seed, i, quality = job
    array = synth_image(seed, i, 500)[:375] if i % 2 else synth_image(seed, i, 500)[:, :375]  # 500x375, 375x500
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@dataset("images_crop_jpeg", full={"records": 2000, "quality": 90, "seed": 1},
         quick={"records": 256, "quality": 90, "seed": 1},
         tiny={"records": 16, "quality": 90, "seed": 1},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: 'image' = a 500x375 or 375x500 RGB JPEG "
                             f"(quality {p['quality']}, synthetic photo-like) + int64 'label' (i % 1000)"))
def build_crop_images(path: str, p: dict) -> dict:
    import multiprocessing

    from tfrecord_torch import RecordWriter, make_example

    n, jpeg_bytes = p["records"], 0
    with multiprocessing.get_context("fork").Pool(2) as pool, RecordWriter(path) as w:
        for i, data in enumerate(pool.imap(_crop_jpeg, ((p["seed"], i, p["quality"]) for i in range(n)),
                                           chunksize=8)):
            w.write(make_example({"image": data, "label": i % 1000}))
            jpeg_bytes += len(data)
        payload = w.offset - 16 * n
    return {"records": n, "bytes": payload, "checksum": sum(i % 1000 for i in range(n)),
            "pixels": n * 3 * CROP * CROP, "about": f"mean JPEG {jpeg_bytes / n / 1e3:.1f} KB"}


case("images_crop", dataset="images_crop_jpeg", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     ref="tf.data",
     title="ImageNet training idiom: ~500x375 JPEG records, RandomResizedCrop(224) + flip, batches of 64, "
           "on 2 cores",
     short="images_crop: RandomResizedCrop(224) + flip -> [64, 3, 224, 224]")


def _transform():
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(CROP), v2.RandomHorizontalFlip()])


def _ours_batched(path, workers: int, persistent: bool = False, **options):
    import torch.utils.data

    from tfrecord_torch import Batching, ImageBatching, TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(), batch_size=IMAGE_BATCH, transform=_transform(),
                         batching=Batching(images=ImageBatching(**options)))
    if persistent:
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)
        return lambda: _image_tally(loader)
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))


@worker("images_crop", "ours batch mode",
        note=f"TFRecordDataset(path, features=presets.tfds(), batch_size={IMAGE_BATCH}, transform=v2.Compose("
             "[v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()])) through DataLoader(batch_size=None, "
             "num_workers=2): the crop is fused (only the crop window decoded, by the compiled libjpeg-turbo "
             "helper; torch's antialiased resize kernel, as v2.Resize; flip) on each worker's decode threads "
             "into one uint8 [64, 3, 224, 224] buffer")
def crop_ours_batched(path):
    return _ours_batched(path, 2)


@worker("images_crop", "ours batch mode (persistent workers)",
        note="the same DataLoader made once with persistent_workers=True and iterated each pass, as a "
             "training loop runs its epochs (workers and their segments live across passes)")
def crop_ours_batched_persistent(path):
    return _ours_batched(path, 2, persistent=True)


@worker("images_crop", "ours batch mode (workers=0)",
        note="the same with num_workers=0 (decode threads in the main process)")
def crop_ours_batched0(path):
    return _ours_batched(path, 0)


@worker("images_crop", "ours per sample",
        note=f"as users write it: TFRecordDataset(path, features=presets.tfds(), transform=v2.Compose(...)) "
             f"through DataLoader(batch_size={IMAGE_BATCH}, num_workers=2); the crop head fused per sample "
             f"(crop-window decode, v2.Resize's kernel), then v2 ops")
def crop_ours_per_sample(path):
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(), transform=_transform())
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2))


@worker("images_crop", "ours per sample (persistent workers)",
        note="the per-sample DataLoader made once with persistent_workers=True and iterated each pass")
def crop_ours_per_sample_persistent(path):
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(), transform=_transform())
    loader = torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2, persistent_workers=True)
    return lambda: _image_tally(loader)


def _tf_pipeline(path, fused: bool):
    import tensorflow as tf

    desc = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):  # the standard ResNet preprocessing (tensorflow/models preprocessing.py)
        ex = tf.io.parse_single_example(record, desc)
        shape = tf.io.extract_jpeg_shape(ex["image"])
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), min_object_covered=0.1,
            aspect_ratio_range=[3 / 4, 4 / 3], area_range=[0.08, 1.0], max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        if fused:
            image = tf.io.decode_and_crop_jpeg(ex["image"], tf.stack([y, x, h, w]), channels=3)
        else:
            image = tf.image.crop_to_bounding_box(tf.io.decode_jpeg(ex["image"], channels=3), y, x, h, w)
        image = tf.image.random_flip_left_right(tf.image.resize(image, [CROP, CROP]))
        return {"image": tf.cast(tf.clip_by_value(image + 0.5, 0, 255), tf.uint8), "label": ex["label"]}

    def run():
        ds = (tf.data.Dataset.from_tensor_slices([path])
              .interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(IMAGE_BATCH).prefetch(tf.data.AUTOTUNE))
        return _image_tally(ds.as_numpy_iterator())
    return run


@worker("images_crop", "tf.data",
        note="tf.data's ResNet preprocessing: interleave(TFRecordDataset), map(parse_single_example, "
             "sample_distorted_bounding_box, decode_and_crop_jpeg, resize 224, random_flip_left_right, "
             f"uint8; AUTOTUNE), batch({IMAGE_BATCH}), prefetch(AUTOTUNE); CRCs checked")
def crop_tf(path):
    return _tf_pipeline(path, fused=True)


@worker("images_crop", "tf.data (full decode)",
        note="the same with decode_jpeg then crop_to_bounding_box (no crop-window decoding)")
def crop_tf_full(path):
    return _tf_pipeline(path, fused=False)


add_image_peers("images_crop", crop=CROP)


@worker("images_crop", "decode-only limit (simplejpeg threads)", yardstick=True,
        note="ceiling, not a peer: full simplejpeg decodes (fastdct) of the JPEGs in memory on a thread per "
             "core, no crop, resize or batching")
def crop_decode_limit(path):
    import simplejpeg

    jpegs, labels = jpegs_in_memory(path)
    return on_threads(len(jpegs), lambda i: simplejpeg.decode_jpeg(jpegs[i], fastdct=True),
                      {"records": len(jpegs), "pixels": len(jpegs) * 3 * CROP * CROP, "checksum": labels})


target("images_crop", "ours batch mode >= 1.15x tf.data", "ours batch mode", "tf.data", at_least=1.15)
target("images_crop", "ours batch mode (workers=0) >= 1.15x tf.data", "ours batch mode (workers=0)", "tf.data",
       at_least=1.15)


def _windows(path):
    """The JPEGs in memory, each with a crop window and flip drawn as v2.RandomResizedCrop(224) and
    RandomHorizontalFlip draw them (the library's own draws, seeded), and the label sum."""
    import torch
    from torchvision.transforms import v2

    from tfrecord_torch.features.images.crop import crop_params_batch, plan_transform
    from tfrecord_torch.features.images.limits import read_header

    jpegs, labels = jpegs_in_memory(path)
    plan, _ = plan_transform(v2.Compose([v2.RandomResizedCrop(CROP), v2.RandomHorizontalFlip()]))
    headers = [read_header(j) for j in jpegs]
    params = crop_params_batch(plan, [(h.height, h.width) for h in headers], torch.Generator().manual_seed(0))
    return jpegs, params, labels


def _window_limit(path, resize: bool):
    import numpy as np

    from tfrecord_torch.features.images.crop import Box, resize_into
    from tfrecord_torch.features.images.jpeg import decode_jpeg_window

    jpegs, params, labels = _windows(path)
    out = np.empty((len(jpegs), CROP, CROP, 3), np.uint8)

    def one(i):
        c = params[i]
        window = decode_jpeg_window(jpegs[i], c.box)
        if resize:
            resize_into(window, Box(0, 0, c.height, c.width), c.flip, "bilinear", out[i])

    return on_threads(len(jpegs), one, {"records": len(jpegs), "pixels": len(jpegs) * 3 * CROP * CROP,
                                        "checksum": labels})


@worker("images_crop", "crop-window decode-only limit", yardstick=True,
        note="ceiling, not a peer: only the crop windows decoded (the compiled libjpeg-turbo helper, TF's "
             "default IDCT, as decode_and_crop_jpeg), windows drawn as RandomResizedCrop(224), JPEGs in "
             "memory, a thread per core; no resize, flip, reading or batching")
def crop_window_limit(path):
    return _window_limit(path, resize=False)


@worker("images_crop", "crop-window decode + resize limit", yardstick=True,
        note="ceiling, not a peer: the same windows decoded, then resized to 224x224 (torch's antialiased "
             "kernel, v2.Resize's pixels) and flipped into one buffer; no reading, parsing or batching")
def crop_window_resize_limit(path):
    return _window_limit(path, resize=True)




def _dali_index(path: str) -> str:
    """DALI's index file (``offset framed_size`` per record), by walking the frames."""
    import os
    import struct
    import tempfile

    lines, offset, end = [], 0, os.path.getsize(path)
    with open(path, "rb") as f:
        while offset < end:
            f.seek(offset)
            (length,) = struct.unpack("<Q", f.read(8))
            lines.append(f"{offset} {length + 16}\n")
            offset += length + 16
    index = os.path.join(tempfile.mkdtemp(dir=SPEC.get("scratch")), "dali.idx")  # in the run's scratch folder
    with open(index, "w") as f:
        f.writelines(lines)
    return index


@worker("images_crop", "DALI CPU", python="dali",
        note="NVIDIA DALI 2.4 (nvidia-dali-cuda120 wheel) on the CPU only (device_id=None, num_threads=2): "
             "readers.tfrecord, decoders.image_random_crop (crop-window decoding, libjpeg-turbo), "
             f"resize {CROP}x{CROP}, flip(horizontal=coin_flip); batch {IMAGE_BATCH}; needs its own venv "
             "benchmarks/venvs/dali (pip install nvidia-dali-cuda120 numpy); no GPU needed")
def crop_dali(path):
    import numpy as np
    from nvidia import dali
    from nvidia.dali import fn, pipeline_def

    index = _dali_index(path)
    n = sum(1 for _ in open(index))

    @pipeline_def(batch_size=IMAGE_BATCH, num_threads=2, device_id=None, seed=0, prefetch_queue_depth=2)
    def pipe():
        inputs = fn.readers.tfrecord(
            path=path, index_path=index, name="reader",
            features={"image": dali.tfrecord.FixedLenFeature((), dali.tfrecord.string, ""),
                      "label": dali.tfrecord.FixedLenFeature([1], dali.tfrecord.int64, -1)})
        images = fn.decoders.image_random_crop(inputs["image"], device="cpu", output_type=dali.types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, resize_x=CROP, resize_y=CROP)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, inputs["label"]

    p = pipe()
    p.build()

    def run():
        records = checksum = pixels = 0
        while records < n:
            images, labels = p.run()
            take = min(IMAGE_BATCH, n - records)  # the reader wraps around; count one epoch
            lab = labels.as_array().reshape(-1)[:take]
            records += take
            checksum += int(lab.sum())
            pixels += take * 3 * CROP * CROP
            assert np.asarray(images.as_tensor()).shape[1:] == (CROP, CROP, 3)
        return {"records": records, "checksum": checksum, "pixels": pixels}
    return run
