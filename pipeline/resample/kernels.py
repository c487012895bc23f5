"""Resampling kernels: one implementation for NumPy and CuPy, imitating GDAL's warper.

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
valid source is nodata.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from pipeline.resample.coords import CoordMap, LineMap
from pipeline.resample.fuse import get_xp, nodata_fill, valid_mask
from pipeline.resample.methods import NAMES, POINT

__all__ = ["KERNEL_METHODS", "CoordMap", "LineMap", "block_factor", "resample"]

KERNEL_METHODS = NAMES
CENTRE_METHODS = POINT
"""Methods that sample at pixel centres; the others read each pixel's footprint (its corners)."""
EPS = 1e-10
"""GDAL's nudge before flooring a source coordinate."""
DOWNSAMPLING = 0.95
"""Below this scale (destination pixels per source pixel) GDAL stretches the kernel over 1/scale pixels."""
BLOCK_PX = 1 << 16
"""Destination pixels per row block on the CPU: the intermediates stay in cache."""
WHOLE_FRAME_BYTES = 8 << 20
"""Sources up to this size are zero-framed whole, once, for the edge blocks; larger ones by bands of rows."""
BAND_ROWS = 4
"""A large source's framed band of rows holds this many times the rows one block reaches."""
SPARSE_TAP = 0.5
"""A footprint's last tap is added only where it weighs anything when that is under this share of pixels."""
INDEX_BOUND = float(1 << 30)
"""First tap indices are bounded by this before they become int32 (whole sources are far smaller)."""

Taps = tuple[Any, list[Any]]
"""(first source index, [weight of tap k]): tap ``k`` reads index ``first + k``."""
ONE = 1.0
"""A tap's weight where it is exactly 1 for every pixel: the tap adds its pixels, multiplying by
nothing (``1 * v`` is ``v``, so the sums are the same bits)."""
Footprints = tuple[Any, Any, Any, Any]
"""(ylo, yhi, xlo, xhi) of a row block's pixels in source pixels, each ``lo <= hi``."""


# ---------------------------------------------------------------------------------------------- helpers
def _work_dtype(dtype: Any, xp: Any) -> str:
    """float32 for 8/16-bit and float32 pixels (exact for their sums here), float64 otherwise."""
    d = xp.dtype(dtype)
    return "f4" if (d.kind in "iu" and d.itemsize <= 2) or d == xp.dtype("f4") else "f8"


