"""The ``tfrecord-torch convert`` subcommand."""

from __future__ import annotations

import os

__all__ = ["add_convert_parser"]


def add_convert_parser(sub, parents=()) -> None:
    p = sub.add_parser("convert", parents=list(parents), help="convert a torchvision dataset or an image folder to shards",
                       description="Write a torchvision dataset (by class name, e.g. CIFAR10, MNIST, "
                                   "FashionMNIST, FakeData) or an ImageFolder-style directory as "
                                   "TFDS-style sharded TFRecords with indexes and metadata. Image "
                                   "files are copied byte for byte; decoded pixels are encoded.")
    p.add_argument("source", help="a torchvision.datasets class name, or a folder of class subfolders")
    p.add_argument("output", help="output folder, local or a URL (s3://bucket/prefix, ...)")
    p.add_argument("--name", help="dataset name (default: the source's name, lowercased)")
    p.add_argument("--split", default=None,
                   help="split name in the output; also passed to datasets that take split= "
                        "(default: train, or test with --test)")
    p.add_argument("--root", default=".", help="root folder of a torchvision dataset (no download)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--train", dest="train", action="store_true", default=None,
                       help="the training part (train=True)")
    group.add_argument("--test", dest="train", action="store_false", help="the test part (train=False)")
    p.add_argument("--format", default="png", choices=["png", "jpeg", "raw"],
                   help="encoding for decoded pixels (default png, lossless)")
    p.add_argument("--quality", type=int, default=95, help="JPEG quality (default 95)")
    p.add_argument("--shard-size", type=int, default=10_000, help="records per shard, at most (default 10000)")
    p.add_argument("--num-shards", type=int, default=None, help="the number of shards (instead of --shard-size)")
    p.add_argument("--compression", choices=["none", "gzip"], default="none")
    p.add_argument("--compression-level", type=int, choices=range(-1, 10), default=None, metavar="LEVEL",
                   help="with --compression gzip: 0 (stored) to 9 (smallest), -1 zlib's default (6); "
                        "default: TensorFlow's")
    p.add_argument("--seed", type=int, default=0, help="seed of the write order (default 0)")
    p.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                   help="keep the source order (default: a seeded random order, so shards mix classes)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None,
                       help="processes writing shards (0: this one; default: one per core from 5000 images)")
    where.add_argument("--dask-scheduler", metavar="ADDRESS", default=None,
                       help="write the shards on a Dask cluster (tcp://host:8786; needs tfrecord_torch[dask]); "
                            "its workers must see the source at the same path")
    p.add_argument("--size", type=int, default=1000, help="FakeData: number of images")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_convert)


def _cmd_convert(args) -> int:
    from tfrecord_torch.records.compression import CompressionOptions
    from tfrecord_torch.write.convert import write_dataset
    from tfrecord_torch.write.options import Encoding, Execution, ShardLayout

    compression = None if args.compression == "none" else args.compression
    deflate = None
    if args.compression_level is not None:
        if compression is None:
            raise ValueError(f"--compression-level {args.compression_level} needs --compression gzip")
        deflate = CompressionOptions(level=args.compression_level)
    source, default_name = _source_dataset(args)
    dataset = source.build()  # once per process: write_dataset reuses it
    split = args.split or ("test" if args.train is False else "train")
    name = args.name or default_name
    options = dict(name=name, split=split, seed=args.seed, shuffle=args.shuffle,
                   shards=ShardLayout(size=args.shard_size, count=args.num_shards, compression=compression,
                                      compression_options=deflate),
                   encoding=Encoding(image_format=args.format, quality=args.quality),
                   storage_options=args.storage_options)
    if args.dask_scheduler:
        try:
            from distributed import Client
        except ImportError as e:
            raise ValueError("--dask-scheduler needs Dask: pip install 'tfrecord_torch[dask]'") from e
        with Client(args.dask_scheduler) as client:
            paths = write_dataset(source, args.output, **options,
                                  execution=Execution(executor=client.get_executor(), progress=not args.quiet))
    else:
        paths = write_dataset(source, args.output, **options,
                              execution=Execution(num_workers=args.workers, progress=not args.quiet))
    print(f"{len(dataset)} records in {len(paths)} shards -> {args.output} ({name}-{split})")
    return 0


def _source_dataset(args):
    """A DatasetSource recipe for the source (tasks on other processes rebuild it) and a default name."""
    import inspect

    import torchvision.datasets as tvd

    from tfrecord_torch.write.source import DatasetSource

    if os.path.isdir(args.source):
        source = DatasetSource(tvd.ImageFolder, os.path.abspath(args.source))
        base = os.path.basename(os.path.normpath(args.source)) or "images"
        return source, "".join(c if c.isalnum() or c == "_" else "_" for c in base.lower())
    cls = getattr(tvd, args.source, None)
    if not (inspect.isclass(cls) and hasattr(cls, "__getitem__")):
        names = sorted(n for n in dir(tvd) if n[:1].isupper() and inspect.isclass(getattr(tvd, n)))
        raise ValueError(f"source must be a folder or a torchvision.datasets class, got "
                         f"{args.source!r}; classes: {', '.join(names)}")
    params = inspect.signature(cls).parameters
    kwargs = {}
    if cls is tvd.FakeData:
        kwargs["size"] = args.size
    else:
        kwargs["root"] = os.path.abspath(args.root)
    if "train" in params and args.train is not None:
        kwargs["train"] = args.train
    if "split" in params and args.split:
        kwargs["split"] = args.split
    if "download" in params:
        kwargs["download"] = False
    source = DatasetSource(cls, **kwargs)
    try:
        source.build()
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted..."
        raise ValueError(f"{args.source} at {args.root!r}: {e}") from e
    return source, args.source.lower()
