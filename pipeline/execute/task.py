"""One task: read, resample, fuse and write every chunk of a partition.

Runs on a Dask worker. It receives a :class:`~pipeline.planning.plan.Partition`
(paths and windows, never data or open handles) and a small
:class:`TaskContext`, and returns a plain dict the report consumes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pipeline.errors import TileReadError
from pipeline.inputs import netstats
from pipeline.inputs.read import configure_reads, open_count, read_window
from pipeline.planning.grid import offset_transform
from pipeline.planning.plan import BandSpec, ChunkJob, Partition, SourceWindow
from pipeline.resample import FirstValid, compiled, fuse_arrays
from pipeline.resample.common import all_valid, nodata_fill, valid_mask
from pipeline.resample.mask import apply_mask, dilate, drop_pixels, mask_window, sample_nearest
from pipeline.resample.parity import to_host
from pipeline.resample.reduce import Reduction
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
    """The config's storage settings as a :class:`~pipeline.storage.StorageSettings` (endpoint, region;
    never a credential: each worker resolves those from its own AWS chain), for an ``s3://`` store."""
    store_stamp: str | None = None
    """:func:`pipeline.store.write.store_stamp` of the store: workers read its metadata once per process."""
    gdal_env: tuple[tuple[str, str], ...] = ()
    """``inputs.gdal_env`` as (option, value) pairs, over the cloud defaults for remote reads."""
    mask_exclude: tuple[int, ...] = ()
    """``mask.exclude`` as class values (names resolved against the mask band's STAC classes)."""
    mask_bits: tuple[int, ...] = ()
    """``mask.exclude_bits`` as bit positions."""
    mask_dilate: int = 0
    reducer: str | None = None
    """``composite.reducer``; None: one time step per date."""
    count_band: BandSpec | None = None
    """``clear_count``, written with the first band's chunks."""
    chunk_rows: int = 0
    """The output chunks' height (a composite's jobs may be row strips of them)."""
    grid_height: int = 0
    device: str = "cpu"
    """Where this task's arrays are computed (set per task from the driver's decision)."""
    compiled: bool = False
    """Whether resampling uses the compiled kernels (:func:`pipeline.resample.compiled.choose`, asked once by
    the driver)."""
    run_token: str = ""
    """Unique to this run (a resumed one too): what a worker keeps from the files' contents, such as its
    judged mask windows, is kept for one run, as the files may have changed in between."""


def _worker_name() -> str:
    if "distributed" not in sys.modules:  # the threads scheduler names its threads itself; no 0.4 s import
        return f"local-{os.getpid()}"
    try:
        from distributed import get_worker

        w = get_worker()
        return str(w.name if w.name is not None else w.address)
    except (ImportError, ValueError):
        return f"local-{os.getpid()}"


_libraries_warm = [False]


def warm_libraries() -> None:
    """Each library's first-use set-up that depends on no run: GDAL's drivers (a GeoTIFF written and read
    in memory), the ZSTD codec, numpy.ma (which rasterio imports on a first read), pyproj and PROJ's
    database (a first transformer), the compiled kernels' library. Once per process; the fork server does
    it before it forks, so its workers start with it done (it opens no dataset and starts no thread, so no
    lock is held when it forks)."""
    if _libraries_warm[0]:
        return
    import numpy.ma  # noqa: F401
    import rasterio
    import rasterio.warp  # noqa: F401
    from rasterio.io import MemoryFile

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
    from pipeline.store.write import zstd_encoder

    zstd_encoder(1, False)(pixel)
    from pyproj import Transformer

    # pyproj imported and PROJ's database opened: ~30 ms of each worker's warm-up for the run's CRSs, done
    # once in the fork server, which waits for the driver's plan anyway (PROJ makes a forked child reopen
    # its database handle, or reads it with pread, which a child may share)
    Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True).transform(0.0, 0.0)
    compiled.kernels()  # the compiled kernels' library loaded (under 1 ms), where it was built
    _libraries_warm[0] = True


