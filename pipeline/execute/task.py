"""One task: read, resample, fuse and write every chunk of a partition.

Runs on a Dask worker. It receives a :class:`~pipeline.planning.plan.Partition`
(paths and windows, never data or open handles) and a small
:class:`~pipeline.execute.context.TaskContext`, and returns a plain dict the report consumes. A
worker's start-up is :mod:`pipeline.execute.warmup`; its kept mask windows :mod:`pipeline.execute.masks`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pipeline.errors import TileReadError
from pipeline.execute.context import TaskContext
from pipeline.execute.masks import MASKS
from pipeline.execute.warmup import rss_mb, worker_name
from pipeline.inputs import netstats
from pipeline.inputs.prefetch import Prefetch
from pipeline.inputs.read import configure_reads, open_count
from pipeline.planning.grid import offset_transform
from pipeline.planning.plan import BandSpec, ChunkJob, Partition, SourceWindow
from pipeline.resample import FirstValid, compiled, fuse_arrays
from pipeline.resample.common import all_valid, nodata_fill, valid_mask
from pipeline.resample.mask import apply_mask
from pipeline.resample.parity import to_host
from pipeline.resample.reduce import Reduction
from pipeline.resample.warp import MAPS, RowSpan, warp_window
from pipeline.store.write import StoreWriter, journal_record


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


@dataclass
class _Tally:
    """What a task's chunks cost and found, summed as they are computed."""

    read_s: float = 0.0
    mask_s: float = 0.0
    resample_s: float = 0.0
    reduce_s: float = 0.0
    write_s: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    windows_skipped: int = 0
    tiles: set[str] = field(default_factory=set)
    skipped: list[dict[str, str]] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    rules: dict[str, int] = field(default_factory=dict)
    """Mask pixels judged, and those each rule matched (:func:`count_rules`)."""
    masked: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    """(band, date index) -> [dropped pixels, valid pixels] of the source windows judged."""
    clear: dict[int, list[int]] = field(default_factory=dict)
    """Time step -> pixels of the first band with 0, 1, ... clear observations (:func:`_clear_histogram`)."""


def _fuse_layer(
    ctx: TaskContext,
    job: ChunkJob,
    sources: tuple[SourceWindow, ...],
    band: BandSpec,
    tally: _Tally,
    reads: Prefetch,
) -> np.ndarray | None:
    """One date's tiles of one chunk, each masked (``mask``), resampled and fused; None where no tile
    gave a pixel."""
    r0, c0, h, w = job.window
    nodata = band.layer_nodata
    dst_transform = offset_transform(ctx.grid_transform, r0, c0)
    # first/last keep one tile per pixel: tiles go in priority order and each is resampled only
    # where the chunk is still empty (bit for bit the same: the kernels' blocks equal the whole).
    mosaic = FirstValid((h, w), nodata) if _picks_one(ctx) else None
    ordered = sources[::-1] if mosaic is not None and ctx.fuse == "last" else sources
    warped = []
    for src in ordered:
        # Only the part of the chunk this tile covers is resampled, then placed in the chunk.
        dst_window = src.dst_window or (0, 0, h, w)
        if mosaic is not None:
            pending = mosaic.pending(dst_window)
            if pending is None:
                tally.windows_skipped += 1
                reads.skip(src)
                continue
            dst_window = pending
        dr, dc, dh, dw = dst_window
        t0 = time.perf_counter()
        try:
            data = reads.take(src)
            t1 = time.perf_counter()
            tally.read_s += t1 - t0
            if src.mask is not None:
                drop = MASKS.drop(ctx, src, data.shape, tally.rules)
                src_nodata = src.nodata if not np.isnan(src.nodata) else nodata
                counts = tally.masked.setdefault((job.band, src.layer), [0, 0])
                if all_valid(data, src_nodata, np):  # (one read of the window, no mask made: the usual case)
                    counts[0] += int(np.count_nonzero(drop))
                    counts[1] += data.size
                else:
                    valid = valid_mask(data, src_nodata, np)
                    counts[0] += int(np.count_nonzero(drop & valid))
                    counts[1] += int(np.count_nonzero(valid))
                data = apply_mask(data, drop, src_nodata)
                t2 = time.perf_counter()
                tally.mask_s += t2 - t1
                t1 = t2
        except TileReadError as e:
            if ctx.on_error == "fail":
                raise
            tally.skipped.append({"path": e.path, "error": e.problem})
            tally.degraded.append(f"{job.band}/t{job.t}/{job.cy}/{job.cx}")
            tally.read_s += time.perf_counter() - t0
            continue
        span = RowSpan(ctx.grid_transform, ctx.grid_width, r0 + dr, c0 + dc) if ctx.grid_width else None
        part = warp_window(
            data,
            src,
            (dh, dw),
            offset_transform(dst_transform, dr, dc),
            ctx.grid_crs,
            nodata,
            band.resampling,
            ctx.engine,
            ctx.device,
            span,
            MAPS,
        )
        if mosaic is not None:
            mosaic.add(part, dr, dc)
        elif (dh, dw) != (h, w):
            full = np.full((h, w), nodata, dtype=part.dtype)
            full[dr : dr + dh, dc : dc + dw] = part
            warped.append(full)
        else:
            warped.append(part)
        tally.resample_s += time.perf_counter() - t1
        tally.bytes_read += data.nbytes
        tally.tiles.add(src.path)
    t2 = time.perf_counter()
    fused = mosaic.result() if mosaic is not None else fuse_arrays(warped, nodata, ctx.fuse) if warped else None
    tally.resample_s += time.perf_counter() - t2
    return fused


