"""One task: read, resample, fuse and write every chunk of a partition.

Runs on a Dask worker. It receives a :class:`~pipeline.plan.Partition`
(paths and windows, never data or open handles) and a small
:class:`TaskContext`, and returns a plain dict the report consumes.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline import netstats
from pipeline.errors import TileReadError
from pipeline.grid import offset_transform
from pipeline.plan import BandSpec, Partition
from pipeline.read import configure_reads, open_count, read_window
from pipeline.resample import FirstValid, fuse_arrays
from pipeline.warp import MAPS, RowSpan, warp_window
from pipeline.write import StoreWriter, journal_record


@dataclass(frozen=True)
class TaskContext:
    store_path: str
    grid_crs: str
    grid_transform: tuple[float, float, float, float, float, float]
    bands: tuple[BandSpec, ...]
    resampling: str
    fuse: str
    on_error: str
    engine: str = "auto"
    """Resampling engine: auto | kernels | gdal (see pipeline.warp)."""
    grid_width: int = 0
    """Columns in the grid's rows: reprojection positions are approximated along whole rows (no seams)."""
    skip_covered: bool = True
    """first/last fusion: skip reading and resampling where earlier tiles already filled the chunk."""
    storage: Any = None
    """The config's :class:`~pipeline.config.StorageConfig` (endpoint, region; never a credential: each
    worker resolves those from its own AWS chain), for an ``s3://`` store."""
    store_stamp: str | None = None
    """:func:`pipeline.write.store_stamp` of the store: workers read its metadata once per process."""
    gdal_env: tuple[tuple[str, str], ...] = ()
    """``inputs.gdal_env`` as (option, value) pairs, over the cloud defaults for remote reads."""


def _worker_name() -> str:
    if "distributed" not in sys.modules:  # the threads scheduler names its threads itself; no 0.4 s import
        return f"local-{os.getpid()}"
    try:
        from distributed import get_worker

        w = get_worker()
        return str(w.name if w.name is not None else w.address)
    except (ImportError, ValueError):
        return f"local-{os.getpid()}"


