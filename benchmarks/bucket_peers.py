#!/usr/bin/env python
"""The peers of benchmarks/bucket.py: webdataset and mosaicml streaming
reading the same payload bytes (the JPEGs and labels our shards hold) from
the same shaped bucket. Each peer runs in its own process under its own venv
(benchmarks/venvs/README.md); this module imports neither tfrecord_torch nor
anything outside the peer's venv.

    PEER_PYTHON benchmarks/bucket_peers.py write --peer webdataset --source DIR --shards 4 --per-shard 512 --out DIR
    PEER_PYTHON benchmarks/bucket_peers.py read --peer webdataset --mode "in order" --endpoint URL \\
        --bucket bench --prefix wds --shards 4 --records 1024

``write`` lays the peer's shards out in a local folder (sample ``i``: the
JPEG ``DIR/{i % count:02d}.jpg`` and the label ``i % 10``, as bucket.py
writes ours); bucket.py uploads them. ``read`` prints one JSON line: images/s
over the first ``--records`` images and the seconds from ``iter(loader)`` to
the first batch, the clock started where bucket.py starts it for ours.

With ``--data small`` (mosaicml streaming only) the samples are small
records: the int64 label ``i % 1000`` and row ``i`` of the float32 array in
``--source`` (an .npy file bucket.py saves from the floats of its own small
records), read in batches of 256.

Both decode with ``torchvision.io.decode_jpeg`` to uint8 [3, H, W] (the
decoder the per-sample ``Image()`` uses), in 2 DataLoader workers, batches of
64. webdataset reads presigned ``http://`` URLs of the shards, which it
streams through ``curl`` (its own handler for http URLs); it checks no
checksum. mosaicml streaming downloads whole shards with boto3
(``S3_ENDPOINT_URL`` pointed at the proxy); its index holds xxh64 hashes of
each shard, checked only with ``validate_hash="xxh64"`` (the ``+ xxh64``
rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

PEERS = ("webdataset", "mosaicml-streaming", "mosaicml-streaming + xxh64")
MODES = ("in order", "shuffle=True", "map-style RandomSampler")  # the last: mosaicml streaming only
BATCH = 64
SMALL_BATCH = 256
SHUFFLE_BUFFER = 1000  # webdataset's sample shuffle buffer (its docs' usual figure)


def _samples(jpegs: str, count: int):
    files = sorted(os.listdir(jpegs))
    payloads = []
    for name in files:
        with open(os.path.join(jpegs, name), "rb") as f:
            payloads.append(f.read())
    for i in range(count):
        yield i, payloads[i % len(payloads)], i % 10


def write_small(npy: str, shards: int, per_shard: int, out: str) -> None:
    import numpy as np
    from streaming import MDSWriter

    xs = np.load(npy)
    # MDS row: 4 bytes of offset, the label's 8 bytes, the array's bytes (no length: the shape is fixed)
    limit = 4 + 4 * (per_shard + 1) + per_shard * (4 + 8 + xs[0].nbytes) + 256
    with MDSWriter(out=out, columns={"label": "int", "x": f"ndarray:float32:{xs.shape[1]}"}, size_limit=limit,
                   hashes=["xxh64"]) as w:
        for i in range(shards * per_shard):
            w.write({"label": i % 1000, "x": xs[i]})


def write(peer: str, jpegs: str, shards: int, per_shard: int, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    if peer == "webdataset":
        import webdataset as wds

        with wds.ShardWriter(os.path.join(out, "bench-%06d.tar"), maxcount=per_shard, verbose=0) as w:
            for i, jpeg, label in _samples(jpegs, shards * per_shard):
                w.write({"__key__": f"{i:08d}", "jpg": jpeg, "cls": label})
        return
    from streaming import MDSWriter

    # A size limit one shard's bytes wide: shard k holds samples [k * per_shard, (k + 1) * per_shard)
    # like ours (per_shard is a multiple of the JPEG count, so every shard holds the same bytes).
    sizes = [len(jpeg) for _, jpeg, _ in _samples(jpegs, per_shard)]
    limit = 4 + 4 * (per_shard + 1) + sum(sizes) + per_shard * (4 + 8) + 256
    with MDSWriter(out=out, columns={"image": "bytes", "label": "int"}, size_limit=limit,
                   hashes=["xxh64"]) as w:
        for _, jpeg, label in _samples(jpegs, shards * per_shard):
            w.write({"image": jpeg, "label": label})


def _decode(data: bytes):
    import torch
    from torchvision.io import decode_jpeg

    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def _webdataset_loader(mode: str, urls: list[str]):
    import webdataset as wds
    from torch.utils.data import DataLoader

    shuffled = mode == "shuffle=True"
    ds = wds.WebDataset(urls, shardshuffle=len(urls) if shuffled else False, seed=0 if shuffled else None,
                        empty_check=False)
    if shuffled:
        ds = ds.shuffle(SHUFFLE_BUFFER)
    ds = ds.to_tuple("jpg", "cls").map_tuple(_decode, lambda b: int(b))
    return DataLoader(ds, batch_size=BATCH, num_workers=2)


def _streaming_loader(mode: str, remote: str, local: str, validate: bool, small: bool):
    import torch
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader

    class Decoded(StreamingDataset):
        def get_item(self, idx: int):
            sample = super().get_item(idx)
            if small:
                return torch.from_numpy(sample["x"]), sample["label"]
            return _decode(sample["image"]), sample["label"]

    class Indexed(torch.utils.data.Dataset):
        """Random access, as a map-style dataset: ``dataset[i]`` downloads the sample's shard whole
        the first time any process of the machine asks for one of its samples."""

        def __init__(self, ds: StreamingDataset) -> None:
            self.ds = ds

        def __len__(self) -> int:
            return self.ds.num_samples

        def __getitem__(self, i: int):
            return self.ds.get_item(i)

    batch = SMALL_BATCH if small else BATCH
    ds = Decoded(remote=remote, local=local, shuffle=mode == "shuffle=True", shuffle_seed=0, batch_size=batch,
                 validate_hash="xxh64" if validate else None)
    if mode == "map-style RandomSampler":
        indexed = Indexed(ds)
        sampler = torch.utils.data.RandomSampler(indexed, generator=torch.Generator().manual_seed(0))
        return DataLoader(indexed, batch_size=batch, sampler=sampler, num_workers=2)
    return DataLoader(ds, batch_size=batch, num_workers=2)


def read(peer: str, mode: str, endpoint: str, bucket: str, prefix: str, shards: int, records: int,
         small: bool = False) -> dict:
    os.environ.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    if peer == "webdataset":
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint)
        urls = [s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": f"{prefix}/bench-{k:06d}.tar"},
                                          ExpiresIn=3600) for k in range(shards)]
        loader = _webdataset_loader(mode, urls)
    else:
        os.environ["S3_ENDPOINT_URL"] = endpoint
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        local = tempfile.mkdtemp(prefix="bench-mds-")  # a fresh, empty local folder for each run
        loader = _streaming_loader(mode, f"s3://{bucket}/{prefix}", local, validate=peer.endswith("xxh64"),
                                   small=small)
    try:
        t0 = time.perf_counter()
        seen, first = 0, None
        for _images, labels in loader:
            if first is None:
                first = time.perf_counter() - t0
            seen += len(labels)
            if seen >= records:
                break
        rate = seen / (time.perf_counter() - t0)
    finally:
        del loader  # its workers are gone before their folder is
        if peer != "webdataset":
            shutil.rmtree(local, ignore_errors=True)
    return {"rate": rate, "first": first or 0.0, "seen": seen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("write", "read"))
    parser.add_argument("--peer", choices=PEERS, required=True)
    parser.add_argument("--data", choices=("images", "small"), default="images")
    parser.add_argument("--source", help="write: the JPEG folder (images) or the floats' .npy (small)")
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--per-shard", type=int)
    parser.add_argument("--out")
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--endpoint")
    parser.add_argument("--bucket")
    parser.add_argument("--prefix")
    parser.add_argument("--records", type=int)
    args = parser.parse_args()
    if args.peer == "webdataset" and (args.data == "small" or args.mode == "map-style RandomSampler"):
        parser.error("webdataset reads images in order or shuffled (no small records, no random access)")
    if args.action == "write":
        if args.data == "small":
            os.makedirs(args.out, exist_ok=True)
            write_small(args.source, args.shards, args.per_shard, args.out)
        else:
            write(args.peer, args.source, args.shards, args.per_shard, args.out)
        return
    got = read(args.peer, args.mode, args.endpoint, args.bucket, args.prefix, args.shards, args.records,
               small=args.data == "small")
    print(json.dumps(got), flush=True)


if __name__ == "__main__":
    main()