def _row_blocks(h: int, w: int, xp: Any) -> Iterator[tuple[int, int]]:
    step = h if xp.__name__ != "numpy" else max(1, BLOCK_PX // max(w, 1))
    for r0 in range(0, h, step):
        yield r0, min(h, r0 + step)


def _finish(acc: Any, wsum: Any, nodata: float, dtype: Any, xp: Any, convex: bool = False) -> Any:
    """acc / wsum in ``dtype`` (integers rounded half up, as GDAL), nodata where no weight; ``acc`` may be
    overwritten. Where every pixel has weight (the usual case) no masks are formed at all.

    ``convex`` (weights never negative: a mean of valid pixels, within their range): for unsigned
    types up to 32 bits, the value plus a half is already between 0.5 and the type's maximum plus a
    half, so the cast's truncation is the floor and no clip is needed; and where nodata is 0, a pixel
    without weight (acc 0) casts to it by itself."""
    ok = wsum > 1e-6
    everywhere = bool(ok.all())
    if not everywhere:
        value = acc / xp.where(ok, wsum, 1.0)
    elif acc.dtype == xp.result_type(acc, wsum):
        value = xp.divide(acc, wsum, out=acc)
    else:
        value = acc / wsum
    kind = xp.dtype(dtype).kind
    if kind in "iu":
        value += 0.5  # GDAL rounds half up
        if convex and kind == "u" and xp.dtype(dtype).itemsize <= 4:
            if everywhere or nodata_fill(nodata, dtype, xp) == 0:  # (acc is 0 where there is no weight)
                return value.astype(dtype)
        else:
            info = xp.iinfo(dtype)
            xp.floor(value, out=value)
            xp.clip(value, info.min, info.max, out=value)
    if everywhere:
        return value.astype(dtype)
    return xp.where(ok, value, nodata_fill(nodata, dtype, xp)).astype(dtype)


def _pad(a: Any, p: int, value: Any, xp: Any, dtype: Any = None, out: Any = None) -> Any:
    """``a`` in a frame of ``p`` pixels of ``value`` (cast to ``dtype`` on the way: one pass), written
    into ``out`` when given (its shape must be the framed one)."""
    if out is None:
        out = xp.empty((a.shape[0] + 2 * p, a.shape[1] + 2 * p), dtype=dtype or a.dtype)
    _set_frame(out, p, value)
    out[p : p + a.shape[0], p : p + a.shape[1]] = a
    return out


def _set_frame(out: Any, p: int, value: Any) -> None:
    """The outer ``p`` (>= 1) rows and columns of ``out`` set to ``value``."""
    out[:p], out[-p:], out[:, :p], out[:, -p:] = value, value, value, value


def _inside(xc: Any, yc: Any, src_shape: tuple[int, int]) -> Any:
    h, w = src_shape
    return (xc >= 0) & (xc < w) & (yc >= 0) & (yc < h)


# ------------------------------------------------------------------------------------------------- taps
def _tent_weight(t: Any, xp: Any) -> Any:
    return xp.maximum(0.0, 1.0 - xp.abs(t))


def _cubic_weight(t: Any, xp: Any) -> Any:
    """Keys' cubic convolution kernel with a = -0.5 (GDAL's cubic)."""
    t = xp.abs(t)
    near = (1.5 * t - 2.5) * t * t + 1.0
    far = ((-0.5 * t + 2.5) * t - 4.0) * t + 2.0
    return xp.where(t < 1.0, near, xp.where(t < 2.0, far, 0.0))


KERNELS: dict[str, tuple[float, int, Callable[[Any, Any], Any]]] = {
    "bilinear": (1.0, 1, _tent_weight),
    "cubic": (2.0, 3, _cubic_weight),
}
"""method -> (radius in destination pixels, polynomial degree between knots (1 or more), weight function)."""


@lru_cache(maxsize=64)
def _tap_polynomials(method: str, stretch: int) -> tuple[tuple[float, ...], ...]:
    """Per tap, the weight as a polynomial in the sample's fractional position ``f`` (highest power first).

    With a whole-number stretch the kernel's knots fall on whole source pixels, so between two pixel
    centres every tap's weight is one polynomial: fitted here once from the kernel itself, then
    evaluated by Horner's rule (a few multiply-adds per tap instead of the piecewise kernel)."""
    radius, degree, weight = KERNELS[method]
    r = int(round(radius * stretch))
    f = np.linspace(0.1, 0.9, degree + 1)
    return tuple(tuple(np.polyfit(f, weight(((k - r + 1) - f) / stretch, np), degree)) for k in range(2 * r))


def _kernel_taps(c: Any, scale: float, method: str, xp: Any, dtype: str = "f8") -> Taps:
    """Taps of ``method``'s kernel centred on positions ``c``, GDAL's rule: when downsampling (scale
    below 0.95) the kernel stretches over radius / scale source pixels."""
    radius, _, weight = KERNELS[method]
    stretch = 1 if scale >= DOWNSAMPLING else _integer_stretch(scale)
    if stretch is not None:
        s = c - 0.5
        first = xp.floor(s)
        f = (s - first).astype(dtype, copy=False)
        shift = int(round(radius * stretch)) - 1
        first = first.astype(xp.int64)
        if shift:
            first -= shift
        wts = []
        for coeffs in _tap_polynomials(method, stretch):
            w = xp.multiply(f, coeffs[0], dtype=dtype)  # Horner's first step, c0 * f, without a full array of c0
            w += coeffs[1]
            for c_ in coeffs[2:]:
                w *= f
                w += c_
            wts.append(w)
        return first, wts
    r = radius / scale
    first = xp.floor(c - 0.5 - r).astype(xp.int64) + 1
    return first, [weight((first + k + 0.5 - c) * scale, xp) for k in range(int(math.ceil(2 * r)) + 1)]


def _integer_stretch(scale: float) -> int | None:
    """1/scale when it is a whole number (the stretched kernel's knots then sit on pixel centres)."""
    r = 1.0 / scale
    return round(r) if abs(r - round(r)) < 1e-9 and round(r) >= 1 else None


def _ordered(lo: Any, hi: Any, xp: Any) -> tuple[Any, Any]:
    """``lo``, ``hi`` with ``lo <= hi`` everywhere: the arrays themselves when they already are (one
    reduction; north-up onto north-up always is), else their minimum and maximum (two slow passes)."""
    if not lo.size or float((hi - lo).min()) >= 0:
        return lo, hi
    return xp.minimum(lo, hi), xp.maximum(lo, hi)


def _footprint_taps(lo: Any, hi: Any, xp: Any, ordered: bool = False) -> Taps:
    """Source pixels under [lo, hi) and the length of each overlap (GDAL's average weights); a tap every
    footprint covers whole (downsampling by 2 or more) weighs :data:`ONE`, a number, not an array.

    With ``u`` the footprint's end measured from its first pixel's left edge, tap ``k >= 1`` overlaps
    ``clip(u - k, 0, 1)`` and the first ``min(u, 1)`` less the part left of the footprint. Taps past
    the source's edges read the zero padding of the gathers, so no clipping here. (Clips with array-free
    bounds: NumPy's minimum against a scalar is several times slower.) First indices are int32 (a
    quarter of the cost of converting to int64), bounded first: positions far off the source stay
    off it. ``ordered``: the caller has ordered ``lo`` and ``hi`` (:func:`_ordered`).
    """
    if not ordered:
        lo, hi = _ordered(lo, hi, xp)
    first = lo + EPS
    xp.floor(first, out=first)
    u = hi - first
    a = lo - first
    u_min = float(u.min()) if u.size else 0.0
    if u_min >= 1.0:  # every footprint reaches past its first pixel (scale <= 1): min(u, 1) is 1
        w0 = xp.subtract(1.0, a, out=a)
    else:
        w0 = xp.clip(u, -xp.inf, 1.0)
        w0 -= a
    k_max = max(1, int(math.ceil(float(u.max()) - EPS))) if u.size else 1
    wts: list[Any] = [w0]
    for k in range(1, k_max):
        if u_min >= k + 1:  # every footprint covers its pixel k whole: a weight of exactly 1, no array
            wts.append(ONE)
            continue
        w = u - k
        xp.clip(w, 0.0, 1.0, out=w)
        wts.append(w)
    xp.clip(first, -INDEX_BOUND, INDEX_BOUND, out=first)
    return first.astype(xp.int32), wts


def _overlap(lo: Any, hi: Any, n: int, xp: Any) -> Any:
    """Length of [lo, hi) inside [0, n) (``lo <= hi``): the sum of a footprint's average weights over the
    pixels of a source of ``n`` pixels that are all valid, without gathering them."""
    inside = xp.clip(hi, 0.0, float(n))
    inside -= xp.clip(lo, 0.0, float(n))
    return inside


# ---------------------------------------------------------------------------------------------- nearest
def resample_nearest(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """The source pixel containing each destination centre."""
    xp = get_xp(src)
    h_s, w_s = src.shape
    h, w = cmap.shape_yx
    fill = nodata_fill(nodata, src.dtype, xp)
    if cmap.separable:  # outer indexing: one gather per pixel, no per-pixel coordinates
        xc, yc = cmap.centre_positions(xp)
        ix, iy = xp.floor(xc[0] + EPS).astype(xp.int64), xp.floor(yc[:, 0] + EPS).astype(xp.int64)
        out = src[xp.clip(iy, 0, h_s - 1)[:, None], xp.clip(ix, 0, w_s - 1)[None, :]]
        return xp.where(((iy >= 0) & (iy < h_s))[:, None] & ((ix >= 0) & (ix < w_s))[None, :], out, fill)
    flat, framed = src.ravel(), None
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        x, y = cmap.centre_positions(xp, r0, r1)
        x += EPS
        y += EPS
        xp.floor(x, out=x)
        xp.floor(y, out=y)
        block = out[r0:r1]
        xlo, xhi, ylo, yhi = float(x.min()), float(x.max()), float(y.min()), float(y.max())
        if xlo >= 0 and xhi < w_s and ylo >= 0 and yhi < h_s:
            y *= w_s  # the whole block lands inside the source: a plain gather
            y += x
            _take_into(flat, y.astype(xp.int64), block, xp)
            continue
        if src.nbytes > WHOLE_FRAME_BYTES:  # no frame of a large source (a copy of it): a mask instead
            if min(xlo, ylo) < -INDEX_BOUND or max(xhi, yhi) > INDEX_BOUND:
                xp.clip(x, -1, w_s, out=x)  # (far off the source: keep the integers in range)
                xp.clip(y, -1, h_s, out=y)
            ix, iy = x.astype(xp.int64), y.astype(xp.int64)
            off = ix.view(xp.uint64) >= w_s  # (negative integers are huge unsigned ones)
            off |= iy.view(xp.uint64) >= h_s
            iy *= w_s
            iy += ix
            _take_into(flat, iy, block, xp)  # (off-source pixels read some pixel, then get the fill)
            xp.copyto(block, xp.asarray(fill, dtype=block.dtype), where=off)
            continue
        if framed is None:  # a one-pixel frame of nodata: positions off the source clip onto it
            framed = _pad(src, 1, fill, xp).ravel()
        xp.clip(x, -1, w_s, out=x)
        xp.clip(y, -1, h_s, out=y)
        y += 1
        y *= w_s + 2
        y += x
        y += 1
        _take_into(framed, y.astype(xp.int64), block, xp)
    return out


# ------------------------------------------------------------------------------------ weighted methods
def _separable_mean(src: Any, nodata: float, y_taps: Taps, x_taps: Taps, xp: Any) -> Any:
    """Σ w·v / Σ w over 1-D taps: along x, then along y; same CRS only. In blocks of destination rows,
    each reading only the source rows its taps need, so the intermediate stays in cache; pixels are
    gathered in their own dtype and weighted in float."""
    h_s, w_s = src.shape
    h, w = y_taps[0].shape[0], x_taps[0].shape[0]
    ft = _work_dtype(src.dtype, xp)
    valid = valid_mask(src, nodata, xp)
    all_valid = bool(valid.all())
    data = src if all_valid else xp.where(valid, src, 0)
    vf = None if all_valid else valid.astype(ft)
    # the x taps once: clipped columns, weights zeroed off the source
    x_cols = [xp.clip(x_taps[0] + k, 0, w_s - 1) for k in range(len(x_taps[1]))]
    x_wts = [xp.where((x_taps[0] + k >= 0) & (x_taps[0] + k < w_s), wk, 0.0).astype(ft)[None, :]
             for k, wk in enumerate(x_taps[1])]  # fmt: skip
    y_wts = [xp.where((y_taps[0] + k >= 0) & (y_taps[0] + k < h_s), wk, 0.0).astype(ft)
             for k, wk in enumerate(y_taps[1])]  # fmt: skip
    wx_sum = sum(x_wts[1:], x_wts[0].copy())
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        first = y_taps[0][r0:r1]
        s0 = max(0, min(h_s - 1, int(first.min())))
        s1 = max(s0 + 1, min(h_s, int(first.max()) + len(y_wts)))
        rows = [xp.clip(first + k, s0, s1 - 1) - s0 for k in range(len(y_wts))]
        block_wy = [wk[r0:r1, None] for wk in y_wts]
        acc = _two_pass(data[s0:s1], x_cols, x_wts, rows, block_wy, ft, xp)
        if vf is None:
            wsum = sum(block_wy[1:], block_wy[0].copy()) * wx_sum
        else:
            wsum = _two_pass(vf[s0:s1], x_cols, x_wts, rows, block_wy, ft, xp)
        out[r0:r1] = _finish(acc, wsum, nodata, src.dtype, xp)
    return out


def _two_pass(a: Any, x_cols: list[Any], x_wts: list[Any], rows: list[Any], y_wts: list[Any], ft: Any, xp: Any) -> Any:
    """Σ_k wy_k · (Σ_j wx_j · a[:, cols_j])[rows_k]: the separable weighted sum of one row block."""
    t = xp.zeros((a.shape[0], x_cols[0].shape[0]), dtype=ft)
    for cols, wk in zip(x_cols, x_wts, strict=True):
        t += xp.take(a, cols, axis=1) * wk
    acc = xp.zeros((rows[0].shape[0], t.shape[1]), dtype=ft)
    for r, wk in zip(rows, y_wts, strict=True):
        acc += xp.take(t, r, axis=0) * wk
    return acc


def _gather_mean(data: Any, valid: Any, pad: int, y_taps: Taps, x_taps: Taps, ft: Any, xp: Any,
                 spans: tuple[tuple[int, int], tuple[int, int]], overlaps: tuple[Any, Any] | None = None,
                 ) -> tuple[Any, Any]:  # fmt: skip
    """Σ w·v and Σ w·valid (in ``ft``) over per-pixel taps, gathered from ``data`` padded by ``pad`` zeros.

    ``valid``: the padded validity as a 2-D array, or as (rows, columns) 1-D profiles when it is
    separable (no nodata in the window): the weight sum then costs no gathers at all. ``spans``: the
    least and greatest first index of the y and x taps. ``overlaps``: with a window that is all valid,
    each footprint's length inside the source along y and x (average): Σ w·valid is their product.
    """
    hp, wp = data.shape
    (fy, wy), (fx, wx) = y_taps, x_taps
    iy = xp.clip(fy, -len(wy), hp - 2 * pad) + pad if pad else fy
    ix = xp.clip(fx, -len(wx), wp - 2 * pad) + pad if pad else fx
    if hp * wp >= 1 << 31:  # flat indices past int32
        iy, ix = iy.astype(xp.int64), ix.astype(xp.int64)
    base = iy * wp
    base += ix
    base = base.astype(xp.int64, copy=False)  # take's index type: converted once, not per gather
    separable = isinstance(valid, tuple)
    sources = [data.ravel()] if separable else [data.ravel(), valid.ravel()]
    # A footprint a little over n pixels long reaches an (n+1)-th pixel only for some destination
    # pixels: that last tap is added for those pixels alone, not gathered for all of them. The sums are
    # formed in the same order as with every tap gathered (a tap of weight 0 adds exactly 0), so the
    # result does not depend on which pixels share a block.
    sparse_y, sparse_x = _sparse_tap(wy, xp), _sparse_tap(wx, xp)
    dense_y = wy[:-1] if sparse_y is not None else wy
    dense_x = wx[:-1] if sparse_x is not None else wx
    if sparse_x is not None:
        base_x, wx_last = base.ravel()[sparse_x] + len(wx) - 1, wx[-1].ravel()[sparse_x]
    # Gathers into reused buffers and products written in place: no temporaries per tap.
    picked = [xp.empty(base.shape, dtype=flat.dtype) for flat in sources]
    term = xp.empty(base.shape, dtype=ft)
    sums: list[Any] = [None for _ in sources]
    for ky, wyk in enumerate(dense_y):
        for i, flat in enumerate(sources):
            row: Any = None
            for kx, wxk in enumerate(dense_x):
                _take_into(flat[ky * wp + kx :], base, picked[i], xp)  # an offset view, not an index sum
                if row is None:
                    row = picked[i].astype(ft) if wxk is ONE else xp.multiply(wxk, picked[i], dtype=ft)
                elif wxk is ONE:
                    row += picked[i]
                else:
                    xp.multiply(wxk, picked[i], out=term, dtype=ft)
                    row += term
            if sparse_x is not None:
                row.ravel()[sparse_x] += wx_last * xp.take(flat[ky * wp :], base_x)
            if wyk is not ONE:
                row *= wyk
            if sums[i] is None:
                sums[i] = row
            else:
                sums[i] += row
    if sparse_y is not None:
        b = base.ravel()[sparse_y] + (len(wy) - 1) * wp
        w_cols = [wk if wk is ONE else wk.ravel()[sparse_y] for wk in wx]
        for total, flat in zip(sums, sources, strict=True):
            row = xp.zeros(b.shape, dtype=ft)
            for kx, wxk in enumerate(w_cols):
                row += xp.multiply(wxk, xp.take(flat[kx:], b), dtype=ft)
            total.ravel()[sparse_y] += wy[-1].ravel()[sparse_y] * row
    acc = sums[0]
    wsum = None if separable else sums[1]
    if separable and overlaps is not None:
        wsum = overlaps[0] * overlaps[1]
    elif separable:
        vy, vx = valid
        (ylo, yhi), (xlo, xhi) = spans  # of the clipped indices: clipping is monotone
        ys = (min(max(ylo, -len(wy)), hp - 2 * pad), min(max(yhi, -len(wy)), hp - 2 * pad)) if pad else spans[0]
        xs = (min(max(xlo, -len(wx)), wp - 2 * pad), min(max(xhi, -len(wx)), wp - 2 * pad)) if pad else spans[1]
        sy, sx = _profile_sum(vy, iy, wy, pad, ys, xp), _profile_sum(vx, ix, wx, pad, xs, xp)
        wsum = sy * sx
    return acc, wsum


def _take_into(flat: Any, index: Any, out: Any, xp: Any) -> None:
    """``out[:] = flat[index]``. NumPy's take buffers ``out`` in its default bounds-checked mode; with
    ``clip`` it writes straight into it: 3.2 -> 1.3 ns per pixel (u16 gathers of a 64K-pixel block).
    CuPy's take has no mode. An index out of range reads some pixel of ``flat`` (NumPy clips it, CuPy
    wraps it) and never fails: callers that pass one overwrite what it read."""
    if xp is np:
        np.take(flat, index, out=out, mode="clip")
    else:
        xp.take(flat, index, out=out)


def _sparse_tap(wts: list[Any], xp: Any) -> Any:
    """Flat indices of the pixels whose last tap weighs anything, when they are few (else None)."""
    if len(wts) < 2 or wts[-1] is ONE:
        return None
    reaches = wts[-1] != 0
    if int(xp.count_nonzero(reaches)) > SPARSE_TAP * reaches.size:
        return None
    return xp.flatnonzero(reaches)


def _profile_sum(profile: Any, first: Any, wts: list[Any], pad: int, span: tuple[int, int], xp: Any) -> Any:
    """Σ_k w_k · profile[first + k], in that order. A tap whose pixels of the block all read one value
    of the profile (all of it, for a window without nodata; its inside, away from the edges a
    prefilter lowered) multiplies by that value without a gather: the same products, so blocks equal
    the whole. ``span``: the least and greatest of ``first`` (unpadded)."""
    n = len(profile) - 2 * pad
    lo, hi = span
    inner = profile[pad : pad + n]
    total: Any = None
    for k, wk in enumerate(wts):
        c = _constant_over(inner, lo + k, hi + k)
        if c is not None:
            term = wk if c == 1.0 else wk * c  # w * 1 is w: no pass at all
        else:
            term = xp.empty(first.shape, dtype=profile.dtype)
            _take_into(profile[k:], first, term, xp)
            term *= wk  # v * w: the same product as w * v
        if total is None:
            total = term.copy() if term is wk else term
        else:
            total += term
    return total


def _constant_over(a: Any, i: int, j: int) -> float | None:
    """The one value of ``a[i : j + 1]`` if all its elements equal it and the range is inside ``a``."""
    if i < 0 or j >= len(a) or j < i:
        return None
    part = a[i : j + 1]
    c = float(part[0])
    return c if bool((part == c).all()) else None


def _span(taps: Taps) -> tuple[int, int]:
    """The least and greatest first index of these taps."""
    return (int(taps[0].min()), int(taps[0].max())) if taps[0].size else (0, 0)


class _Band(NamedTuple):
    """Source rows ``r0 : r1`` of the pixels and of their validity, in a frame of ``pad`` zeros."""

    r0: int
    r1: int
    pad: int
    framed: Any
    vframed: Any


class _LazyRows:
    """A large source's pixels (nodata zeroed) or validity, prefiltered (:func:`_tent_prefilter`, along
    x then y) a band of rows at a time, into the band's buffer: no float copy of the whole source.
    :meth:`make` is asked for ``reach`` rows more on each side than the band keeps, so every kept row
    is summed with all its neighbours, in the order the whole-source prefilter sums them: same bits."""

    def __init__(self, src: Any, valid: Any, stretch_xy: tuple[int, int], xp: Any) -> None:
        self.src, self.valid, self.xp = src, valid, xp
        self.stretch_xy = stretch_xy
        self.shape: tuple[int, int] = src.shape
        self.reach = stretch_xy[1] - 1
        """Rows the y prefilter reads on each side of a row."""

    def make(self, out: Any, a0: int, a1: int, validity: bool) -> None:
        """Rows ``a0 : a1`` into ``out`` (``validity``: of the validity), prefiltered; the first and last
        ``reach`` rows miss neighbours unless they are the source's own edges."""
        if validity:
            out[...] = self.valid[a0:a1]
        elif self.valid is None:
            out[...] = self.src[a0:a1]
        else:
            out[...] = self.xp.where(self.valid[a0:a1], self.src[a0:a1], 0)
        sx, sy = self.stretch_xy
        if sx > 1:
            _tent_prefilter(out, sx, 1, self.xp)
        if sy > 1:
            _tent_prefilter(out, sy, 0, self.xp)


class _Weighted:
    """Pixels with nodata zeroed and their validity, as the per-pixel gathers read them.

    ``valid``: a 2-D float array, or (rows, columns) 1-D profiles when validity is separable (no
    nodata in the window). A block whose taps all land inside reads these directly; a block at the
    edges reads a zero-framed copy (taps off the source weigh nothing): of the whole source, made once,
    when it is small (the pipeline's windows); else a band of rows from the first its taps reach, a few
    blocks deep, shared by the blocks below while they stay in it, written into the same buffers each
    time. A 4096² output's source framed whole is 271 MB of fresh pages, which took this machine seconds
    to fault in after another library had churned memory; framing each block's rows afresh copied
    overlapping rows ~9 times over. A source given as ``lazy`` rows (a large source's bilinear
    prefilter, :class:`_LazyRows`) is always read through such bands, each made when it is framed.
    """

    def __init__(self, data: Any, valid: Any, ft: Any, xp: Any, all_valid: bool = False,
                 lazy: _LazyRows | None = None) -> None:  # fmt: skip
        self.data, self.valid, self.ft, self.xp = data, valid, ft, xp
        self.all_valid = all_valid
        """Every pixel is valid (``valid`` is profiles of ones)."""
        self.lazy = lazy
        """Rows made on demand instead of ``data`` (and of ``valid`` where it is 2-D): always framed by bands."""
        self.shape: tuple[int, int] = lazy.shape if lazy is not None else data.shape
        self.whole: dict[int, tuple[Any, Any]] = {}
        """The whole source framed, by frame width (small sources only)."""
        self.band: _Band | None = None
        """Large sources: the rows framed last."""
        self.buffers: dict[str, Any] = {}
        """Large sources: the arrays the framed rows are written into, reused from block to block."""

    def sums(self, y_taps: Taps, x_taps: Taps, footprints: Footprints | None = None) -> tuple[Any, Any]:
        """Σ w·v and Σ w·valid over the taps. ``footprints`` (average): where every pixel is valid, the
        weight sums are their lengths inside the source (:func:`_overlap`), not gathered."""
        xp, (h, w) = self.xp, self.shape
        overlaps = None
        if footprints is not None and self.all_valid:
            fy0, fy1, fx0, fx1 = footprints
            overlaps = _overlap(fy0, fy1, h, xp), _overlap(fx0, fx1, w, xp)
        spans = (_span(y_taps), _span(x_taps))
        (ylo, yhi), (xlo, xhi) = spans
        ny = len(y_taps[1])
        inside = ylo >= 0 and yhi + ny <= h and xlo >= 0 and xhi + len(x_taps[1]) <= w
        if inside and self.lazy is None:  # all taps inside
            return _gather_mean(self.data, self.valid, 0, y_taps, x_taps, self.ft, xp, spans, overlaps)
        pad = max(ny, len(x_taps[1])) + 1
        if self.lazy is not None:
            pad = max(pad, self.lazy.reach)  # (the frame holds the neighbour rows a band's prefilter reads)
        if self.lazy is None and self.data.nbytes <= WHOLE_FRAME_BYTES:
            r0 = 0
            if pad not in self.whole:
                self.whole[pad] = self._framed(0, h, pad, reuse=False)
            framed, vframed = self.whole[pad]
        else:  # the rows the taps reach, framed with the next blocks' rows below them (blocks go down)
            r0, r1 = min(max(ylo, 0), h), min(max(yhi + ny, 0), h)
            band = self.band
            if band is None or band.pad != pad or r0 < band.r0 or r1 > band.r1:
                end = min(h, max(r1, r0 + BAND_ROWS * max(r1 - r0, 1)))
                band = self.band = _Band(r0, end, pad, *self._framed(r0, end, pad, reuse=True))
            r0, framed, vframed = band.r0, band.framed, band.vframed
        rows = (y_taps[0] - r0, y_taps[1]) if r0 else y_taps  # the same taps, counted from the first framed row
        return _gather_mean(framed, vframed, pad, rows, x_taps, self.ft, xp, ((ylo - r0, yhi - r0), spans[1]),
                            overlaps)  # fmt: skip

    def _framed(self, r0: int, r1: int, pad: int, reuse: bool) -> tuple[Any, Any]:
        """Rows ``r0 : r1`` of the pixels and of their validity in a frame of ``pad`` zeros; written into
        buffers kept from the last call where ``reuse`` (fresh pages are what is slow, see above)."""
        xp = self.xp
        zeros = xp.zeros(pad, dtype=self.ft)  # not np.pad: ~40 us of Python per call
        if isinstance(self.valid, tuple):
            vy, vx = self.valid
            vframed: Any = (xp.concatenate([zeros, vy[r0:r1], zeros]), xp.concatenate([zeros, vx, zeros]))
        elif self.lazy is not None:
            vframed = self._made_into(self.lazy, "valid", r0, r1, pad)
        else:
            vframed = self._pad_into("valid", self.valid[r0:r1], pad, reuse)
        if self.lazy is not None:
            return self._made_into(self.lazy, "data", r0, r1, pad), vframed
        return self._pad_into("data", self.data[r0:r1], pad, reuse), vframed

    def _made_into(self, lazy: _LazyRows, name: str, r0: int, r1: int, pad: int) -> Any:
        """Rows ``r0 : r1`` made by ``lazy`` in a frame of ``pad`` zeros, in a reused buffer: the rows a
        prefilter reads beyond them are made in the frame first, then the frame is zeroed again."""
        h, w = self.shape
        a0, a1 = max(0, r0 - lazy.reach), min(h, r1 + lazy.reach)
        framed = self._buffer(name, r1 - r0 + 2 * pad, w + 2 * pad, self.ft)
        lazy.make(framed[pad - (r0 - a0) : pad + (a1 - r0), pad : pad + w], a0, a1, name == "valid")
        _set_frame(framed, pad, 0)
        return framed

    def _pad_into(self, name: str, a: Any, pad: int, reuse: bool) -> Any:
        if not reuse:
            return _pad(a, pad, 0, self.xp)
        return _pad(a, pad, 0, self.xp, out=self._buffer(name, a.shape[0] + 2 * pad, a.shape[1] + 2 * pad, a.dtype))

    def _buffer(self, name: str, rows: int, cols: int, dtype: Any) -> Any:
        """``rows`` x ``cols`` of the array kept for ``name``, reallocated only when it is too small or of
        another width or dtype (fresh pages are what is slow, see above)."""
        buf = self.buffers.get(name)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != dtype:
            buf = self.buffers[name] = self.xp.empty((rows, cols), dtype=dtype)
        return buf[:rows]


BlockTaps = tuple[Taps, Taps, Footprints | None]
"""A row block's y taps, x taps and, for the average, its footprints (see :meth:`_Weighted.sums`)."""


def _general_mean(src: Any, nodata: float, cmap: CoordMap, taps_for: Callable[[int, int], BlockTaps],
                  inside_test: bool, convex: bool = False) -> Any:  # fmt: skip
    """Weighted means over per-pixel taps from a line map, in row blocks; GDAL's renormalisation.

    Pixels are gathered in their own dtype (half the memory traffic of float32 for 16-bit data) and
    weighted in float. ``convex``: the weights are never negative (see :func:`_finish`)."""
    xp = get_xp(src)
    h, w = cmap.shape_yx
    ft = _work_dtype(src.dtype, xp)
    valid = valid_mask(src, nodata, xp)
    if bool(valid.all()):
        ones = (xp.ones(src.shape[0], dtype=ft), xp.ones(src.shape[1], dtype=ft))
        pixels = _Weighted(src, ones, ft, xp, all_valid=True)
    else:
        pixels = _Weighted(xp.where(valid, src, 0), valid.astype(ft), ft, xp)
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        acc, wsum = pixels.sums(*taps_for(r0, r1))
        block = _finish(acc, wsum, nodata, src.dtype, xp, convex)
        if inside_test:
            xc, yc = cmap.centre_positions(xp, r0, r1, "f4")
            block = xp.where(_inside(xc, yc, src.shape), block, nodata_fill(nodata, src.dtype, xp))
        out[r0:r1] = block
    return out


def _tent_prefilter(a: Any, stretch: int, axis: int, xp: Any) -> Any:
    """``a`` convolved with the discrete tent 1 - |k|/stretch along ``axis`` (zeros beyond the edges), in
    place, in slabs across the other axis: only a slab's copy is allocated, not whole arrays (a 4096²
    output's source is 8232², 271 MB in float32, and fresh pages that size cost seconds to fault in on
    this kind of machine). Returns ``a``."""
    n = a.shape[axis] if a.ndim > 1 else a.shape[0]
    other = a.shape[1 - axis] if a.ndim > 1 else 1
    step = max(1, (1 << 20) // max(n, 1)) if xp.__name__ == "numpy" else other  # slabs of ~1M values
    for s0 in range(0, other, step):
        slab: Any = a if a.ndim == 1 else a[s0 : s0 + step] if axis == 1 else a[:, s0 : s0 + step]
        orig = slab.copy() if stretch > 2 else slab  # (stretch 2: one product, taken before the sums)
        scaled = xp.empty_like(orig)
        for k in range(1, stretch):
            xp.multiply(orig, 1.0 - k / stretch, out=scaled)  # each product once: it serves both neighbours
            lo = [slice(None)] * a.ndim
            hi = [slice(None)] * a.ndim
            lo[axis], hi[axis] = slice(0, n - k), slice(k, n)
            slab[tuple(lo)] += scaled[tuple(hi)]
            slab[tuple(hi)] += scaled[tuple(lo)]
    return a


def _bilinear_general(src: Any, nodata: float, cmap: CoordMap, sx: float, sy: float) -> Any:
    """Reprojected bilinear. With whole-number stretches (10 m -> 20 m: 2) the stretched tent equals a tent
    prefilter on pixel centres followed by plain bilinear interpolation, exactly: the weighted sum is
    piecewise linear between centres. So: two separable passes, then four gathers per pixel."""
    xp = get_xp(src)
    stretch = [1 if s >= DOWNSAMPLING else _integer_stretch(s) for s in (sx, sy)]
    if stretch[0] is None or stretch[1] is None:  # other stretches: the taps one by one

        def direct(r0: int, r1: int) -> BlockTaps:
            xc, yc = cmap.centre_positions(xp, r0, r1)
            return _kernel_taps(yc, sy, "bilinear", xp, "f4"), _kernel_taps(xc, sx, "bilinear", xp, "f4"), None

        return _general_mean(src, nodata, cmap, direct, inside_test=True)
    ft = _work_dtype(src.dtype, xp)
    valid = valid_mask(src, nodata, xp)
    all_valid = bool(valid.all())
    vy, vx = xp.ones(src.shape[0], dtype=ft), xp.ones(src.shape[1], dtype=ft)
    if all_valid:  # separable validity: its profiles prefiltered
        vx = _tent_prefilter(vx, stretch[0], 0, xp) if stretch[0] > 1 else vx
        vy = _tent_prefilter(vy, stretch[1], 0, xp) if stretch[1] > 1 else vy
    pixels: _Weighted
    if xp is np and src.size * np.dtype(ft).itemsize > WHOLE_FRAME_BYTES:
        # A large source (a 4096² output's is 8232², 271 MB in float32): prefiltered by bands of rows into
        # reused buffers, not copied whole into fresh pages (slow to fault in after other work).
        lazy = _LazyRows(src, None if all_valid else valid, (stretch[0], stretch[1]), xp)
        pixels = _Weighted(None, (vy, vx) if all_valid else None, ft, xp, lazy=lazy)
    else:
        data = (src if all_valid else xp.where(valid, src, 0)).astype(ft)  # a copy: prefiltered in place
        vf = None if all_valid else valid.astype(ft)
        for axis, s in ((1, stretch[0]), (0, stretch[1])):
            if s > 1:
                data = _tent_prefilter(data, s, axis, xp)
                vf = _tent_prefilter(vf, s, axis, xp) if vf is not None else None
        pixels = _Weighted(data, vf if vf is not None else (vy, vx), ft, xp)
    h, w = cmap.shape_yx
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        xc, yc = cmap.centre_positions(xp, r0, r1, "f4")
        acc, wsum = pixels.sums(_kernel_taps(yc, 1.0, "bilinear", xp, ft), _kernel_taps(xc, 1.0, "bilinear", xp, ft))
        block = _finish(acc, wsum, nodata, src.dtype, xp)
        out[r0:r1] = xp.where(_inside(xc, yc, src.shape), block, nodata_fill(nodata, src.dtype, xp))
    return out


def _interpolate(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    xp = get_xp(src)
    sx, sy = cmap.scale(xp)
    if cmap.separable:
        xc, yc = cmap.centre_positions(xp)
        y_taps, x_taps = _kernel_taps(yc[:, 0], sy, method, xp), _kernel_taps(xc[0], sx, method, xp)
        out = _separable_mean(src, nodata, y_taps, x_taps, xp)
        return xp.where(_inside(xc, yc, src.shape), out, nodata_fill(nodata, src.dtype, xp))
    if method == "bilinear":
        return _bilinear_general(src, nodata, cmap, sx, sy)
    ft = _work_dtype(src.dtype, xp)

    def taps(r0: int, r1: int) -> BlockTaps:
        xc, yc = cmap.centre_positions(xp, r0, r1, "f4")
        return _kernel_taps(yc, sy, method, xp, ft), _kernel_taps(xc, sx, method, xp, ft), None

    return _general_mean(src, nodata, cmap, taps, inside_test=True)


def resample_bilinear(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Bilinear (tent) interpolation at destination centres, weights renormalised over valid pixels."""
    return _interpolate(src, nodata, cmap, "bilinear")


def resample_cubic(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Cubic convolution (Keys, a = -0.5) at destination centres, weights renormalised over valid pixels."""
    return _interpolate(src, nodata, cmap, "cubic")


def _footprints(cmap: CoordMap, xp: Any, r0: int, r1: int) -> tuple[Any, Any, Any, Any]:
    """(xlo, xhi, ylo, yhi) of destination rows ``r0 : r1``: GDAL's box from each pixel's top-left and
    bottom-right corners."""
    x, y = cmap.corner_positions(xp, r0, r1 + 1, "f8" if cmap.separable else "f4")
    if cmap.separable:
        return x[:, :-1], x[:, 1:], y[:-1, :], y[1:, :]
    return x[:-1, :-1], x[1:, 1:], y[:-1, :-1], y[1:, 1:]


def resample_average(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Area-weighted mean of the source pixels under each destination footprint, nodata ignored."""
    xp = get_xp(src)
    fast = _block_reduce(src, nodata, cmap, xp)
    if fast is not None:
        return fast
    if cmap.separable:
        xlo, xhi, ylo, yhi = _footprints(cmap, xp, 0, cmap.shape_yx[0])
        y_taps = _footprint_taps(ylo[:, 0], yhi[:, 0], xp)
        x_taps = _footprint_taps(xlo[0], xhi[0], xp)
        return _separable_mean(src, nodata, y_taps, x_taps, xp)

    def taps(r0: int, r1: int) -> BlockTaps:
        xlo, xhi, ylo, yhi = _footprints(cmap, xp, r0, r1)
        (ylo, yhi), (xlo, xhi) = _ordered(ylo, yhi, xp), _ordered(xlo, xhi, xp)
        return _footprint_taps(ylo, yhi, xp, True), _footprint_taps(xlo, xhi, xp, True), (ylo, yhi, xlo, xhi)

    return _general_mean(src, nodata, cmap, taps, inside_test=False, convex=True)


# -------------------------------------------------------------------------------- aligned block factors
def block_factor(cmap: CoordMap, src_shape: tuple[int, int]) -> tuple[int, int, int] | None:
    """(factor, row0, col0) when the map is an aligned integer-factor reduction fully inside the source."""
    if not cmap.separable:
        return None
    h, w = cmap.shape_yx
    fx, fy = float(cmap.xe[1] - cmap.xe[0]), float(cmap.ye[1] - cmap.ye[0])
    x0, y0 = float(cmap.xe[0]), float(cmap.ye[0])
    f = round(fx)
    if not (f >= 1 and abs(fx - f) < 1e-9 and abs(fy - f) < 1e-9 and abs(x0 - round(x0)) < 1e-9
            and abs(y0 - round(y0)) < 1e-9):  # fmt: skip
        return None
    x0i, y0i = round(x0), round(y0)
    if x0i < 0 or y0i < 0 or x0i + w * f > src_shape[1] or y0i + h * f > src_shape[0]:
        return None
    return f, y0i, x0i


def _block_reduce(src: Any, nodata: float, cmap: CoordMap, xp: Any) -> Any | None:
    """Fast path: same CRS, integer factor, aligned edges, fully inside: strided sums (f=1: a copy)."""
    found = block_factor(cmap, src.shape)
    if found is None:
        return None
    f, y0i, x0i = found
    h, w = cmap.shape_yx
    block = src[y0i : y0i + h * f, x0i : x0i + w * f]
    if f == 1:
        return block.copy()  # identical grids: a copy
    # f*f strided adds into exact accumulators: far cheaper than a multi-axis reduction of a float copy.
    kind = xp.dtype(src.dtype).kind
    if kind in "iu" and xp.dtype(src.dtype).itemsize <= 2 and f * f * 65536 < 2**32:
        acc_dtype = "i8" if kind == "i" else "u4"
    else:
        acc_dtype = "f8"
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):  # in row blocks: the strided passes stay in cache
        rows = block[r0 * f : r1 * f]
        acc = xp.zeros((r1 - r0, w), dtype=acc_dtype)
        count = xp.zeros((r1 - r0, w), dtype="u2" if f * f < 65536 else "u4")
        for dy in range(f):
            for dx in range(f):
                part = rows[dy::f, dx::f]
                ok = valid_mask(part, nodata, xp)
                acc += xp.where(ok, part, 0).astype(acc_dtype, copy=False)
                count += ok
        out[r0:r1] = _finish(acc.astype("f8"), count.astype("f8"), nodata, src.dtype, xp)
    return out


# ------------------------------------------------------------------------------------ footprint statistics
def _stat_dtype(dtype: Any, xp: Any) -> Any:
    """Room for a sentinel no pixel can hold: int32 for 8/16-bit integers."""
    d = xp.dtype(dtype)
    return xp.dtype("i4") if d.kind in "iu" and d.itemsize <= 2 else d


def _sentinel(dtype: Any, high: bool, xp: Any) -> Any:
    d = xp.dtype(dtype)
    if d.kind == "f":
        return xp.asarray(xp.inf if high else -xp.inf, dtype=d)
    return xp.asarray(xp.iinfo(d).max if high else xp.iinfo(d).min, dtype=d)


class _Marked:
    """The source with nodata replaced by a sentinel, padded with it on demand (kept across row blocks).

    ``shift`` (unsigned pixels whose nodata is 0): the pixels are stored minus ``shift``, wrapping, so
    nodata lands on the sentinel without a wider dtype: for max, shift 0 and sentinel 0; for min,
    shift 1 and sentinel the dtype's maximum. Half the memory traffic of int32, and no mask."""

    def __init__(self, src: Any, nodata: float, sentinel: Any, xp: Any, shift: int | None = None) -> None:
        self.src, self.sentinel, self.xp, self.shift = src, sentinel, xp, shift
        self.valid: Any = None if shift is not None else valid_mask(src, nodata, xp)
        self.pad, self.flat = -1, None

    def padded(self, pad: int) -> tuple[Any, int]:
        if pad > self.pad:
            xp = self.xp
            self.pad = max(pad, 2 * self.pad)
            if self.shift is not None:  # frame with nodata, then shift everything at once (wrapping)
                framed = _pad(self.src, self.pad, 0, xp)
                if self.shift:
                    framed -= xp.asarray(self.shift, dtype=framed.dtype)
            else:
                framed = _pad(self.src, self.pad, self.sentinel, xp, self.sentinel.dtype)  # cast and frame
                if not bool(self.valid.all()):
                    inner = framed[self.pad : framed.shape[0] - self.pad, self.pad : framed.shape[1] - self.pad]
                    inner[~self.valid] = self.sentinel
            self.flat = framed.ravel()
        return self.flat, self.pad

    def block(self, rows: slice, cols: slice) -> Any:
        """A region of the marked source (the aligned fast path reads it without gathers)."""
        part = self.src[rows, cols]
        if self.shift is not None:
            return part - self.xp.asarray(self.shift, dtype=part.dtype) if self.shift else part
        return self.xp.where(self.valid[rows, cols], part.astype(self.sentinel.dtype), self.sentinel)


def _footprint_values(marked: _Marked, cmap: CoordMap, r0: int, r1: int, repeats_ok: bool) -> Iterator[Any]:
    """The values under the footprints of rows ``r0 : r1``, one array per tap; the sentinel where a tap
    is nodata, off the source or outside the footprint. ``repeats_ok`` (min, max): taps past a
    footprint's end repeat its last pixel instead, which needs no mask."""
    src, sentinel, xp = marked.src, marked.sentinel, marked.xp
    h_s, w_s = src.shape
    found = block_factor(cmap, src.shape)
    if found is not None:  # aligned factor: strided views, no gathers
        f, y0i, x0i = found
        w = cmap.shape_yx[1]
        block = marked.block(slice(y0i + r0 * f, y0i + r1 * f), slice(x0i, x0i + w * f))
        for dy in range(f):
            for dx in range(f):
                yield block[dy::f, dx::f]
        return
    xlo, xhi, ylo, yhi = _footprints(cmap, xp, r0, r1)
    (fy, wy), (fx, wx) = _footprint_taps(ylo, yhi, xp), _footprint_taps(xlo, xhi, xp)
    flat, pad = marked.padded(max(len(wy), len(wx)) + 1)
    wp = w_s + 2 * pad
    iy = (xp.clip(fy, -len(wy), h_s) + pad).astype(xp.int64)
    ix = (xp.clip(fx, -len(wx), w_s) + pad).astype(xp.int64)
    if repeats_ok:  # the last tap inside the footprint, repeated: min and max do not mind
        ny = xp.maximum(sum(xp.asarray(wk > 0).astype("i8") for wk in wy[1:]), 0)  # (ONE > 0 is a bool)
        nx = xp.maximum(sum(xp.asarray(wk > 0).astype("i8") for wk in wx[1:]), 0)
        rows_k = [(iy + xp.minimum(k, ny)) * wp for k in range(len(wy))]
        cols_k = [ix + xp.minimum(k, nx) for k in range(len(wx))]
        for rk in rows_k:
            for ck in cols_k:
                yield xp.take(flat, rk + ck)
        return
    base = iy * wp + ix
    for ky, wyk in enumerate(wy):
        for kx, wxk in enumerate(wx):
            yield xp.where((wyk > 0) & (wxk > 0), xp.take(flat[ky * wp + kx :], base), sentinel)


def _extreme(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    xp = get_xp(src)
    h, w = cmap.shape_yx
    pick = xp.minimum if method == "min" else xp.maximum
    if xp.dtype(src.dtype).kind == "u" and nodata == 0:  # no wider dtype needed (see _Marked)
        shift = 1 if method == "min" else 0
        sentinel = xp.asarray(xp.iinfo(src.dtype).max if shift else 0, dtype=src.dtype)
        marked = _Marked(src, nodata, sentinel, xp, shift)
    else:
        shift = 0
        sentinel = _sentinel(_stat_dtype(src.dtype, xp), method == "min", xp)
        marked = _Marked(src, nodata, sentinel, xp)
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        best: Any = None
        for values in _footprint_values(marked, cmap, r0, r1, repeats_ok=True):
            best = values.copy() if best is None else pick(best, values, out=best)
        if shift:
            best += xp.asarray(shift, dtype=best.dtype)  # the sentinel wraps back to 0, nodata
            out[r0:r1] = best if nodata == 0 else xp.where(best == 0, nodata_fill(nodata, src.dtype, xp), best)
        else:
            out[r0:r1] = xp.where(best == sentinel, nodata_fill(nodata, src.dtype, xp), best).astype(src.dtype)
    return out


def resample_min(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Smallest valid source value under each footprint."""
    return _extreme(src, nodata, cmap, "min")


def resample_max(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Largest valid source value under each footprint."""
    return _extreme(src, nodata, cmap, "max")


def _ranked(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    """Median or mode of the footprint's valid values (invalid ones carry a sentinel that sorts last)."""
    xp = get_xp(src)
    h, w = cmap.shape_yx
    last = _sentinel(_stat_dtype(src.dtype, xp), True, xp)
    out = xp.empty((h, w), dtype=src.dtype)
    marked = _Marked(src, nodata, last, xp)
    for r0, r1 in _row_blocks(h, w, xp):
        stack = xp.stack(list(_footprint_values(marked, cmap, r0, r1, repeats_ok=False)), axis=-1)
        n_valid = (stack != last).sum(axis=-1)  # in GDAL's scan order: rows, then columns
        if method == "median":  # GDAL: the value at rank (n - 1) / 2 of the sorted valid values
            stack = xp.sort(stack, axis=-1)
            rank = (n_valid - 1) // 2
        else:
            stack, rank = _mode_rank(stack, n_valid, xp)
        value = xp.take_along_axis(stack, xp.maximum(rank, 0)[..., None], axis=-1)[..., 0]
        out[r0:r1] = xp.where(n_valid > 0, value, nodata_fill(nodata, src.dtype, xp)).astype(src.dtype)
    return out


def _mode_rank(stack: Any, n_valid: Any, xp: Any) -> tuple[Any, Any]:
    """GDAL's mode: counting in scan order, a value takes over only when its count passes the leader's,
    so the winner is the value that first reaches the highest count. A stable sort keeps scan order
    within equal values (CuPy's sorts are always stable); a run's length at an element is that value's
    count when it was scanned."""
    order = xp.argsort(stack, axis=-1, kind="stable") if xp.__name__ == "numpy" else xp.argsort(stack, axis=-1)
    ranked = xp.take_along_axis(stack, order, axis=-1)
    k = ranked.shape[-1]
    run = xp.ones(ranked.shape, dtype="i4")
    for i in range(1, k):
        run[..., i] = xp.where(ranked[..., i] == ranked[..., i - 1], run[..., i - 1] + 1, 1)
    run = xp.where(xp.arange(k) < n_valid[..., None], run, 0)  # invalid values were sorted last
    best = run.max(axis=-1)
    first = xp.where(run == best[..., None], order, k)  # scan position where that count was reached
    return ranked, xp.argmin(first, axis=-1)


def resample_median(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Median of the valid source values under each footprint."""
    return _ranked(src, nodata, cmap, "median")


def resample_mode(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Most frequent valid source value under each footprint."""
    return _ranked(src, nodata, cmap, "mode")


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
