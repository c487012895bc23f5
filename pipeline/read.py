"""Windowed reads: only the window and overview level a chunk needs.

Tasks carry paths and windows (never open handles); each worker thread opens
a file lazily once and keeps it in a small LRU cache, so a file touched by
many chunks of a partition (or of later partitions on the same worker) is
opened once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from pipeline.errors import TileReadError
from pipeline.grid import offset_transform
from pipeline.plan import SourceWindow

MAX_OPEN_FILES = 64
_local = threading.local()
_opens = [0]  # datasets opened by this process (a list so threads share one counter)


def open_count() -> int:
    """How many datasets this process has opened (cache misses), for the report."""
    return _opens[0]


def _open_dataset(path: str, level: int) -> Any:
    import rasterio

    cache: OrderedDict[tuple[str, int], Any] | None = getattr(_local, "datasets", None)
    if cache is None:
        cache = _local.datasets = OrderedDict()
    key = (path, level)
    ds = cache.get(key)
    if ds is not None:
        cache.move_to_end(key)
        return ds
    kwargs = {} if level < 0 else {"overview_level": level}
    if not rasterio.env.hasenv():
        # Without a GDAL environment on this thread, rasterio sets one up and tears it down around every
        # open (~0.4 ms of ~2 ms); this one stays (an Env entered later restores it when it leaves).
        rasterio.env.defenv()
    ds = rasterio.open(path, **kwargs)
    _opens[0] += 1
    cache[key] = ds
    while len(cache) > MAX_OPEN_FILES:
        _, old = cache.popitem(last=False)
        old.close()
    return ds


def read_window(src: SourceWindow) -> np.ndarray:
    """Read ``src.window`` of band 1 at ``src.overview_level``; raise TileReadError naming file and window."""
    from rasterio.windows import Window

    r0, c0, h, w = src.window
    where = f"window rows {r0}:{r0 + h} cols {c0}:{c0 + w}" + (
        f" of overview {src.overview_level}" if src.overview_level >= 0 else ""
    )
    failure = None
    try:
        ds = _open_dataset(src.path, src.overview_level)
        t = ds.transform
        _, _, x0, _, _, y0 = offset_transform(tuple(t)[:6], r0, c0)
        if abs(x0 - src.transform[2]) > abs(t.a) * 1e-3 or abs(y0 - src.transform[5]) > abs(t.e) * 1e-3:
            raise TileReadError(
                src.path, f"georeferencing changed since it was indexed ({where}); rerun `pipeline index`"
            )
        data = ds.read(1, window=Window(c0, r0, w, h))
    except TileReadError:
        raise
    except Exception as e:  # rasterio raises several types for truncated/corrupt/missing files
        cache = getattr(_local, "datasets", None)
        if cache:
            stale = cache.pop((src.path, src.overview_level), None)
            if stale is not None:
                stale.close()
        detail = f"{e} ({e.__cause__})" if e.__cause__ else str(e)
        failure = f"read failed ({where}): {detail}; the file may be truncated, corrupt or gone"
    if failure is not None:
        # Raised outside the except block and chained to a plain OSError: GDAL's exception types do not
        # survive pickling back from a Dask worker, and distributed would hand back a bare Exception.
        raise TileReadError(src.path, failure) from OSError(failure)
    if data.shape != (h, w):
        raise TileReadError(src.path, f"short read ({where}): got {data.shape}")
    return data
