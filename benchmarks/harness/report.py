"""The report: the machine, the Markdown table, the notes under it and the targets."""

from __future__ import annotations

import os
import platform
import shlex
import sys

from benchmarks.harness.registry import DATASETS, TARGETS, UNITS, Case


def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        from google.protobuf.internal import api_implementation
        pb_impl = api_implementation.Type()
    except ImportError:
        pb_impl = "?"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "tfrecord": _version("tfrecord"),
        "tfrecord_torch": _version("tfrecord_torch"),
        "numpy": _version("numpy"),
        "protobuf": f"{_version('protobuf')} ({pb_impl})",
        "crc32c": _version("crc32c"),
    }


def loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def command_line() -> str:
    exe = sys.executable
    rel = os.path.relpath(exe)
    if not rel.startswith(".."):
        exe = rel if os.sep in rel else f".{os.sep}{rel}"
    return shlex.join([exe, *sys.argv])


def fmt_throughput(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "% RSS growth":
        value = round(value, 1) + 0.0  # no "-0.0"
    return UNITS[unit][1].format(value)


def render(results: list[dict], header: dict, notes: list[str]) -> str:
    m = header["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['os']}; "
        f"Python {m['python']}, torch {m['torch']}, TensorFlow {m['tensorflow']}, "
        f"tfrecord {m['tfrecord']}, numpy {m['numpy']}, protobuf {m['protobuf']}, crc32c {m['crc32c']}",
        f"Command: `{header['command']}` (in {header['cwd']}), started {header['date']}; "
        f"1-min load average at start / end: {header['loadavg_start']} / {header['loadavg_end']}",
        "",
        "| case | implementation | throughput (median) | best | unit | this/ours | ours is N× "
        "(ours ÷ this) | CPU | note |",
        "|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in results:
        if "error" in r or "skipped" in r:
            what = "FAILED" if "error" in r else "skipped"
            why = r.get("error") or f"{r['note']}; {r['skipped']}"
            lines.append(f"| {r['case']} | {r['impl']} | {what} | | {r['unit']} | | | | "
                         f"{why.replace('|', '/').replace(chr(10), ' ')} |")
            continue
        if r.get("ref") is None:
            this_ours = ours_is = "n/a"
        elif r.get("ref") == r["impl"]:
            this_ours, ours_is = "1.00 (ref)", "1.00 (ref)"
        elif r.get("ours_is") is not None:
            this_ours, ours_is = f"{1 / r['ours_is']:.2f}", f"{r['ours_is']:.2f}x"
        else:
            this_ours = ours_is = "-"
        if r.get("ref") not in (None, "ours", r["impl"]):
            this_ours += f" (vs {r['ref']})"
        python = f"run by {r['python']}" if r.get("python") else ""
        note = "; ".join(x for x in (r["note"], r.get("detail"), r.get("probe"), python) if x)
        lines.append(
            f"| {r['case']} | {r['impl']} | {fmt_throughput(r['throughput'], r['unit'])} | "
            f"{fmt_throughput(r['best'], r['unit'])} | {r['unit']} | {this_ours} | {ours_is} | "
            f"{r['cpu_util']:.2f} | {note.replace('|', '/')} |")
    lines.append("")
    lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines) + "\n"


def case_notes(cases: list[Case], files: dict[str, tuple[str, dict]], warm: dict[str, float],
               size: str) -> list[str]:
    """One note per case: its title and its data."""
    notes = []
    for c in cases:
        ds = DATASETS[c.dataset]
        expected = files[c.dataset][1]
        about = expected.get("about")
        notes.append(f"{c.name}: {c.title}. Data: {ds.describe(ds.params(size))}"
                     f"{f' ({about})' if about else ''}, "
                     f"{expected['file_bytes'] / 1e6:,.1f} MB {'on disk' if ds.folder else 'file'} "
                     f"(page-cache warm-up read: {warm[c.dataset]:.2f} s).")
    return notes


def method_notes(*, quick: bool, rounds: int, jobs: int, jobs_given: bool, results: list[dict]) -> list[str]:
    """How the rows were measured, and whether the machine was busy meanwhile."""
    notes = []
    if rounds > 1:
        notes.append(f"{rounds} rounds: the rows ran round-robin {rounds} times and each row's "
                     "timed passes were pooled (throughput = median of all of them); the throughput of "
                     "each round is in results.json ('rounds').")
    notes += [
        "Each row ran in its own process: "
        f"{'(--quick: no warm-up pass)' if quick else '1 untimed warm-up pass'}, then the timed passes "
        "(throughput = median pass, best = fastest); every pass checked for the right record "
        "count and checksum (the conversion rows: their output, after the timing). GB = 1e9 "
        "payload bytes. The memory row is one measurement (no warm-up; ratio columns n/a).",
        "'ours is N×' = throughput of the reference row (`ours`, or the row named in 'this/ours') "
        "÷ throughput of this row (above 1: the reference is faster); 'this/ours' is its inverse.",
        "CPU = CPU time of the process and its child processes (DataLoader workers, pools) ÷ wall "
        "time in the median pass (1.00 = one core busy).",
        "CRC probe (framing_1mib, parse_small, small_loader): each implementation also read a "
        "10-record file with one flipped bit inside a "
        "float of record 4 (the proto still decodes, only a CRC check can tell).",
    ]
    noisy = [f"{r['case']}/{r['impl']} ({r['other_cores']:.2f})" for r in results
             if (r.get("other_cores") or 0) > 0.1]
    if jobs > 1:
        default = ", the --quick default" if not jobs_given else ""
        notes.append(f"Rows ran {jobs} at a time (--jobs {jobs}{default}): they competed for the "
                     "cores, so these numbers are not measurements.")
    elif noisy:
        notes.append("WARNING: other processes were busy while these rows ran (cores they used "
                     f"on average): {', '.join(noisy)}; their numbers may be low. Rerun on an idle "
                     "machine to compare.")
    else:
        notes.append("Other processes used under 0.1 core during every row (from /proc/stat).")
    return notes


def check_targets(results: list[dict]) -> list[dict]:
    """Each target whose rows ran: its measured value and whether it was met."""
    rows = {(r["case"], r["impl"]): r for r in results if "error" not in r and "skipped" not in r}
    out = []
    for t in TARGETS:
        row = rows.get((t.case, t.row))
        if row is None or (t.other is not None and (t.case, t.other) not in rows):
            continue
        if t.metric is not None:
            if t.metric not in (row.get("metrics") or {}):
                continue
            value = row["metrics"][t.metric]
            met = value >= t.at_least if t.at_least is not None else value < t.below
            shown = f"{value:,.3g} {t.metric.replace('_', ' ')}"
        elif t.other is not None:
            value = row["throughput"] / rows[(t.case, t.other)]["throughput"]
            met, shown = value >= t.at_least, f"{value:.2f}x"
        else:
            value = row["throughput"]
            met = value >= t.at_least if t.at_least is not None else value < t.below
            shown = fmt_throughput(value, row["unit"]) + f" {row['unit']}"
        out.append({"case": t.case, "target": t.text, "value": value, "shown": shown, "met": bool(met)})
    return out


def render_targets(targets: list[dict]) -> str:
    if not targets:
        return ""
    lines = ["", "Targets (reported, not asserted):", ""]
    lines += [f"- {t['case']}: {t['target']}: {t['shown']} -- {'met' if t['met'] else 'NOT met'}"
              for t in targets]
    return "\n".join(lines) + "\n"