def warm_up(
    log_level: int | None = None, ctx: TaskContext | None = None, crs: tuple[str, ...] = (), local: bool = False
) -> int:
    """Import the I/O stack on a worker and do each library's first-use set-up (:func:`warm_libraries`;
    PROJ's database, the run's store) before the first task, so start-up is not timed as reading or
    resampling.

    ``log_level``: for the local cluster's workers, the level their ``distributed`` log handlers print
    at. Task errors are reported by the driver. ``ctx``, ``crs``: the run's store (its arrays are
    opened) and the tiles' CRSs (the transformers from the grid's CRS to theirs are made). ``local``:
    a worker of the run's own cluster, whose allocator is tuned (:func:`pipeline.execute.workers.tune_malloc`).
    """
    netstats.clear_cache()  # a run reads objects as they are now (a long-lived process may hold old ones)
    if local:
        from pipeline.execute.workers import tune_malloc

        tune_malloc()
    warm_libraries()
    from pipeline.planning.grid import transform_points

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


MASK_CACHE_BYTES = 64 << 20
"""What a process keeps of judged mask windows and their samplings (one byte per pixel: a 1024-pixel
chunk at 20 m over one Sentinel-2 tile keeps ~2 MB with its 10, 20 and 60 m samplings)."""

MASK_ALIGN = 64
"""Mask windows are read rounded out to multiples of this many mask pixels, so that a chunk's bands at
10, 20 and 60 m, whose windows differ by a pixel or two, share one read and one judgement."""


