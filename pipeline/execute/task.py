"""One task: read, resample, fuse and write every chunk of a partition.

Runs on a Dask worker. It receives a :class:`~pipeline.planning.plan.Partition`
(paths and windows, never data or open handles) and a small
:class:`TaskContext`, and returns a plain dict the report consumes.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.errors import TileReadError
from pipeline.inputs import netstats
from pipeline.inputs.read import configure_reads, open_count, read_window
from pipeline.planning.grid import offset_transform
from pipeline.planning.plan import BandSpec, Partition
from pipeline.resample import FirstValid, compiled, fuse_arrays
from pipeline.resample.warp import MAPS, RowSpan, warp_window
from pipeline.store.write import StoreWriter, journal_record


@dataclass(frozen=True)
class TaskContext:
    """What every task of a run shares: the store, the grid, the bands, the method and the rules;
    identifiers only, so it pickles small."""

    store_path: str
    grid_crs: str
    grid_transform: tuple[float, float, float, float, float, float]
    bands: tuple[BandSpec, ...]
    resampling: str
    fuse: str
    on_error: str
    engine: str = "auto"
    """Resampling engine: auto | kernels | gdal (see pipeline.resample.warp)."""
    grid_width: int = 0
    """Columns in the grid's rows: reprojection positions are approximated along whole rows (no seams)."""
    skip_covered: bool = True
    """first/last fusion: skip reading and resampling where earlier tiles already filled the chunk."""
    storage: Any = None
    """The config's :class:`~pipeline.config.StorageConfig` (endpoint, region; never a credential: each
    worker resolves those from its own AWS chain), for an ``s3://`` store."""
    store_stamp: str | None = None
    """:func:`pipeline.store.write.store_stamp` of the store: workers read its metadata once per process."""
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


def warm_up(
    log_level: int | None = None, ctx: TaskContext | None = None, crs: tuple[str, ...] = (), local: bool = False
) -> int:
    """Import the I/O stack on a worker and do each library's first-use set-up (GDAL's drivers, PROJ's
    database, the codecs) before the first task, so start-up is not timed as reading or resampling.

    ``log_level``: for the local cluster's workers, the level their ``distributed`` log handlers print
    at. Task errors are reported by the driver. ``ctx``, ``crs``: the run's store (its arrays are
    opened) and the tiles' CRSs (the transformers from the grid's CRS to theirs are made). ``local``:
    a worker of the run's own cluster, whose allocator is tuned (:func:`pipeline.execute.workers.tune_malloc`).
    """
    netstats.clear_cache()  # a run reads objects as they are now (a long-lived process may hold old ones)
    if local:
        from pipeline.execute.workers import tune_malloc

        tune_malloc()
    import numcodecs
    import rasterio
    import rasterio.warp  # noqa: F401
    from rasterio.io import MemoryFile

    from pipeline.planning.grid import transform_points

    pixel = np.ones((1, 16, 16), dtype="uint16")
    with (
        MemoryFile() as mem,
        mem.open(
            driver="GTiff",
            width=16,
            height=16,
            count=1,
            dtype="uint16",
            crs="EPSG:32632",
            transform=rasterio.Affine(20, 0, 0, 0, -20, 0),
            compress="zstd",
            tiled=True,
            blockxsize=16,
            blockysize=16,
        ) as ds,
    ):
        ds.write(pixel)
        ds.read(1)
    numcodecs.Zstd(level=1).encode(pixel)
    if ctx is not None:
        from pipeline.resample.warp import same_crs
        from pipeline.store.write import open_array

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


def rss_mb() -> float:
    """This process's resident memory now, in MB (``/proc/self/statm``; the peak where there is no /proc):
    each task records it as it ends, the report's memory over time per worker."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()


def _picks_one(ctx: TaskContext) -> bool:
    """first/last fusion on the kernels, where a block of the chunk resamples exactly as the whole
    (positions along grid rows): only then may a tile be resampled just where the chunk is empty."""
    return ctx.fuse in ("first", "last") and ctx.engine != "gdal" and ctx.grid_width > 0 and ctx.skip_covered


def _add_chunk(fit: list[float], mb: float, seconds: float) -> None:
    """Accumulate one chunk into a task's least-squares sums (``chunk_fit``): the report pools them over
    the run's tasks to split a chunk's time into a fixed part and a part per MB
    (:func:`pipeline.report.summary.compute_chunk_costs`)."""
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
        from pipeline.execute.device import detect_gpu

        gpu = detect_gpu()
        if not gpu.available:
            device, reason = "cpu", f"assigned to the GPU but this worker has none ({gpu.reason})"
    configure_reads(ctx.storage, ctx.gdal_env)
    start = time.time()
    opened_before = open_count()
    hits_before, misses_before = MAPS.tally()
    compiled_before = compiled.calls()
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
                data,
                src,
                (dh, dw),
                offset_transform(dst_transform, dr, dc),
                ctx.grid_crs,
                band.nodata,
                band.resampling,
                ctx.engine,
                device,
                span,
                MAPS,
            )
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
        "compiled_windows": compiled.calls() - compiled_before,
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
        "rss_mb": rss_mb(),
    }
