"""Resampling: pure array kernels, one implementation for NumPy and CuPy (``xp``), and the seam
that feeds them.

* the kernels: :mod:`~pipeline.resample.methods` (the one table of methods), :mod:`~pipeline.resample.coords`
  (coordinate maps), :mod:`~pipeline.resample.point`, :mod:`~pipeline.resample.weighted`,
  :mod:`~pipeline.resample.footprint`, :mod:`~pipeline.resample.rank` (the families),
  :mod:`~pipeline.resample.common` (shared helpers), :mod:`~pipeline.resample.kernels` (dispatch),
  :mod:`~pipeline.resample.fuse` (tiles of one chunk into one array), :mod:`~pipeline.resample.parity`,
  :mod:`~pipeline.resample.compiled` (nearest, bilinear and average on reprojected maps in C, ``_fused.c``, built
  with the package and called through ctypes; the NumPy kernels are their reference).
  They import nothing geospatial (no rasterio, pyproj, dask, zarr or xarray): callers hand in arrays
  and plain numbers;
* :mod:`~pipeline.resample.warp` (one source window onto one chunk: the coordinate map from the
  geometry, the map cache, the kernels or GDAL's warper) and :mod:`~pipeline.resample.transform`
  (GDAL's approximate transformer, vectorised): the only modules here that import pyproj or rasterio.

The names below load on first use, so that :mod:`pipeline.config` reads the table of methods
(:mod:`~pipeline.resample.methods`, which imports nothing) without importing NumPy and the kernels.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.resample.common import valid_mask
    from pipeline.resample.fuse import FirstValid, fuse_arrays
    from pipeline.resample.kernels import KERNEL_METHODS, CoordMap, resample

_HOMES = {
    "valid_mask": "common",
    "FirstValid": "fuse",
    "fuse_arrays": "fuse",
    "KERNEL_METHODS": "kernels",
    "CoordMap": "kernels",
    "resample": "kernels",
}
__all__ = ["KERNEL_METHODS", "CoordMap", "FirstValid", "fuse_arrays", "resample", "valid_mask"]


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module on first use."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"pipeline.resample.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
