"""The chart (results.png): one panel per case, each row's throughput in the case's unit."""

from __future__ import annotations

import sys

from benchmarks.harness.registry import CASES, TARGETS
from benchmarks.harness.report import fmt_throughput


def _thousands(v, _pos) -> str:
    return f"{v:,.0f}"


def _plain(v, _pos) -> str:
    return f"{v:g}"


def write_chart(results: list[dict], path: str) -> bool:
    """One panel per case: each row's throughput (the case's unit), ours in
    blue, each bar labelled with its value and its ratio to its reference row."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("matplotlib is not installed: no chart (pip install matplotlib)", file=sys.stderr)
        return False
    groups: dict[str, list[dict]] = {}
    for r in results:
        if "error" not in r and "skipped" not in r:
            groups.setdefault(r["case"], []).append(r)
    if not groups:
        return False
    heights = [len(rows) + 1.6 for rows in groups.values()]
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 0.42 * sum(heights) + 0.6),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], groups.items()):
        c = CASES[name]
        values = [r["throughput"] for r in rows]
        labels = [r["impl"] for r in rows]
        colours = ["#1f77b4" if r["impl"].startswith("ours") else
                   "#bbbbbb" if c.impls[r["impl"]].yardstick else "#ff7f0e" for r in rows]
        y = list(range(len(rows)))[::-1]
        ax.barh(y, values, color=colours, height=0.7)
        ax.set_yticks(y, labels, fontsize=9)
        ax.set_title(f"{c.short}  [{c.unit}]", fontsize=10, loc="left")
        top = max([abs(v) for v in values] + [1e-9])
        lo = min(0.0, min(values))
        ax.set_xlim(lo * 1.15, top * 1.45)
        ax.axvline(0, color="black", linewidth=0.6)
        for yi, r, v in zip(y, rows, values):
            text = fmt_throughput(v, r["unit"])
            if r.get("ref") == r["impl"] and not c.measure:
                text += "  (ref)"
            elif r.get("ours_is"):
                text += f"  ({1 / r['ours_is']:.2f}x {r['ref']})"
            ax.text(max(v, 0) + top * 0.01, yi, text, va="center", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_formatter(FuncFormatter(_thousands if top >= 100 else _plain))
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if c.measure:
            target = next((t.below for t in TARGETS if t.case == name and t.below is not None
                           and t.metric is None), None)
            if target is not None:
                ax.axvline(target, color="red", linestyle="--", linewidth=1)
                ax.set_xlim(min(lo * 1.15, -1), max(top, target) * 1.45)
                ax.text(target, 0.25, f" target < {target:g}", color="red", fontsize=8, va="center")
    fig.suptitle("tfrecord_torch benchmarks (blue: ours; orange: peers; grey: ceilings and yardsticks)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
