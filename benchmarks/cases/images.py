"""The image pipeline: JPEG records to batches of uint8 tensors, on 2 cores."""

from __future__ import annotations

from benchmarks.cases.image_peers import add_image_peers
from benchmarks.cases.synth import synth_jpegs
from benchmarks.harness.registry import case, dataset, target, worker


@dataset("images_jpeg", full={"records": 4000, "size": 256, "quality": 90, "classes": 100, "seed": 0},
         quick={"records": 128, "size": 256, "quality": 90, "classes": 100, "seed": 0},
         tiny={"records": 16, "size": 64, "quality": 90, "classes": 100, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: 'image' = a {p['size']}x{p['size']} "
                             f"RGB JPEG (quality {p['quality']}, synthetic photo-like: gradient, blob, "
                             f"texture, shapes, noise) + int64 'label' (i % {p['classes']})"))
def build_images(path: str, p: dict) -> dict:
    from tfrecord_torch import RecordWriter, make_example

    n, classes, jpeg_bytes = p["records"], p["classes"], 0
    with RecordWriter(path) as w:
        for i, data in enumerate(synth_jpegs(p["seed"], n, p["size"], p["quality"])):
            w.write(make_example({"image": data, "label": i % classes}))
            jpeg_bytes += len(data)
        payload = w.offset - 16 * n
    return {"records": n, "bytes": payload, "checksum": sum(i % classes for i in range(n)),
            "pixels": n * 3 * p["size"] ** 2, "about": f"mean JPEG {jpeg_bytes / n / 1e3:.1f} KB"}


# --------------------------------------------------------------------------
# Case (c): image pipeline, JPEG records to batches of uint8 tensors
# --------------------------------------------------------------------------

case("images", dataset="images_jpeg", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     title="Image pipeline: JPEG records to batches of 64 uint8 images, on 2 cores",
     short="images: JPEG records to uint8 batches [64, 3, 256, 256]")

IMAGE_BATCH = 64


def _image_tally(batches) -> dict:
    """Batches with 'label' [B] and 'image' [B, ...] (torch or numpy)."""
    import math

    records = checksum = pixels = 0
    for b in batches:
        records += len(b["label"])
        checksum += int(b["label"].sum())
        pixels += math.prod(b["image"].shape)
    return {"records": records, "checksum": checksum, "pixels": pixels}


@worker("images", "ours",
        note=f"TFRecordDataset(path, features=presets.tfds()) through DataLoader(batch_size={IMAGE_BATCH}, "
             "num_workers=2): uint8 tensors [64, 3, 256, 256] (libjpeg-turbo, accurate IDCT: torchvision's pixels); CRCs verified")
def images_ours(path):
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds())
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2))


@worker("images", "ours (persistent workers)",
        note="the same DataLoader made once with persistent_workers=True and iterated each pass, as a "
             "training loop runs its epochs: the workers, and the shared-memory segments they stack "
             "batches into, live across passes (started in the warm-up pass)")
def images_ours_persistent(path):
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    loader = torch.utils.data.DataLoader(TFRecordDataset(path, features=presets.tfds()), batch_size=IMAGE_BATCH,
                                         num_workers=2, persistent_workers=True)
    return lambda: _image_tally(loader)


@worker("images", "ours, torchvision imported first",
        note="the same, with `import torchvision.io` in the main process before the DataLoader starts: "
             "the forked workers inherit it instead of each importing it at its first image, every epoch")
def images_ours_preloaded(path):
    import torchvision.io  # noqa: F401

    return images_ours(path)


def _batched(path, workers: int, persistent: bool = False):
    import torch.utils.data
    import torchvision.io  # noqa: F401

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(), batch_size=IMAGE_BATCH)
    if persistent:
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)
        return lambda: _image_tally(loader)
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))


@worker("images", "ours batch mode",
        note=f"TFRecordDataset(path, features=presets.tfds(), batch_size={IMAGE_BATCH}) through "
             "DataLoader(batch_size=None, num_workers=2): each worker reads whole batches and decodes "
             "them on its decode threads (libjpeg-turbo, TF's default IDCT; one GIL-free call per thread) into one uint8 buffer "
             "[64, 3, 256, 256] channels_last, shipped in shared memory")
