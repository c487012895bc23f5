"""Checks of the workers' memory and the GPU: a worker near its memory (``worker_memory``), a GPU chosen
but never used (``gpu_ran``) and GPU tasks on chunks too small to pay for their transfers
(``gpu_windows``)."""

from __future__ import annotations

import statistics
from typing import Any

from pipeline.report.checks.entry import entry

MEMORY_SHARE = 0.8
"""``worker_memory`` warns when a worker's peak passes this share of its memory (its limit, or the
machine's memory shared by the local workers)."""


GPU_MIN_CHUNK_BYTES = 1 << 20
"""``gpu_windows``: GPU tasks whose chunks are under this many bytes spend more on transfers and launches
than the kernels save (:mod:`pipeline.execute.device` models it; ``device: gpu`` overrides the model)."""


def check_worker_memory(report: dict[str, Any]) -> dict[str, str]:
    """The worker whose peak came closest to its memory limit."""
    mem = report.get("memory") or {}
    peaks: dict[str, float] = mem.get("worker_peak_mb") or {}
    limits: dict[str, float] = mem.get("worker_limit_mb") or {}
    over = {w: mb / limits[w] for w, mb in peaks.items() if limits.get(w)}
    worst = max(over.items(), key=lambda kv: kv[1], default=None)
    return entry(
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


def check_gpu_ran(report: dict[str, Any]) -> dict[str, str]:
    """The GPU was asked for (or chosen for some task) but no task ran there."""
    ex, dev = report["execution"], report["devices"]
    n = len(report["tasks"])
    gpu_wanted = ex.get("device_requested") == "gpu" or any(d["device"] == "gpu" for d in dev["decisions"])
    return entry(
        "gpu_ran",
        gpu_wanted and dev["gpu"] == 0,
        f"{dev['gpu']} of {n} tasks on the GPU" + (f"; {dev['decisions'][0]['reason']}" if dev["decisions"] else ""),
        "the GPU was chosen but no task ran there: check worker GPU resources and CuPy",
    )


def check_gpu_windows(report: dict[str, Any]) -> dict[str, str]:
    """GPU tasks on windows too small to pay for their transfers (``device: gpu`` forces them)."""
    gpu = [t for t in report["tasks"] if t.get("device") == "gpu"]
    per_chunk = [t["bytes_written"] / t["chunks"] for t in gpu if t.get("chunks")]
    small = statistics.median(per_chunk) if per_chunk else 0.0
    warn = bool(per_chunk) and small < GPU_MIN_CHUNK_BYTES
    return entry(
        "gpu_windows",
        warn,
        f"{len(gpu)} GPU task(s)" + (f", median {small / 1024:.0f} KiB written per chunk" if per_chunk else ""),
        "the GPU ran chunks too small to pay for their transfers: set execution.device=auto (its cost model "
        "keeps small windows on the CPU) or raise output.chunks to 1 MB+ per chunk",
    )
