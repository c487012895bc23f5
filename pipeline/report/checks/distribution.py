"""Checks of how the work spread over workers and partitions: one worker doing it all (``workers_used``),
stragglers that hold up the end (``long_tail``), tasks run one after another (``blocking``), partitions too
large to spread (``partition_size``) and workers idle while work remained (``idle_workers``)."""

from __future__ import annotations

import statistics
from typing import Any

from pipeline.report.checks.entry import entry, round_up
from pipeline.report.checks.io_network import READ_AMPLIFICATION, full_reads
from pipeline.report.summary import max_concurrency

MIN_TASKS = 10
"""Checks on the spread of task times (``task_overhead``, ``long_tail``) judge runs of at least this many
tasks: a 5-task run's median gap is one or two samples of a noisy machine (``task_overhead`` warned on
the small fixture's clean run about one time in five)."""


STRAGGLER_SHARE = 0.1
"""``long_tail`` counts a straggler that took at least this share of the run's parallel phase."""

HELD_UP_SHARE = 0.25
"""``long_tail`` warns on a run of several workers only if their last tasks ended at least this share of
the longest straggler apart: where they all finished together, the stragglers ran early and held up
nothing."""


MIN_SPLIT_S = 0.5
"""``partition_size`` judges runs whose tasks took at least this many seconds in all: below, the run is
over before more tasks could help."""


MIN_STRAGGLER_S = 0.5
"""``long_tail`` judges stragglers that took at least this long: a 0.1 s task at 10x the median of a
0.3 s parallel phase holds up nothing a person would notice (the small fixture with one 64x finer tile
given overviews read at average: 0.11 s, 11x the median)."""


def task_durations(tasks: list[dict[str, Any]]) -> tuple[list[float], float]:
    """Each task's seconds, in the tasks' order, and their median (0 for no task)."""
    durations = [t["end"] - t["start"] for t in tasks]
    return durations, statistics.median(durations) if durations else 0.0


def worker_threads(report: dict[str, Any]) -> int:
    """The run's worker threads (at least 1)."""
    return max(int(report["execution"]["threads"]), 1)


def compute_stragglers(tasks: list[dict[str, Any]], factor: float = 3.0) -> list[dict[str, Any]]:
    """Tasks that took over ``factor`` x the median task, longest first."""
    durations, med = task_durations(tasks)
    out = [
        {
            "id": t["id"],
            "partition": t["index"],
            "worker": t["worker"],
            "duration_s": d,
            "x_median": d / med,
            "chunks": t["chunks"],
            "cost_bytes": t.get("cost_bytes", 0),
        }
        for t, d in zip(tasks, durations, strict=True)
        if med > 0 and d > factor * med
    ]
    return sorted(out, key=lambda s: -s["duration_s"])


def check_workers_used(report: dict[str, Any]) -> dict[str, str]:
    """All the work on one worker while other workers (or, for a local run, cores) were there."""
    ex, workers = report["execution"], report["workers"]
    n = len(report["tasks"])
    used = [w for w, v in workers.items() if v["tasks"] > 0]
    local = ex.get("scheduler") in ("local", "threads", "local-cluster")
    local_cores = int(ex.get("cores", 1)) if local else 1
    return entry(
        "workers_used",
        n > 1 and len(used) <= 1 and (len(workers) > 1 or local_cores > 1),
        f"{len(used)} of {len(workers)} workers ran tasks ({n} tasks"
        + (f", {local_cores} cores here)" if local else ")"),
        f"all work ran on one worker: set execution.workers={max(local_cores, 2)} if cores are free; on a "
        "cluster, check for a resource request only one worker can satisfy, or fewer partitions than workers "
        "(lower execution.partition_mb)",
    )


