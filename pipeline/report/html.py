"""``pipeline report RUN.json --html OUT.html`` (and ``--compare OLD.json``): one self-contained page.

The charts (:mod:`pipeline.report.charts`) are embedded as ``data:`` URIs: the page holds its images, and
nothing is written beside it. Sections: the run, the settings it ran with, where the time went, tasks by
worker, task durations, memory over time, diagnostics, network, skipped inputs, the full-scale
projection and the text breakdown; with an older report, what changed.
"""

from __future__ import annotations

import html
import os
from typing import Any

from pipeline.report import charts
from pipeline.report.charts import COLOURS
from pipeline.report.summary import format_report

__all__ = ["COLOURS", "render_html", "write_html"]

_STYLE = """body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}
table{border-collapse:collapse;width:100%;margin-bottom:1em}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;
text-align:left;vertical-align:top}th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.warn td{background:#fde2e1}tr.fixed td{background:#e2f5e1}tr.worse td{background:#fde2e1}
pre{background:#f6f6f6;padding:1em;font-size:12px;overflow-x:auto}img{max-width:100%}
p.answer{font-size:15px;background:#eef3fa;padding:.6em 1em;border-left:4px solid #4e79a7}"""

# The settings a person tuning a run looks at first: (label, dotted key in the resolved config).
_SETTINGS = [
    ("output.chunks", "output.chunks"),
    ("output.shards", "output.shards"),
    ("output.compression", "output.compression"),
    ("execution.partition_mb", "execution.partition_mb"),
    ("execution.workers", "execution.workers"),
    ("execution.threads_per_worker", "execution.threads_per_worker"),
    ("execution.scheduler", "execution.scheduler"),
    ("execution.device", "execution.device"),
    ("resampling", "resampling"),
    ("fuse", "fuse"),
    ("grid.crs", "grid.crs"),
    ("grid.resolution", "grid.resolution"),
]


def _e(value: Any) -> str:
    return html.escape(str(value))


def _table(
    head: list[str],
    rows: list[list[Any]],
    classes: list[str] | None = None,
    num: frozenset[int] | set[int] = frozenset(),
) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = f" class='{classes[i]}'" if classes and classes[i] else ""
        cells = "".join(f"<td class='num'>{_e(c)}</td>" if j in num else f"<td>{_e(c)}</td>" for j, c in enumerate(row))
        out.append(f"<tr{cls}>{cells}</tr>")
    return "".join(out) + "</table>"


def _get(mapping: dict[str, Any], dotted: str) -> Any:
    node: Any = mapping
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _settings(report: dict[str, Any]) -> str:
    cfg = report.get("resolved_config") or {}
    ex = report["execution"]
    rows: list[list[Any]] = [[label, _get(cfg, key) if cfg else "(not recorded)"] for label, key in _SETTINGS]
    rows += [
        ["scheduler used", f"{ex.get('scheduler')} ({ex.get('scheduler_reason', '')})"],
        ["workers / threads used", f"{ex.get('workers')} / {ex.get('threads')} ({ex.get('cores')} cores here)"],
        ["devices", f"cpu {report['devices']['cpu']} tasks, gpu {report['devices']['gpu']} tasks"],
        ["partitions", f"{report['plan']['partitions']} ({report['plan'].get('resumed_done', 0)} done before)"],
    ]
    if ex.get("dashboard"):
        rows.append(["dashboard (during the run)", ex["dashboard"]])
    note = "" if cfg else "<p>This report predates the recorded config: the rows below are what it holds.</p>"
    return note + _table(["setting", "value"], rows)


