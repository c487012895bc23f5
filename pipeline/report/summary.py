"""Where the time went: stage timers in; the JSON file and its text table out (the checks on it:
:mod:`pipeline.report.diagnostics`).

Stage accounting
----------------
``stages`` are wall-clock seconds that add up to ``wall_s``:

* ``index``, ``plan``, ``finalize`` run on the driver and are timed directly;
  ``write`` also gets the driver's time to create the store template.
* During the parallel phase, ``T`` worker threads run tasks. A task-second
  spent reading is 1/T of a wall-second of the whole cluster, so each of
  ``read``, ``mask`` (reading and judging mask tiles, dropping pixels),
  ``resample`` (with fusing), ``reduce`` (a composite's reduction over dates)
  and ``write`` gets ``task_seconds / T`` wall seconds.
* ``overhead`` is the rest: cluster start, scheduling, transfers, idle
  threads and the driver's bookkeeping. A large overhead is idle capacity.

``stage_task_s`` are the same stages as summed task-seconds across workers
(driver stages count once; ``overhead`` there is time inside tasks not spent
in read/resample/write).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STAGES = ("index", "plan", "read", "mask", "resample", "reduce", "write", "finalize", "overhead")
TASK_STAGES = ("read", "mask", "resample", "reduce", "write")


class StageClock:
    """Wall-clock timer per driver stage: ``with clock.stage("plan"): ...``."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name`` (added to what it already has)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t

    def elapsed(self) -> float:
        """Seconds since the clock was made."""
        return time.perf_counter() - self.t0


