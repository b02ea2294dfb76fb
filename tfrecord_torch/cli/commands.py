"""The ``tfrecord-torch`` command line."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

import numpy as np

from tfrecord_torch import __version__

from tfrecord_torch.io import files as fs
from tfrecord_torch.errors import ExampleDecodeError, TFRecordError
from tfrecord_torch.example.codec import parse_example, parse_sequence_example
from tfrecord_torch.records.framing import read_records
from tfrecord_torch.records.writer import RecordWriter
from tfrecord_torch.records.index import build_index, check_index, default_index_path, load_index
from tfrecord_torch.policy import ErrorPolicy
from tfrecord_torch.example.schema import SchemaReport
from tfrecord_torch.cli.convert import add_convert_parser
from tfrecord_torch.data.shards import expand_paths
from tfrecord_torch.records.compression import compression_of

__all__ = ["main"]


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
                       description="Write '<file>.index' (one 'offset size' line per record, the "
                                   "format of DALI's tfrecord2idx) for each file, checking every CRC.")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("-o", "--output", help="index path (only with a single input file)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("verify", parents=[remote], help="check every record's CRCs (and indexes, if present)",
                       description="Read every record, checking both CRCs; also check '<file>.index' "
                                   "when it exists. Exit status 1 if anything is corrupt.")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("inspect", parents=[remote], help="count records and describe their features",
                       description="Count records, list feature keys with their kinds and value "
                                   "lengths, and print an inferred tf.io feature_description.")
    p.add_argument("files", nargs="+", help=files_help)
    p.add_argument("--limit", type=int, default=None,
                   help="parse at most this many records for the schema (all are counted)")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of a table")
    p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
    p.set_defaults(func=_cmd_inspect)

    for name, what in (("head", "the first records"), ("cat", "every record")):
        p = sub.add_parser(name, parents=[remote], help=f"print {what} as JSON lines",
                           description=f"Print {what} as JSON lines: one object per record, "
                                       "mapping each feature key to its list of values.")
        p.add_argument("files", nargs="+", help=files_help)
        if name == "head":
            p.add_argument("-n", "--records", type=int, default=5, help="records per file (default 5)")
        p.add_argument("--sequence", action="store_true",
                       help="records are SequenceExamples: print context and feature_lists")
        p.add_argument("--bytes", choices=["auto", "base64", "length"], default="auto",
                       help="how to print bytes values: 'auto' gives UTF-8 text when the bytes are "
                            "valid UTF-8 and 'base64:...' otherwise (default); 'length' gives "
                            "'<N bytes>'")
        p.add_argument("--compression", default="auto", choices=["auto", "none", "gzip", "zlib"])
        p.set_defaults(func=_cmd_print, limit_arg=name == "head")

    add_convert_parser(sub, parents=[remote])

    p = sub.add_parser("decompress", parents=[remote], help="rewrite a GZIP/ZLIB record file uncompressed",
                       description="Copy the records of a compressed file into an uncompressed "
                                   "one, which can then be indexed for random access.")
    p.add_argument("input")
    p.add_argument("output")
    p.set_defaults(func=_cmd_decompress)
    return parser


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def expand(args) -> list[str]:
    """Record files from the paths, glob patterns and folders in ``args.files``
    (globs and folders skip index and metadata files)."""
    return expand_paths(args.files, args.storage_options)


def _compression(args) -> str | None:
    return None if args.compression == "none" else args.compression


def _cmd_index(args) -> int:
    from tqdm import tqdm

    so = args.storage_options
    files = expand(args)
    if args.output and len(files) != 1:
        raise ValueError("--output needs exactly one input file")
    sizes = {path: fs.size_and_version(path, so)[0] for path in files}
    failed = 0
    with tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, disable=args.quiet) as bar:
        for path in files:
            done = bar.n
            try:
                written = build_index(path, args.output, storage_options=so, progress=bar.update)
            except TFRecordError as e:  # report it and index the other files
                failed += 1
                bar.write(f"tfrecord-torch index: error: {e}", file=sys.stderr)
                continue
            finally:
                bar.update(done + sizes[path] - bar.n)  # a failed file counts as read
            if not args.quiet:
                bar.write(f"{path}: {len(load_index(written, storage_options=so))} records -> {written}")
    return 1 if failed else 0


class _Collect(ErrorPolicy):
    """Skip every bad record that can be skipped, keeping the errors to report."""

    def __init__(self) -> None:
        super().__init__("skip")
        self.errors: list[TFRecordError] = []

    def report(self, error: TFRecordError) -> None:
        self.errors.append(error)


def _cmd_verify(args) -> int:
    so, bad = args.storage_options, 0
    for path in expand(args):
        found, count, note = _Collect(), 0, ""
        try:
            for _ in read_records(path, compression=_compression(args), on_error=found, storage_options=so):
                count += 1
            index_path = default_index_path(path)
            if fs.exists(index_path, so):
                check_index(load_index(index_path, storage_options=so), path, index_path=index_path,
                            storage_options=so)
                note = f", index {index_path} matches"
        except (TFRecordError, OSError) as e:  # an unreadable file or index: report it, check the rest
            found.errors.append(e)
        if not found.errors:
            print(f"OK      {path}: {count} records{note}")
            continue
        bad += 1
        for e in found.errors:
            print(f"CORRUPT {e}")
        print(f"BAD     {path}: {count} good records, {len(found.errors)} error(s) "
              "(a bad header or a truncation ends the read: records after it are unchecked)")
    return 1 if bad else 0


def _cmd_inspect(args) -> int:
    so = args.storage_options
    report = SchemaReport()
    sizes = []
    for path in expand(args):
        compression = compression_of(path, _compression(args), so)
        sizes.append((path, fs.size_and_version(path, so)[0], compression))
        for payload in read_records(path, compression=compression, storage_options=so):
            report.records += 1
            if args.limit is not None and report.parsed + report.not_examples >= args.limit:
                continue
            try:
                report.add(parse_example(payload))
            except ExampleDecodeError:
                report.not_examples += 1
    if args.json:
        out = report.as_dict()
        out["files"] = [{"path": p, "bytes": n, "compression": c} for p, n, c in sizes]
        print(json.dumps(out, indent=2))
        return 0
    for path, n, c in sizes:
        print(f"file: {path} ({n:,} bytes, compression: {c or 'none'})")
    print(f"records: {report.records:,} (parsed {report.parsed:,}"
          f"{f', {report.not_examples:,} not Examples' if report.not_examples else ''})")
    if report.features:
        rows = [("key", "kind", "length", "present")]
        for key, s in sorted(report.features.items()):
            length = str(s.min_len) if s.min_len == s.max_len else f"{s.min_len}-{s.max_len}"
            rows.append((key, s.kind, length, f"{s.count}/{report.parsed}"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        print("schema (tf.io feature_description):")
        print(report.feature_description())
    return 0


def _cmd_print(args) -> int:
    limit = args.records if args.limit_arg else None
    for path in expand(args):
        records = read_records(path, compression=_compression(args), storage_options=args.storage_options)
        for number, payload in enumerate(records):
            if limit is not None and number >= limit:
                break
            if args.sequence:
                context, lists = parse_sequence_example(payload)
                obj = {"context": _jsonable(context, args.bytes),
                       "feature_lists": {k: [_value(v, args.bytes) for v in steps]
                                         for k, steps in lists.items()}}
            else:
                obj = _jsonable(parse_example(payload), args.bytes)
            sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
    return 0


def _jsonable(features: dict, mode: str) -> dict:
    return {key: _value(value, mode) for key, value in sorted(features.items())}


def _value(value, mode: str) -> list:
    if not isinstance(value, list):
        if value.dtype.kind == "f":  # shortest float32 text; JSON has no NaN/Infinity: strings
            return [float(str(v)) if np.isfinite(v) else str(v) for v in value]
        return value.tolist()
    return [_bytes(b, mode) for b in value]


def _bytes(b: bytes, mode: str) -> str:
    if mode == "length":
        return f"<{len(b)} bytes>"
    if mode == "auto":
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return "base64:" + base64.b64encode(b).decode("ascii")


def _cmd_decompress(args) -> int:
    count = 0
    so = args.storage_options
    with RecordWriter(args.output, storage_options=so) as writer:
        for payload in read_records(args.input, storage_options=so):
            writer.write(payload)
            count += 1
    print(f"{args.input}: {count} records -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
