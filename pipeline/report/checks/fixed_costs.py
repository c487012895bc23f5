"""Checks of fixed costs, per task and per chunk: scheduling overhead against the tasks' time
(``task_overhead``), task arguments that carry data (``task_args_size``) and chunks dominated by their
fixed cost (``chunk_size``); the per-chunk costs measured from a run and the chunk size to advise
(``pipeline plan`` and :mod:`pipeline.execute.chunkcost` use them too)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from pipeline.report.checks.distribution import MIN_TASKS, task_durations
from pipeline.report.checks.entry import entry, round_up
from pipeline.report.summary import TASK_STAGES

TASK_OVERHEAD_SHARE = 0.10
"""Warn when the per-task overhead passes this share of the median task. Dask's dispatch costs ~2-5 ms
per task on a busy 2-core machine: 5% flagged the small fixture's clean 60 ms tasks at random
(3-8% from run to run), while partitions that really are too small measure over 100%."""


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


def check_task_overhead(report: dict[str, Any]) -> dict[str, str]:
    """Per-task overhead (dispatch, transfer, idle gaps and time outside the stages) against the median
    task: tasks too small for their scheduling cost."""
    tasks = report["tasks"]
    n = len(tasks)
    _, med = task_durations(tasks)
    per_task, _ = compute_task_overhead(tasks)
    share = per_task / med if med > 0 else 0.0
    part_mb = float(report.get("plan", {}).get("partition_mb") or 0.0)
    return entry(
        "task_overhead",
        n >= MIN_TASKS and share > TASK_OVERHEAD_SHARE,
        f"per-task overhead {per_task * 1e3:.1f} ms against a median task of {med * 1e3:.1f} ms ({share:.1%})"
        + ("" if n >= MIN_TASKS else f"; {n} tasks: too few to judge (needs {MIN_TASKS})"),
        "tasks are too small for their scheduling cost: raise execution.partition_mb"
        + (
            # x4: a task's time grows slower than its bytes where each chunk has a fixed cost too; aimed at half
            # the threshold, so that a run following the advice is not judged at its edge (0.05 MB from 0.002
            # gave 10.1-11% on the small preset's 32² chunks, in 4 runs)
            f" (set execution.partition_mb={round_up(part_mb * share / (TASK_OVERHEAD_SHARE / 2) * 4)} or more)"
            if part_mb
            else ""
        ),
    )


def check_task_args_size(report: dict[str, Any]) -> dict[str, str]:
    """Task arguments large enough to carry data rather than paths and windows."""
    max_arg = int(report["execution"].get("max_task_arg_bytes", 0))
    return entry(
        "task_args_size",
        max_arg > 64 * 1024,
        f"largest task argument {max_arg / 1024:.1f} KiB",
        "tasks should carry paths and windows, not arrays or whole tables",
    )


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


def check_chunk_size(report: dict[str, Any]) -> dict[str, str]:
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
        return entry("chunk_size", False, f"{n} chunks: too few to measure per-chunk costs (needs {need})", "")
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
    return entry(
        "chunk_size",
        warn,
        f"{n} chunks of {chunk_bytes / 1024:.0f} KiB ({mb:.3f} MB read and written each), {total / n * 1e3:.2f} ms "
        f"each; fixed cost {fixed * 1e3:.2f} ms a chunk ({source}): {share:.0%} of chunk time",
        f"chunks of {chunk_bytes / 1024:.0f} KiB are dominated by fixed costs per chunk (a file, a window read, "
        "a kernel call each): " + chunk_size_advice(chunks_yx, chunk_bytes, (fixed, per_mb, mb), shape_yx),
    )
