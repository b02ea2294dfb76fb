"""The ``tfrecord-torch`` subcommands (the parser, in :mod:`tfrecord_torch.cli.parser`,
imports this module only to run one)."""

from __future__ import annotations

import base64
import json
import sys

import numpy as np

from tfrecord_torch.cli.sniff import sniff
from tfrecord_torch.data.shards import expand_paths
from tfrecord_torch.errors import CorruptRecordError, ExampleDecodeError, TFRecordError
from tfrecord_torch.example.codec import has_feature_lists, parse_example, parse_sequence_example
from tfrecord_torch.example.schema import SchemaReport, spec_imports
from tfrecord_torch.example.tensorproto import looks_like_tensorproto
from tfrecord_torch.io import files as fs
from tfrecord_torch.io.shardcache import ShardCache, clear_shard_cache, shard_cache_usage
from tfrecord_torch.policy import ErrorPolicy
from tfrecord_torch.records.compression import compression_of
from tfrecord_torch.records.framing import iter_chunks, read_records
from tfrecord_torch.records.index import build_index, check_index, load_index
from tfrecord_torch.records.shardindex import (
    cache_limit,
    cache_usage,
    clear_index_cache,
    index_cache_dir,
    index_candidates,
)
from tfrecord_torch.records.streams import open_stream
from tfrecord_torch.records.writer import RecordWriter

__all__ = ["expand"]


def expand(args) -> list[str]:
    """Record files from the paths, glob patterns and folders in ``args.files``
    (globs and folders skip index and metadata files); ``-`` is standard input."""
    if list(args.files) == ["-"]:
        return ["/dev/stdin"]
    return expand_paths(args.files, args.storage_options)


def _compression(args) -> str | None:
    return None if args.compression == "none" else args.compression


