"""Where the time went: stage timers in; JSON, a text table and diagnostics out.

Stage accounting
----------------
``stages`` are wall-clock seconds that add up to ``wall_s``:

* ``index``, ``plan``, ``finalize`` run on the driver and are timed directly;
  ``write`` also gets the driver's time to create the store template.
* During the parallel phase, ``T`` worker threads run tasks. A task-second
  spent reading is 1/T of a wall-second of the whole cluster, so each of
  ``read``, ``resample`` and ``write`` gets ``task_seconds / T`` wall seconds.
* ``overhead`` is the rest: cluster start, scheduling, transfers, idle
  threads and the driver's bookkeeping. A large overhead is idle capacity.

``stage_task_s`` are the same stages as summed task-seconds across workers
(driver stages count once; ``overhead`` there is time inside tasks not spent
in read/resample/write).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STAGES = ("index", "plan", "read", "resample", "write", "finalize", "overhead")
TASK_STAGES = ("read", "resample", "write")


class StageClock:
    """Wall-clock timer per driver stage: ``with clock.stage("plan"): ...``."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def compute_stages(
    wall_s: float, driver_s: dict[str, float], tasks: list[dict[str, Any]], threads: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(stages, stage_task_s) as described in the module docstring."""
    task_s = {s: sum(t[f"{s}_s"] for t in tasks) for s in TASK_STAGES}
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
    out: dict[str, dict[str, float]] = {n: {"tasks": 0, "busy_s": 0.0} for n in names}
    for t in tasks:
        w = out.setdefault(t["worker"], {"tasks": 0, "busy_s": 0.0})
        w["tasks"] += 1
        w["busy_s"] += t["end"] - t["start"]
    return out


def max_concurrency(tasks: list[dict[str, Any]]) -> int:
    events = sorted([(t["start"], 1) for t in tasks] + [(t["end"], -1) for t in tasks])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def _check(check: str, warn: bool, detail: str, advice: str) -> dict[str, str]:
    return {"check": check, "status": "warn" if warn else "ok", "detail": detail, "advice": advice if warn else ""}


TASK_OVERHEAD_SHARE = 0.10
"""Warn when the per-task overhead passes this share of the median task. Dask's dispatch costs ~2-5 ms
per task on a busy 2-core machine: 5% flagged the small fixture's clean 60 ms tasks at random
(3-8% from run to run), while partitions that really are too small measure over 100%."""


def compute_task_overhead(tasks: list[dict[str, Any]]) -> tuple[float, float]:
    """(median per-task overhead s, summed overhead s): gaps between a worker's consecutive tasks
    (dispatch, transfer, idle) plus time inside tasks outside read/resample/write."""
    gaps: list[float] = []
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tasks:
        by_worker[t["worker"]].append(t)
    for ts in by_worker.values():
        ts.sort(key=lambda t: t["start"])
        gaps += [max(b["start"] - a["end"], 0.0) for a, b in zip(ts, ts[1:], strict=False)]
    inside = [max(t["end"] - t["start"] - (t["read_s"] + t["resample_s"] + t["write_s"]), 0.0) for t in tasks]
    median = (statistics.median(gaps) if gaps else 0.0) + (statistics.median(inside) if inside else 0.0)
    return median, sum(gaps) + sum(inside)


def compute_stragglers(tasks: list[dict[str, Any]], factor: float = 3.0) -> list[dict[str, Any]]:
    """Tasks that took over ``factor`` x the median task, longest first."""
    durations = [t["end"] - t["start"] for t in tasks]
    med = statistics.median(durations) if durations else 0.0
    out = [
        {"id": t["id"], "partition": t["index"], "worker": t["worker"], "duration_s": d, "x_median": d / med,
         "chunks": t["chunks"], "cost_bytes": t.get("cost_bytes", 0)}
        for t, d in zip(tasks, durations, strict=True)
        if med > 0 and d > factor * med
    ]  # fmt: skip
    return sorted(out, key=lambda s: -s["duration_s"])


SMALL_OBJECT_BYTES = 1_000_000
"""Warn when the store's chunk (or shard) objects average below this: each is one request to write and
one to read, and object stores charge per request and take ~10-100 ms per request to first byte."""


def check_object_sizes(output: dict[str, Any]) -> list[dict[str, str]]:
    """Diagnostic for a store in a bucket: the mean size of the objects the run wrote (advice: shard, or
    larger chunks). nothing for a local store, where a small file costs no request."""
    if "://" not in str(output.get("path", "")):
        return []
    objects, size = int(output.get("objects") or 0), int(output.get("objects_bytes") or 0)
    mean = size / objects if objects else 0.0
    return [_check(
        "object_size", objects > 1 and mean < SMALL_OBJECT_BYTES,
        f"{objects} chunk objects, {mean / 1e6:.2f} MB on average",
        "small objects cost a request each (and, in a bucket, money and latency): set output.shards "
        "(one object per shard of many chunks) or larger output.chunks",
    )]  # fmt: skip


def compute_diagnostics(report: dict[str, Any]) -> list[dict[str, str]]:
    """One entry per check, computed from the report's own numbers only."""
    tasks = report["tasks"]
    ex = report["execution"]
    threads = max(int(ex["threads"]), 1)
    n = len(tasks)
    durations = [t["end"] - t["start"] for t in tasks]
    med = statistics.median(durations) if durations else 0.0
    workers = report["workers"]
    used = [w for w, v in workers.items() if v["tasks"] > 0]
    local_cores = int(ex.get("cores", 1)) if ex.get("scheduler") == "local" else 1
    out = check_object_sizes(report.get("output", {}))

    out.append(_check(
        "workers_used", n > 1 and len(used) <= 1 and (len(workers) > 1 or local_cores > 1),
        f"{len(used)} of {len(workers)} workers ran tasks ({n} tasks"
        + (f", {local_cores} cores here)" if ex.get("scheduler") == "local" else ")"),
        "all work ran on one worker: add workers (execution.workers) if cores are free; on a cluster, check "
        "for a resource request only one worker can satisfy, or fewer partitions than workers "
        "(lower execution.partition_mb)",
    ))  # fmt: skip

    per_task, _ = compute_task_overhead(tasks)
    share = per_task / med if med > 0 else 0.0
    out.append(_check(
        "task_overhead", n > 1 and share > TASK_OVERHEAD_SHARE,
        f"per-task overhead {per_task * 1e3:.1f} ms against a median task of {med * 1e3:.1f} ms ({share:.1%})",
        "tasks are too small for their scheduling cost: raise execution.partition_mb",
    ))  # fmt: skip

    stragglers = compute_stragglers(tasks)
    tail = max(durations) / med if med > 0 else 1.0
    out.append(_check(
        "long_tail", bool(stragglers) and n > 2,
        f"{len(stragglers)} task(s) over 3x the median ({med:.2f} s); longest {tail:.1f}x"
        + (": partition " + ", ".join(str(t["partition"]) for t in stragglers[:3]) if stragglers else ""),
        "uneven partitions: a chunk needs far more input than the others (a huge or very fine tile?); "
        "lower output.chunks or execution.partition_mb so large work splits",
    ))  # fmt: skip

    max_arg = int(ex.get("max_task_arg_bytes", 0))
    out.append(_check(
        "task_args_size", max_arg > 64 * 1024,
        f"largest task argument {max_arg / 1024:.1f} KiB",
        "tasks should carry paths and windows, not arrays or whole tables",
    ))  # fmt: skip

    conc = max_concurrency(tasks)
    out.append(_check(
        "blocking", threads > 1 and n >= 2 and conc <= 1,
        f"at most {conc} task(s) ran at once on {threads} worker thread(s)",
        "independent tasks ran one after another: submit all partitions before waiting on any",
    ))  # fmt: skip

    dev = report["devices"]
    gpu_wanted = ex.get("device_requested") == "gpu" or any(d["device"] == "gpu" for d in dev["decisions"])
    out.append(_check(
        "gpu_ran", gpu_wanted and dev["gpu"] == 0,
        f"{dev['gpu']} of {n} tasks on the GPU" + (f"; {dev['decisions'][0]['reason']}" if dev["decisions"] else ""),
        "the GPU was chosen but no task ran there: check worker GPU resources and CuPy",
    ))  # fmt: skip

    st = report["stage_task_s"]
    io, compute = st["read"] + st["write"], st["resample"]
    io_share = io / (io + compute) if io + compute else 0.0
    bound = "I/O-bound" if io_share >= 0.5 else "compute-bound"
    advice = (
        "more workers help while storage keeps up; faster storage or fewer bytes (overviews, compression) help more"
        if io_share >= 0.5
        else "more workers/cores or the GPU help: resampling dominates"
    )
    out.append({"check": "io_vs_compute", "status": "ok",
                "detail": f"{bound}: read+write {io_share:.0%} of task time, resample {1 - io_share:.0%}",
                "advice": advice})  # fmt: skip

    # Idle while work remained: between the first and the last task start, some task was still waiting.
    idle: dict[str, float] = {}
    if n:
        lo, hi = min(t["start"] for t in tasks), max(t["start"] for t in tasks)
        for w in workers:
            busy = sum(max(min(t["end"], hi) - max(t["start"], lo), 0.0) for t in tasks if t["worker"] == w)
            idle[w] = 1 - busy / (hi - lo) if hi > lo else 0.0
    idle_bad = {w: s for w, s in idle.items() if s > 0.5}
    out.append(_check(
        "idle_workers", n >= 2 * max(len(workers), 1) and bool(idle_bad),
        "idle while tasks were waiting: " + ", ".join(f"{w} {s:.0%}" for w, s in sorted(idle.items())),
        "workers sat idle while work remained: a worker that cannot run these tasks (resources, memory), "
        "or a driver that submits too slowly",
    ))  # fmt: skip
    out.extend(_network_checks(report.get("network") or {}))
    return out


