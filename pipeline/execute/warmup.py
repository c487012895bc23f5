"""A worker's start and its memory: each library's first-use set-up done before the first task (so
start-up is not timed as reading or resampling), the worker's name for the report, and its resident
memory, now and at its peak."""

from __future__ import annotations

import gc
import logging
import os
import sys

import numpy as np

from pipeline.execute.context import TaskContext
from pipeline.inputs import netstats
from pipeline.resample import compiled, fuse, kernels  # noqa: F401 - the kernels, imported before a fork server forks


def worker_name() -> str:
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
    a worker of the run's own cluster, whose allocator is tuned (:func:`pipeline.execute.workers.tune_malloc`)
    and whose GDAL block cache is bounded (:func:`pipeline.execute.workers.bound_gdal_cache`).
    """
    netstats.clear_cache()  # a run reads objects as they are now (a long-lived process may hold old ones)
    if local:
        # What the fork server imported is kept out of this worker's collections: each would otherwise walk
        # every object, and a write to an object's header copies its page into this worker. (A splice of
        # the collector's lists here, after the fork; in the server, any program importing its preload
        # would have its collector frozen too.) The cloudy composite's process tree: 627 -> 604 MB of PSS
        # against no freeze, medians of 4 sampled runs (``MC_SAMPLED=4 python bench/memory_trees.py 0
        # before=TREE now=.``); 615 MB here against 611 freezing in the server, the same within a run's noise.
        gc.freeze()
        from pipeline.execute.workers import tune_malloc

        tune_malloc()
    warm_libraries()
    if local:
        from pipeline.execute.workers import bound_gdal_cache

        bound_gdal_cache()
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