def _aligned(win: tuple[int, int, int, int], rows: int, cols: int) -> tuple[int, int, int, int]:
    """``win`` (row_off, col_off, height, width) rounded out to :data:`MASK_ALIGN`, clipped to the file."""
    r0, c0 = win[0] // MASK_ALIGN * MASK_ALIGN, win[1] // MASK_ALIGN * MASK_ALIGN
    r1 = min(-(-(win[0] + win[2]) // MASK_ALIGN) * MASK_ALIGN, rows)
    c1 = min(-(-(win[1] + win[3]) // MASK_ALIGN) * MASK_ALIGN, cols)
    return r0, c0, r1 - r0, c1 - c0


class _JudgedMasks:
    """This process's judged mask windows (the drop mask of each mask window read, after the rules and
    the dilation), kept across its tasks: a chunk's bands are tasks of their own where their stacks are
    large, and each would read and judge the same mask window again. A kept window serves any window it
    contains, and a larger window judges the pixels a smaller one needs the same (the needed window
    carries the dilation's margin, :func:`pipeline.resample.mask.dilate`), so results do not depend on
    which task read first. Least recently used out first past ``max_bytes``; keyed by the run's token as
    well, so a later run on a long-lived worker (a resumed one too) judges afresh."""

    def __init__(self, max_bytes: int = MASK_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[Any, ...], _Judged] = OrderedDict()
        self._windows: dict[tuple[Any, ...], set[tuple[int, int, int, int]]] = {}
        self._lock = threading.Lock()
        self.bytes = 0

    def drop(
        self, ctx: TaskContext, src: SourceWindow, shape: tuple[int, int], rules: dict[str, int] | None = None
    ) -> np.ndarray:
        """Per pixel of ``src``'s window (``shape``), whether its mask tile drops it: the mask pixel at the
        pixel's centre (nearest, same tile), after the rules and the dilation. ``rules``: where a mask
        window is read and judged, its pixels that each rule matches are added there (:func:`count_rules`)."""
        m = src.mask
        assert m is not None  # called only for masked sources
        need = mask_window(src.transform, shape, m.transform, (m.height, m.width), ctx.mask_dilate)
        if need[2] <= 0 or need[3] <= 0:
            return np.zeros(shape, dtype=bool)
        tile = (m, ctx.mask_exclude, ctx.mask_bits, ctx.mask_dilate, ctx.run_token)
        with self._lock:
            win = next((w for w in self._windows.get(tile, ()) if _contains(w, need)), None)
            entry = None if win is None else self._kept[(tile, win)]
            if entry is not None:
                self._kept.move_to_end((tile, win))
                sampled = entry.samples.get((src.transform, shape))
                if sampled is not None:
                    return sampled
        if entry is None or win is None:
            win = _aligned(need, m.height, m.width)
            at = offset_transform(m.transform, win[0], win[1])
            values = read_window(SourceWindow(m.path, -1, win, at, src.crs, float("nan"), band_index=m.band_index))
            entry = _Judged(dilate(drop_pixels(values, ctx.mask_exclude, ctx.mask_bits), ctx.mask_dilate))
            if rules is not None:
                count_rules(values, ctx.mask_exclude, ctx.mask_bits, rules)
        sampled = sample_nearest(entry.judged, m.transform, src.transform, shape, origin=(win[0], win[1]))
        sampled.flags.writeable = False  # shared by the bands that ask for it
        self._keep(tile, win, entry, (src.transform, shape), sampled)
        return sampled

    def _keep(
        self,
        tile: tuple[Any, ...],
        win: tuple[int, int, int, int],
        entry: _Judged,
        at: tuple[Any, ...],
        sampled: np.ndarray,
    ) -> None:
        """Keep ``entry`` (if new) and its ``sampled`` pixels for a data window ``at`` (transform, shape)."""
        with self._lock:
            key = (tile, win)
            kept = self._kept.get(key)
            if kept is None:  # new, or evicted since this thread found it: counted whole again
                if entry.nbytes() + sampled.nbytes > self.max_bytes:
                    return
                kept = self._kept[key] = entry
                self._windows.setdefault(tile, set()).add(win)
                self.bytes += entry.nbytes()
            if at not in kept.samples:
                kept.samples[at] = sampled
                self.bytes += sampled.nbytes
            while self.bytes > self.max_bytes:
                (old_tile, old_win), old = self._kept.popitem(last=False)
                self.bytes -= old.nbytes()
                wins = self._windows[old_tile]
                wins.discard(old_win)
                if not wins:
                    del self._windows[old_tile]


@dataclass
class _Judged:
    """A mask window's drop mask, and its pixels as sampled for the data windows asked of it so far (a
    chunk's bands of one resolution share them)."""

    judged: np.ndarray
    samples: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)

    def nbytes(self) -> int:
        return int(self.judged.nbytes + sum(a.nbytes for a in self.samples.values()))


MASKS = _JudgedMasks()
"""This process's judged mask windows, shared by its threads and tasks."""


def count_rules(values: np.ndarray, exclude: tuple[int, ...], bits: tuple[int, ...], into: dict[str, int]) -> None:
    """Add to ``into`` the mask pixels of ``values`` (a mask window, before the dilation) that each rule
    matches, as ``class <v>`` and ``bit <b>``, and all of them as ``pixels``: the report's
    ``mask.matched_share``, which tells the clear-observations advice which rules cost the most pixels."""
    into["pixels"] = into.get("pixels", 0) + int(values.size)
    for v in exclude:
        key = f"class {v:g}"
        into[key] = into.get(key, 0) + int(np.count_nonzero(drop_pixels(values, (v,), ())))
    for b in bits:
        key = f"bit {b}"
        into[key] = into.get(key, 0) + int(np.count_nonzero(drop_pixels(values, (), (b,))))


def _contains(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    """Whether window ``outer`` (row_off, col_off, height, width) holds all of ``inner``."""
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[0] + inner[2] <= outer[0] + outer[2]
        and inner[1] + inner[3] <= outer[1] + outer[3]
    )


def _fuse_layer(
    ctx: TaskContext,
    job: ChunkJob,
    sources: tuple[SourceWindow, ...],
    band: BandSpec,
    tally: _Tally,
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
                continue
            dst_window = pending
        dr, dc, dh, dw = dst_window
        t0 = time.perf_counter()
        try:
            data = read_window(src)
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
    writer = StoreWriter(ctx.store_path, ctx.storage, ctx.store_stamp)
    chunks = _Chunks(ctx, writer, tally)
    fit = [0.0] * 5  # per chunk (MB = its bytes read + written, s): n, sum MB, sum MB^2, sum s, sum MB*s
    xp: Any = np
    if device == "gpu" and ctx.reducer is not None:  # the reduction too: its layers go over as they are fused
        import cupy

        xp = cupy
    for job in partition.jobs:
        t_job, mb_job = time.perf_counter(), tally.bytes_read + tally.bytes_written
        band = bands[job.band]
        h, w = job.window[2:]
        if ctx.reducer is None:
            values = _fuse_layer(ctx, job, job.sources, band, tally)
            if values is not None:
                chunks.put(band, job.t, job.window, values)
        else:
            reduction = Reduction(ctx.reducer, (h, w), band.layer_dtype, band.layer_nodata, xp=xp)
            seen = False
            for layer in _layers(job.sources):
                fused = _fuse_layer(ctx, job, layer, band, tally)
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
    t4 = time.perf_counter()
    chunks.close()
    writer.flush()  # a sharded array's shards, each whole
    journal_record(ctx.store_path, partition.key, ctx.storage)
    tally.write_s += time.perf_counter() - t4
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
    }
