"""Diagnostics: each check names a slow configuration found in the run (or the plan) and the advice
that removes it. A check warns only with evidence enough to judge (its MIN_* thresholds); every
threshold is a constant with the measurement it comes from, in the module of :mod:`pipeline.report.checks`
for what it judges:

* :mod:`~pipeline.report.checks.distribution`: the work's spread over workers and partitions, stragglers;
* :mod:`~pipeline.report.checks.fixed_costs`: fixed costs per task and per chunk, the chunk size to advise;
* :mod:`~pipeline.report.checks.io_network`: I/O against compute, reads per byte written, storage and the
  network (a new check of object storage or remote reads goes there, in ``check_network``);
* :mod:`~pipeline.report.checks.valid_pixels`: nodata values, the mask's and composite's clear observations;
* :mod:`~pipeline.report.checks.memory_gpu`: workers' memory and the GPU.

:func:`compute_diagnostics` runs them in the report's order; the names below stay importable from here."""

from __future__ import annotations

from typing import Any

from pipeline.report.checks.distribution import (
    HELD_UP_SHARE,
    MIN_SPLIT_S,
    MIN_STRAGGLER_S,
    MIN_TASKS,
    STRAGGLER_SHARE,
    check_blocking,
    check_idle_workers,
    check_long_tail,
    check_partition_size,
    check_workers_used,
    compute_stragglers,
)
from pipeline.report.checks.fixed_costs import (
    CHUNK_ADVICE_SHARE,
    CHUNK_FIXED_SHARE,
    GUIDE_CHUNK_BYTES,
    MIN_CHUNKS,
    MIN_CHUNKS_TIMED,
    TASK_OVERHEAD_SHARE,
    check_chunk_size,
    check_task_args_size,
    check_task_overhead,
    chunk_fixed_share,
    chunk_size_advice,
    compute_chunk_costs,
    compute_task_overhead,
)
from pipeline.report.checks.io_network import (
    MIN_READ_BYTES,
    READ_AMPLIFICATION,
    check_io_vs_compute,
    check_network,
    check_object_size,
    check_overviews,
    overview_verdict,
)
from pipeline.report.checks.memory_gpu import (
    GPU_MIN_CHUNK_BYTES,
    MEMORY_SHARE,
    check_gpu_ran,
    check_gpu_windows,
    check_worker_memory,
)
from pipeline.report.checks.valid_pixels import FEW_CLEAR, FEW_CLEAR_SHARE, check_clear_observations, check_nodata

__all__ = [
    "CHUNK_ADVICE_SHARE",
    "CHUNK_FIXED_SHARE",
    "FEW_CLEAR",
    "FEW_CLEAR_SHARE",
    "GPU_MIN_CHUNK_BYTES",
    "GUIDE_CHUNK_BYTES",
    "HELD_UP_SHARE",
    "MEMORY_SHARE",
    "MIN_CHUNKS",
    "MIN_CHUNKS_TIMED",
    "MIN_READ_BYTES",
    "MIN_SPLIT_S",
    "MIN_STRAGGLER_S",
    "MIN_TASKS",
    "READ_AMPLIFICATION",
    "STRAGGLER_SHARE",
    "TASK_OVERHEAD_SHARE",
    "check_clear_observations",
    "chunk_fixed_share",
    "chunk_size_advice",
    "compute_chunk_costs",
    "compute_diagnostics",
    "compute_stragglers",
    "compute_task_overhead",
    "overview_verdict",
]


def compute_diagnostics(report: dict[str, Any]) -> list[dict[str, str]]:
    """One entry per check, computed from the report's own numbers only, in this order (the report's,
    which comparisons and the page show as they find it)."""
    out = check_object_size(report)
    out += [
        check_workers_used(report),
        check_task_overhead(report),
        check_long_tail(report),
        check_task_args_size(report),
        check_blocking(report),
        check_gpu_ran(report),
        check_gpu_windows(report),
        check_chunk_size(report),
        check_partition_size(report),
        check_overviews(report),
        check_nodata(report),
        check_worker_memory(report),
    ]
    if report.get("composite"):
        out.append(check_clear_observations(report))
    out += [check_io_vs_compute(report), check_idle_workers(report)]
    out += check_network(report)
    return out
