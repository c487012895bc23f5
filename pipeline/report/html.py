"""``pipeline report RUN.json --html OUT.html``: one self-contained page with plots.

Charts are drawn with matplotlib (Agg), saved as PNGs beside the page and
embedded in it as data URIs, so the page works when copied alone.
"""

from __future__ import annotations

import base64
import html
import os
from typing import Any

from pipeline.report.summary import STAGES, format_report

COLOURS = {
    "index": "#8c8c8c",
    "plan": "#b07aa1",
    "read": "#4e79a7",
    "resample": "#f28e2b",
    "write": "#59a14f",
    "finalize": "#edc948",
    "overhead": "#e15759",
}


def _stage_chart(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    values = [report["stages"][s] for s in STAGES]
    ax.barh(list(STAGES)[::-1], values[::-1], color=[COLOURS[s] for s in STAGES][::-1])
    for y, v in enumerate(values[::-1]):
        ax.text(v, y, f" {v:.2f} s", va="center", fontsize=8)
    ax.set_xlabel("wall-clock seconds")
    ax.set_title(f"Stage breakdown (wall {report['wall_s']:.2f} s)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _timeline_chart(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    workers = sorted(report["workers"])
    t0 = min((t["start"] for t in tasks), default=0.0)
    fig, ax = plt.subplots(figsize=(8, 0.6 * max(len(workers), 2) + 1.2), dpi=100)
    for row, w in enumerate(workers):
        for t in (t for t in tasks if t["worker"] == w):
            x = t["start"] - t0
            for s in ("read", "resample", "write"):
                ax.barh(row, t[f"{s}_s"], left=x, color=COLOURS[s], height=0.7)
                x += t[f"{s}_s"]
            rest = (t["end"] - t["start"]) - (x - (t["start"] - t0))
            if rest > 0:
                ax.barh(row, rest, left=x, color=COLOURS["overhead"], height=0.7)
    ax.set_yticks(range(len(workers)), [f"worker {w}" for w in workers])
    ax.set_xlabel("seconds since the first task started")
    ax.set_title("Task timeline (read / resample / write / other)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[s]) for s in ("read", "resample", "write", "overhead")]
    ax.legend(
        handles,
        ["read", "resample", "write", "other"],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35),
        fontsize=7,
        ncol=4,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_html(report: dict[str, Any], out: str) -> list[str]:
    """Write ``out`` and its PNGs (``<out stem>.stages.png``, ``.timeline.png``); return all paths."""
    stem = os.path.splitext(out)[0]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    pngs = [f"{stem}.stages.png", f"{stem}.timeline.png"]
    _stage_chart(report, pngs[0])
    _timeline_chart(report, pngs[1])

    def embed(p: str) -> str:
        with open(p, "rb") as f:
            return "data:image/png;base64," + base64.b64encode(f.read()).decode()

    rows = "".join(
        f"<tr class='{d['status']}'><td>{html.escape(d['check'])}</td><td>{d['status']}</td>"
        f"<td>{html.escape(d['detail'])}</td><td>{html.escape(d['advice'])}</td></tr>"
        for d in report["diagnostics"]
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pipeline run report</title>
<style>body{{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px}}
tr.warn td{{background:#fde2e1}}pre{{background:#f6f6f6;padding:1em;font-size:12px;overflow-x:auto}}</style>
</head><body>
<h1>Run report</h1>
<p>{html.escape(str(report.get("config")))} &rarr; {html.escape(report["output"]["path"])}</p>
<h2>Where the time went</h2><img alt="stage breakdown" src="{embed(pngs[0])}">
<h2>Tasks by worker</h2><img alt="task timeline" src="{embed(pngs[1])}">
<h2>Diagnostics</h2><table><tr><th>check</th><th>status</th><th>detail</th><th>advice</th></tr>{rows}</table>
<h2>Breakdown</h2><pre>{html.escape(format_report(report))}</pre>
</body></html>"""
    with open(out, "w") as f:
        f.write(page)
    return [out, *pngs]
