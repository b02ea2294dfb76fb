"""The ``tfrecord-torch`` command line: arguments and dispatch. Light: the
subcommands' modules (and numpy, torch) are imported only to run one."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable

from tfrecord_torch import __version__
from tfrecord_torch.cli.convert import add_convert_parser
from tfrecord_torch.errors import TFRecordError

__all__ = ["main"]


def _lazy(name: str, module: str = "tfrecord_torch.cli.commands") -> Callable[[argparse.Namespace], int]:
    """The subcommand ``name`` of ``module``, imported when run."""
    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)
    return run


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `tfrecord-torch cat x | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except (TFRecordError, OSError, ValueError) as e:
        print(f"tfrecord-torch {args.command}: error: {e}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord-torch",
        description="Read, check and index TFRecord files without TensorFlow.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    files_help = ("TFRecord files, folders or glob patterns, local or URLs (s3://, gs://, https://, ...; "
                  "quote globs to keep the shell out)")
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--storage-options", type=_json_object, default=None, metavar="JSON",
                        help="fsspec options for URLs as a JSON object, e.g. "
                             "'{\"client_kwargs\": {\"endpoint_url\": \"http://localhost:9000\"}}'")

    p = sub.add_parser("index", parents=[remote], help="write an index file beside each record file",
                       description="Write '<file>.index' beside each file (one 'offset size' line per "
                                   "record, the format of DALI's tfrecord2idx), checking every CRC. "
                                   "Datasets need not be told: without it they keep the indexes they "
                                   "build in the local index cache (see `tfrecord-torch cache`).")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("-o", "--output", help="index path (only with a single input file)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_lazy("_cmd_index"))

    p = sub.add_parser("cache", help="show or clear the local index and shard caches",
                       description="Datasets keep the indexes they build for shards without one in a "
                                   "local cache ($TFRECORD_TORCH_CACHE or ~/.cache/tfrecord_torch/index), "
                                   "bounded by $TFRECORD_TORCH_CACHE_LIMIT bytes (default 1 GiB), and "
                                   "copies of remote shards in the shard cache ($TFRECORD_TORCH_SHARD_CACHE "
                                   "or ~/.cache/tfrecord_torch/shards): by default when the shards fit in "
                                   "the least of 32 GiB and half the disk's free space, or as a dataset's "
                                   "ShardCache(directory=..., limit=...) says; TFRECORD_TORCH_SHARD_CACHE=off "
                                   "or cache=None reads by range requests instead. Print their folders and "
                                   "sizes, or clear them.")
    p.add_argument("--clear", action="store_true",
                   help="remove every cached index and shard copy (not while a job reads the shard cache)")
    p.set_defaults(func=_lazy("_cmd_cache"))

    p = sub.add_parser("verify", parents=[remote], help="check every record's CRCs (and indexes, if present)",
                       description="Read every record, checking both CRCs; also check its index "
                                   "files ('<file>.index', 'index/<file>.index') when they exist. Exit status 1 if anything is corrupt.")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
    p.set_defaults(func=_lazy("_cmd_verify"))

    p = sub.add_parser("inspect", parents=[remote], help="count records and describe their features",
                       description="Count records, list feature keys with their kinds and value "
                                   "lengths (and a SequenceExample's feature lists with their steps and "
                                   "values per step), and print an inferred tf.io feature_description "
                                   "and tfrecord_torch spec.")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("--limit", type=int, default=None,
                   help="parse at most this many records for the schema (all are counted)")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of a table")
    p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
    p.set_defaults(func=_lazy("_cmd_inspect"))

    for name, what in (("head", "the first records"), ("cat", "every record")):
        p = sub.add_parser(name, parents=[remote], help=f"print {what} as JSON lines",
                           description=f"Print {what} as JSON lines: one object per record, "
                                       "mapping each feature key to its list of values (a "
                                       "SequenceExample: {\"context\": ..., \"feature_lists\": ...}).")
        p.add_argument("files", nargs="+", help=files_help)
        if name == "head":
            p.add_argument("-n", "--records", type=int, default=5, help="records per file (default 5)")
        p.add_argument("--sequence", action="store_true",
                       help="print every record as a SequenceExample's context and feature_lists "
                            "(records with feature lists print so anyway)")
        default = "summary" if name == "head" else "auto"
        p.add_argument("--bytes", choices=["summary", "auto", "base64", "length"], default=default,
                       help="how to print bytes values: 'summary' gives short printable UTF-8 as text "
                            "and anything else as '<N bytes>' with its format if known ('<8149 bytes, "
                            "JPEG>'); 'auto' gives UTF-8 text when the bytes are valid UTF-8 and "
                            "'base64:...' otherwise; 'base64' always base64; 'length' gives '<N bytes>' "
                            f"(default: {default})")
        p.add_argument("--full", dest="bytes", action="store_const", const="auto",
                       help="every bytes value in full (same as --bytes auto)")
        p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
        p.set_defaults(func=_lazy("_cmd_print"), limit_arg=name == "head")

    p = sub.add_parser("preview", parents=[remote], help="draw the first images as a contact sheet (PNG)",
                       description="Decode the first images of the files (JPEG, PNG, GIF, WebP, ...) and "
                                   "draw them as a grid, each with its record number and label, into a "
                                   "PNG. The image key is the bytes feature whose values are images by "
                                   "their magic bytes, the label key an int64 scalar named like 'label' "
                                   "or 'class', unless given.")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("-o", "--out", default="preview.png", help="the PNG to write (default preview.png)")
    p.add_argument("-n", "--n", type=int, default=16, help="records to show, from the start (default 16)")
    p.add_argument("--key", default=None, help="the feature holding the encoded images (default: found)")
    p.add_argument("--label", default=None,
                   help="the feature to print under each image (default: an int64 scalar named like "
                        "'label' or 'class', if any)")
    p.add_argument("--cols", type=int, default=4, help="images per row (default 4)")
    p.add_argument("--size", type=int, default=128, help="the side of each image's square in pixels "
                                                         "(default 128)")
    p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
    p.set_defaults(func=_lazy("run", "tfrecord_torch.cli.preview"))

    add_convert_parser(sub, parents=[remote])

    p = sub.add_parser("decompress", parents=[remote], help="rewrite a GZIP/ZLIB record file uncompressed",
                       description="Copy the records of a compressed file into an uncompressed "
                                   "one, which can then be indexed for random access.")
    p.add_argument("input")
    p.add_argument("output")
    p.set_defaults(func=_lazy("_cmd_decompress"))
    return parser


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value
