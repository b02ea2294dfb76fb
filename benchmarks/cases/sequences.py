"""Sequences: YouTube-8M frame-level records padded into batches, T5 token
lists padded and packed, each beside tf.data doing the same."""

from __future__ import annotations

from benchmarks.harness.registry import case, dataset, target, worker

YT_BATCH = 32
T5_BATCH = 32
T5_LENGTHS = {"inputs": 512, "targets": 114}  # T5's usual feature_lengths


@dataset("yt8m_frames", full={"records": 800, "seed": 0}, quick={"records": 160, "seed": 0},
         tiny={"records": 40, "seed": 0},
         describe=lambda p: (f"{p['records']:,} YouTube-8M frame-level SequenceExamples: context 'id', "
                             "'labels'; 60-300 frames of 'rgb' (1,024 bytes) and 'audio' (128 bytes)"))
def build_frames(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter, make_sequence_example

    rng = np.random.default_rng(p["seed"])
    checksum = 0
    with RecordWriter(path) as w:
        for i in range(p["records"]):
            t = int(rng.integers(60, 301))
            rgb = rng.integers(0, 256, (t, 1024), dtype=np.uint8)
            audio = rng.integers(0, 256, (t, 128), dtype=np.uint8)
            w.write(make_sequence_example(
                {"id": f"v{i:06d}".encode(), "labels": rng.integers(0, 3862, 1 + i % 4).tolist()},
                {"rgb": [f.tobytes() for f in rgb], "audio": [f.tobytes() for f in audio]}))
            checksum += t + int(rgb[-1, 0]) + int(audio[-1, -1])
        payload = w.offset - 16 * p["records"]
    return {"records": p["records"], "bytes": payload, "checksum": checksum}


def _frames_tally(batches) -> dict:
    """Padded batches: rgb [B, T, 1024], audio [B, T, 128], lengths [B] (torch or numpy)."""
    records = checksum = 0
    for b in batches:
        lengths = b["rgb_length"].tolist()
        rows = range(len(lengths))
        records += len(lengths)
        checksum += sum(lengths) + sum(int(b["rgb"][i, n - 1, 0]) + int(b["audio"][i, n - 1, -1])
                                       for i, n in zip(rows, lengths))
    return {"records": records, "checksum": checksum}


case("yt8m_padded", dataset="yt8m_frames", unit="records/s", repeats=3, quick_repeats=1, probe=False,
     title=f"YouTube-8M frame-level records to padded batches of {YT_BATCH} (rgb [B, T, 1024], audio "
           "[B, T, 128], lengths)",
     short=f"yt8m_padded: frames to padded batches of {YT_BATCH}")

_FRAMES_SPEC = ('features={"id": Bytes(), "labels": Int64(shape=None)}, sequence_features={"rgb": '
                'RawTensor(dtype="uint8", shape=(1024,)), "audio": RawTensor(dtype="uint8", shape=(128,))}')


def _frames_dataset(path, **options):
    from tfrecord_torch import Bytes, Int64, RawTensor, TFRecordDataset

    return TFRecordDataset(path, features={"id": Bytes(), "labels": Int64(shape=None)},
                           sequence_features={"rgb": RawTensor(dtype="uint8", shape=(1024,)),
                                              "audio": RawTensor(dtype="uint8", shape=(128,))}, **options)


def _frames_loader(path, threads: int | None, workers: int = 0, persistent: bool = False):
    import functools

    import torch
    from torch.utils.data import DataLoader

    from tfrecord_torch import pad_collate

    if threads is not None:
        torch.set_num_threads(threads)
    collate = functools.partial(pad_collate, sequences=["rgb", "audio", "labels"])
    ds = _frames_dataset(path)
    if persistent:
        loader = DataLoader(ds, batch_size=YT_BATCH, collate_fn=collate, num_workers=workers, persistent_workers=True)
        return lambda: _frames_tally(loader)
    return lambda: _frames_tally(DataLoader(ds, batch_size=YT_BATCH, collate_fn=collate, num_workers=workers))


@worker("yt8m_padded", "ours",
        note=f"TFRecordDataset(path, {_FRAMES_SPEC}) through DataLoader(batch_size={YT_BATCH}, "
             "collate_fn=partial(pad_collate, sequences=['rgb', 'audio', 'labels']), num_workers=0), torch's "
             "default threads; CRCs verified")
def frames_ours(path):
    return _frames_loader(path, None)


@worker("yt8m_padded", "ours torch threads=1",
        note="the same after torch.set_num_threads(1)")
def frames_ours_one_thread(path):
    return _frames_loader(path, 1)


@worker("yt8m_padded", "ours, 2 workers",
        note="the same with num_workers=2 (workers forked each pass): each padded batch made in shared memory "
             "the worker uses again")
def frames_ours_workers(path):
    return _frames_loader(path, None, 2)


@worker("yt8m_padded", "ours, 2 persistent workers",
        note="the same DataLoader made once with persistent_workers=True, iterated each pass")
def frames_ours_persistent(path):
    return _frames_loader(path, None, 2, persistent=True)


@worker("yt8m_padded", "ours batch mode",
        note=f"TFRecordDataset(path, ..., batch_size={YT_BATCH}) through DataLoader(batch_size=None, "
             "num_workers=0)")
def frames_ours_batch_mode(path):
    from torch.utils.data import DataLoader

    ds = _frames_dataset(path, batch_size=YT_BATCH)
    return lambda: _frames_tally(DataLoader(ds, batch_size=None))


@worker("yt8m_padded", "tf.data padded_batch",
        note="TFRecordDataset.map(parse_single_sequence_example + decode_raw, AUTOTUNE)"
             f".padded_batch({YT_BATCH}).as_numpy_iterator(); CRCs checked")
def frames_tf(path):
    import tensorflow as tf

    def parse(serialized):
        context, lists = tf.io.parse_single_sequence_example(
            serialized, context_features={"id": tf.io.FixedLenFeature([], tf.string),
                                          "labels": tf.io.VarLenFeature(tf.int64)},
            sequence_features={"rgb": tf.io.FixedLenSequenceFeature([], tf.string),
                               "audio": tf.io.FixedLenSequenceFeature([], tf.string)})
        rgb = tf.reshape(tf.io.decode_raw(lists["rgb"], tf.uint8), [-1, 1024])
        return {"id": context["id"], "labels": tf.sparse.to_dense(context["labels"]), "rgb": rgb,
                "audio": tf.reshape(tf.io.decode_raw(lists["audio"], tf.uint8), [-1, 128]),
                "rgb_length": tf.shape(rgb)[0]}

    def run():
        ds = (tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .padded_batch(YT_BATCH))
        return _frames_tally(ds.as_numpy_iterator())
    return run


target("yt8m_padded", "ours >= 1.0x tf.data padded_batch", "ours", "tf.data padded_batch", at_least=1.0)
target("yt8m_padded", "ours torch threads=1 >= 1.0x tf.data padded_batch", "ours torch threads=1",
       "tf.data padded_batch", at_least=1.0)
target("yt8m_padded", "ours, 2 persistent workers >= 1.0x tf.data padded_batch", "ours, 2 persistent workers",
       "tf.data padded_batch", at_least=1.0)


@dataset("t5_tokens", full={"records": 20_000, "seed": 0}, quick={"records": 4_000, "seed": 0},
         tiny={"records": 600, "seed": 0},
         describe=lambda p: (f"{p['records']:,} T5-style tf.train.Examples: int64 'inputs' (8-640 tokens) "
                             "and 'targets' (2-160), no token 0"))
def build_tokens(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter, make_example

    rng = np.random.default_rng(p["seed"])
    checksum = 0
    with RecordWriter(path) as w:
        for _ in range(p["records"]):
            inputs = rng.integers(1, 32100, int(rng.integers(8, 641)))
            targets = rng.integers(1, 32100, int(rng.integers(2, 161)))
            w.write(make_example({"inputs": inputs, "targets": targets}))
            checksum += int(targets[:T5_LENGTHS["targets"]].sum())  # what packing keeps of the targets
        payload = w.offset - 16 * p["records"]
    return {"records": p["records"], "bytes": payload, "checksum": checksum}


def _packed_tally(batches) -> dict:
    """Packed rows: examples counted by their targets' segments (each has some), tokens summed."""
    import numpy as np

    records = checksum = 0
    for b in batches:
        records += int(np.asarray(b["targets_segment_ids"]).max(1).sum())
        checksum += int(b["targets"].sum())
    return {"records": records, "checksum": checksum}


case("t5_pack", dataset="t5_tokens", unit="records/s", repeats=3, quick_repeats=1, probe=False,
     title=f"T5 token lists packed into rows of {T5_LENGTHS} (seqio's trim_and_pack rule)",
     short="t5_pack: token lists packed into rows")

_T5_SPEC = 'features={"inputs": Int64(shape=None), "targets": Int64(shape=None)}'


def _tokens_dataset(path):
    from tfrecord_torch import Int64, TFRecordDataset

    return TFRecordDataset(path, features={"inputs": Int64(shape=None), "targets": Int64(shape=None)})


@worker("t5_pack", "ours",
        note=f"TFRecordDataset(path, {_T5_SPEC}) through DataLoader(batch_size={max(T5_LENGTHS.values())}, "
             f"collate_fn=partial(pack_collate, lengths={T5_LENGTHS})): seqio's groups; CRCs verified")
def pack_ours(path):
    import functools

    from torch.utils.data import DataLoader

    from tfrecord_torch import pack_collate

    collate = functools.partial(pack_collate, lengths=T5_LENGTHS)
    return lambda: _packed_tally(DataLoader(_tokens_dataset(path), batch_size=max(T5_LENGTHS.values()),
                                            collate_fn=collate))


@worker("t5_pack", "tf.data seqio pack",
        note="TFRecordDataset.map(parse_single_example, AUTOTUNE) then seqio's trim_and_pack rule in "
             "tf ops (benchmarks/seqio_pack.py: padded_batch groups, a tf.while_loop per group), "
             f".batch({T5_BATCH}).as_numpy_iterator()")
def pack_tf(path):
    import tensorflow as tf

    from benchmarks.seqio_pack import trim_and_pack

    description = {"inputs": tf.io.VarLenFeature(tf.int64), "targets": tf.io.VarLenFeature(tf.int64)}

    def run():
        ds = tf.data.TFRecordDataset(path).map(
            lambda r: {k: tf.sparse.to_dense(v) for k, v in tf.io.parse_single_example(r, description).items()},
            num_parallel_calls=tf.data.AUTOTUNE)
        return _packed_tally(trim_and_pack(ds, T5_LENGTHS).batch(T5_BATCH).as_numpy_iterator())
    return run


target("t5_pack", "ours >= 1.0x tf.data seqio pack", "ours", "tf.data seqio pack", at_least=1.0)