def _cmd_index(args) -> int:
    from tqdm import tqdm

    storage_options = args.storage_options
    files = expand(args)
    if args.output and len(files) != 1:
        raise ValueError("--output needs exactly one input file")
    sizes = {path: fs.size_and_version(path, storage_options)[0] for path in files}
    failed: list[TFRecordError] = []
    try:
        with tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, disable=args.quiet) as bar:
            for path in files:
                done = bar.n
                try:
                    written = build_index(path, args.output, storage_options=storage_options,
                                          progress=bar.update)
                except TFRecordError as e:  # index the other files, then report it
                    failed.append(e)
                    continue
                finally:
                    bar.update(done + sizes[path] - bar.n)  # a failed file counts as read
                if not args.quiet:
                    count = len(load_index(written, storage_options=storage_options))
                    bar.write(f"{path}: {count} records -> {written}")
    finally:  # once the bar is closed: a bar redrawn below an error would hide it
        for error in failed:
            print(f"tfrecord-torch index: error: {error}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_cache(args) -> int:
    folder, shards = index_cache_dir(), ShardCache()
    if args.clear:
        print(f"removed {clear_index_cache()} cached indexes from {folder}")
        print(f"removed {clear_shard_cache(shards)} shard copies from {shards.folder}")
        return 0
    count, total = cache_usage()
    print(f"{folder}: {count} cached indexes, {total:,} bytes (limit {cache_limit():,} bytes, "
          "set by TFRECORD_TORCH_CACHE_LIMIT; clear with `tfrecord-torch cache --clear`)")
    count, total = shard_cache_usage(shards)
    print(f"{shards.folder}: {count} shard copies, {total:,} bytes (where datasets copy remote shards "
          "by default, set by TFRECORD_TORCH_SHARD_CACHE; each dataset bounds it: the least of 32 GiB and "
          "half the disk's free space, or its ShardCache(limit=))")
    return 0


class _Collect(ErrorPolicy):
    """Skip every bad record that can be skipped, keeping the errors to report."""

    def __init__(self) -> None:
        super().__init__("skip")
        self.errors: list[Exception] = []

    def report(self, error: TFRecordError) -> None:
        self.errors.append(error)


def _cmd_verify(args) -> int:
    storage_options, bad = args.storage_options, 0
    for path in expand(args):
        found, count, note = _Collect(), 0, ""
        try:
            for _ in read_records(path, compression=_compression(args), on_error=found,
                                  storage_options=storage_options):
                count += 1
            for index_path in index_candidates(path):
                if fs.exists(index_path, storage_options):
                    check_index(load_index(index_path, storage_options=storage_options), path,
                                index_path=index_path, storage_options=storage_options)
                    note += f", index {index_path} matches"
        except (TFRecordError, OSError) as e:  # an unreadable file or index: report it, check the rest
            found.errors.append(e)
        if not found.errors:
            print(f"OK      {path}: {count} records{note}")
            continue
        bad += 1
        for error in found.errors:
            print(f"CORRUPT {error}")
        print(f"BAD     {path}: {count} good records, {len(found.errors)} error(s) "
              "(a bad header or a truncation ends the read: records after it are unchecked)")
    return 1 if bad else 0


def _cmd_inspect(args) -> int:
    storage_options = args.storage_options
    report = SchemaReport(sniff=sniff)
    sizes = []
    for path in expand(args):
        compression = compression_of(path, _compression(args), storage_options)
        sizes.append((path, fs.size_and_version(path, storage_options)[0], compression))
        for payload in read_records(path, compression=compression, storage_options=storage_options):
            report.records += 1
            if args.limit is not None and \
                    report.parsed + report.not_examples + report.serialized_tensors >= args.limit:
                continue
            try:
                parsed = parse_sequence_example(payload) if has_feature_lists(payload) else (parse_example(payload),)
            except ExampleDecodeError:
                report.not_examples += 1
                continue
            if not any(parsed) and looks_like_tensorproto(payload):  # a TensorProto parses with no features
                report.serialized_tensors += 1
            else:
                report.add(*parsed)
    if args.json:
        out = report.as_dict()
        out["files"] = [{"path": p, "bytes": n, "compression": c} for p, n, c in sizes]
        print(json.dumps(out, indent=2))
        return 0
    for path, n, c in sizes:
        print(f"file: {path} ({n:,} bytes, compression: {c or 'none'})")
    print(f"records: {report.records:,} (parsed {report.parsed:,}"
          f"{f', {report.not_examples:,} not Examples' if report.not_examples else ''}"
          f"{f', {report.serialized_tensors:,} serialized tensors' if report.serialized_tensors else ''})")
    if report.serialized_tensors:
        print("serialized tensors (tf.io.serialize_tensor's TensorProtos) are not Examples: read them with "
              "features=Payload(decode=parse_tensor) (from tfrecord_torch import Payload, parse_tensor)")
    if report.lists:
        _print_sequences(report)
    elif report.features:
        _feature_table(report)
        print("schema (tf.io feature_description, which TFRecordDataset(features=...) also takes):")
        print(report.feature_description())
        spec = report.torch_spec()
        print(f"tfrecord_torch spec ({spec_imports(spec)}):")
        print(spec)
    return 0


def _feature_table(report: SchemaReport) -> None:
    _table([(key, s.kind, _span(s.min_len, s.max_len), f"{s.count}/{report.parsed}", s.content.summary())
            for key, s in sorted(report.features.items())], ("key", "kind", "length", "present", "content"))


def _print_sequences(report: SchemaReport) -> None:
    """Inspect's report on SequenceExamples: context features, feature lists
    (steps per record, values per step) and both specs, ready to paste."""
    if report.features:
        print("context features:")
        _feature_table(report)
    else:
        print("context features: none")
    print("feature lists (tf.train.SequenceExample; steps per record, values per step):")
    _table([(key, s.kind, _span(s.steps.min_len, s.steps.max_len), _span(s.width.min_len, s.width.max_len),
             f"{s.steps.count}/{report.parsed}", s.width.content.summary())
            for key, s in sorted(report.lists.items())],
           ("key", "kind", "steps", "width", "present", "content"))
    print("schema (tf.io.parse_single_sequence_example's context_features= and sequence_features=, "
          "which TFRecordDataset(features=..., sequence_features=...) also takes):")
    print(report.sequence_description())
    spec = report.sequence_spec()
    print(f"tfrecord_torch spec ({spec_imports(spec)}; "
          "TFRecordDataset(..., features=features, sequence_features=sequence_features)):")
    print(spec)


def _span(low: int | None, high: int) -> str:
    return "-" if low is None else str(low) if low == high else f"{low}-{high}"


def _table(rows: list, header: tuple) -> None:
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _cmd_print(args) -> int:
    limit = args.records if args.limit_arg else None
    for path in expand(args):
        with open_stream(path, _compression(args), args.storage_options) as stream:
            for record, offset, payload in _located(stream, limit):
                try:
                    _print_one(payload, args)
                except ExampleDecodeError as e:  # name the record, as a reader error does
                    raise CorruptRecordError(path, offset, record, f"not a tf.train.Example: {e}") from e
    sys.stdout.flush()
    return 0


def _located(stream, limit: int | None):
    """(record number, byte offset, payload) of the first ``limit`` records."""
    for chunk in iter_chunks(stream):
        for payload, offset, record in zip(chunk.payloads(), chunk.offsets.tolist(), chunk.numbers.tolist()):
            if limit is not None and record >= limit:
                return
            yield record, offset, payload


def _print_one(payload: bytes, args) -> None:
    if args.sequence or has_feature_lists(payload):
        context, lists = parse_sequence_example(payload)
        obj = {"context": _jsonable(context, args.bytes),
               "feature_lists": {k: [_value(v, args.bytes) for v in steps] for k, steps in lists.items()}}
    else:
        obj = _jsonable(parse_example(payload), args.bytes)
    sys.stdout.write(json.dumps(obj) + "\n")


def _jsonable(features: dict, mode: str) -> dict:
    return {key: _value(value, mode) for key, value in sorted(features.items())}


def _value(value, mode: str) -> list:
    if not isinstance(value, list):
        if value.dtype.kind == "f":  # shortest float32 text; JSON has no NaN/Infinity: strings
            return [float(str(v)) if np.isfinite(v) else str(v) for v in value]
        return value.tolist()
    return [_bytes(b, mode) for b in value]


SHORT_TEXT = 64  # bytes: longer values print as a summary in "summary" mode


def _bytes(b: bytes, mode: str) -> str:
    if mode == "length":
        return f"<{len(b)} bytes>"
    if mode == "summary":
        return _summary(b)
    if mode == "auto":
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return "base64:" + base64.b64encode(b).decode("ascii")


def _summary(b: bytes) -> str:
    """Short printable UTF-8 (tabs and line breaks allowed) as its text;
    anything else as ``<N bytes>``, with the format when a sniffer knows it
    (``<8149 bytes, JPEG>``)."""
    if len(b) <= SHORT_TEXT:
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(c.isprintable() or c in "\t\n\r" for c in text):
            return text
    found = sniff(b)
    return f"<{len(b)} bytes{f', {found.name}' if found else ''}>"


def _cmd_decompress(args) -> int:
    count = 0
    storage_options = args.storage_options
    with RecordWriter(args.output, storage_options=storage_options) as writer:
        for payload in read_records(args.input, storage_options=storage_options):
            writer.write(payload)
            count += 1
    print(f"{args.input}: {count} records -> {args.output}")
    return 0