CLEAR_BINS = 16
"""The ``clear_observations`` histogram counts pixels with 0, 1, ..., 15 and 16 or more clear observations."""


def _clear_histogram(tally: _Tally, job: ChunkJob, count: np.ndarray) -> None:
    """Add the job's pixels to its period's histogram of clear observations, counting only pixels some tile
    covers (the boxes of the tiles' footprints in the chunk): a pixel no tile reaches is not a cloudy one."""
    covered = np.zeros(count.shape, dtype=bool)
    for src in job.sources:
        r, c, h, w = src.dst_window or (0, 0, *count.shape)
        covered[r : r + h, c : c + w] = True
    hist = np.bincount(np.minimum(count[covered], CLEAR_BINS).astype(np.int64), minlength=CLEAR_BINS + 1)
    mine = tally.clear.setdefault(job.t, [0] * (CLEAR_BINS + 1))
    for k, n in enumerate(hist.tolist()):
        mine[k] += n


def _read_order(ctx: TaskContext, partition: Partition) -> list[SourceWindow]:
    """The windows of ``partition`` in the order its jobs read them (:func:`_fuse_layer`'s order)."""
    last = _picks_one(ctx) and ctx.fuse == "last"
    out: list[SourceWindow] = []
    for job in partition.jobs:
        for group in [job.sources] if ctx.reducer is None else _layers(job.sources):
            out += group[::-1] if last else group
    return out


def _layers(sources: tuple[SourceWindow, ...]) -> list[tuple[SourceWindow, ...]]:
    """A job's sources split by date (they come in date order, each date's in fuse order)."""
    out: list[list[SourceWindow]] = []
    for src in sources:
        if not out or out[-1][-1].layer != src.layer:
            out.append([])
        out[-1].append(src)
    return [tuple(g) for g in out]