def images_ours_batched(path):
    return _batched(path, 2)


@worker("images", "ours batch mode (persistent workers)",
        note="the same DataLoader made once with persistent_workers=True and iterated each pass (workers "
             "and their segments live across passes)")
def images_ours_batched_persistent(path):
    return _batched(path, 2, persistent=True)


@worker("images", "ours batch mode (workers=0)",
        note="the same with num_workers=0: the main process reads, and its decode threads "
             "(one per core) decode")
def images_ours_batched0(path):
    return _batched(path, 0)


@worker("images", "ours (workers=0)",
        note=f"per-sample: DataLoader(TFRecordDataset(path, features=presets.tfds()), batch_size={IMAGE_BATCH}, "
             "num_workers=0): the main process collates; its records decode on a decode thread per core, "
             "up to 64 MB of them ahead (libjpeg-turbo, accurate IDCT)")
def images_ours0(path):
    import torch.utils.data
    import torchvision.io  # noqa: F401

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds())
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=0))


def _map_style(path, workers: int):
    import torch.utils.data
    import torchvision.io  # noqa: F401

    from tfrecord_torch import IndexedTFRecordDataset, presets

    ds = IndexedTFRecordDataset(path, features=presets.tfds())
    generator = torch.Generator().manual_seed(0)
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, shuffle=True,
                                                            generator=generator, num_workers=workers))


@worker("images", "ours map-style, shuffled (workers=0)",
        note="random access: DataLoader(IndexedTFRecordDataset(path, features=presets.tfds()), "
             f"batch_size={IMAGE_BATCH}, shuffle=True, num_workers=0): each batch read by __getitems__ in file "
             "order, its images decoded on threads of the call (one per core), joined before it returns")
def images_map_style0(path):
    return _map_style(path, 0)


@worker("images", "ours map-style, shuffled",
        note="the same with num_workers=2 (each worker decodes its batches on its own thread)")
def images_map_style(path):
    return _map_style(path, 2)


def _pil_decode(record):
    import io

    import numpy as np
    import torch
    from PIL import Image

    data = record["image"]
    data = data.tobytes() if hasattr(data, "tobytes") else data  # numpy in older tfrecord releases
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return {"image": torch.from_numpy(image).permute(2, 0, 1), "label": int(record["label"][0])}


@worker("images", "tfrecord + PIL",
        note='tfrecord.torch.dataset.TFRecordDataset(path, None, {"image": "byte", "label": "int"}, '
             f"transform=PIL decode) through DataLoader(batch_size={IMAGE_BATCH}, num_workers=2); no index: "
             "each worker reads the whole file, so the image decode is split with a modulo filter; no CRC check")
def images_tfrecord_pil(path):
    import torch.utils.data
    from tfrecord.torch.dataset import TFRecordDataset

    class Split(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            w, n = (0, 1) if info is None else (info.id, info.num_workers)
            ds = TFRecordDataset(path, None, {"image": "byte", "label": "int"})
            for i, record in enumerate(ds):
                if i % n == w:
                    yield _pil_decode(record)

    return lambda: _image_tally(torch.utils.data.DataLoader(Split(), batch_size=IMAGE_BATCH, num_workers=2))


def tf_image_batches(path, batch: int = IMAGE_BATCH, dct_method: str = ""):
    """tf.data's image pipeline over ``path``: parse_single_example and
    decode_jpeg(channels=3) mapped with AUTOTUNE, batched, prefetched
    (``dct_method``: decode_jpeg's; "" is TF's default, the fast IDCT)."""
    import tensorflow as tf

    desc = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, desc)
        return {"image": tf.io.decode_jpeg(ex["image"], channels=3, dct_method=dct_method), "label": ex["label"]}

    return (tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch).prefetch(tf.data.AUTOTUNE))


