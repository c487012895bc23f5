"""Resampling kernels: one implementation for NumPy and CuPy, imitating GDAL's warper.

This module is the entry point (:func:`resample`) and the fast paths every family shares; the kernels
live by family: ``point.py`` (nearest, bilinear, cubic), ``footprint.py`` (average), ``rank.py`` (min,
max, median, mode), with ``common.py`` (constants, framing, taps) and ``weighted.py`` (weighted sums).

Every method reads a :class:`~pipeline.resample.coords.CoordMap` (where the
destination pixels fall in the source window) and the source pixels, and
nothing else. Three shapes of work, each picked by the map:

* separable maps (same CRS): 1-D taps per axis, applied along x then y;
* line maps (reprojection): per-pixel taps gathered from the source (from a
  zero-framed copy where they fall off its edges), in row blocks small enough
  to stay in cache on the CPU;
* aligned integer factors (10 m -> 20 m on shared edges): strided slices, no
  gathers at all; a factor of one is a copy; aligned upsampling (60 m -> 20 m)
  picks each destination pixel's one source pixel by rows and columns. For
  the footprint methods, destination pixels wholly off the source are cut
  away first (nodata), so a window reaching a pixel past a tile's edge still
  takes these paths.

Nodata follows GDAL: bilinear and cubic renormalise their weights over valid
neighbours; average, mode, min, max and median ignore nodata; a pixel with no
valid source is nodata. An average whose footprint weighs an infinite value is
NaN, as GDAL's warper gives it (its compensated sums turn infinity into NaN); a
source pixel a footprint touches with no weight changes nothing, infinite or not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.resample import compiled
from pipeline.resample.common import get_xp, nodata_fill
from pipeline.resample.coords import CoordMap, LineMap
from pipeline.resample.footprint import block_factor, resample_average
from pipeline.resample.methods import NAMES, POINT
from pipeline.resample.point import resample_bilinear, resample_cubic, resample_nearest
from pipeline.resample.rank import resample_max, resample_median, resample_min, resample_mode

__all__ = ["KERNEL_METHODS", "CoordMap", "LineMap", "block_factor", "resample"]


KERNEL_METHODS = NAMES


CENTRE_METHODS = POINT
"""Methods that sample at pixel centres; the others read each pixel's footprint (its corners)."""


RESAMPLERS: dict[str, Callable[[Any, float, CoordMap], Any]] = {
    "nearest": resample_nearest,
    "bilinear": resample_bilinear,
    "cubic": resample_cubic,
    "average": resample_average,
    "mode": resample_mode,
    "min": resample_min,
    "max": resample_max,
    "median": resample_median,
}