class _Chunks:
    """Writes whole chunks: a job that is a row strip of its chunk (a composite split in space) is placed
    into the chunk, which is written once its strips are in (or when the task ends: strips with no tile
    are no job, and stay fill)."""

    def __init__(self, ctx: TaskContext, writer: StoreWriter, tally: _Tally) -> None:
        self.ctx, self.writer, self.tally = ctx, writer, tally
        self.open: dict[tuple[str, int, int, int], list[Any]] = {}

    def put(self, band: BandSpec, t: int, window: tuple[int, int, int, int], values: np.ndarray) -> None:
        r0, c0, h, w = window
        ch = self.ctx.chunk_rows or h
        top = (r0 // ch) * ch
        full_h = min(ch, self.ctx.grid_height - top) if self.ctx.grid_height else h
        if h == full_h:
            self._write(band.name, t, window, values)
            return
        key = (band.name, t, top, c0)
        entry = self.open.get(key)
        if entry is None:
            fill = np.full((full_h, w), nodata_fill(band.nodata, values.dtype, np), dtype=values.dtype)
            entry = self.open[key] = [fill, 0]
        entry[0][r0 - top : r0 - top + h] = values
        entry[1] += h
        if entry[1] == full_h:
            del self.open[key]
            self._write(band.name, t, (top, c0, full_h, w), entry[0])

    def close(self) -> None:
        for (name, t, top, c0), (values, _) in list(self.open.items()):
            self._write(name, t, (top, c0, *values.shape), values)
        self.open.clear()

    def _write(self, name: str, t: int, window: tuple[int, int, int, int], values: np.ndarray) -> None:
        t0 = time.perf_counter()
        self.tally.bytes_written += self.writer.write_chunk(name, t, window, values)
        self.tally.write_s += time.perf_counter() - t0


def _run_jobs(
    partition: Partition,
    ctx: TaskContext,
    bands: dict[str, BandSpec],
    chunks: _Chunks,
    tally: _Tally,
    fit: list[float],
    xp: Any,
    reads: Prefetch,
) -> None:
    """Each chunk job of ``partition``: its dates fused (and reduced, for a composite), then put."""
    for job in partition.jobs:
        t_job, mb_job = time.perf_counter(), tally.bytes_read + tally.bytes_written
        band = bands[job.band]
        h, w = job.window[2:]
        if ctx.reducer is None:
            values = _fuse_layer(ctx, job, job.sources, band, tally, reads)
            if values is not None:
                chunks.put(band, job.t, job.window, values)
        else:
            reduction = Reduction(ctx.reducer, (h, w), band.layer_dtype, band.layer_nodata, xp=xp)
            seen = False
            for layer in _layers(job.sources):
                fused = _fuse_layer(ctx, job, layer, band, tally, reads)
                if fused is not None:
                    t0 = time.perf_counter()
                    reduction.add(xp.asarray(fused))
                    tally.reduce_s += time.perf_counter() - t0
                    seen = True
            if seen:
                t0 = time.perf_counter()
                values, count = (to_host(a) for a in reduction.result())
                tally.reduce_s += time.perf_counter() - t0
                chunks.put(band, job.t, job.window, values)
                if job.band == ctx.bands[0].name:
                    if ctx.count_band is not None:
                        chunks.put(ctx.count_band, job.t, job.window, count)
                    _clear_histogram(tally, job, count)
        _add_chunk(fit, (tally.bytes_read + tally.bytes_written - mb_job) / 1e6, time.perf_counter() - t_job)


def run_partition(partition: Partition, ctx: TaskContext, device: str = "cpu", reason: str = "") -> dict[str, Any]:
    """Compute and write every chunk of ``partition``; return its timing record.

    ``device``/``reason``: the driver's decision for this task. A GPU task on a worker without a
    usable GPU runs on the CPU and says so. The run's choice of compiled kernels holds on this thread
    for the task alone (:func:`pipeline.resample.compiled.use`), then what held before it does again.
    """
    before = compiled.use(ctx.compiled)
    try:
        return _run_partition(partition, ctx, device, reason)
    finally:
        compiled.use(before)


def _run_partition(partition: Partition, ctx: TaskContext, device: str, reason: str) -> dict[str, Any]:
    if device == "gpu":
        from pipeline.execute.device import detect_gpu

        gpu = detect_gpu()
        if not gpu.available:
            device, reason = "cpu", f"assigned to the GPU but this worker has none ({gpu.reason})"
    ctx = replace(ctx, device=device)
    configure_reads(ctx.storage, ctx.gdal_env, ctx.run_token)
    start = time.time()
    opened_before = open_count()
    hits_before, misses_before = MAPS.tally()
    compiled_before = compiled.calls()
    tally = _Tally()
    bands = {b.name: b for b in ctx.bands}
    writer = StoreWriter(ctx.store_path, ctx.storage, ctx.store_stamp, ctx.chunk_separator)
    chunks = _Chunks(ctx, writer, tally)
    fit = [0.0] * 5  # per chunk (MB = its bytes read + written, s): n, sum MB, sum MB^2, sum s, sum MB*s
    xp: Any = np
    if device == "gpu" and ctx.reducer is not None:  # the reduction too: its layers go over as they are fused
        import cupy

        xp = cupy
    itemsize = max((np.dtype(b.source_dtype or b.dtype).itemsize for b in ctx.bands), default=8)
    reads = Prefetch(
        _read_order(ctx, partition) if Prefetch.ahead(ctx.io_concurrency) else (),
        ctx.io_concurrency,
        ctx.prefetch_bytes,
        lambda src: src.window[2] * src.window[3] * itemsize,
    )
    try:
        _run_jobs(partition, ctx, bands, chunks, tally, fit, xp, reads)
    finally:
        reads.close()
    t4 = time.perf_counter()
    chunks.close()
    writer.flush()  # a sharded array's shards, each whole
    journal_record(ctx.store_path, partition.key, ctx.storage)
    tally.write_s += time.perf_counter() - t4
    hits, misses = MAPS.tally()
    return {
        "id": partition.key,
        "index": partition.index,
        "worker": worker_name(),
        "pid": os.getpid(),
        "device": device,
        "device_reason": reason,
        "start": start,
        "end": time.time(),
        "tiles": len(tally.tiles),
        "files_opened": open_count() - opened_before,
        "chunks": len(partition.jobs),
        "windows_skipped": tally.windows_skipped,
        "maps_reused": hits - hits_before,
        "maps_made": misses - misses_before,
        "maps_kept_mb": MAPS.bytes / 1e6,
        "compiled_windows": compiled.calls() - compiled_before,
        "read_s": tally.read_s,
        "mask_s": tally.mask_s,
        "resample_s": tally.resample_s,
        "reduce_s": tally.reduce_s,
        "write_s": tally.write_s,
        "bytes_read": tally.bytes_read,
        "bytes_written": tally.bytes_written,
        "cost_bytes": partition.cost_bytes,
        "chunk_fit": fit,
        "skipped": tally.skipped,
        "degraded_chunks": tally.degraded,
        "masked": [[b, t, d, v] for (b, t), (d, v) in sorted(tally.masked.items())],
        "mask_rules": dict(tally.rules),
        "clear": [[t, hist] for t, hist in sorted(tally.clear.items())],
        "network": netstats.take(),
        "rss_mb": rss_mb(),
        "io_threads": reads.threads,
        "read_io_s": reads.io_s,
        "prefetch_peak_mb": reads.peak_bytes / 1e6,
    }