def _network(report: dict[str, Any]) -> str:
    net = report.get("network") or {}
    if not net.get("requests"):
        return "<p>No remote reads: the inputs were local files.</p>"
    lat = net.get("latency_ms") or {}
    needed = net.get("bytes_needed") or 0
    rows = [
        ["requests", f"{net['requests']:,}"],
        ["bytes fetched", f"{net['bytes_fetched'] / 1e6:,.1f} MB"],
        ["bytes the windows need", f"{needed / 1e6:,.1f} MB"],
        ["fetched / needed", f"{net['bytes_fetched'] / needed:.2f}x" if needed else "-"],
        ["retries", f"{net.get('retries', 0):,}"],
        ["read latency p50", f"{lat.get('p50') or 0:.1f} ms"],
        ["read latency p99", f"{lat.get('p99') or 0:.1f} ms"],
    ]
    return _table(["figure", "value"], rows, num={1})


def _skipped(report: dict[str, Any]) -> str:
    skipped = report["inputs"]["skipped"]
    if not skipped:
        return "<p>None: every input was used.</p>"
    shown = skipped[:500]
    more = f"<p>... and {len(skipped) - len(shown)} more (in the JSON).</p>" if len(skipped) > len(shown) else ""
    degraded = report["output"].get("chunks_degraded") or []
    note = f"<p>{len(degraded)} chunk(s) were written without them.</p>" if degraded else ""
    return note + _table(["path", "error"], [[s["path"], s["error"]] for s in shown]) + more


def _projection(report: dict[str, Any]) -> str:
    from pipeline.report.sizing import CASE_STUDY_QUESTION, format_estimate, project_case_study

    if not report["tasks"]:
        return "<p>No task ran: nothing measured to project from.</p>"
    e = project_case_study(report)
    if e["workers_needed"] is None:
        answer = f"out of reach: the serial driver work alone ({e['serial_driver_s']:.0f} s) exceeds 3 minutes"
    else:
        answer = f"~{e['workers_needed']:,} single-threaded workers, limited by {e['limiting_stage']}"
        if e["network"]["in_flight_cluster"] is not None:
            answer += f"; {e['network']['in_flight_cluster']:,.0f} requests in flight across the cluster"
    return (
        f"<p class='answer'><b>{_e(CASE_STUDY_QUESTION)}</b><br>{_e(answer)}</p>"
        f"<pre>{_e(format_estimate(e, 'At full scale, from this run (driver planning extrapolated per file):'))}</pre>"
    )


def _diagnostics(report: dict[str, Any]) -> str:
    diags = report["diagnostics"]
    rows = [[d["check"], d["status"], d["detail"], d["advice"]] for d in diags]
    return _table(["check", "status", "detail", "advice"], rows, [d["status"] for d in diags])


