"""The report's charts, drawn with matplotlib's Agg canvas into memory and returned as ``data:`` URIs, so
the HTML page holds its images and nothing is written beside it. Each takes the run report (or two)."""

from __future__ import annotations

import base64
import io
from typing import Any

from pipeline.report.summary import STAGES, TASK_STAGES

COLOURS = {
    "index": "#8c8c8c",
    "plan": "#b07aa1",
    "read": "#4e79a7",
    "mask": "#76b7b2",
    "resample": "#f28e2b",
    "reduce": "#ff9da7",
    "write": "#59a14f",
    "finalize": "#edc948",
    "overhead": "#e15759",
}
"""One colour per stage, in every chart."""

OLD_COLOUR = "#bab0ac"
"""The older run's bars in a comparison."""


def _figure(width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.figure import Figure  # the object API: no pyplot, no global backend switched

    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot()


def _uri(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def stage_chart(report: dict[str, Any]) -> str:
    """Wall-clock seconds per stage, one bar each."""
    fig, ax = _figure(8, 3.2)
    values = [report["stages"].get(s, 0.0) for s in STAGES]
    ax.barh(list(STAGES)[::-1], values[::-1], color=[COLOURS[s] for s in STAGES][::-1])
    for y, v in enumerate(values[::-1]):
        ax.text(v, y, f" {v:.2f} s", va="center", fontsize=8)
    ax.set_xlabel("wall-clock seconds")
    ax.set_title(f"Stage breakdown (wall {report['wall_s']:.2f} s)")
    return _uri(fig)


def timeline_chart(report: dict[str, Any]) -> str:
    """Each worker's tasks over time, split into read / resample / write / other."""
    from matplotlib.patches import Rectangle

    tasks = report["tasks"]
    workers = sorted(report["workers"])
    t0 = min((t["start"] for t in tasks), default=0.0)
    fig, ax = _figure(8, 0.6 * max(len(workers), 2) + 1.2)
    for row, w in enumerate(workers):
        for t in (t for t in tasks if t["worker"] == w):
            x = t["start"] - t0
            for s in TASK_STAGES:
                ax.barh(row, t.get(f"{s}_s", 0.0), left=x, color=COLOURS[s], height=0.7)
                x += t.get(f"{s}_s", 0.0)
            rest = (t["end"] - t["start"]) - (x - (t["start"] - t0))
            if rest > 0:
                ax.barh(row, rest, left=x, color=COLOURS["overhead"], height=0.7)
    ax.set_yticks(range(len(workers)), [f"worker {w}" for w in workers])
    ax.set_xlabel("seconds since the first task started")
    ax.set_title("Task timeline (read / resample / write / other)")
    shown = [s for s in TASK_STAGES if any(t.get(f"{s}_s", 0.0) for t in tasks) or s in ("read", "resample", "write")]
    handles = [Rectangle((0, 0), 1, 1, color=COLOURS[s]) for s in (*shown, "overhead")]
    ax.legend(
        handles,
        [*shown, "other"],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35),
        fontsize=7,
        ncol=len(shown) + 1,
        frameon=False,
    )
    return _uri(fig)


def memory_chart(report: dict[str, Any]) -> str | None:
    """Resident memory of each worker's process as its tasks ended (None where the tasks did not record it)."""
    tasks = [t for t in report["tasks"] if "rss_mb" in t]
    if not tasks:
        return None
    t0 = min(t["start"] for t in report["tasks"])
    fig, ax = _figure(8, 3.0)
    by_process: dict[str, list[tuple[float, float]]] = {}
    threads = report.get("execution", {}).get("scheduler") == "threads"
    for t in sorted(tasks, key=lambda t: t["end"]):
        name = "this process (all threads)" if threads else str(t["worker"])
        by_process.setdefault(name, []).append((t["end"] - t0, float(t["rss_mb"])))
    for name, points in sorted(by_process.items()):
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=name)
    limits = [v for v in (report.get("memory") or {}).get("worker_limit_mb", {}).values() if v]
    if limits and not threads and min(limits) < 4 * max(float(t["rss_mb"]) for t in tasks):
        ax.axhline(min(limits), color=COLOURS["overhead"], linestyle="--", linewidth=1, label="worker limit")
    ax.set_xlabel("seconds since the first task started")
    ax.set_ylabel("resident MB")
    ax.set_ylim(bottom=0)
    ax.set_title("Memory over time per worker (as each task ended)")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return _uri(fig)


def duration_chart(report: dict[str, Any]) -> str | None:
    """Histogram of task durations, the median marked."""
    import statistics

    durations = [t["end"] - t["start"] for t in report["tasks"]]
    if not durations:
        return None
    fig, ax = _figure(8, 2.8)
    ax.hist(durations, bins=max(5, min(30, len(durations) // 2)), color=COLOURS["read"], edgecolor="white")
    med = statistics.median(durations)
    ax.axvline(med, color=COLOURS["overhead"], linestyle="--", linewidth=1.2, label=f"median {med:.2f} s")
    ax.set_xlabel("task duration, s")
    ax.set_ylabel("tasks")
    ax.set_title(f"Task durations ({len(durations)} tasks)")
    ax.legend(fontsize=8, frameon=False)
    return _uri(fig)


def compare_chart(new: dict[str, Any], old: dict[str, Any]) -> str:
    """Wall-clock seconds per stage, the older run's bar beside the newer one's."""
    import numpy as np

    fig, ax = _figure(8, 3.6)
    y = np.arange(len(STAGES))[::-1]
    ax.barh(y + 0.2, [old["stages"].get(s, 0.0) for s in STAGES], height=0.4, color=OLD_COLOUR, label="old")
    ax.barh(
        y - 0.2,
        [new["stages"].get(s, 0.0) for s in STAGES],
        height=0.4,
        color=[COLOURS[s] for s in STAGES],
        label="new",
    )
    ax.set_yticks(y, list(STAGES))
    ax.set_xlabel("wall-clock seconds")
    ax.set_title(f"Stages: old (grey) {old['wall_s']:.2f} s wall, new (colour) {new['wall_s']:.2f} s wall")
    return _uri(fig)
