"""Detection records with instance masks: TF Object Detection API records to detection batches."""

from __future__ import annotations

from benchmarks.cases.synth import synth_jpegs
from benchmarks.harness.registry import case, dataset, target, worker


@dataset("od_masks", full={"records": 1000, "size": 256, "objects": 4, "seed": 0},
         quick={"records": 96, "size": 256, "objects": 4, "seed": 0},
         tiny={"records": 12, "size": 64, "objects": 4, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples in the OD API's schema: a {p['size']}x"
                             f"{p['size']} JPEG, 0-{p['objects']} objects each (normalised boxes, "
                             "class/label, class/text, is_crowd, area) with one gray PNG mask per object "
                             "(image/object/mask, as create_coco_tf_record writes them)"))
def build_od_masks(path: str, p: dict) -> dict:
    import io

    import numpy as np
    from PIL import Image

    from tfrecord_torch import RecordWriter, make_example

    rng = np.random.default_rng(p["seed"])
    size, labels, mask_pixels = p["size"], 0, 0
    with RecordWriter(path) as w:
        for data in synth_jpegs(p["seed"], p["records"], size, 90):
            n = int(rng.integers(0, p["objects"] + 1))
            lo = rng.uniform(0.0, 0.5, (n, 2)).astype(np.float32)
            hi = (lo + rng.uniform(0.1, 0.5, (n, 2))).clip(0, 1).astype(np.float32)
            masks = []
            for k in range(n):
                mask = np.zeros((size, size), np.uint8)
                y0, x0, y1, x1 = (int(v * size) for v in (lo[k, 1], lo[k, 0], hi[k, 1], hi[k, 0]))
                mask[y0:y1, x0:x1] = 1
                mask_pixels += int(mask.sum())
                buf = io.BytesIO()
                Image.fromarray(mask, "L").save(buf, format="PNG")
                masks.append(buf.getvalue())
            label = rng.integers(1, 91, n)
            labels += int(label.sum())
            w.write(make_example({
                "image/encoded": data, "image/format": b"jpeg", "image/height": size, "image/width": size,
                "image/object/bbox/xmin": lo[:, 0], "image/object/bbox/ymin": lo[:, 1],
                "image/object/bbox/xmax": hi[:, 0], "image/object/bbox/ymax": hi[:, 1],
                "image/object/class/label": label, "image/object/class/text": np.array([b"thing"] * n, "S5"),
                "image/object/is_crowd": np.zeros(n, np.int64), "image/object/area": np.ones(n, np.float32),
                "image/object/mask": np.array(masks, object) if n else np.zeros(0, "S1")}))
        payload = w.offset - 16 * p["records"]
    return {"records": p["records"], "bytes": payload, "checksum": labels + mask_pixels}


case("detection", dataset="od_masks", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     title="Detection: OD API records with PNG instance masks to detection batches of 16, on 2 cores",
     short="detection: OD records + PNG masks to image, boxes, labels, masks [N, H, W]")

DETECTION_BATCH = 16


def _tally(targets) -> dict:
    """Targets with 'labels' [N] and 'masks' [N, H, W] (torch or numpy; padded rows hold zeros),
    summed by NumPy for every row alike: torch's sum of a uint8 mask runs on its OpenMP team, whose
    wake-ups on 2 busy cores took half of the workers=0 row's time (cProfile), a cost of the check,
    not of loading."""
    import numpy as np

    records = checksum = 0
    for labels, masks in targets:
        records += 1
        checksum += int(np.asarray(labels).sum()) + int(np.asarray(masks).sum())
    return {"records": records, "checksum": checksum}


