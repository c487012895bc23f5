"""Fused per-block kernels for reprojected maps (line maps): one pass over each destination pixel, every
tap read and weighed in a loop, no array temporaries. Plain Python over NumPy arrays, compiled by numba
(``@njit(nogil=True, cache=True)``, :mod:`pipeline.resample.compiled`), which runs a whole block without
the GIL.

They compute what the NumPy kernels compute (:mod:`pipeline.resample.point`,
:mod:`pipeline.resample.footprint`) in the same operations and order, so nearest and average give the
same bits (tested against them): positions along each segment as ``x0 + dx * (t0 + j)`` in the NumPy
kernels' precision (float64 for nearest, float32 for the footprints), GDAL's floors and nudges, the same
float32 sums per tap row, the same rounding. The average's taps are made once per map and source shape
(:func:`average_taps`) and kept with the map, as the NumPy kernel keeps its own.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = np.float32(1e-10)
"""GDAL's nudge before flooring, as the float32 kernels add it."""
MIN_WEIGHT32 = np.float32(1e-6)
"""A pixel with no more weight than this is nodata (:func:`pipeline.resample.common._finish`)."""
HALF32 = np.float32(0.5)
INDEX_BOUND = float(1 << 30)


def row_positions_f4(row_ptr, col, count, t0, x0, dx, y0, dy, r, xs, ys):  # type: ignore[no-untyped-def]
    """Positions of lattice row ``r`` in float32, as ``LineMap.positions(np, r, r + 1, "f4")`` makes them."""
    for s in range(row_ptr[r], row_ptr[r + 1]):
        c0, n = col[s], count[s]
        t0s, dxs, dys = np.float32(t0[s]), np.float32(dx[s]), np.float32(dy[s])
        x0s, y0s = np.float32(x0[s]), np.float32(y0[s])
        for j in range(n):
            t = t0s + np.float32(j)
            xs[c0 + j] = dxs * t + x0s
            ys[c0 + j] = dys * t + y0s


def nearest_lines(src, fill, row_ptr, col, count, t0, x0, dx, y0, dy, out):  # type: ignore[no-untyped-def]
    """Nearest on a line map of pixel centres: the source pixel containing each centre (GDAL floors
    ``x + 1e-10``, added to each segment's start in float64); ``fill`` off the source."""
    h_s, w_s = src.shape
    for r in range(out.shape[0]):
        for s in range(row_ptr[r], row_ptr[r + 1]):
            c0, n = col[s], count[s]
            xs0, ys0 = x0[s] + 1e-10, y0[s] + 1e-10
            for j in range(n):
                t = t0[s] + j
                x = math.floor(dx[s] * t + xs0)
                y = math.floor(dy[s] * t + ys0)
                if 0 <= x < w_s and 0 <= y < h_s:
                    out[r, c0 + j] = src[int(y), int(x)]
                else:  # (NaN fails both tests too)
                    out[r, c0 + j] = fill


def _footprint_axis_f4(lo, hi, k_max, w_out):  # type: ignore[no-untyped-def]
    """One footprint's taps along one axis, as ``common._footprint_taps`` makes them in float32: writes
    ``k_max`` weights (0 past the footprint) and returns the first source index (bounded as there)."""
    f = np.float32(math.floor(lo + EPS32))
    u = hi - f
    a = lo - f
    w_out[0] = (u if u < np.float32(1.0) else np.float32(1.0)) - a
    for k in range(1, k_max):
        w = u - np.float32(k)
        w_out[k] = np.float32(0.0) if w < np.float32(0.0) else (np.float32(1.0) if w > np.float32(1.0) else w)
    return int(min(max(float(f), -INDEX_BOUND), INDEX_BOUND))


def _clip_f4(v, n):  # type: ignore[no-untyped-def]
    return np.float32(0.0) if v < np.float32(0.0) else (np.float32(n) if v > np.float32(n) else v)


def _ordered_corners(xa, ya, xb, yb, c):  # type: ignore[no-untyped-def]
    """A pixel's footprint (GDAL's box from its top-left to its bottom-right corner), each lo <= hi."""
    xl, xh, yl, yh = xa[c], xb[c + 1], ya[c], yb[c + 1]
    if xh < xl:
        xl, xh = xh, xl
    if yh < yl:
        yl, yh = yh, yl
    return xl, xh, yl, yh


def average_reach(row_ptr, col, count, t0, x0, dx, y0, dy, h, w):  # type: ignore[no-untyped-def]
    """The most taps any footprint of the map needs along y and along x (``common._footprint_taps``'s count)."""
    xa = np.empty(w + 1, np.float32)
    ya = np.empty(w + 1, np.float32)
    xb = np.empty(w + 1, np.float32)
    yb = np.empty(w + 1, np.float32)
    ky = kx = 1
    row_positions_f4(row_ptr, col, count, t0, x0, dx, y0, dy, 0, xa, ya)
    for r in range(h):
        row_positions_f4(row_ptr, col, count, t0, x0, dx, y0, dy, r + 1, xb, yb)
        for c in range(w):
            xl, xh, yl, yh = _ordered_corners(xa, ya, xb, yb, c)
            ky = max(ky, math.ceil(float(yh - np.float32(math.floor(yl + EPS32))) - 1e-10))
            kx = max(kx, math.ceil(float(xh - np.float32(math.floor(xl + EPS32))) - 1e-10))
        xa, xb = xb, xa
        ya, yb = yb, ya
    return ky, kx


