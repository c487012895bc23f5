"""The output store: template first, then chunk-aligned writes, completion last.

1. :func:`create_store` writes the whole layout up front (arrays, coordinates,
   CRS, attributes with ``pipeline_complete: false``) and no band data.
2. Tasks call :func:`write_chunk` for whole chunks only; each chunk is its own
   object in the store, so writers never share anything and need no lock.
3. :func:`finalize_store` marks the store complete and consolidates metadata.
   A store whose attributes do not say complete was interrupted.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import threading
import warnings
from typing import Any

import numpy as np

from pipeline import __version__
from pipeline.errors import ConfigError, StoreError
from pipeline.plan import Plan

logger = logging.getLogger(__name__)
JOURNAL_DIR = ".pipeline-journal"
"""Inside the store while it is incomplete: one empty file per finished partition."""
_arrays: dict[tuple[str, str], Any] = {}
_arrays_lock = threading.Lock()


def _compressors(codec: str, level: int) -> Any:
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    if codec == "zstd":
        return [ZstdCodec(level=level)]
    if codec == "blosc":
        return [BloscCodec(cname="zstd", clevel=level, shuffle="bitshuffle")]
    if codec == "gzip":
        return [GzipCodec(level=level)]
    return None


def store_is_complete(path: str) -> bool:
    import zarr

    try:
        return bool(zarr.open_group(path, mode="r").attrs.get("pipeline_complete", False))
    except Exception:  # noqa: BLE001 - absent or unreadable: not complete
        return False


def create_store(plan: Plan, path: str, *, codec: str, level: int, config_hash: str,
                 settings: dict[str, Any], overwrite: bool) -> None:  # fmt: skip
    """Write the store template. Refuses an existing path unless ``overwrite``."""
    import dask.array as da
    import pandas as pd
    import rioxarray  # noqa: F401 - registers the .rio accessor
    import xarray as xr

    if os.path.exists(path):
        if not overwrite:
            raise ConfigError(
                "output.path",
                f"{path} already exists; pass --overwrite to replace it (or --resume to finish it)",
            )
        logger.info("removing existing store %s (--overwrite)", path)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    grid = plan.grid
    ch, cw = grid.chunks_yx
    shape = (len(plan.times), *grid.shape_yx)
    coords = {
        "time": pd.to_datetime(list(plan.times)).values.astype("datetime64[ns]"),
        "y": grid.y_coords(),
        "x": grid.x_coords(),
    }
    data_vars = {b.name: (("time", "y", "x"), da.zeros(shape, dtype=b.dtype, chunks=(1, ch, cw))) for b in plan.bands}
    ds = xr.Dataset(data_vars, coords=coords)
    ds = ds.rio.write_crs(grid.crs).rio.write_transform(grid.affine)
    ds.spatial_ref.attrs["GeoTransform"] = " ".join(str(v) for v in grid.affine.to_gdal())
    ds.attrs.update(
        pipeline_complete=False,
        pipeline_config_hash=config_hash,
        pipeline_settings=settings,
        pipeline_version=__version__,
        resampling=plan.resampling,
        fuse=plan.fuse,
    )
    encoding: dict[str, dict[str, Any]] = {
        b.name: {
            "chunks": (1, ch, cw),
            "_FillValue": (np.nan if math.isnan(b.nodata) else np.dtype(b.dtype).type(b.nodata)),
            "compressors": _compressors(codec, level),
        }
        for b in plan.bands
    }
    encoding["time"] = {"units": "seconds since 1970-01-01", "dtype": "int64"}
    try:
        ds.to_zarr(path, mode="w-", compute=False, zarr_format=3, consolidated=False, encoding=encoding)
        # CF links from each band to its CRS. Written by hand: xarray drops `grid_mapping` and does not
        # list `spatial_ref` under `coordinates`, and a default open_zarr would then see no CRS.
        import zarr

        group = zarr.open_group(path, mode="r+")
        for b in plan.bands:
            group[b.name].attrs.update(grid_mapping="spatial_ref", coordinates="spatial_ref")
    except OSError as e:
        raise StoreError(f"cannot create the output store {path}: {e}") from e


def _open_array(path: str, band: str) -> Any:
    import zarr

    key = (path, band)
    with _arrays_lock:
        arr = _arrays.get(key)
        if arr is None:
            arr = _arrays[key] = zarr.open_array(path, path=band, mode="r+")
    return arr


def write_chunk(path: str, band: str, t: int, window: tuple[int, int, int, int], data: np.ndarray) -> int:
    """Write one whole chunk; raise StoreError if the region is not chunk-aligned. Returns bytes."""
    arr = _open_array(path, band)
    r0, c0, h, w = window
    _, ch, cw = arr.chunks
    _, height, width = arr.shape
    aligned = r0 % ch == 0 and c0 % cw == 0 and (h == ch or r0 + h == height) and (w == cw or c0 + w == width)
    if not aligned or data.shape != (h, w):
        raise StoreError(f"{path}/{band}: write of rows {r0}:{r0 + h} cols {c0}:{c0 + w} is not one whole chunk")
    try:
        arr[t, r0 : r0 + h, c0 : c0 + w] = data
    except OSError as e:  # read-only or full destination
        raise StoreError(f"cannot write chunk ({band}, t={t}, rows {r0}, cols {c0}) to {path}: {e}") from e
    return int(data.nbytes)


def journal_done(path: str) -> set[str]:
    """Keys of the partitions a previous run finished."""
    try:
        return set(os.listdir(os.path.join(path, JOURNAL_DIR)))
    except FileNotFoundError:
        return set()


def journal_record(path: str, key: str) -> None:
    """Record partition ``key`` as finished (after all its chunks are written)."""
    folder = os.path.join(path, JOURNAL_DIR)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, key), "wb"):
            pass
    except OSError as e:
        raise StoreError(f"cannot record finished partition {key} in {folder}: {e}") from e


def store_config(path: str) -> dict[str, Any]:
    """The attributes a previous run left: config hash and settings, completion."""
    import zarr

    try:
        return dict(zarr.open_group(path, mode="r").attrs)
    except Exception as e:  # noqa: BLE001
        raise StoreError(f"{path} is not a store this tool can resume ({e}); use --overwrite") from e


def finalize_store(path: str) -> int:
    """Drop the journal, mark complete, consolidate metadata; return the store's size in bytes."""
    import zarr

    try:
        shutil.rmtree(os.path.join(path, JOURNAL_DIR), ignore_errors=True)
        group = zarr.open_group(path, mode="r+")
        group.attrs["pipeline_complete"] = True
        with warnings.catch_warnings():
            # Consolidated metadata is a zarr-python extension to v3; xarray reads it, which is the point.
            warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
            zarr.consolidate_metadata(path)
    except OSError as e:
        raise StoreError(f"cannot finalise the output store {path}: {e}") from e
    return store_size(path)


def store_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total
