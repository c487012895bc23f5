"""How many workers a run needs: per-byte stage costs measured by one run, applied to another plan.

Pure functions over a run report (what was measured) and a plan summary (what
is to be done). Task stages spread over workers: ``read``, ``mask``, ``resample``
and ``reduce`` are charged per decoded byte read, ``write`` per raw byte written; where another plan's
wall is projected (:func:`project_wall`), resampling is charged per byte and per coordinate map made
(:func:`map_costs`). Driver stages (planning, finalising; indexing unless the index is trusted) are
serial and charged per file. Workers are single-threaded and as fast as the measured ones. The bucket
is priced apart (:mod:`pipeline.report.network_sizing`): its requests' latency and bandwidth over the
reads in flight; the workers needed are the larger of the compute-bound and network-bound counts.
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.report.network_sizing import combine, format_network, measure_network, price_network

TASK_STAGES = ("read", "mask", "resample", "reduce", "write")
PER_BYTE_READ = ("read", "mask", "resample", "reduce")

FULL_FILES = 192_000
"""The published case study: 192,000 satellite files ..."""
FULL_BYTES = 7e12
"""... 7 TB of them ..."""
TARGET_S = 180.0
"""... resampled and written in three minutes."""
CASE_STUDY_QUESTION = "What would 7 TB (192,000 files) in 3 minutes take, at this run's measured costs?"


def measure_costs(report: dict[str, Any]) -> dict[str, float]:
    """Seconds per byte (task stages) and per file (driver stages) from a run report."""
    st = report["stage_task_s"]
    read_b = max(report["inputs"]["bytes_read"], 1)
    written_b = max(sum(t["bytes_written"] for t in report["tasks"]), 1)
    files = max(report["inputs"]["files"], 1)
    return {
        **{f"{s}_s_per_byte": st.get(s, 0.0) / read_b for s in PER_BYTE_READ},
        "write_s_per_byte": st["write"] / written_b,
        "index_s_per_file": st["index"] / files,
        "plan_s_per_file": st["plan"] / files,
        "finalize_s": st["finalize"],
    }


def estimate_workers(
    costs: dict[str, float],
    *,
    bytes_read: float,
    bytes_written: float,
    files: int,
    target_s: float,
    index_trusted: bool = True,
    driver_s: float | None = None,
) -> dict[str, Any]:
    """Workers needed to finish in ``target_s``, and the stage that limits it.

    ``driver_s``: the index+plan time when it was measured on this very plan (else extrapolated per file).
    """
    task_s = {s: costs.get(f"{s}_s_per_byte", 0.0) * bytes_read for s in PER_BYTE_READ}
    task_s["write"] = costs["write_s_per_byte"] * bytes_written
    if driver_s is not None:
        serial = driver_s + costs["finalize_s"]
    else:
        serial = costs["plan_s_per_file"] * files + costs["finalize_s"]
        if not index_trusted:
            serial += costs["index_s_per_file"] * files
    total = sum(task_s.values())
    budget = target_s - serial
    workers = math.ceil(total / budget) if budget > 0 else None
    return {
        "target_s": target_s,
        "files": files,
        "bytes_read": bytes_read,
        "bytes_written": bytes_written,
        "task_s": task_s,
        "task_core_hours": total / 3600,
        "serial_driver_s": serial,
        "workers_needed": workers,
        "limiting_stage": max(task_s, key=task_s.__getitem__) if workers else "driver (serial planning)",
    }


def estimate_for_plan(
    report: dict[str, Any], plan_summary: dict[str, Any], target_s: float, latency_ms: float | None = None
) -> dict[str, Any]:
    """``pipeline plan --from-report``: the plan's bytes at the report's measured costs; the plan's own
    measured index+plan time as the serial driver work; the bucket priced from the report's remote reads,
    else from the plan's source windows at ``latency_ms`` (:func:`price_bucket`)."""
    e = estimate_workers(
        measure_costs(report),
        bytes_read=plan_summary["bytes_to_read"],
        bytes_written=plan_summary["bytes_out"],
        files=plan_summary["inputs"]["files"],
        target_s=target_s,
        driver_s=plan_summary["driver_s"],
    )
    return price_bucket(e, report, plan_summary["inputs"]["bytes"], plan_summary.get("windows"), latency_ms)


def price_bucket(
    e: dict[str, Any],
    report: dict[str, Any],
    input_bytes: float,
    windows: float | None = None,
    latency_ms: float | None = None,
) -> dict[str, Any]:
    """An estimate (:func:`estimate_workers`) with the bucket priced (:mod:`pipeline.report.network_sizing`)
    over the seconds the tasks have (the target less the serial driver work): ``input_bytes`` the files'
    bytes, ``windows`` the plan's source windows (else at the report's windows per byte)."""
    network = price_network(
        measure_network(report),
        bytes_read=e["bytes_read"],
        input_bytes=input_bytes,
        files=e["files"],
        budget_s=e["target_s"] - e["serial_driver_s"],
        windows=windows,
        latency_ms=latency_ms,
    )
    return combine(e, network)


MIN_FIT_TASKS = 5
""":func:`map_costs` separates resampling's costs over at least this many tasks."""


def map_costs(report: dict[str, Any]) -> tuple[float, float] | None:
    """(resampling seconds per byte read, seconds per coordinate map made): a least-squares fit over the
    run's tasks of ``resample_s`` on ``bytes_read`` and ``maps_made``, which the tasks separate because
    a worker's first tasks make the maps its later ones reuse (the case study's runs on 1 and 2 workers
    and at 4x the dates each gave 3.6-3.9 ms per MB and 2.5-2.7 ms per map). None where they cannot: too
    few tasks, no map made, or a negative cost."""
    import numpy as np

    tasks = report["tasks"]
    if len(tasks) < MIN_FIT_TASKS or not any(t.get("maps_made", 0) for t in tasks):
        return None
    a = np.array([[float(t["bytes_read"]), float(t.get("maps_made", 0))] for t in tasks])
    y = np.array([float(t.get("resample_s", 0.0)) for t in tasks])
    (per_byte, per_map), *_ = np.linalg.lstsq(a, y, rcond=None)
    if not (per_byte >= 0 and per_map >= 0):
        return None
    return float(per_byte), float(per_map)