class _Boto3OnDemand(types.ModuleType):
    """Stands for boto3 in ``rasterio.session``, which imports it when rasterio is imported but uses it
    only to make the AWS session of a remote read: the real boto3 is imported on first use."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # module dunders (``__path__``, ``__spec__``...): not a package stand-in
            raise AttributeError(name)
        import importlib

        return getattr(importlib.import_module("boto3"), name)


def import_rasterio() -> None:
    """Import rasterio without boto3 (with botocore and s3transfer, ~0.2 s of a short run's start), which
    it imports up front for the AWS sessions of ``s3://`` reads: where neither is imported yet, boto3 is
    held by a stand-in while rasterio imports and then imported on rasterio's first use of it, in the
    import system's usual thread-safe way. Another thread importing boto3 during those ~0.1 s gets the
    stand-in, which works for attributes but not for ``import boto3.x``: a threads run calls this in its
    driver before its threads start (:func:`pipeline.execute.run`)."""
    if "rasterio" in sys.modules or "boto3" in sys.modules:
        return
    import importlib.util

    stand_in = _Boto3OnDemand("boto3") if importlib.util.find_spec("boto3") is not None else None
    if stand_in is not None:
        sys.modules["boto3"] = stand_in
    try:
        import rasterio  # noqa: F401
    finally:
        if stand_in is not None and sys.modules.get("boto3") is stand_in:
            del sys.modules["boto3"]


def warm_up(
    log_level: int | None = None, ctx: TaskContext | None = None, crs: tuple[str, ...] = (), local: bool = False
) -> int:
    """Import the I/O stack on a worker and do each library's first-use set-up (GDAL's drivers, PROJ's
    database, the codecs) before the first task, so start-up is not timed as reading or resampling.

    ``log_level``: for the local cluster's workers, the level their ``distributed`` log handlers print
    at. Task errors are reported by the driver. ``ctx``, ``crs``: the run's store (its arrays are
    opened) and the tiles' CRSs (the transformers from the grid's CRS to theirs are made). ``local``:
    a worker of the run's own cluster, whose allocator is tuned (:func:`pipeline.workers.tune_malloc`).
    """
    netstats.clear_cache()  # a run reads objects as they are now (a long-lived process may hold old ones)
    if local:
        from pipeline.workers import tune_malloc

        tune_malloc()
    import numcodecs
    import rasterio
    import rasterio.warp  # noqa: F401
    from rasterio.io import MemoryFile

    from pipeline.grid import transform_points

    pixel = np.ones((1, 16, 16), dtype="uint16")
    with MemoryFile() as mem, mem.open(driver="GTiff", width=16, height=16, count=1, dtype="uint16",
                                       crs="EPSG:32632", transform=rasterio.Affine(20, 0, 0, 0, -20, 0),
                                       compress="zstd", tiled=True, blockxsize=16, blockysize=16) as ds:  # fmt: skip
        ds.write(pixel)
        ds.read(1)
    numcodecs.Zstd(level=1).encode(pixel)
    if ctx is not None:
        from pipeline.warp import same_crs
        from pipeline.write import open_array

        for tile_crs in crs:
            same_crs(tile_crs, ctx.grid_crs)
            transform_points(ctx.grid_crs, tile_crs, np.array([0.0]), np.array([0.0]))
        for band in ctx.bands:
            open_array(ctx.store_path, band.name, ctx.storage, ctx.store_stamp)
    if log_level is not None:
        logging.getLogger("distributed").setLevel(log_level)
    return os.getpid()


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (getrusage: KiB on Linux, bytes on macOS); run on
    each worker at the end of a run for the report's ``memory``."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6


def _picks_one(ctx: TaskContext) -> bool:
    """first/last fusion on the kernels, where a block of the chunk resamples exactly as the whole
    (positions along grid rows): only then may a tile be resampled just where the chunk is empty."""
    return ctx.fuse in ("first", "last") and ctx.engine != "gdal" and ctx.grid_width > 0 and ctx.skip_covered


def _add_chunk(fit: list[float], mb: float, seconds: float) -> None:
    """Accumulate one chunk into a task's least-squares sums (``chunk_fit``): the report pools them over
    the run's tasks to split a chunk's time into a fixed part and a part per MB
    (:func:`pipeline.report.compute_chunk_costs`)."""
    fit[0] += 1
    fit[1] += mb
    fit[2] += mb * mb
    fit[3] += seconds
    fit[4] += mb * seconds


def run_partition(partition: Partition, ctx: TaskContext, device: str = "cpu", reason: str = "") -> dict[str, Any]:
    """Compute and write every chunk of ``partition``; return its timing record.

    ``device``/``reason``: the driver's decision for this task. A GPU task on a worker without a
    usable GPU runs on the CPU and says so.
    """
    if device == "gpu":
        from pipeline.device import detect_gpu

        gpu = detect_gpu()
        if not gpu.available:
            device, reason = "cpu", f"assigned to the GPU but this worker has none ({gpu.reason})"
    configure_reads(ctx.storage, ctx.gdal_env)
    start = time.time()
    opened_before = open_count()
    hits_before, misses_before = MAPS.tally()
    read_s = resample_s = write_s = 0.0
    bytes_read = bytes_written = windows_skipped = 0
    tiles: set[str] = set()
    skipped: list[dict[str, str]] = []
    degraded: list[str] = []
    bands = {b.name: b for b in ctx.bands}
    writer = StoreWriter(ctx.store_path, ctx.storage, ctx.store_stamp)
    fit = [0.0] * 5  # per chunk (MB = its bytes read + written, s): n, sum MB, sum MB^2, sum s, sum MB*s
    for job in partition.jobs:
        t_job, mb_job = time.perf_counter(), bytes_read + bytes_written
        band = bands[job.band]
        r0, c0, h, w = job.window
        dst_transform = offset_transform(ctx.grid_transform, r0, c0)
        # first/last keep one tile per pixel: tiles go in priority order and each is resampled only
        # where the chunk is still empty (bit for bit the same: the kernels' blocks equal the whole).
        mosaic = FirstValid((h, w), band.nodata) if _picks_one(ctx) else None
        sources = job.sources[::-1] if mosaic is not None and ctx.fuse == "last" else job.sources
        warped = []
        for src in sources:
            # Only the part of the chunk this tile covers is resampled, then placed in the chunk.
            dst_window = src.dst_window or (0, 0, h, w)
            if mosaic is not None:
                pending = mosaic.pending(dst_window)
                if pending is None:
                    windows_skipped += 1
                    continue
                dst_window = pending
            dr, dc, dh, dw = dst_window
            t0 = time.perf_counter()
            try:
                data = read_window(src)
            except TileReadError as e:
                if ctx.on_error == "fail":
                    raise
                skipped.append({"path": e.path, "error": e.problem})
                degraded.append(f"{job.band}/t{job.t}/{job.cy}/{job.cx}")
                read_s += time.perf_counter() - t0
                continue
            t1 = time.perf_counter()
            span = RowSpan(ctx.grid_transform, ctx.grid_width, r0 + dr, c0 + dc) if ctx.grid_width else None
            part = warp_window(
                data, src, (dh, dw), offset_transform(dst_transform, dr, dc), ctx.grid_crs, band.nodata,
                ctx.resampling, ctx.engine, device, span, MAPS,
            )  # fmt: skip
            if mosaic is not None:
                mosaic.add(part, dr, dc)
            elif (dh, dw) != (h, w):
                full = np.full((h, w), band.nodata, dtype=part.dtype)
                full[dr : dr + dh, dc : dc + dw] = part
                warped.append(full)
            else:
                warped.append(part)
            t2 = time.perf_counter()
            read_s += t1 - t0
            resample_s += t2 - t1
            bytes_read += data.nbytes
            tiles.add(src.path)
        t2 = time.perf_counter()
        fused = (
            mosaic.result() if mosaic is not None else fuse_arrays(warped, band.nodata, ctx.fuse) if warped else None
        )
        if fused is not None:
            t3 = time.perf_counter()
            bytes_written += writer.write_chunk(job.band, job.t, job.window, fused)
            resample_s += t3 - t2
            write_s += time.perf_counter() - t3
        _add_chunk(fit, (bytes_read + bytes_written - mb_job) / 1e6, time.perf_counter() - t_job)
    t4 = time.perf_counter()
    writer.flush()  # a sharded array's shards, each whole
    journal_record(ctx.store_path, partition.key, ctx.storage)
    write_s += time.perf_counter() - t4
    hits, misses = MAPS.tally()
    return {
        "id": partition.key,
        "index": partition.index,
        "worker": _worker_name(),
        "pid": os.getpid(),
        "device": device,
        "device_reason": reason,
        "start": start,
        "end": time.time(),
        "tiles": len(tiles),
        "files_opened": open_count() - opened_before,
        "chunks": len(partition.jobs),
        "windows_skipped": windows_skipped,
        "maps_reused": hits - hits_before,
        "maps_made": misses - misses_before,
        "maps_kept_mb": MAPS.bytes / 1e6,
        "read_s": read_s,
        "resample_s": resample_s,
        "write_s": write_s,
        "bytes_read": bytes_read,
        "bytes_written": bytes_written,
        "cost_bytes": partition.cost_bytes,
        "chunk_fit": fit,
        "skipped": skipped,
        "degraded_chunks": degraded,
        "network": netstats.take(),
    }