def resample(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    """Resample ``src`` onto the destination described by ``cmap`` with ``method``."""
    if method not in RESAMPLERS:
        raise ValueError(f"no array kernel for {method!r}; kernels: {', '.join(KERNEL_METHODS)}")
    if method == "average" and src.dtype.kind == "f":
        infinite = _infinite(src, nodata)
        if infinite is not None:
            return _average_with_infinities(src, nodata, cmap, infinite)
    return _resample(src, nodata, cmap, method)


def _infinite(src: Any, nodata: float) -> Any | None:
    """Where a float source holds an infinite value that is data (not its nodata value), or None where it
    holds none (one pass over the source)."""
    xp = get_xp(src)
    infinite = xp.isinf(src)
    if math.isinf(nodata):
        infinite &= src != nodata
    return infinite if bool(infinite.any()) else None


def _average_with_infinities(src: Any, nodata: float, cmap: CoordMap, infinite: Any) -> Any:
    """The average of a source holding infinite values: NaN wherever a footprint gives one of them weight
    (GDAL's result), elsewhere the average of the source as it is. The infinite pixels are replaced by 0
    for the sums, so that a tap of weight 0 on one adds 0 whichever kernel sums it (0 x inf is NaN); which
    pixels weigh one comes from the average of their indicator (above 0 exactly there: weights are never
    negative)."""
    xp = get_xp(src)
    out = _resample(xp.where(infinite, src.dtype.type(0), src), nodata, cmap, "average")
    weighs = _resample(infinite.astype(src.dtype), math.nan, cmap, "average") > 0
    out[weighs] = np.nan
    return out


def _resample(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    if method not in CENTRE_METHODS and cmap.separable:
        part = inside_part(cmap, src.shape)
        if part is not None:  # the pixels off the source are nodata; the rest may take a fast path
            xp = get_xp(src)
            (r0, r1), (c0, c1) = part
            out = xp.full(cmap.shape_yx, nodata_fill(nodata, src.dtype, xp), dtype=src.dtype)
            if r1 > r0 and c1 > c0:
                sub = replace(cmap, shape_yx=(r1 - r0, c1 - c0), xe=cmap.xe[c0 : c1 + 1], ye=cmap.ye[r0 : r1 + 1])
                out[r0:r1, c0:c1] = _footprint_method(src, nodata, sub, method)
            return out
        return _footprint_method(src, nodata, cmap, method)
    if not cmap.separable and method in compiled.METHODS:
        out = compiled.resample(src, nodata, cmap, method)
        if out is not None:
            return out
    return RESAMPLERS[method](src, nodata, cmap)


def _footprint_method(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    """A footprint method on a separable map: a gather of rows and columns where every footprint lies
    inside one source pixel on an aligned lattice (the same value whatever the method), else the kernel."""
    one = single_pixel(cmap, src.shape)
    if one is None:
        return RESAMPLERS[method](src, nodata, cmap)
    xp = get_xp(src)
    rows, cols = one
    out = src[rows] if isinstance(rows, slice) else xp.take(src, xp.asarray(rows), axis=0)
    out = out[:, cols].copy() if isinstance(cols, slice) else xp.take(out, xp.asarray(cols), axis=1)
    if src.dtype.kind == "f" and not math.isnan(nodata):  # NaN pixels are nodata too (valid_mask)
        out = xp.where(xp.isnan(out), nodata_fill(nodata, src.dtype, xp), out)
    return out


def _host(a: Any) -> Any:
    """A small array as float64 on the host (CuPy arrays copied back), for decisions made once per map."""
    return np.asarray(a.get() if not isinstance(a, np.ndarray) and hasattr(a, "get") else a, dtype="f8")


def _axis_lattice(e: Any) -> tuple[int, int] | None:
    """(n, k0) when the edges ``e`` are the lattice ``(k0 + k) / n`` of source pixel coordinates (whole
    numbers: 1 / n pixels each, n >= 1), checked on the host; else None."""
    e = _host(e)
    if e.shape[0] < 2:
        return None
    step = float(e[1] - e[0])
    if not step > 0:
        return None
    n = round(1.0 / step)
    if n < 1 or abs(step * n - 1.0) > 1e-9:
        return None
    k = e * n
    k0 = round(float(k[0]))
    if float(np.abs(k - (k0 + np.arange(e.shape[0]))).max()) > 1e-9 * max(1.0, abs(k0)):
        return None
    return n, k0


def single_pixel(cmap: CoordMap, src_shape: tuple[int, int]) -> tuple[Any, Any] | None:
    """(rows, columns) of the one source pixel under each destination pixel, when the map is an aligned
    lattice of 1 / n source pixels (same CRS; n = 1: identical grids, a copy; 60 m onto 20 m: n = 3)
    lying inside the source; slices where n = 1, else host index arrays. None otherwise.

    A grid property, not a chunk's: every chunk of an aligned grid is aligned, so chunks and the whole
    take the same path."""
    if not cmap.separable:
        return None
    picks: list[Any] = []
    for e, size in ((cmap.ye, src_shape[0]), (cmap.xe, src_shape[1])):
        found = _axis_lattice(e)
        if found is None:
            return None
        n, k0 = found
        m = e.shape[0] - 1
        first, last = k0 // n, (k0 + m - 1) // n
        if first < 0 or last >= size:
            return None
        if n == 1:
            picks.append(slice(first, first + m))
        else:
            picks.append(np.arange(k0, k0 + m, dtype=np.int64) // n)
    return picks[0], picks[1]


def inside_part(cmap: CoordMap, src_shape: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((r0, r1), (c0, c1)): the destination rows and columns whose footprints lie inside the source,
    when that is not all of them and every other pixel's footprint lies wholly outside it (none
    straddles an edge). Those are nodata for every footprint method, and the rest resample exactly as
    they would in the whole map (each pixel reads only its own footprint). Else None."""
    if not cmap.separable:
        return None
    spans = []
    for e, size in ((cmap.ye, src_shape[0]), (cmap.xe, src_shape[1])):
        e = _host(e)
        lo, hi = np.minimum(e[:-1], e[1:]), np.maximum(e[:-1], e[1:])
        tol = 1e-9 * max(1.0, float(size))
        inside = (lo >= -tol) & (hi <= size + tol)
        outside = (hi <= tol) | (lo >= size - tol)
        if not bool((inside | outside).all()):
            return None
        idx = np.flatnonzero(inside)
        if idx.size and idx[-1] - idx[0] + 1 != idx.size:
            return None
        spans.append((int(idx[0]), int(idx[-1]) + 1) if idx.size else (0, 0))
    (r0, r1), (c0, c1) = spans
    if (r0, r1, c0, c1) == (0, cmap.shape_yx[0], 0, cmap.shape_yx[1]):
        return None
    return spans[0], spans[1]