def project_maps(report: dict[str, Any], plan_summary: dict[str, Any], workers: int) -> float | None:
    """The coordinate maps the run of ``plan_summary`` on ``workers`` single-threaded worker processes
    makes: its plan's geometries times the maps per geometry and process the measured run made (each
    process makes the maps of the geometries its tasks meet: every one where partitions span the grid;
    a process's threads share them), at most one per window. None where the report or the plan does not
    count geometries."""
    made = sum(int(t.get("maps_made", 0)) for t in report["tasks"])
    measured = int(report.get("plan", {}).get("geometries") or 0)
    target = int(plan_summary.get("geometries") or 0)
    processes = max(len({t.get("pid") for t in report["tasks"]}), 1)  # (threads share their process's maps)
    if not (made and measured and target):
        return None
    per_geometry_worker = made / measured / processes
    return float(min(target * per_geometry_worker * max(workers, 1), plan_summary.get("windows") or math.inf))


def project_wall(report: dict[str, Any], plan_summary: dict[str, Any], workers: int) -> dict[str, Any]:
    """The wall time of another run (``plan_summary``: what ``pipeline plan`` gives for it) on ``workers``
    single-threaded workers, from the measured run ``report``: the task stages at its per-byte costs spread
    over the workers, the plan's own measured index+plan time, the measured finalising, and the measured
    run's fixed overhead (workers' start and stop, scheduling: its ``overhead`` stage). Resampling is
    priced per byte plus per coordinate map made (:func:`map_costs`, :func:`project_maps`) where the run
    separates the two: maps are made per geometry and worker, not per byte, so a run of more dates over
    the same tiles makes no more of them, and one of more workers makes more."""
    costs = measure_costs(report)
    task_s = {s: costs.get(f"{s}_s_per_byte", 0.0) * plan_summary["bytes_to_read"] for s in PER_BYTE_READ}
    task_s["write"] = costs["write_s_per_byte"] * plan_summary["bytes_out"]
    fit, maps = map_costs(report), project_maps(report, plan_summary, workers)
    if fit is not None and maps is not None:
        task_s["resample"] = fit[0] * plan_summary["bytes_to_read"] + fit[1] * maps
    serial = float(plan_summary.get("driver_s") or 0.0) + costs["finalize_s"]
    overhead = float(report["stages"].get("overhead", 0.0))
    wall = serial + sum(task_s.values()) / max(workers, 1) + overhead
    return {
        "workers": workers,
        "task_s": task_s,
        "maps": maps,
        "serial_s": serial,
        "overhead_s": overhead,
        "wall_s": wall,
    }


def project_bytes(
    report: dict[str, Any],
    files: int,
    input_bytes: float,
    target_s: float,
    driver_s: float | None = None,
    latency_ms: float | None = None,
) -> dict[str, Any]:
    """Scale by input file bytes: for an archive whose files are larger than the measured ones.
    ``driver_s``: the index+plan time measured on a plan of ``files`` files (else extrapolated per file);
    the bucket priced per byte read too (:func:`price_bucket`)."""
    scale = input_bytes / max(report["inputs"]["bytes"], 1)
    e = estimate_workers(
        measure_costs(report),
        bytes_read=report["inputs"]["bytes_read"] * scale,
        bytes_written=sum(t["bytes_written"] for t in report["tasks"]) * scale,
        files=files,
        target_s=target_s,
        driver_s=driver_s,
    )
    return price_bucket(e, report, input_bytes, latency_ms=latency_ms)


def project_case_study(
    report: dict[str, Any], driver_s: float | None = None, latency_ms: float | None = None
) -> dict[str, Any]:
    """The answer to :data:`CASE_STUDY_QUESTION`: this run's per-byte costs applied to 7 TB of input."""
    return project_bytes(report, FULL_FILES, FULL_BYTES, TARGET_S, driver_s, latency_ms)


def format_estimate(e: dict[str, Any], title: str) -> str:
    """An estimate (:func:`estimate_for_plan`) as text: bytes, task-seconds per stage, the bucket's requests,
    latency, bandwidth and reads in flight, and the workers it needs."""
    total = sum(e["task_s"].values()) or 1.0
    lines = [
        f"{title}",
        f"  to read {e['bytes_read'] / 1e9:,.1f} GB decoded, write {e['bytes_written'] / 1e9:,.1f} GB raw; "
        f"task work {e['task_core_hours']:,.1f} core-hours ("
        + ", ".join(f"{s} {v / total:.0%}" for s, v in e["task_s"].items() if v)
        + ")",
        f"  serial driver work {e['serial_driver_s']:.1f} s (planning {e['files']:,} files, finalising)",
    ]
    if e.get("network"):
        lines += format_network(e["network"], e["workers_needed"])
    if e["workers_needed"] is None:
        lines.append(f"  {e['target_s']:.0f} s is out of reach: the serial driver work alone exceeds it")
    else:
        both = e.get("workers_network") is not None
        lines.append(
            f"  ~{e['workers_needed']:,} single-threaded workers to finish in {e['target_s']:.0f} s; "
            f"limited by {e['limiting_stage']}"
            + (f" (compute-bound {e['workers_compute']:,}, network-bound {e['workers_network']:,})" if both else "")
        )
    return "\n".join(lines)
