"""Resampling engines behind one seam: warp one source window onto one chunk.

``kernels`` runs the project's array kernels (:mod:`pipeline.resample.kernels`,
NumPy or CuPy) on a coordinate map built here: exact and separable when the
source and destination share a CRS, else exact positions (pyproj) on a coarse
grid that the kernel interpolates. ``gdal`` runs GDAL's warper
(``rasterio.warp.reproject``) on the in-memory window. The task code calls
:func:`warp_window` and nothing else.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
from affine import Affine

from pipeline.grid import transform_points
from pipeline.plan import SourceWindow
from pipeline.resample.fuse import valid_mask
from pipeline.resample.kernels import CoordMap, block_factor, densify_grid, resample

# Our method names -> rasterio's Resampling members where they differ.
GDAL_NAMES = {"median": "med"}


@lru_cache(maxsize=256)
def _crs(text: str) -> Any:
    from rasterio.crs import CRS

    return CRS.from_user_input(text)


COARSE_STEP = 16
"""Destination pixels between exact positions of the cross-CRS coordinate map."""


@lru_cache(maxsize=1024)
def _same_crs(a: str, b: str) -> bool:
    return a == b or bool(_crs(a) == _crs(b))


def _separable(src: SourceWindow, dst_transform: tuple[float, ...], dst_crs: str) -> bool:
    t = src.transform
    return t[1] == 0 and t[3] == 0 and dst_transform[1] == 0 and dst_transform[3] == 0 and _same_crs(src.crs, dst_crs)


def compute_coord_map(
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    step: int = COARSE_STEP,
) -> CoordMap:
    """Destination pixel corners in the source window's pixel coordinates."""
    h, w = dst_shape_yx
    sa, sb, sc, sd, se, sf = src.transform[:6]
    da, db, dc, dd, de, df = dst_transform[:6]
    scale = _scale(src, dst_transform, dst_crs)
    if _separable(src, dst_transform, dst_crs):
        xe = (dc + da * np.arange(w + 1) - sc) / sa
        ye = (df + de * np.arange(h + 1) - sf) / se
        return CoordMap(shape_yx=(h, w), xe=xe, ye=ye, scale_xy=scale)
    rows = np.unique(np.append(np.arange(0, h + 1, step), h))
    cols = np.unique(np.append(np.arange(0, w + 1, step), w))
    cc, rr = np.meshgrid(cols.astype("f8"), rows.astype("f8"))
    x, y = transform_points(dst_crs, src.crs, dc + da * cc + db * rr, df + dd * cc + de * rr)
    inv = ~Affine(sa, sb, sc, sd, se, sf)
    px = inv.a * x + inv.b * y + inv.c
    py = inv.d * x + inv.e * y + inv.f
    X = densify_grid(px, rows, cols, (h + 1, w + 1), np)
    Y = densify_grid(py, rows, cols, (h + 1, w + 1), np)
    return CoordMap(shape_yx=(h, w), X=X, Y=Y, scale_xy=scale)


@lru_cache(maxsize=1024)
def _unit_metres(crs: str) -> float | None:
    c = _crs(crs)
    return float(c.linear_units_factor[1]) if c.is_projected else None


def _scale(src: SourceWindow, dst_transform: tuple[float, ...], dst_crs: str) -> tuple[float, float] | None:
    """Destination pixels per source pixel from the two grids' pixel sizes (projected CRSs), so it is the
    same for every chunk; None (estimate per map) for geographic CRSs."""
    fs, fd = _unit_metres(src.crs), _unit_metres(dst_crs)
    if fs is None or fd is None:
        return None
    t = src.transform
    return abs(t[0]) * fs / (abs(dst_transform[0]) * fd), abs(t[4]) * fs / (abs(dst_transform[4]) * fd)


def warp_window(
    src_array: np.ndarray,
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    dst_nodata: float,
    method: str,
    engine: str = "gdal",
    device: str = "cpu",
) -> np.ndarray:
    """Resample ``src_array`` (the pixels of ``src.window``) onto a destination chunk.

    ``device="gpu"``: the array kernels on CuPy (decoded pixels in, warped pixels back).
    """
    if device == "gpu":
        return _warp_on_gpu(src_array, src, dst_shape_yx, dst_transform, dst_crs, dst_nodata, method)
    cmap = None
    if engine == "auto" and method in ("nearest", "average") and _separable(src, dst_transform, dst_crs):
        # The measured CPU wins (bench/kernels.py): same-CRS nearest (outer indexing) and aligned
        # integer-factor average (a reshape-mean, or a copy). GDAL's warper is faster everywhere else.
        cmap = compute_coord_map(src, dst_shape_yx, dst_transform, dst_crs)
        if method == "average" and block_factor(cmap, src_array.shape) is None:
            cmap = None
    elif engine == "kernels":
        cmap = compute_coord_map(src, dst_shape_yx, dst_transform, dst_crs)
    if cmap is not None:
        return _resample_kernels(src_array, src, cmap, dst_nodata, method)
    return _warp_gdal(src_array, src, dst_shape_yx, dst_transform, dst_crs, dst_nodata, method)


def _resample_kernels(array: Any, src: SourceWindow, cmap: CoordMap, dst_nodata: float, method: str) -> np.ndarray:
    """The array kernels on ``array`` (NumPy or CuPy), back on the host with the chunk's nodata."""
    nodata = dst_nodata if np.isnan(src.nodata) else src.nodata
    out = resample(array, nodata, cmap, method)
    out = out.get() if not isinstance(out, np.ndarray) else out
    if nodata != dst_nodata and not (np.isnan(nodata) and np.isnan(dst_nodata)):
        out = np.where(valid_mask(out, nodata), out, np.asarray(dst_nodata).astype(out.dtype))
    return out


def _warp_on_gpu(
    src_array: np.ndarray,
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    dst_nodata: float,
    method: str,
) -> np.ndarray:
    """The same kernels with CuPy as ``xp``: the map is built on the host, then moved with the pixels."""
    import cupy

    host = compute_coord_map(src, dst_shape_yx, dst_transform, dst_crs)
    arrays = {k: cupy.asarray(v) for k in ("xe", "ye", "X", "Y") if (v := getattr(host, k)) is not None}
    return _resample_kernels(cupy.asarray(src_array), src, replace(host, **arrays), dst_nodata, method)


def _warp_gdal(
    src_array: np.ndarray,
    src: SourceWindow,
    dst_shape_yx: tuple[int, int],
    dst_transform: tuple[float, ...],
    dst_crs: str,
    dst_nodata: float,
    method: str,
) -> np.ndarray:
    """GDAL's warper on the in-memory window."""
    from rasterio.enums import Resampling
    from rasterio.warp import reproject

    dst = np.full(dst_shape_yx, dst_nodata, dtype=src_array.dtype)
    src_nodata = None if np.isnan(src.nodata) and src_array.dtype.kind != "f" else src.nodata
    reproject(
        source=src_array,
        destination=dst,
        src_transform=Affine(*src.transform),
        src_crs=_crs(src.crs),
        src_nodata=src_nodata,
        dst_transform=Affine(*dst_transform),
        dst_crs=_crs(dst_crs),
        dst_nodata=dst_nodata,
        resampling=Resampling[GDAL_NAMES.get(method, method)],
        num_threads=1,
    )
    return dst