@worker("images", "tf.data",
        note="TFRecordDataset(path).map(parse_single_example + tf.io.decode_jpeg(channels=3), "
             f"num_parallel_calls=AUTOTUNE).batch({IMAGE_BATCH}).prefetch(AUTOTUNE).as_numpy_iterator(): "
             "uint8 [64, 256, 256, 3]; CRCs checked")
def images_tf(path):
    import tensorflow  # noqa: F401 - imported before the timed passes

    def run():
        return _image_tally(tf_image_batches(path).as_numpy_iterator())
    return run


add_image_peers("images")

_JPEGS: list = []  # decode-only limit: the JPEGs as uint8 tensors, inherited by the forked pool


def _decoder_init() -> None:
    import torch

    torch.set_num_threads(1)


def _decode_share(bounds) -> tuple[int, int]:
    import warnings

    from torchvision.io import ImageReadMode, decode_image

    lo, hi = bounds
    records = pixels = 0
    with warnings.catch_warnings():  # torchvision 0.29 announces a move to torchcodec
        warnings.simplefilter("ignore", DeprecationWarning)
        for data in _JPEGS[lo:hi]:
            pixels += decode_image(data, mode=ImageReadMode.RGB).numel()
            records += 1
    return records, pixels


@worker("images", "decode-only limit", yardstick=True,
        note="ceiling, not a peer: torchvision.io.decode_image(mode=RGB), the decoder ours uses, over the "
             "same JPEGs already in memory as uint8 tensors; 2 forked processes each decode half "
             "(multiprocessing Pool(2), wall time of the whole pass); no reading, parsing, batching")
