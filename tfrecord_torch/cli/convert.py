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
    p.add_argument("--shard-size", type=int, default=10_000, help="records per shard (default 10000)")
    p.add_argument("--compression", choices=["none", "gzip"], default="none")
    p.add_argument("--workers", type=int, default=0, help="encoding processes (default 0: this one)")
    p.add_argument("--size", type=int, default=1000, help="FakeData: number of images")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_convert)


def _cmd_convert(args) -> int:
    from tfrecord_torch.write.convert import write_dataset

    dataset, default_name = _source_dataset(args)
    split = args.split or ("test" if args.train is False else "train")
    name = args.name or default_name
    paths = write_dataset(dataset, args.output, name=name, split=split, image_format=args.format,
                          quality=args.quality, shard_size=args.shard_size, num_workers=args.workers,
                          compression=None if args.compression == "none" else args.compression,
                          progress=not args.quiet, storage_options=args.storage_options)
    print(f"{len(dataset)} records in {len(paths)} shards -> {args.output} ({name}-{split})")
    return 0


def _source_dataset(args):
    import inspect

    import torchvision.datasets as tvd

    if os.path.isdir(args.source):
        dataset = tvd.ImageFolder(args.source)
        base = os.path.basename(os.path.normpath(args.source)) or "images"
        return dataset, "".join(c if c.isalnum() or c == "_" else "_" for c in base.lower())
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
        kwargs["root"] = args.root
    if "train" in params and args.train is not None:
        kwargs["train"] = args.train
    if "split" in params and args.split:
        kwargs["split"] = args.split
    if "download" in params:
        kwargs["download"] = False
    try:
        return cls(**kwargs), args.source.lower()
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted..."
        raise ValueError(f"{args.source} at {args.root!r}: {e}") from e
