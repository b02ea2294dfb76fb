"""Full decode of users' sized JPEGs: ~100 KB 500x375 photos and 1024x768 JPEGs
(4:2:0 and 4:4:4), each in every spelling of ours beside tf.data, in one run.

The ``images`` case's 256x256 JPEGs of ~24 KB flatter the paths that pay per
image (the per-sample path's to-tensor, stack and hand-off copies): at
1024x768 an image is 2.4 MB of pixels, each copy of it ~0.3-1 ms. These cases
show those costs, with the decoder's own ceiling (the JPEGs already in memory,
decoded on a thread per core into one buffer) as the limit no spelling passes.

A pass of these cases is short (384 images of 1024x768 take under a second),
so a DataLoader made for each pass pays its start in every pass: it forks its
workers, and each maps the pages of the batches it writes anew. The ``fork
and join floor`` row times that start with nothing to decode. ``images_1024_long``
is the same JPEGs as 8 shards of 384 (3,072 images a pass, an epoch of a few
seconds), where those costs are spread over 8 times the images, as over a
training run's epochs.
"""

from __future__ import annotations

from benchmarks.cases.image_peers import add_image_peers
from benchmarks.cases.images import (
    IMAGE_BATCH,
    _batched,
    _forked_per_pass,
    _image_tally,
    jpegs_in_memory,
    on_threads,
    tf_image_batches,
)
from benchmarks.harness.registry import case, dataset, target, worker

# case -> (height, width, JPEG subsampling for PIL: 2 is 4:2:0, 0 is 4:4:4, what it says)
SHAPES = {
    "images_500": (375, 500, 2, "500x375 photos, 4:2:0"),
    "images_1024": (768, 1024, 2, "1024x768, 4:2:0"),
    "images_1024_444": (768, 1024, 0, "1024x768, 4:4:4"),
}


def _photo_jpeg(job) -> bytes:
    """Photo ``i`` of the set (synth.photo_image: gradient under a 1/f texture,
    shapes, noise) at one size, quality drawn from 90-95."""
    import io

    import numpy as np
    from PIL import Image

    from benchmarks.cases.synth import photo_image

    seed, i, height, width, subsampling = job
    quality = int(np.random.default_rng([seed, i, 1]).integers(90, 96))
    buf = io.BytesIO()
    Image.fromarray(photo_image(seed, i, height, width)).save(buf, format="JPEG", quality=quality,
                                                               subsampling=subsampling)
    return buf.getvalue()


def _photo_jpegs(p: dict, height: int, width: int, subsampling: int) -> list[bytes]:
    """The data set's ``p["records"]`` photo JPEGs of seed ``p["seed"]``, made on 2 processes."""
    import multiprocessing

    jobs = [(p["seed"], i, height, width, subsampling) for i in range(p["records"])]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        return pool.map(_photo_jpeg, jobs, chunksize=4)


def _described(width: int, height: int, subsampling: int, label: str) -> str:
    return (f"'image' = a {width}x{height} RGB JPEG of a synthetic detailed photo (synth.photo_image), quality "
            f"90-95, {'4:4:4' if subsampling == 0 else '4:2:0'} + int64 'label' ({label})")


def _register_dataset(name: str, height: int, width: int, subsampling: int, records: int) -> None:
    @dataset(f"{name}_jpeg", full={"records": records, "seed": 5},
             quick={"records": 128, "seed": 5}, tiny={"records": 8, "seed": 5},
             describe=lambda p: f"{p['records']:,} tf.train.Examples: " + _described(width, height, subsampling,
                                                                                      "i % 1000"))
    def build(path: str, p: dict) -> dict:
        from tfrecord_torch import RecordWriter, make_example

        jpegs, n = _photo_jpegs(p, height, width, subsampling), p["records"]
        with RecordWriter(path) as w:
            for i, data in enumerate(jpegs):
                w.write(make_example({"image": data, "label": i % 1000}))
            payload = w.offset - 16 * n
        return {"records": n, "bytes": payload, "checksum": sum(i % 1000 for i in range(n)),
                "pixels": n * 3 * height * width, "about": f"mean JPEG {sum(map(len, jpegs)) / n / 1e3:.1f} KB"}


