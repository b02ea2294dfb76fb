#!/usr/bin/env python
"""Benchmarks: tfrecord_torch side by side with tf.data and the ``tfrecord`` package.

Usage::

    .venv/bin/python benchmarks/run.py [--quick | --tiny] [--out DIR] [--only CASE[/IMPL],...]
        [--repeats N] [--rounds N] [--jobs N] [--list]

(or ``bash dev.sh bench``). Prints a Markdown table and writes it to
``DIR/results.md`` and ``DIR/results.json``, with a bar chart of every case in
``DIR/results.png`` (matplotlib; DIR defaults to ``bench-output``).

Cases, one module each in ``benchmarks/cases/``: ``framing_1mib`` (1 MiB records),
``parse_small`` (small Examples to numpy), ``images`` (JPEG records to batches of
uint8 tensors through a DataLoader, against tf.data and the decoder's own limit),
``small_loader`` (small Examples to batched tensors through a DataLoader), ``memory``
(RSS growth over epochs), ``convert`` (write_dataset against a TensorFlow writer loop
and ``cp -r``), ``remote_open`` (seconds to the first record over 1,000 shards on a local
S3 server, and requests per shard). Targets are reported under the table, not asserted.

How it measures
---------------
* The data sets are written once with our RecordWriter into ``DIR/data`` and
  reused by later runs while their parameters match (``DIR/data/*.json``).
  The parent process reads each one once before any measurement so it sits in
  the page cache.
* Every (case, implementation) pair runs in a subprocess of its own: this
  script re-invoked as ``run.py --worker CASE/IMPL --spec JSON``, under the
  contender's own interpreter if it names one (``@worker(..., python=...)``: a
  path or a virtualenv under ``benchmarks/venvs``; a missing one skips the row).
  TensorFlow and the ``tfrecord`` package cannot share a process (both register
  ``tensorflow.Example`` with protobuf), and a fresh process for ours too means
  none of them inherits another's warm caches or imports. A worker imports only
  what it needs, and only after it starts.
* A worker first reads a small file with one corrupted payload byte (the CRC
  probe, reported in the note column: does the implementation notice?; only
  cases whose rows read the small-Example schema), then makes one untimed
  warm-up pass (not with --quick), then times ``repeats`` full passes. The
  throughput is the median pass; "best" is the fastest. Each pass is checked
  against the data set (record count, payload bytes, a checksum of the decoded
  values), so an implementation cannot win by skipping work.
* ``--rounds N`` runs the rows round-robin N times and pools each row's passes,
  so a slow stretch of a noisy host falls on every contender alike.
* "CPU" is CPU time / wall time of the median pass, of the worker process (all
  threads) and its child processes (DataLoader workers, pools): 1.0 means one
  core busy.
* A measure case (``memory``) runs once and reports a value, not a
  throughput; its ratio columns are n/a.

Adding a contender or a case: see ``benchmarks/harness/registry.py`` -- one
``@worker(case, impl, note=...)`` function ``make(path) -> run`` in a case module.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != ROOT:  # this checkout's package and benchmarks, before any installed copy
    sys.path.insert(0, ROOT)

from benchmarks.harness import registry  # noqa: E402 - after the sys.path line above
from benchmarks.harness.registry import CASES, DATASETS, names_in  # noqa: E402


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="small data, 1-2 passes, no warm-up, 2 rows at a time: a smoke test")
    size.add_argument("--tiny", action="store_true",
                      help="like --quick with tiny data sets: checks that the rows run, measures nothing")
    ap.add_argument("--out", default="bench-output", help="folder for data sets and results")
    ap.add_argument("--only", default="", help="comma-separated CASE or CASE/IMPL to run")
    ap.add_argument("--repeats", type=int, help="timed passes per implementation (default per case)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the rows this many times, round-robin, and pool each row's timed passes: "
                         "a slow stretch of a noisy host then falls on every implementation alike")
    ap.add_argument("--jobs", type=int, help="rows run at a time (default 1; 2 with --quick/--tiny, "
                    "whose numbers are then not measurements)")
    ap.add_argument("--list", action="store_true", help="list cases and implementations")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    return ap, ap.parse_args(argv)


def main(argv=None) -> int:
    ap, args = _args(argv)
    registry.load_cases()
    if args.worker:
        from benchmarks.harness.worker import RESULT_MARK, run_worker

        result = run_worker(args.worker, json.loads(args.spec))
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0
    if args.list:
        for c in CASES.values():
            print(f"{c.name}: {c.title}")
            for i in c.impls.values():
                python = f" [python: {i.python}]" if i.python else ""
                print(f"  {c.name}/{i.name}: {i.note}{python}")
        return 0

    from benchmarks.harness import chart, report, runner
    from benchmarks.harness.worker import build_corrupt

    started = time.perf_counter()
    load_start, date = report.loadavg(), time.strftime("%Y-%m-%d %H:%M:%S %Z")

    def log(msg: str) -> None:
        print(f"[bench {time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    known = {c.name for c in CASES.values()} | {f"{c.name}/{i.name}" for c in CASES.values() for i in c.impls.values()}
    try:  # each name whole, though row names hold commas: a part that names nothing is an error, not dropped
        wanted = names_in(args.only, known)
    except ValueError as e:
        ap.error(f"--only: {e} (see --list)")
    selected = [(c, i) for c in CASES.values() for i in c.impls.values()
                if not wanted or c.name in wanted or f"{c.name}/{i.name}" in wanted]
    if not selected:
        ap.error(f"--only {args.only!r} matches nothing (see --list)")
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    jobs = args.jobs or (2 if size != "full" else 1)
    if args.rounds > 1 and jobs > 1:
        ap.error("--rounds runs rows one at a time: use it with --jobs 1")

    out = args.out
    data_dir, log_dir = os.path.join(out, "data"), os.path.join(out, "logs")
    scratch = os.path.join(out, "scratch")  # the conversion cases' output, removed after each pass
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)

    files: dict[str, tuple[str, dict]] = {}
    warm: dict[str, float] = {}
    for name in dict.fromkeys(c.dataset for c, _ in selected):
        ds = DATASETS[name]
        files[name] = runner.ensure_dataset(ds, ds.params(size), data_dir, log)
        warm[name] = runner.warm_page_cache(files[name][0])
    corrupt = os.path.join(data_dir, "corrupt.tfrecord")
    build_corrupt(corrupt)

    plan = runner.Plan(files=files, size=size, corrupt=corrupt, scratch=scratch, log_dir=log_dir,
                       repeats=args.repeats, timeout=3600 if size == "full" else 600, log=log,
                       datasets=DATASETS)
    results = runner.run_all(selected, plan, rounds=args.rounds, jobs=jobs)
    shutil.rmtree(scratch, ignore_errors=True)

    header = {"machine": report.machine_info(), "command": report.command_line(), "cwd": os.getcwd(),
              "date": date, "quick": size != "full", "size": size,
              "loadavg_start": load_start, "loadavg_end": report.loadavg()}
    cases = list(dict.fromkeys(c for c, _ in selected))
    notes = report.case_notes(cases, files, warm, size)
    notes += report.method_notes(quick=size != "full", rounds=args.rounds, jobs=jobs,
                                 jobs_given=bool(args.jobs), results=results)
    targets = report.check_targets(results)
    png = os.path.join(out, "results.png")
    if os.path.exists(png):
        os.remove(png)
    if chart.write_chart(results, png):
        notes.append("Chart: results.png (one panel per case, each row's throughput in the case's unit, "
                     "labelled with its ratio to the reference row).")
    table = report.render(results, header, notes)
    total = time.perf_counter() - started
    table += f"- Total run time: {total:.0f} s.\n"
    table += report.render_targets(targets)
    print(table)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({**header, "total_s": total, "notes": notes, "results": results, "targets": targets,
                   "datasets": {n: {"path": p, "expected": e} for n, (p, e) in files.items()}},
                  f, indent=1)
    failed = [f"{r['case']}/{r['impl']}" for r in results if "error" in r]
    if failed:
        print(f"FAILED: {', '.join(failed)} (logs in {log_dir})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