def average_taps(row_ptr, col, count, t0, x0, dx, y0, dy, src_h, src_w, first, wy, wx, overlap):  # type: ignore[no-untyped-def]  # noqa: E501
    """Every pixel's footprint taps, once per map and source shape: ``first`` (h, w, 2) first row and column,
    ``wy`` (h, w, Ky) and ``wx`` (h, w, Kx) weights, ``overlap`` (h, w) the footprint's area inside the source
    (the weight sum of a source without nodata, as ``common._overlap`` gives it)."""
    h, w = overlap.shape
    xa = np.empty(w + 1, np.float32)
    ya = np.empty(w + 1, np.float32)
    xb = np.empty(w + 1, np.float32)
    yb = np.empty(w + 1, np.float32)
    row_positions_f4(row_ptr, col, count, t0, x0, dx, y0, dy, 0, xa, ya)
    for r in range(h):
        row_positions_f4(row_ptr, col, count, t0, x0, dx, y0, dy, r + 1, xb, yb)
        for c in range(w):
            xl, xh, yl, yh = _ordered_corners(xa, ya, xb, yb, c)
            first[r, c, 0] = _footprint_axis_f4(yl, yh, wy.shape[2], wy[r, c])
            first[r, c, 1] = _footprint_axis_f4(xl, xh, wx.shape[2], wx[r, c])
            overlap[r, c] = (_clip_f4(yh, src_h) - _clip_f4(yl, src_h)) * (_clip_f4(xh, src_w) - _clip_f4(xl, src_w))
        xa, xb = xb, xa
        ya, yb = yb, ya


def _valid_at(v, test_value, nodata, test_nan):  # type: ignore[no-untyped-def]
    """Whether a source value holds data (``common.valid_mask``): not ``nodata`` where ``test_value``, not
    NaN where ``test_nan``; compared in float64, ``nodata`` already in the source's float type."""
    x = np.float64(v)
    if test_nan and x != x:
        return False
    return not (test_value and x == nodata)


def weighted_sums_f4(
    src, test_value, nodata, test_nan, all_valid, first, wy, wx, overlap, fill, unsigned_convex, lo_hi, out
):  # type: ignore[no-untyped-def]  # noqa: E501
    """Σ w·v / Σ w·valid over per-pixel taps (``first``, ``wy``, ``wx``) in float32, in the NumPy kernels'
    order (along x for each tap row, times that row's weight, rows added in turn); taps off the source or
    without data (:func:`_valid_at`, tested here: no mask array is made) add nothing. Without nodata the
    weight sum is ``overlap``. Then GDAL's rounding (half up for integers; ``unsigned_convex``: a cast
    truncates a non-negative mean, no clip), ``fill`` where no weight. (A branch per tap, not a select:
    masks come in blobs, whose branches the core predicts; measured on blob masks the select was 1.2x
    slower, on pixels dropped at random 2.3x faster.)"""
    h_s, w_s = src.shape
    h, w = out.shape
    ny, nx = wy.shape[2], wx.shape[2]
    integer = lo_hi[1] > lo_hi[0]
    for r in range(h):
        for c in range(w):
            iy0, ix0 = first[r, c, 0], first[r, c, 1]
            inside = iy0 >= 0 and iy0 + ny <= h_s and ix0 >= 0 and ix0 + nx <= w_s
            acc = np.float32(0.0)
            wsum = np.float32(0.0)
            if inside and all_valid:
                for ky in range(ny):
                    row = np.float32(0.0)
                    for kx in range(nx):
                        row += wx[r, c, kx] * np.float32(src[iy0 + ky, ix0 + kx])
                    acc += row * wy[r, c, ky]
                wsum = overlap[r, c]
            elif inside:
                for ky in range(ny):
                    row = np.float32(0.0)
                    vrow = np.float32(0.0)
                    for kx in range(nx):
                        v = src[iy0 + ky, ix0 + kx]
                        if _valid_at(v, test_value, nodata, test_nan):
                            row += wx[r, c, kx] * np.float32(v)
                            vrow += wx[r, c, kx]
                    acc += row * wy[r, c, ky]
                    wsum += vrow * wy[r, c, ky]
            else:
                for ky in range(ny):
                    iy = iy0 + ky
                    row = np.float32(0.0)
                    vrow = np.float32(0.0)
                    if 0 <= iy < h_s:
                        for kx in range(nx):
                            ix = ix0 + kx
                            if 0 <= ix < w_s and (all_valid or _valid_at(src[iy, ix], test_value, nodata, test_nan)):
                                row += wx[r, c, kx] * np.float32(src[iy, ix])
                                vrow += wx[r, c, kx]
                    acc += row * wy[r, c, ky]
                    wsum += vrow * wy[r, c, ky]
                if all_valid:
                    wsum = overlap[r, c]
            if not wsum > MIN_WEIGHT32:
                out[r, c] = fill
                continue
            value = acc / wsum
            if integer:
                value = value + HALF32
                if not unsigned_convex:
                    value = np.float32(math.floor(value))
                    value = min(max(value, lo_hi[0]), lo_hi[1])
            out[r, c] = value