def check_long_tail(report: dict[str, Any]) -> dict[str, str]:
    """Stragglers that hold up the end, and why: tasks whose tiles are far finer than the grid (many more
    bytes read per byte written than the median task) or partitions too large to spread."""
    tasks, ex = report["tasks"], report["execution"]
    durations, med = task_durations(tasks)
    stragglers = compute_stragglers(tasks)
    tail = max(durations) / med if med > 0 else 1.0
    # A straggler matters where it can hold up the end: a 20 ms task 4x the median of 5 ms ones does not.
    exec_wall = float(ex.get("exec_wall_s") or 0.0) or (
        max(t["end"] for t in tasks) - min(t["start"] for t in tasks) if tasks else 0.0
    )
    worst = stragglers[0]["duration_s"] if stragglers else 0.0
    judged = len(tasks) >= MIN_TASKS and worst >= MIN_STRAGGLER_S
    by_id = {t["id"]: t for t in tasks}

    def reads(t: dict[str, Any]) -> float:
        return float(t.get("bytes_read", 0)) / max(float(t.get("bytes_written", 0)), 1.0)

    typical = statistics.median([reads(t) for t in tasks]) if tasks else 0.0
    slow = [reads(by_id[s["id"]]) for s in stragglers[:3] if s["id"] in by_id]
    fine = bool(slow) and typical > 0 and max(slow) > READ_AMPLIFICATION * typical
    full, had, by_method = full_reads(report)
    if fine and (had - by_method) * 2 > full:  # mostly tiles whose overviews are coarser than the grid
        advice = (
            f"the slowest tasks read {max(slow) / typical:.0f}x more bytes per byte written than the median task: "
            "their tiles are read at full resolution because their overviews are coarser than the grid's pixel "
            "where they land (gdalwarp reads them whole too); lower output.chunks so their chunks split"
        )
    elif fine:
        advice = (
            f"the slowest tasks read {max(slow) / typical:.0f}x more bytes per byte written than the median task: "
            "their tiles are far finer than the grid and read at full resolution; give them overviews "
            "(gdaladdo -r average, or write COGs) and use a resampling that reads them (average, bilinear, cubic)"
        )
    else:
        advice = (
            "uneven partitions: a chunk needs far more input than the others; lower output.chunks or "
            "execution.partition_mb so large work splits"
        )
    # Workers (threads, processes or cluster workers) that all finished together were held up by
    # nothing: the longest tasks ran first. (A run of one worker is judged by its tasks alone.)
    last: dict[str, float] = {}
    for t in tasks:
        last[t["worker"]] = max(last.get(t["worker"], 0.0), t["end"])
    spread = max(last.values()) - min(last.values()) if len(last) > 1 else None
    held = spread is None or spread >= HELD_UP_SHARE * worst
    return entry(
        "long_tail",
        judged and held and worst >= STRAGGLER_SHARE * exec_wall,
        f"{len(stragglers)} task(s) over 3x the median ({med:.2f} s); longest {tail:.1f}x"
        + (": partition " + ", ".join(str(t["partition"]) for t in stragglers[:3]) if stragglers else "")
        + ("" if judged or not stragglers else f"; {worst:.2f} s: too short to judge (needs {MIN_STRAGGLER_S} s)")
        + (
            f"; they held nothing up: the {len(last)} workers finished within {spread:.2f} s of each other"
            if judged and not held and spread is not None
            else ""
        ),
        advice,
    )


def check_blocking(report: dict[str, Any]) -> dict[str, str]:
    """Independent tasks that ran one after another on several worker threads."""
    tasks = report["tasks"]
    threads, n = worker_threads(report), len(tasks)
    conc = max_concurrency(tasks)
    return entry(
        "blocking",
        threads > 1 and n >= 4 and conc <= 1,
        f"at most {conc} task(s) ran at once on {threads} worker thread(s)",
        "independent tasks ran one after another: submit all partitions before waiting on any",
    )


def check_partition_size(report: dict[str, Any]) -> dict[str, str]:
    """Huge partitions: fewer tasks than worker threads could run, where the work could split. (Local runs
    start no more workers than tasks: ``threads_available`` is what the config asked for.)"""
    threads = worker_threads(report)
    threads = max(threads, int(report["execution"].get("threads_available", threads)))
    tasks = report["tasks"]
    n, jobs = len(tasks), int(sum(t.get("chunks", 0) for t in tasks))
    busy = sum(t["end"] - t["start"] for t in tasks)
    cost_mb = sum(float(t.get("cost_bytes", 0)) for t in tasks) / 1e6
    judged = busy >= MIN_SPLIT_S and jobs >= 2 * threads
    warn = judged and threads > 1 and n < threads
    target = round_up(cost_mb / (2 * threads)) if cost_mb else "a smaller value"
    return entry(
        "partition_size",
        warn,
        f"{n} task(s) for {threads} worker thread(s), {jobs} chunks, {busy:.2f} task-s"
        + ("" if judged else ": too little work to judge"),
        f"partitions are so large that worker threads had nothing to do: set execution.partition_mb={target} "
        f"(about two tasks per thread)",
    )


def check_idle_workers(report: dict[str, Any]) -> dict[str, str]:
    """Workers idle while work remained: between the first and the last task start, some task was still
    waiting."""
    tasks, workers = report["tasks"], report["workers"]
    n = len(tasks)
    idle: dict[str, float] = {}
    if n:
        lo, hi = min(t["start"] for t in tasks), max(t["start"] for t in tasks)
        for w in workers:
            busy = sum(max(min(t["end"], hi) - max(t["start"], lo), 0.0) for t in tasks if t["worker"] == w)
            idle[w] = 1 - busy / (hi - lo) if hi > lo else 0.0
    idle_bad = {w: s for w, s in idle.items() if s > 0.5}
    return entry(
        "idle_workers",
        n >= 2 * max(len(workers), 1) and bool(idle_bad),
        "idle while tasks were waiting: " + ", ".join(f"{w} {s:.0%}" for w, s in sorted(idle.items())),
        "workers sat idle while work remained: a worker that cannot run these tasks (resources, memory), "
        "or a driver that submits too slowly",
    )