def _ours(path, workers: int, persistent: bool = False):
    import torch.utils.data
    import torchvision.io  # noqa: F401

    from tfrecord_torch import TFRecordDataset, detection_collate, presets

    ds = TFRecordDataset(path, features=presets.object_detection(masks=True, objects=("is_crowd", "area")))

    def make():
        return torch.utils.data.DataLoader(ds, batch_size=DETECTION_BATCH, num_workers=workers,
                                           collate_fn=detection_collate, persistent_workers=persistent)
    made = make() if persistent else None

    def targets():
        for _, batch in made or make():
            yield from ((t["labels"], t["masks"]) for t in batch)
    return lambda: _tally(targets())


@worker("detection", "ours",
        note="TFRecordDataset(path, features=presets.object_detection(masks=True, objects=('is_crowd', 'area'))) "
             f"through DataLoader(batch_size={DETECTION_BATCH}, num_workers=2, collate_fn=detection_collate): "
             "Image, BoundingBoxes, labels, text, is_crowd, area and a Mask [N, H, W] per image")
def detection_ours(path):
    return _ours(path, 2)


@worker("detection", "ours, 2 persistent workers",
        note="the same DataLoader made once with persistent_workers=True, iterated each pass (the workers "
             "forked once, not for each pass: about 100 ms of a 1 s pass)")
def detection_ours_persistent(path):
    return _ours(path, 2, persistent=True)


@worker("detection", "ours (workers=0)", note="the same with num_workers=0")
def detection_ours0(path):
    return _ours(path, 0)


@worker("detection", "tf.data",
        note="TFRecordDataset(path).map(parse_single_example + decode_jpeg + the OD API's PNG mask decode "
             "(tf.map_fn of decode_image(channels=1) > 0), num_parallel_calls=AUTOTUNE)"
             f".padded_batch({DETECTION_BATCH}).prefetch(AUTOTUNE): images, boxes, labels, text, is_crowd, "
             "area and masks [B, N, H, W] padded to the batch's largest N")
def detection_tf(path):
    import tensorflow as tf

    desc = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/height": tf.io.FixedLenFeature([], tf.int64), "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/object/class/label": tf.io.VarLenFeature(tf.int64),
            "image/object/class/text": tf.io.VarLenFeature(tf.string),
            "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
            "image/object/area": tf.io.VarLenFeature(tf.float32),
            "image/object/mask": tf.io.VarLenFeature(tf.string),
            **{f"image/object/bbox/{c}": tf.io.VarLenFeature(tf.float32) for c in ("xmin", "ymin", "xmax", "ymax")}}

    def decode_png_mask(buffer):
        image = tf.squeeze(tf.image.decode_image(buffer, channels=1), axis=2)
        image.set_shape([None, None])
        return tf.cast(tf.greater(image, 0), tf.uint8)

    def parse(record):
        ex = tf.io.parse_single_example(record, desc)
        dense = {k: tf.sparse.to_dense(v) for k, v in ex.items() if isinstance(v, tf.SparseTensor)}
        h, w = ex["image/height"], ex["image/width"]
        png = dense["image/object/mask"]
        masks = tf.cond(tf.greater(tf.size(png), 0),
                        lambda: tf.map_fn(decode_png_mask, png, fn_output_signature=tf.uint8),
                        lambda: tf.zeros(tf.cast(tf.stack([0, h, w]), tf.int32), tf.uint8))
        boxes = tf.stack([dense[f"image/object/bbox/{c}"] for c in ("xmin", "ymin", "xmax", "ymax")], 1)
        return {"image": tf.io.decode_jpeg(ex["image/encoded"], channels=3), "boxes": boxes,
                "labels": dense["image/object/class/label"], "text": dense["image/object/class/text"],
                "is_crowd": dense["image/object/is_crowd"], "area": dense["image/object/area"], "masks": masks}

    def targets():
        batches = (tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
                   .padded_batch(DETECTION_BATCH).prefetch(tf.data.AUTOTUNE))
        for batch in batches.as_numpy_iterator():
            yield from zip(batch["labels"], batch["masks"])
    return lambda: _tally(targets())


target("detection", "ours, 2 persistent workers >= 1.0x tf.data", "ours, 2 persistent workers", "tf.data", at_least=1.0)