def _register_long(name: str, height: int, width: int, subsampling: int, records: int, shards: int) -> None:
    """Data set ``NAME_jpeg``: a folder of ``shards`` shards, each the same
    ``records`` JPEGs as the short case's data set (the same seed), labelled
    on through the shards (k % 1000 for the k-th record of the folder)."""
    @dataset(f"{name}_jpeg", folder=True, full={"records": records, "shards": shards, "seed": 5},
             quick={"records": 64, "shards": 2, "seed": 5}, tiny={"records": 8, "shards": 2, "seed": 5},
             describe=lambda p: (f"{p['shards']} shards of the same {p['records']:,} tf.train.Examples "
                                 f"({p['shards'] * p['records']:,} records): "
                                 + _described(width, height, subsampling, "k % 1000")))
    def build(path: str, p: dict) -> dict:
        import os

        from tfrecord_torch import RecordWriter, make_example

        jpegs, n = _photo_jpegs(p, height, width, subsampling), p["records"]
        os.makedirs(path)
        for s in range(p["shards"]):
            with RecordWriter(os.path.join(path, f"shard-{s:02d}.tfrecord")) as w:
                for i, data in enumerate(jpegs):
                    w.write(make_example({"image": data, "label": (s * n + i) % 1000}))
        total = n * p["shards"]
        return {"records": total, "checksum": sum(k % 1000 for k in range(total)),
                "pixels": total * 3 * height * width,
                "about": f"mean JPEG {sum(map(len, jpegs)) / n / 1e3:.1f} KB"}


def shards_in(path: str) -> str | list[str]:
    """The file, or the folder's shards in order: what TFRecordDataset and tf.data take."""
    import glob
    import os

    return sorted(glob.glob(os.path.join(path, "*.tfrecord"))) if os.path.isdir(path) else path


def _fork_floor(path):
    """The ``fork and join floor`` row over ``path``'s labels (k % 1000)."""
    from tfrecord_torch import parse_example, read_records

    labels = [int(parse_example(r)["label"][0]) for shard in ([path] if isinstance(path, str) else path)
              for r in read_records(shard)]
    return _forked_per_pass(len(labels), sum(labels), None, classes=1000)


def _per_sample(path, workers: int, persistent: bool = False, decoder: str | None = None):
    import torch.utils.data
    import torchvision.io  # noqa: F401 - imported before the workers fork, as the images case's rows do

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(decoder=decoder))
    if persistent:
        loader = torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=workers,
                                             persistent_workers=True)
        return lambda: _image_tally(loader)
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=workers))


def _tf(path, dct_method: str = ""):
    import tensorflow  # noqa: F401 - imported before the timed passes

    return lambda: _image_tally(tf_image_batches(path, dct_method=dct_method).as_numpy_iterator())


def _decode_limit(path, fastdct: bool):
    import numpy as np
    import simplejpeg

    jpegs, labels = jpegs_in_memory(path)
    h, w = simplejpeg.decode_jpeg_header(jpegs[0])[:2]
    # two batches' slots, reused: thread k of on_threads takes i = k, k + 2, ..., so no slot has two writers
    out = np.empty((2 * IMAGE_BATCH, h, w, 3), np.uint8)
    return on_threads(len(jpegs), lambda i: simplejpeg.decode_jpeg(jpegs[i], fastdct=fastdct,
                                                                   buffer=out[i % len(out)]),
                      {"records": len(jpegs), "pixels": len(jpegs) * h * w * 3, "checksum": labels})


DL = f"DataLoader(TFRecordDataset(path, features=presets.tfds()), batch_size={IMAGE_BATCH}"
BM = f"DataLoader(TFRecordDataset(path, features=presets.tfds(), batch_size={IMAGE_BATCH}), batch_size=None"
ROWS = {  # row -> (make(path), note)
    "ours": (lambda p: _per_sample(p, 2), f"per sample: {DL}, num_workers=2), torchvision imported first; "
             "uint8 [64, 3, H, W] (libjpeg-turbo, accurate IDCT); CRCs verified"),
    "ours (persistent workers)": (lambda p: _per_sample(p, 2, persistent=True),
                                  "the same DataLoader made once with persistent_workers=True, iterated each pass"),
    "ours (workers=0)": (lambda p: _per_sample(p, 0), f"per sample in the main process: {DL}, num_workers=0): "
                         "the records decode on a decode thread per core, the main process collates"),
    "ours, decoder='fast'": (lambda p: _per_sample(p, 2, decoder="fast"),
                             f"per sample with TF's default IDCT, tf.data's pixels bit for bit: {DL}, num_workers=2) "
                             "over presets.tfds(decoder='fast')"),
    "ours (workers=0), decoder='fast'": (lambda p: _per_sample(p, 0, decoder="fast"),
                                         "the same with num_workers=0"),
    "ours batch mode": (lambda p: _batched(p, 2), f"{BM}, num_workers=2): whole batches decoded on each "
                        "worker's decode threads into one shared-memory buffer (TF's default IDCT)"),
    "ours batch mode (persistent workers)": (lambda p: _batched(p, 2, persistent=True),
                                             "the same DataLoader made once with persistent_workers=True"),
    "ours batch mode (workers=0)": (lambda p: _batched(p, 0), f"{BM}, num_workers=0): the main process "
                                    "reads, its decode threads (one per core) decode"),
    "tf.data": (_tf, "TFRecordDataset(path).map(parse_single_example + tf.io.decode_jpeg(channels=3), "
                f"num_parallel_calls=AUTOTUNE).batch({IMAGE_BATCH}).prefetch(AUTOTUNE).as_numpy_iterator(): "
                "uint8 [64, H, W, 3]; CRCs checked"),
    "tf.data (INTEGER_ACCURATE)": (lambda p: _tf(p, "INTEGER_ACCURATE"),
                                   "the same with decode_jpeg(dct_method='INTEGER_ACCURATE'): the per-sample "
                                   "path's default pixels (torchvision's) bit for bit"),
}
FLOOR_ROW = "fork and join floor (2 workers with no images)"
FLOOR_NOTE = (f"floor, not a peer: the time torch's DataLoader(batch_size={IMAGE_BATCH}, num_workers=2) made for each "
              "pass takes with nothing to decode: a torch IterableDataset yielding the records' labels alone, split "
              "over the two workers; the pass forks them, collates and joins them. Every row whose workers are forked for "
              "each pass pays it on top of its own work, and a worker's first batches also map their memory anew")