READ_AMPLIFICATION_WARN = 2.0
"""Warn when remote reads fetched over this many times the compressed bytes their windows cover."""


def _network_checks(net: dict[str, Any]) -> list[dict[str, str]]:
    """Remote reads: read amplification (bytes fetched over bytes the windows need) and retries."""
    if not net.get("requests"):
        return []
    needed, fetched = net.get("bytes_needed", 0), net.get("bytes_fetched", 0)
    ratio = fetched / needed if needed else float("inf")
    return [_check(
        "read_amplification", ratio > READ_AMPLIFICATION_WARN,
        f"fetched {fetched / 1e6:.1f} MB for {needed / 1e6:.1f} MB of tile blocks the windows cover "
        f"({ratio:.1f}x) in {net['requests']} requests, {net.get('retries', 0)} retried",
        "reads fetch far more than they use: chunks (output.chunks) that align with the tiles' blocks, "
        "smaller CPL_VSIL_CURL_CHUNK_SIZE or GDAL_INGESTED_BYTES_AT_OPEN in inputs.gdal_env, or "
        "cloud-optimised tiles (internal tiling, overviews) cut it",
    )]  # fmt: skip


def format_report(report: dict[str, Any]) -> str:
    """The human-readable breakdown printed at the end of a run."""
    wall = report["wall_s"]
    mb_read = report["inputs"]["bytes_read"] / 1e6
    mb_out = report["output"]["bytes_raw"] / 1e6
    files = report["inputs"]["files"]
    lines = [f"wall {wall:.2f} s   inputs {files} files, {mb_read:.1f} MB read   "
             f"output {mb_out:.1f} MB raw, {report['output']['bytes'] / 1e6:.1f} MB stored",
             "", f"{'stage':<10}{'wall s':>9}{'share':>8}{'task s':>9}{'MB/s':>9}{'files/s':>9}"]  # fmt: skip
    for s in STAGES:
        sec = report["stages"][s]
        rate = files_rate = ""
        if s == "read" and sec > 0:
            rate, files_rate = f"{mb_read / sec:9.1f}", f"{files / sec:9.1f}"
        elif s in ("resample", "write") and sec > 0:
            rate = f"{mb_out / sec:9.1f}"
        elif s == "index" and sec > 0:
            files_rate = f"{files / sec:9.1f}"
        lines.append(
            f"{s:<10}{sec:9.2f}{sec / wall if wall else 0:8.1%}{report['stage_task_s'][s]:9.2f}"
            f"{rate or '':>9}{files_rate or '':>9}"
        )
    lines.append("")
    lines.append("tasks per worker: " + ", ".join(
        f"{w}: {v['tasks']} ({v['busy_s']:.1f} s busy)" for w, v in sorted(report["workers"].items())
    ))  # fmt: skip
    ex = report["execution"]
    if wall:
        lines.append(f"scheduling overhead: {ex.get('scheduling_overhead_s', 0.0):.2f} s "
                     f"({ex.get('scheduling_overhead_s', 0.0) / wall:.1%} of wall)")  # fmt: skip
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
        lines.append(f"network: {net['requests']} requests, {net['bytes_fetched'] / 1e6:.1f} MB fetched for "
                     f"{net['bytes_needed'] / 1e6:.1f} MB needed, {net['retries']} retries, read latency "
                     f"p50 {lat.get('p50') or 0:.1f} ms, p99 {lat.get('p99') or 0:.1f} ms")  # fmt: skip
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


def write_report(report: dict[str, Any], path: str) -> None:
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(tmp, path)


def read_report(path: str) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)