def _img(uri: str | None, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="{uri}">' if uri else f"<p>No data for {_e(alt)}.</p>"


CHANGE_SHARE = 0.05
"""A stage is marked faster or slower in a comparison when it changed by more than this share of the old
run's wall (smaller changes are within run-to-run noise on a shared machine)."""


def _change_class(old_s: float, new_s: float, wall_s: float) -> str:
    if abs(new_s - old_s) <= CHANGE_SHARE * wall_s:
        return ""
    return "fixed" if new_s < old_s else "worse"


def _comparison(report: dict[str, Any], old: dict[str, Any], old_name: str) -> str:
    from pipeline.report.compare import compare_reports, headline

    cmp = compare_reports(report, old)
    stage_rows = [
        [
            r["stage"],
            f"{r['old_s']:.2f}",
            f"{r['new_s']:.2f}",
            f"{r['delta_s']:+.2f}",
            f"{r['ratio']:.2f}x" if r["ratio"] else "-",
        ]
        for r in cmp["stages"]
    ]
    stage_cls = [_change_class(r["old_s"], r["new_s"], old["wall_s"]) for r in cmp["stages"]]
    diag_rows = [
        [d["check"], d["old"] or "-", d["new"] or "-", d["change"], d["new_detail"]] for d in cmp["diagnostics"]
    ]
    diag_cls = [
        {"fixed": "fixed", "new warning": "worse", "still warns": "warn"}.get(d["change"], "")
        for d in cmp["diagnostics"]
    ]
    settings = (
        _table(["setting", "old", "new"], [[s["key"], s["old"], s["new"]] for s in cmp["settings"]])
        if cmp["settings"]
        else "<p>The same settings.</p>"
        if cmp["settings_recorded"]
        else "<p>Not recorded in both reports (older reports hold no resolved config).</p>"
    )
    return (
        f"<h2>Compared with {_e(old_name)}</h2><p class='answer'>{_e(headline(cmp))}</p>"
        f"{_img(charts.compare_chart(report, old), 'stages compared')}"
        f"<h3>Stage by stage (wall-clock s)</h3>"
        f"{_table(['stage', 'old', 'new', 'change', 'new/old'], stage_rows, stage_cls, num={1, 2, 3, 4})}"
        f"<h3>Diagnostic by diagnostic</h3>{_table(['check', 'old', 'new', 'change', 'now'], diag_rows, diag_cls)}"
        f"<h3>Settings that differ</h3>{settings}"
    )


def _update(report: dict[str, Any]) -> str:
    """An update's dates: each added, recomputed (with why: which tile changed) or kept."""
    u = report.get("update")
    if not u:
        return ""
    rows = [[d, "added", ""] for d in u.get("added", [])]
    rows += [[d, "recomputed", "; ".join(u.get("why", {}).get(d, []))] for d in u.get("recomputed", [])]
    rows += [[d, "kept", ""] for d in u.get("unchanged", [])]
    rows += [[d, "kept", "no input has this date now"] for d in u.get("missing_inputs", [])]
    rows.sort(key=lambda r: r[0])
    cls = ["fixed" if r[1] == "added" else "warn" if r[1] == "recomputed" else "" for r in rows]
    n = {k: len(u.get(k, [])) for k in ("added", "recomputed", "unchanged")}
    said = f"{n['added']} added, {n['recomputed']} recomputed, {n['unchanged']} kept"
    if report.get("dry_run"):
        said += " (a dry run: nothing was written)"
    return f"<h2>Update</h2><p>{_e(said)}</p>" + _table(["date", "what", "why"], rows, cls)


def render_html(report: dict[str, Any], old: dict[str, Any] | None = None, old_name: str = "the old run") -> str:
    """The page for ``report`` (and, given ``old``, what changed since it), images inside."""
    if "tasks" not in report:  # an update that wrote no chunk: its dates only
        return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pipeline update report</title><style>{_STYLE}</style></head>
<body><h1>Update report</h1><p>{_e(report["output"]["path"])}: no chunk written</p>{_update(report)}</body></html>"""
    compared = _comparison(report, old, old_name) if old is not None else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pipeline run report</title><style>{_STYLE}</style></head><body>
<h1>Run report</h1>
<p>{_e(report.get("config"))} &rarr; {_e(report["output"]["path"])}; wall {report["wall_s"]:.2f} s,
{report["inputs"]["files"]} inputs, {len(report["tasks"])} tasks</p>
{compared}{_update(report)}
<h2>Settings it ran with</h2>{_settings(report)}
<h2>Where the time went</h2>{_img(charts.stage_chart(report), "stage breakdown")}
<h2>Tasks by worker</h2>{_img(charts.timeline_chart(report), "task timeline")}
<h2>Task durations</h2>{_img(charts.duration_chart(report), "task durations")}
<h2>Memory over time</h2>{_img(charts.memory_chart(report), "memory over time per worker")}
<h2>Diagnostics</h2>{_diagnostics(report)}
<h2>Network</h2>{_network(report)}
<h2>Skipped inputs</h2>{_skipped(report)}
<h2>At full scale</h2>{_projection(report)}
<h2>Breakdown</h2><pre>{_e(format_report(report))}</pre>
</body></html>"""


def write_html(report: dict[str, Any], out: str, old: dict[str, Any] | None = None, old_name: str = "") -> str:
    """Write the page at ``out`` (nothing else); return its path."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    page = render_html(report, old, old_name or "the old run")
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(page)
    os.replace(tmp, out)
    return os.path.abspath(out)