LIMITS = {
    "decode-only limit (simplejpeg threads)": (
        lambda p: _decode_limit(p, True), "ceiling, not a peer: simplejpeg.decode_jpeg(fastdct=True) (TF's "
        "default IDCT, batch mode's) on a thread per core over the JPEGs already in memory, into one buffer"),
    "decode-only limit (accurate IDCT)": (
        lambda p: _decode_limit(p, False), "ceiling, not a peer: the same with fastdct=False, the "
        "per-sample path's accurate IDCT"),
}
# each spelling against tf.data decoding the same pixels: TF's default IDCT (batch mode, decoder='fast'),
# or the accurate one (the per-sample path's default, torchvision's pixels)
SAME_PIXELS = {r: "tf.data" if "batch mode" in r or "decoder='fast'" in r else "tf.data (INTEGER_ACCURATE)"
               for r in ROWS if not r.startswith("tf.data")}


def _register_targets(name: str, rows) -> None:
    for row, peer in SAME_PIXELS.items():
        if row in rows:
            target(name, f"{row} >= 1.0x {peer}", row, peer, at_least=1.0)
    target(name, "ours batch mode >= 0.9x ours batch mode (workers=0)", "ours batch mode",
           "ours batch mode (workers=0)", at_least=0.9)
    target(name, "ours batch mode (persistent workers) >= 0.9x ours batch mode (workers=0)",
           "ours batch mode (persistent workers)", "ours batch mode (workers=0)", at_least=0.9)


for _name, (_h, _w, _sub, _what) in SHAPES.items():
    _register_dataset(_name, _h, _w, _sub, 1000 if _h < 500 else 384)
    case(_name, dataset=f"{_name}_jpeg", unit="images/s", repeats=3, quick_repeats=1, probe=False, ref="tf.data",
         title=f"Full decode of {_what} JPEGs (quality 90-95) to uint8 batches of {IMAGE_BATCH}, on 2 cores",
         short=f"{_name}: {_what} -> uint8 [64, 3, {_h}, {_w}]")
    for _row, (_make, _note) in ROWS.items():
        worker(_name, _row, note=_note)(_make)
    add_image_peers(_name)
    for _row, (_make, _note) in LIMITS.items():
        worker(_name, _row, note=_note, yardstick=True)(_make)
    worker(_name, FLOOR_ROW, note=FLOOR_NOTE, yardstick=True)(_fork_floor)
    _register_targets(_name, ROWS)

# A long pass: the spellings of the 1024x768 case over 8 shards of its JPEGs (its decode limits hold)
LONG_ROWS = [r for r in ROWS if "decoder='fast'" not in r]
_register_long("images_1024_long", 768, 1024, 2, 384, 8)
case("images_1024_long", dataset="images_1024_long_jpeg", unit="images/s", repeats=2, quick_repeats=1, probe=False,
     ref="tf.data", title="Full decode of 1024x768, 4:2:0 JPEGs (quality 90-95) to uint8 batches of "
     f"{IMAGE_BATCH}, on 2 cores, in passes of 8 shards: images_1024's JPEGs 8 times over",
     short="images_1024_long: 8 x 384 1024x768 -> uint8 [64, 3, 768, 1024]")
for _row in LONG_ROWS:
    _make, _note = ROWS[_row]
    worker("images_1024_long", _row, note=_note.replace("(path", "(shards"))(
        lambda p, _make=_make: _make(shards_in(p)))
worker("images_1024_long", FLOOR_ROW, note=FLOOR_NOTE, yardstick=True)(lambda p: _fork_floor(shards_in(p)))
_register_targets("images_1024_long", LONG_ROWS)
