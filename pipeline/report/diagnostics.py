"""Diagnostics: each check names a slow configuration found in the run (or the plan) and the advice
that removes it. A check warns only with evidence enough to judge (its MIN_* thresholds); every
threshold is a constant here with the measurement it comes from."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from pipeline.report.remote_checks import check_object_sizes, network_checks
from pipeline.report.summary import TASK_STAGES, max_concurrency, rules_text


def _check(check: str, warn: bool, detail: str, advice: str) -> dict[str, str]:
    return {"check": check, "status": "warn" if warn else "ok", "detail": detail, "advice": advice if warn else ""}


FEW_CLEAR = {"median": 3, "mean": 3}
"""``clear_observations``: a pixel of a period with fewer clear observations than this is thinly observed (a
median of one or two dates is one of them, clouds' edges and all); for the other reducers, one will do."""

FEW_CLEAR_SHARE = 0.10
"""``clear_observations`` warns when over this share of a period's covered pixels are thinly observed."""


def check_clear_observations(report: dict[str, Any]) -> dict[str, str]:
    """Composite periods in which many covered pixels have few clear observations (after the mask)."""
    comp = report["composite"]
    need = FEW_CLEAR.get(comp["reducer"], 1)
    thin: list[tuple[str, float, float]] = []
    for step, hist in comp.get("clear_observations", {}).items():
        total = sum(hist)
        if total:
            thin.append((step, sum(hist[:need]) / total, hist[0] / total))
    bad = [t for t in thin if t[1] > FEW_CLEAR_SHARE]
    worst = max(thin, key=lambda t: t[1], default=None)
    excluded = report.get("mask", {}).get("exclude", [])
    shares = report.get("mask", {}).get("matched_share") or {}
    detail = (
        f"{len(bad)} of {len(thin)} {comp['period']} steps have over {FEW_CLEAR_SHARE:.0%} of their pixels with "
        f"fewer than {need} clear observation{'s' if need > 1 else ''}"
        + (f"; worst {worst[0][:10]}: {worst[1]:.0%} ({worst[2]:.0%} with none)" if worst else "")
    )
    longer = {"P16D": "P1M", "P1M": "P3M", "P3M": "P1Y", "P1Y": "all"}.get(comp["period"])
    advice = (
        f"a longer period (composite.period: {longer}) gives each pixel more dates" if longer else "more dates"
    ) + (f", or exclude fewer classes (mask.exclude: {excluded})" if excluded else "")
    if shares:
        advice += f"; of the mask's pixels these rules matched {rules_text(shares)}"
    return _check("clear_observations", bool(bad), detail, advice)


TASK_OVERHEAD_SHARE = 0.10
"""Warn when the per-task overhead passes this share of the median task. Dask's dispatch costs ~2-5 ms
per task on a busy 2-core machine: 5% flagged the small fixture's clean 60 ms tasks at random
(3-8% from run to run), while partitions that really are too small measure over 100%."""


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


MIN_CHUNKS = 50
"""``chunk_size`` fits its per-chunk line over at least this many chunks."""
MIN_CHUNKS_TIMED = 8
"""``chunk_size`` sets the machine's measured fixed cost against the mean time of at least this many chunks
(no fit needed: a run advised into fewer, larger chunks is still judged)."""


CHUNK_FIXED_SHARE = 0.3
"""``chunk_size`` (and ``pipeline plan``) warn when fixed per-chunk costs are over this share of the
chunks' time: past it, chunks 4x larger would cut the time by over a fifth. The fixed cost per chunk is
this machine's, measured once (:mod:`pipeline.execute.chunkcost`; docs/performance.md)."""


CHUNK_ADVICE_SHARE = 0.1
"""The fixed share of chunk time that ``chunk_size``'s advice aims at: a third of the share it warns at, so
that chunks it advises stay clear of the warning when the run's per-MB costs are half the calibration's
(this machine's speed moved 2x within an hour; a run at the advised chunks measured 17-26% against
the earlier fifth's aim)."""


GUIDE_CHUNK_BYTES = 1 << 20
"""Zarr's and Dask's guidance: chunks of ~1 MB or more; smaller ones may be fine where measured so."""


MIN_SPLIT_S = 0.5
"""``partition_size`` judges runs whose tasks took at least this many seconds in all: below, the run is
over before more tasks could help."""


READ_AMPLIFICATION = 2.0
"""``overviews`` warns when the tasks read over this many bytes per byte written, most tiles at full
resolution: a grid 2x coarser than the inputs reads ~4x its bytes without overviews, ~1.3x with them."""


MIN_READ_BYTES = 1 << 20
"""``overviews`` judges runs that read at least this much."""


MEMORY_SHARE = 0.8
"""``worker_memory`` warns when a worker's peak passes this share of its memory (its limit, or the
machine's memory shared by the local workers)."""


GPU_MIN_CHUNK_BYTES = 1 << 20
"""``gpu_windows``: GPU tasks whose chunks are under this many bytes spend more on transfers and launches
than the kernels save (:mod:`pipeline.execute.device` models it; ``device: gpu`` overrides the model)."""


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
    inside = [max(t["end"] - t["start"] - sum(t.get(f"{s}_s", 0.0) for s in TASK_STAGES), 0.0) for t in tasks]
    median = (statistics.median(gaps) if gaps else 0.0) + (statistics.median(inside) if inside else 0.0)
    return median, sum(gaps) + sum(inside)


def compute_chunk_costs(tasks: list[dict[str, Any]]) -> tuple[float, float, int] | None:
    """(fixed seconds per chunk, seconds per MB, chunks) from the tasks' pooled ``chunk_fit`` sums: the
    least-squares line of a chunk's time against its MB read and written, over every chunk of the run.
    None where the chunks' sizes do not vary enough to tell the two parts apart."""
    n, sx, sxx, sy, sxy = (sum(float(t.get("chunk_fit", [0.0] * 5)[i]) for t in tasks) for i in range(5))
    if n < 2:
        return None
    var = sxx - sx * sx / n
    if var <= 1e-12 * max(sxx, 1e-12):
        return None
    slope = max((sxy - sx * sy / n) / var, 0.0)
    fixed = max((sy - slope * sx) / n, 0.0)
    return fixed, slope, int(n)


def compute_stragglers(tasks: list[dict[str, Any]], factor: float = 3.0) -> list[dict[str, Any]]:
    """Tasks that took over ``factor`` x the median task, longest first."""
    durations = [t["end"] - t["start"] for t in tasks]
    med = statistics.median(durations) if durations else 0.0
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
    local = ex.get("scheduler") in ("local", "threads", "local-cluster")
    local_cores = int(ex.get("cores", 1)) if local else 1
    out = check_object_sizes(report.get("output", {}), report.get("plan", {}))

    out.append(
        _check(
            "workers_used",
            n > 1 and len(used) <= 1 and (len(workers) > 1 or local_cores > 1),
            f"{len(used)} of {len(workers)} workers ran tasks ({n} tasks"
            + (f", {local_cores} cores here)" if local else ")"),
            f"all work ran on one worker: set execution.workers={max(local_cores, 2)} if cores are free; on a "
            "cluster, check for a resource request only one worker can satisfy, or fewer partitions than workers "
            "(lower execution.partition_mb)",
        )
    )

    per_task, _ = compute_task_overhead(tasks)
    share = per_task / med if med > 0 else 0.0
    part_mb = float(report.get("plan", {}).get("partition_mb") or 0.0)
    out.append(
        _check(
            "task_overhead",
            n >= MIN_TASKS and share > TASK_OVERHEAD_SHARE,
            f"per-task overhead {per_task * 1e3:.1f} ms against a median task of {med * 1e3:.1f} ms ({share:.1%})"
            + ("" if n >= MIN_TASKS else f"; {n} tasks: too few to judge (needs {MIN_TASKS})"),
            "tasks are too small for their scheduling cost: raise execution.partition_mb"
            + (
                # x4: a task's time grows slower than its bytes where each chunk has a fixed cost too
                f" (set execution.partition_mb={_round_up(part_mb * share / TASK_OVERHEAD_SHARE * 4)} or more)"
                if part_mb
                else ""
            ),
        )
    )

    out.append(_check_long_tail(report, durations, med))

    max_arg = int(ex.get("max_task_arg_bytes", 0))
    out.append(
        _check(
            "task_args_size",
            max_arg > 64 * 1024,
            f"largest task argument {max_arg / 1024:.1f} KiB",
            "tasks should carry paths and windows, not arrays or whole tables",
        )
    )

    conc = max_concurrency(tasks)
    out.append(
        _check(
            "blocking",
            threads > 1 and n >= 4 and conc <= 1,
            f"at most {conc} task(s) ran at once on {threads} worker thread(s)",
            "independent tasks ran one after another: submit all partitions before waiting on any",
        )
    )

    dev = report["devices"]
    gpu_wanted = ex.get("device_requested") == "gpu" or any(d["device"] == "gpu" for d in dev["decisions"])
    out.append(
        _check(
            "gpu_ran",
            gpu_wanted and dev["gpu"] == 0,
            f"{dev['gpu']} of {n} tasks on the GPU"
            + (f"; {dev['decisions'][0]['reason']}" if dev["decisions"] else ""),
            "the GPU was chosen but no task ran there: check worker GPU resources and CuPy",
        )
    )

    out.append(_check_gpu_windows(tasks))
    out.append(_check_chunk_size(report))
    out.append(_check_partition_size(report, threads))
    out.append(_check_overviews(report))
    out.append(_check_nodata(report))
    out.append(_check_worker_memory(report))
    if report.get("composite"):
        out.append(check_clear_observations(report))

    st = report["stage_task_s"]
    io, compute = st["read"] + st["write"], st["resample"] + st.get("mask", 0.0) + st.get("reduce", 0.0)
    io_share = io / (io + compute) if io + compute else 0.0
    bound = "I/O-bound" if io_share >= 0.5 else "compute-bound"
    advice = (
        "more workers help while storage keeps up; faster storage or fewer bytes (overviews, compression) help more"
        if io_share >= 0.5
        else "more workers/cores or the GPU help: resampling dominates"
    )
    out.append(
        {
            "check": "io_vs_compute",
            "status": "ok",
            "detail": f"{bound}: read+write {io_share:.0%} of task time, resample {1 - io_share:.0%}",
            "advice": advice,
        }
    )

    # Idle while work remained: between the first and the last task start, some task was still waiting.
    idle: dict[str, float] = {}
    if n:
        lo, hi = min(t["start"] for t in tasks), max(t["start"] for t in tasks)
        for w in workers:
            busy = sum(max(min(t["end"], hi) - max(t["start"], lo), 0.0) for t in tasks if t["worker"] == w)
            idle[w] = 1 - busy / (hi - lo) if hi > lo else 0.0
    idle_bad = {w: s for w, s in idle.items() if s > 0.5}
    out.append(
        _check(
            "idle_workers",
            n >= 2 * max(len(workers), 1) and bool(idle_bad),
            "idle while tasks were waiting: " + ", ".join(f"{w} {s:.0%}" for w, s in sorted(idle.items())),
            "workers sat idle while work remained: a worker that cannot run these tasks (resources, memory), "
            "or a driver that submits too slowly",
        )
    )
    out.extend(network_checks(report.get("network") or {}))
    return out


def _round_up(x: float) -> str:
    """A config value to suggest: ``x`` rounded up to 1, 2 or 5 times a power of ten."""
    if x <= 0:
        return "0"
    p = 10 ** math.floor(math.log10(x))
    v = next(m * p for m in (1, 2, 5, 10) if m * p >= x * (1 - 1e-9))
    return f"{v:g}"


def _chunk_side(chunks_yx: tuple[int, int], scale: float, shape_yx: tuple[int, int] | None) -> int:
    """Chunk side for ``scale`` times the pixels of ``chunks_yx``: a power of two, at least 256, at most
    the power of two that covers the grid (``shape_yx``) in one chunk."""
    side = math.sqrt(chunks_yx[0] * chunks_yx[1] * max(scale, 1.0))
    side_pow2 = max(256, 1 << math.ceil(math.log2(side)))
    if shape_yx and min(shape_yx) > 0:
        side_pow2 = min(side_pow2, max(256, 1 << math.ceil(math.log2(max(shape_yx)))))
    return side_pow2


def chunk_size_advice(
    chunks_yx: tuple[int, int],
    chunk_bytes: int,
    fit: tuple[float, float, float] | None,
    shape_yx: tuple[int, int] | None = None,
) -> str:
    """``output.chunks`` to set: where a run measured ``fit`` = (fixed s per chunk, s per MB, MB per chunk),
    chunks whose fixed cost is under :data:`CHUNK_ADVICE_SHARE` of their time; else chunks of Zarr's and
    Dask's ~1 MB."""
    scale = GUIDE_CHUNK_BYTES / max(chunk_bytes, 1)
    if fit is not None and fit[1] > 0 and fit[2] > 0:
        scale = (1 / CHUNK_ADVICE_SHARE - 1) * fit[0] / fit[1] / fit[2]
    side = _chunk_side(chunks_yx, scale, shape_yx)
    return f"set output.chunks={{y: {side}, x: {side}}} (Zarr and Dask advise ~1 MB+ per chunk)"


def _chunk_bytes(report: dict[str, Any]) -> tuple[int, tuple[int, int]]:
    """Bytes of one full output chunk and the chunk shape, from the report's own numbers."""
    out = report.get("output", {})
    shape = out.get("shape") or {}
    raw = int(out.get("bytes_raw") or 0)
    cells = int(shape.get("time", 1)) * int(shape.get("y", 1)) * int(shape.get("x", 1)) * len(out.get("bands") or [1])
    chunks_yx = tuple(report.get("plan", {}).get("chunks_yx") or (0, 0))
    if len(chunks_yx) != 2 or not cells or not chunks_yx[0]:
        return 0, (0, 0)
    return int(raw / cells * chunks_yx[0] * chunks_yx[1]), (int(chunks_yx[0]), int(chunks_yx[1]))


def chunk_fixed_share(fixed_s: float, per_mb_s: float, mb: float) -> float:
    """The share of a chunk's time that is fixed, for a chunk of ``mb`` MB read and written."""
    total = fixed_s + per_mb_s * mb
    return fixed_s / total if total > 0 else 0.0


def _check_chunk_size(report: dict[str, Any]) -> dict[str, str]:
    """Fixed per-chunk costs against the chunks' time. The fixed cost is the machine's, measured once
    (``execution.chunk_cost``); without it, the line fitted through the run's own chunks (``chunk_fit``),
    which cannot split the two parts when every chunk has one size."""
    tasks = report["tasks"]
    chunk_bytes, chunks_yx = _chunk_bytes(report)
    n = int(sum(float(t.get("chunk_fit", [0.0])[0]) for t in tasks))
    machine = report.get("execution", {}).get("chunk_cost") or {}
    fit = compute_chunk_costs(tasks)
    need = MIN_CHUNKS_TIMED if "fixed_s" in machine else MIN_CHUNKS
    if n < need or not chunk_bytes or (fit is None and "fixed_s" not in machine):
        n = int(sum(t.get("chunks", 0) for t in tasks))
        return _check("chunk_size", False, f"{n} chunks: too few to measure per-chunk costs (needs {need})", "")
    if "fixed_s" in machine:
        fixed, per_mb, source = float(machine["fixed_s"]), float(machine["per_mb_s"]), "this machine's"
    else:
        assert fit is not None
        fixed, per_mb, source = fit[0], fit[1], "fitted over the run's chunks"
    shape = report.get("output", {}).get("shape") or {}
    shape_yx = (int(shape.get("y", 0)), int(shape.get("x", 0)))
    total = sum(float(t["chunk_fit"][3]) for t in tasks if "chunk_fit" in t)
    mb = sum(float(t["chunk_fit"][1]) for t in tasks if "chunk_fit" in t) / n
    share = min(fixed * n / total, 1.0) if total > 0 else 0.0
    warn = chunk_bytes < GUIDE_CHUNK_BYTES and share > CHUNK_FIXED_SHARE
    return _check(
        "chunk_size",
        warn,
        f"{n} chunks of {chunk_bytes / 1024:.0f} KiB ({mb:.3f} MB read and written each), {total / n * 1e3:.2f} ms "
        f"each; fixed cost {fixed * 1e3:.2f} ms a chunk ({source}): {share:.0%} of chunk time",
        f"chunks of {chunk_bytes / 1024:.0f} KiB are dominated by fixed costs per chunk (a file, a window read, "
        "a kernel call each): " + chunk_size_advice(chunks_yx, chunk_bytes, (fixed, per_mb, mb), shape_yx),
    )


MIN_STRAGGLER_S = 0.5
"""``long_tail`` judges stragglers that took at least this long: a 0.1 s task at 10x the median of a
0.3 s parallel phase holds up nothing a person would notice (the small fixture with one 64x finer tile
given overviews read at average: 0.11 s, 11x the median)."""


def _check_long_tail(report: dict[str, Any], durations: list[float], med: float) -> dict[str, str]:
    """Stragglers that hold up the end, and why: tasks whose tiles are far finer than the grid (many more
    bytes read per byte written than the median task) or partitions too large to spread."""
    tasks, ex = report["tasks"], report["execution"]
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
    full, had, by_method = _full_reads(report)
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
    return _check(
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


def _check_partition_size(report: dict[str, Any], threads: int) -> dict[str, str]:
    """Huge partitions: fewer tasks than worker threads could run, where the work could split. (Local runs
    start no more workers than tasks: ``threads_available`` is what the config asked for.)"""
    threads = max(threads, int(report["execution"].get("threads_available", threads)))
    tasks = report["tasks"]
    n, jobs = len(tasks), int(sum(t.get("chunks", 0) for t in tasks))
    busy = sum(t["end"] - t["start"] for t in tasks)
    cost_mb = sum(float(t.get("cost_bytes", 0)) for t in tasks) / 1e6
    judged = busy >= MIN_SPLIT_S and jobs >= 2 * threads
    warn = judged and threads > 1 and n < threads
    target = _round_up(cost_mb / (2 * threads)) if cost_mb else "a smaller value"
    return _check(
        "partition_size",
        warn,
        f"{n} task(s) for {threads} worker thread(s), {jobs} chunks, {busy:.2f} task-s"
        + ("" if judged else ": too little work to judge"),
        f"partitions are so large that worker threads had nothing to do: set execution.partition_mb={target} "
        f"(about two tasks per thread)",
    )


def _full_reads(report: dict[str, Any]) -> tuple[int, int, int]:
    """Tiles read at full resolution; of those, the ones with overviews; of those, the ones whose method
    reads none (a report without that count: all of them)."""
    plan = report.get("plan", {})
    had = int(plan.get("full_with_overviews", 0))
    return int((plan.get("levels_used") or {}).get("full", 0)), had, int(plan.get("full_by_method", had))


def overview_verdict(levels: dict[str, int], had: int, by_method: int) -> tuple[bool, str]:
    """Whether the tiles read at full resolution are mostly ones that could read less, and what would:
    ``levels``: tiles per level read (``plan.levels_used``); ``had``: those at full resolution with
    overviews; ``by_method``: of those, the ones whose method reads none. The rest of ``had`` have
    overviews coarser than the grid's pixel where they land, which gdalwarp reads whole too. The run's
    ``overviews`` check and ``pipeline plan`` judge by it alike."""
    full = int(levels.get("full", 0))
    avoidable = full - (had - by_method)
    mostly = avoidable * 2 >= sum(levels.values())
    if by_method and by_method * 2 >= avoidable:
        return mostly, (
            f"{by_method} of the {full} tiles read at full resolution have overviews that this run's method does "
            "not read: use a blending resampling (average, bilinear, cubic) for those bands, which reads them"
        )
    return mostly, (
        "the grid is coarser than the inputs but they are read at full resolution: give the inputs overviews "
        "(gdaladdo -r average, or write COGs) and use a blending resampling (average, bilinear, cubic), "
        "which reads them"
    )


def _check_overviews(report: dict[str, Any]) -> dict[str, str]:
    """Downsampling from full resolution: bytes read per byte written, the levels the plan chose, and why
    the tiles read at full resolution were: no overviews (``gdaladdo`` would give them), a method that reads
    none (a blending one would), or overviews coarser than the grid's pixel where the tile lands (gdalwarp
    reads those whole too: nothing to do, so they do not count toward the warning)."""
    read = int(report["inputs"].get("bytes_read", 0))
    written = int(sum(t.get("bytes_written", 0) for t in report["tasks"]))
    levels = report.get("plan", {}).get("levels_used") or {}
    _, had, by_method = _full_reads(report)
    coarse = had - by_method
    ratio = read / written if written else 0.0
    judged = read >= MIN_READ_BYTES and written > 0
    mostly, advice = overview_verdict(levels, had, by_method)
    why = []
    if by_method:
        why.append(f"{by_method} with overviews this method does not read")
    if coarse:
        why.append(f"{coarse} whose overviews are coarser than the grid's pixel, as gdalwarp judges: read whole")
    return _check(
        "overviews",
        judged and ratio > READ_AMPLIFICATION and mostly,
        f"read {ratio:.1f} bytes per byte written; tiles read at "
        + (", ".join(f"{k}: {v}" for k, v in levels.items()) or "no level")
        + (f" ({'; '.join(why)})" if why else "")
        + ("" if judged else f"; {read / 1e6:.1f} MB read: too little to judge"),
        advice,
    )


def _check_nodata(report: dict[str, Any]) -> dict[str, str]:
    """Integer bands with no nodata value at all (no file, STAC item or ``inputs.nodata`` gives one, as for
    Sentinel-2's JP2s): the reads take the output's fill (0) as their nodata, which drops real zeros and
    keeps any other fill as data, so the user should say which value is fill."""
    bands = report.get("inputs", {}).get("bands") or {}
    dtypes = report.get("output", {}).get("dtypes") or {}
    missing = sorted(
        b
        for b, info in bands.items()
        if info.get("nodata") is None and not str(dtypes.get(b, "uint")).startswith("float")
    )
    return _check(
        "nodata",
        bool(missing),
        f"band(s) {', '.join(missing)} have no nodata value" if missing else "every integer band has a nodata value",
        f"neither the files, the STAC items nor the config give {', '.join(missing)} a nodata value, so the "
        "output's fill (0) is taken as theirs: a real 0 is dropped and any other fill value is averaged in as "
        "data; set inputs.nodata to the files' fill value",
    )


def _check_worker_memory(report: dict[str, Any]) -> dict[str, str]:
    mem = report.get("memory") or {}
    peaks: dict[str, float] = mem.get("worker_peak_mb") or {}
    limits: dict[str, float] = mem.get("worker_limit_mb") or {}
    over = {w: mb / limits[w] for w, mb in peaks.items() if limits.get(w)}
    worst = max(over.items(), key=lambda kv: kv[1], default=None)
    return _check(
        "worker_memory",
        worst is not None and worst[1] > MEMORY_SHARE,
        (
            f"peak {peaks[worst[0]]:.0f} MB of {limits[worst[0]]:.0f} MB on {worst[0]} ({worst[1]:.0%})"
            if worst
            else "no worker memory limits known"
        ),
        "a worker came close to its memory: lower output.chunks (a task holds one chunk's source windows at a "
        "time) and execution.threads_per_worker, or give workers more memory",
    )


def _check_gpu_windows(tasks: list[dict[str, Any]]) -> dict[str, str]:
    """GPU tasks on windows too small to pay for their transfers (``device: gpu`` forces them)."""
    gpu = [t for t in tasks if t.get("device") == "gpu"]
    per_chunk = [t["bytes_written"] / t["chunks"] for t in gpu if t.get("chunks")]
    small = statistics.median(per_chunk) if per_chunk else 0.0
    warn = bool(per_chunk) and small < GPU_MIN_CHUNK_BYTES
    return _check(
        "gpu_windows",
        warn,
        f"{len(gpu)} GPU task(s)" + (f", median {small / 1024:.0f} KiB written per chunk" if per_chunk else ""),
        "the GPU ran chunks too small to pay for their transfers: set execution.device=auto (its cost model "
        "keeps small windows on the CPU) or raise output.chunks to 1 MB+ per chunk",
    )