def images_decode_limit(path):
    import multiprocessing

    import torch
    import torchvision.io  # noqa: F401 - imported once, before the fork

    from tfrecord_torch import parse_example, read_records

    labels = 0
    for payload in read_records(path):
        record = parse_example(payload)
        _JPEGS.append(torch.frombuffer(bytearray(record["image"][0]), dtype=torch.uint8))
        labels += int(record["label"][0])
    n = len(_JPEGS)
    pool = multiprocessing.get_context("fork").Pool(2, initializer=_decoder_init)
    shares = [(0, n // 2), (n // 2, n)]

    def run():
        done = pool.map(_decode_share, shares, chunksize=1)
        return {"records": sum(r for r, _ in done), "pixels": sum(p for _, p in done), "checksum": labels}
    return run




@worker("images", "decode-only limit (simplejpeg threads)", yardstick=True,
        note="ceiling, not a peer: simplejpeg.decode_jpeg(fastdct=True) -- the fast path's decoder -- on a "
             "thread per core over the JPEGs already in memory, into one preallocated [N, 256, 256, 3] "
             "buffer; no reading, parsing or batching")
def images_decode_limit_simplejpeg(path):
    import numpy as np
    import simplejpeg

    jpegs, labels = jpegs_in_memory(path)
    h, w = simplejpeg.decode_jpeg_header(jpegs[0])[:2]
    out = np.empty((len(jpegs), h, w, 3), np.uint8)
    return on_threads(len(jpegs), lambda i: simplejpeg.decode_jpeg(jpegs[i], fastdct=True, buffer=out[i]),
                      {"records": len(jpegs), "pixels": out.size, "checksum": labels})


@worker("images", "plain torch dataset (2 workers)", yardstick=True,
        note="yardstick, not a peer: what one writes by hand, through the 'ours' row's "
             "DataLoader(batch_size=64, num_workers=2), made for each pass: a torch IterableDataset over the JPEGs "
             "already in memory (inherited by the forked workers), each worker decoding its half with simplejpeg "
             "(accurate IDCT, as ours) into [3, H, W] planes; torch's default_collate into fresh shared memory; "
             "no reading, parsing or CRC")
def images_plain_torch(path):
    import simplejpeg
    import torch.utils.data

    from tfrecord_torch.features.images.jpeg import to_planes

    jpegs, labels = jpegs_in_memory(path)

    def decoded(i):
        return torch.from_numpy(to_planes(simplejpeg.decode_jpeg(jpegs[i], fastdct=False, fastupsample=False)))

    return _forked_per_pass(len(jpegs), labels, decoded)


@worker("images", "fork and join floor (2 workers with no images)", yardstick=True,
        note="floor, not a peer: the time torch's DataLoader(batch_size=64, num_workers=2) made for each pass "
             "takes with nothing to decode: a torch IterableDataset yielding the 4,000 labels alone, split over "
             "the two workers; the pass forks them, collates and joins them. Every per-sample row whose workers "
             "are forked for each pass pays it on top of its own work")
def images_fork_floor(path):
    jpegs, labels = jpegs_in_memory(path)
    return _forked_per_pass(len(jpegs), labels, None)


def _forked_per_pass(count: int, labels: int, image, classes: int = 100):
    """A pass of DataLoader(batch_size=64, num_workers=2) made for it, over
    ``count`` items {"label": i % classes} (and {"image": image(i)} unless None)."""
    import torch
    import torch.utils.data

    wanted = [i % classes for i in range(count)]  # the labels the build wrote
    if sum(wanted) != labels:
        raise ValueError(f"the labels sum to {labels}, not {sum(wanted)}: another build of the data")

    class InMemory(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            for i in range(info.id, count, info.num_workers):
                yield {"label": wanted[i]} if image is None else {"image": image(i), "label": wanted[i]}

    def tally():
        batches = torch.utils.data.DataLoader(InMemory(), batch_size=IMAGE_BATCH, num_workers=2)
        if image is not None:
            return _image_tally(batches)
        labels = [b["label"] for b in batches]
        return {"records": sum(len(b) for b in labels), "checksum": sum(int(b.sum()) for b in labels)}
    return tally


def jpegs_in_memory(path) -> tuple[list[bytes], int]:
    """The 'image' bytes of every record of ``path``, and the sum of the 'label's."""
    from tfrecord_torch import parse_example, read_records

    records = [parse_example(p) for p in read_records(path)]
    return [r["image"][0] for r in records], sum(int(r["label"][0]) for r in records)


def on_threads(count: int, one, tally: dict):
    """A timed pass of ``one(i)`` for i in range(count) on a thread per core
    (thread k takes k, k + threads, ...), returning ``tally``."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    threads = len(os.sched_getaffinity(0))
    pool = ThreadPoolExecutor(threads)

    def share(k):
        for i in range(k, count, threads):
            one(i)

    def run():
        list(pool.map(share, range(threads)))
        return tally
    return run


target("images", "ours batch mode >= 1.3x tf.data", "ours batch mode", "tf.data", at_least=1.3)
target("images", "ours batch mode >= 0.8x its decoder's limit (simplejpeg threads)", "ours batch mode",
       "decode-only limit (simplejpeg threads)", at_least=0.8)
target("images", "ours batch mode (workers=0) >= 1.3x tf.data", "ours batch mode (workers=0)", "tf.data",
       at_least=1.3)
target("images", "ours batch mode (workers=0) >= 0.8x its decoder's limit (simplejpeg threads)",
       "ours batch mode (workers=0)", "decode-only limit (simplejpeg threads)", at_least=0.8)
target("images", "ours >= 1.0x tf.data", "ours", "tf.data", at_least=1.0)
target("images", "ours (workers=0) >= 1.0x tf.data", "ours (workers=0)", "tf.data", at_least=1.0)
target("images", "ours >= 1.0x a plain torch dataset", "ours", "plain torch dataset (2 workers)", at_least=1.0)
target("images", "ours >= 1.3x tf.data", "ours", "tf.data", at_least=1.3)
target("images", "ours >= 0.9x the decode-only limit", "ours", "decode-only limit", at_least=0.9)
target("images", "(workaround) ours, torchvision imported first >= 1.3x tf.data",
       "ours, torchvision imported first", "tf.data", at_least=1.3)
target("images", "(workaround) ours, torchvision imported first >= 0.9x the decode-only limit",
       "ours, torchvision imported first", "decode-only limit", at_least=0.9)