def compute_stages(
    wall_s: float, driver_s: dict[str, float], tasks: list[dict[str, Any]], threads: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(stages, stage_task_s) as described in the module docstring."""
    task_s = {s: sum(t.get(f"{s}_s", 0.0) for t in tasks) for s in TASK_STAGES}
    inside = sum(t["end"] - t["start"] for t in tasks) - sum(task_s.values())
    stages = {s: float(driver_s.get(s, 0.0)) for s in ("index", "plan", "finalize")}
    for s in TASK_STAGES:
        stages[s] = task_s[s] / max(threads, 1) + float(driver_s.get(s, 0.0))
    stages["overhead"] = max(wall_s - sum(stages.values()), 0.0)
    stage_task_s = {s: float(driver_s.get(s, 0.0)) for s in ("index", "plan", "finalize")}
    stage_task_s.update({s: task_s[s] + float(driver_s.get(s, 0.0)) for s in TASK_STAGES})
    stage_task_s["overhead"] = max(inside, 0.0)
    return {s: stages[s] for s in STAGES}, {s: stage_task_s[s] for s in STAGES}


def summarise_workers(tasks: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, float]]:
    """Tasks and busy seconds per worker; every name in ``names`` appears, idle ones with zeros."""
    out: dict[str, dict[str, float]] = {n: {"tasks": 0, "busy_s": 0.0} for n in names}
    for t in tasks:
        w = out.setdefault(t["worker"], {"tasks": 0, "busy_s": 0.0})
        w["tasks"] += 1
        w["busy_s"] += t["end"] - t["start"]
    return out


def max_concurrency(tasks: list[dict[str, Any]]) -> int:
    """The most tasks that ran at one time."""
    events = sorted([(t["start"], 1) for t in tasks] + [(t["end"], -1) for t in tasks])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def format_update(update: dict[str, Any], dry_run: bool = False) -> str:
    """The report's ``update`` as lines: dates added, recomputed (each with why) and kept."""
    verb = ("would add", "would recompute", "would keep") if dry_run else ("added", "recomputed", "kept")
    lines = []
    for label, key in zip(verb, ("added", "recomputed", "unchanged"), strict=True):
        dates = update.get(key) or []
        lines.append(
            f"{label + ':':<16}{len(dates):4d} date(s)" + (f"  {', '.join(d[:10] for d in dates)}" if dates else "")
        )
        if key == "recomputed":
            for d in dates:
                lines += [f"    {d[:10]}: {why}" for why in update.get("why", {}).get(d, [])]
    if update.get("missing_inputs"):
        lines.append(
            f"kept, no inputs: {', '.join(d[:10] for d in update['missing_inputs'])} (an update drops no date)"
        )
    if update.get("inserted"):
        lines.append("dates inserted before later ones: the whole time axis was staged and published at once")
    if update.get("created"):
        lines.append("no cube there: " + ("a run would make it" if dry_run else "made by a run"))
    return "\n".join(lines)


def format_report(report: dict[str, Any]) -> str:
    """The human-readable breakdown printed at the end of a run."""
    wall = report["wall_s"]
    mb_read = report["inputs"]["bytes_read"] / 1e6
    mb_out = report["output"]["bytes_raw"] / 1e6
    files = report["inputs"]["files"]
    lines = [
        f"wall {wall:.2f} s   inputs {files} files, {mb_read:.1f} MB read   "
        f"output {mb_out:.1f} MB raw, {report['output']['bytes'] / 1e6:.1f} MB stored",
        "",
        f"{'stage':<10}{'wall s':>9}{'share':>8}{'task s':>9}{'MB/s':>9}{'files/s':>9}",
    ]
    for s in STAGES:
        sec = report["stages"].get(s, 0.0)
        if s in ("mask", "reduce") and not sec:
            continue  # a run with no mask or composite
        rate = files_rate = ""
        if s == "read" and sec > 0:
            rate, files_rate = f"{mb_read / sec:9.1f}", f"{files / sec:9.1f}"
        elif s in ("resample", "write") and sec > 0:
            rate = f"{mb_out / sec:9.1f}"
        elif s == "index" and sec > 0:
            files_rate = f"{files / sec:9.1f}"
        lines.append(
            f"{s:<10}{sec:9.2f}{sec / wall if wall else 0:8.1%}{report['stage_task_s'].get(s, 0.0):9.2f}"
            f"{rate or '':>9}{files_rate or '':>9}"
        )
    lines.append("")
    lines.append(
        "tasks per worker: "
        + ", ".join(f"{w}: {v['tasks']} ({v['busy_s']:.1f} s busy)" for w, v in sorted(report["workers"].items()))
    )
    ex = report["execution"]
    if wall:
        lines.append(
            f"scheduling overhead: {ex.get('scheduling_overhead_s', 0.0):.2f} s "
            f"({ex.get('scheduling_overhead_s', 0.0) / wall:.1%} of wall)"
        )
    stragglers = report.get("stragglers", [])
    lines.append(f"stragglers (tasks over 3x the median): {len(stragglers)}")
    for t in stragglers[:5]:
        lines.append(
            f"  partition {t['partition']} on worker {t['worker']}: {t['duration_s']:.2f} s "
            f"({t['x_median']:.1f}x median, {t['chunks']} chunks, {t['cost_bytes'] / 1e6:.1f} MB)"
        )
    dev = report["devices"]
    reason = dev["decisions"][0]["reason"] if dev["decisions"] else ""
    lines.append(f"devices: cpu {dev['cpu']} tasks, gpu {dev['gpu']} tasks ({reason})")
    net = report.get("network") or {}
    if net.get("requests"):
        lat = net.get("latency_ms") or {}
        lines.append(
            f"network: {net['requests']} requests, {net['bytes_fetched'] / 1e6:.1f} MB fetched for "
            f"{net['bytes_needed'] / 1e6:.1f} MB needed, {net['retries']} retries, read latency "
            f"p50 {lat.get('p50') or 0:.1f} ms, p99 {lat.get('p99') or 0:.1f} ms"
        )
    lines.append(_format_scheduler(report))
    lines += _format_composite(report)
    if report["inputs"]["skipped"]:
        lines.append(f"skipped inputs: {len(report['inputs']['skipped'])}")
        lines += [f"  {s['path']}: {s['error']}" for s in report["inputs"]["skipped"][:10]]
    lines.append("")
    for d in report["diagnostics"]:
        mark = "ok  " if d["status"] == "ok" else "WARN"
        lines.append(f"[{mark}] {d['check']}: {d['detail']}")
        if d["status"] == "warn" and d["advice"]:
            lines.append(f"       -> {d['advice']}")
    return "\n".join(lines)


def rules_text(shares: dict[str, float]) -> str:
    """``mask.matched_share`` as text, the rules that match most first: ``class 9 41%, class 8 30%``."""
    return ", ".join(f"{rule} {share:.0%}" for rule, share in sorted(shares.items(), key=lambda kv: -kv[1]))


def _format_composite(report: dict[str, Any]) -> list[str]:
    """The mask (what it dropped, per band over the dates) and the composite (its shape), where the run had them."""
    lines = []
    mask = report.get("mask")
    if mask:
        parts = []
        for band, by_date in mask["dropped_fraction"].items():
            known = [v for v in by_date.values() if v is not None]
            if known:
                parts.append(f"{band} {min(known):.0%}-{max(known):.0%}")
        rule = ", ".join(f"{key} {mask[key]}" for key in ("exclude", "exclude_bits") if mask[key])
        lines.append(
            f"mask: {mask['band']} ({rule}, dilate {mask['dilate']}) dropped per date: " + (", ".join(parts) or "none")
        )
        if mask.get("matched_share"):
            lines.append(f"  of the mask's pixels, before the dilation: {rules_text(mask['matched_share'])}")
    comp = report.get("composite")
    if comp:
        lines.append(
            f"composite: {comp['reducer']} over {comp['period']}: {comp['dates']} dates into {comp['steps']} steps; "
            f"stack {comp['stack_mb']:.0f} MB per chunk"
            + (f" ({comp['strips']} row strips per chunk)" if comp["strips"] > 1 else "")
        )
    return lines


def _format_scheduler(report: dict[str, Any]) -> str:
    """One line: where the tasks ran and why, and the peak memory of the driver and the busiest worker."""
    ex, mem = report["execution"], report.get("memory") or {}
    peaks = mem.get("worker_peak_mb") or {}
    worst = max(peaks.items(), key=lambda kv: kv[1], default=None)
    worker = f", {worst[0]} {worst[1]:.0f} MB" if worst else ""
    return (
        f"scheduler: {ex.get('scheduler')} ({ex.get('scheduler_reason', '')}); peak memory: driver "
        f"{mem.get('driver_peak_mb', 0.0):.0f} MB{worker}"
    )


def write_report(report: dict[str, Any], path: str) -> None:
    """Write the report as JSON at ``path``, atomically (a temporary file, then a rename)."""
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(tmp, path)


def read_report(path: str) -> dict[str, Any]:
    """A report written by :func:`write_report`; a ConfigError naming ``path`` for anything else."""
    from pipeline.errors import ConfigError

    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError("REPORT_JSON", f"cannot read a run report from {path}: {e}") from None
    missing = [
        k for k in ("wall_s", "stages", "tasks", "diagnostics") if not isinstance(report, dict) or k not in report
    ]
    if missing:
        raise ConfigError(
            "REPORT_JSON", f"{path} is not a run report (it lacks {', '.join(missing)}): give the JSON a run wrote"
        )
    return report  # type: ignore[no-any-return]
