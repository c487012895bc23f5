"""What every kernel family (and the fusion) shares: the array module of an array, nodata masks and
fills, tuning constants, row blocks, framing, and the taps (which source
pixels a destination pixel reads, and with what weights). Pure array code for NumPy and CuPy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np


def get_xp(array: Any) -> Any:
    """The array module of ``array``: numpy, or cupy for cupy arrays (imported only then)."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    import numpy

    return numpy


def valid_mask(array: Any, nodata: float, xp: Any = None) -> Any:
    """True where ``array`` holds data: not equal to ``nodata`` and, for floats, not NaN."""
    xp = xp or get_xp(array)
    if array.dtype.kind == "f":
        ok = ~xp.isnan(array)
        return ok if math.isnan(nodata) else ok & (array != nodata)
    if math.isnan(nodata):
        return xp.ones(array.shape, dtype=bool)
    return array != nodata


def all_valid(array: Any, nodata: float, xp: Any = None) -> bool:
    """Whether :func:`valid_mask` is True everywhere, without forming the mask where the values tell: an
    integer array with nodata 0 has no zero, with nodata its type's largest (smallest) value has a
    smaller largest (larger smallest) value, with NaN nodata always; a float array with NaN nodata has a
    least value that is not NaN. One read of the array, no array written (the mask of a 10 m source was
    the average kernel's largest single pass)."""
    xp = xp or get_xp(array)
    if array.size == 0:
        return True
    kind = array.dtype.kind
    if kind in "iu":
        if math.isnan(nodata):
            return True
        info = xp.iinfo(array.dtype)
        if nodata == 0:
            return bool(array.all())
        if nodata == info.max:
            return bool(array.max() < nodata)
        if nodata == info.min:
            return bool(array.min() > nodata)
    elif kind == "f" and math.isnan(nodata):
        return not math.isnan(float(array.min()))
    return bool(valid_mask(array, nodata, xp).all())


def nodata_fill(nodata: float, dtype: Any, xp: Any) -> Any:
    """``nodata`` as a scalar of ``dtype``: 0 for an integer type whose nodata is NaN (none declared)."""
    return xp.asarray(0 if math.isnan(nodata) and xp.dtype(dtype).kind != "f" else nodata).astype(dtype)


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


def _prefilter_stretches(sx: float, sy: float) -> tuple[int, int] | None:
    """The bilinear's stretch along x and y where both are whole numbers (1 when not downsampling, 1/scale
    when downsampling): then its kernel is a tent prefilter followed by plain bilinear interpolation (the
    NumPy kernel and the compiled one both take that path). None where either is not."""
    kx, ky = (1 if s >= DOWNSAMPLING else _integer_stretch(s) for s in (sx, sy))
    return None if kx is None or ky is None else (kx, ky)


def _tent_profiles(shape: tuple[int, int], stretch: tuple[int, int], dtype: Any, xp: Any) -> tuple[Any, Any]:
    """(rows, columns) validity profiles of a ``shape`` source without nodata, prefiltered by the tents of
    ``stretch`` (x, y): the bilinear's separable weight sums."""
    vy, vx = xp.ones(shape[0], dtype=dtype), xp.ones(shape[1], dtype=dtype)
    vx = _tent_prefilter(vx, stretch[0], 0, xp) if stretch[0] > 1 else vx
    vy = _tent_prefilter(vy, stretch[1], 0, xp) if stretch[1] > 1 else vy
    return vy, vx


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
    ``clip(u - k, 0, 1)`` and the first ``1`` less the part left of the footprint. A footprint that ends
    within its first pixel (``u <= 1``) weighs that pixel 1 whatever its length, as GDAL's average does
    (one source pixel along an axis: weight 1), so one of no length reads the pixel it lies on: near a
    pole a destination pixel's two corners can land on one meridian (or parallel), and its footprint,
    from those corners alone, has no width (or height) there. (That weight is a factor of all the pixel's
    taps, so it changes no mean: it keeps a footprint of no length from weighing nothing.) Taps past
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
    w0 = xp.subtract(1.0, a, out=a)
    if not u_min > 1.0:  # (some footprint ends within its first pixel; NaN: as the comparisons say)
        w0[u <= 1.0] = 1.0
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


def _take_into(flat: Any, index: Any, out: Any, xp: Any) -> None:
    """``out[:] = flat[index]``. NumPy's take buffers ``out`` in its default bounds-checked mode; with
    ``clip`` it writes straight into it: 3.2 -> 1.3 ns per pixel (u16 gathers of a 64K-pixel block).
    CuPy's take has no mode. An index out of range reads some pixel of ``flat`` (NumPy clips it, CuPy
    wraps it) and never fails: callers that pass one overwrite what it read."""
    if xp is np:
        np.take(flat, index, out=out, mode="clip")
    else:
        xp.take(flat, index, out=out)


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
        for k in range(1, min(stretch, n)):  # (no row has a neighbour n or more away)
            xp.multiply(orig, 1.0 - k / stretch, out=scaled)  # each product once: it serves both neighbours
            lo = [slice(None)] * a.ndim
            hi = [slice(None)] * a.ndim
            lo[axis], hi[axis] = slice(0, n - k), slice(k, n)
            slab[tuple(lo)] += scaled[tuple(hi)]
            slab[tuple(hi)] += scaled[tuple(lo)]
    return a


def _tent_rows(
    a: Any, c0: int, c1: int, stretch: int, above: list[tuple[int, Any]] | None, xp: Any
) -> list[tuple[int, Any]]:
    """Rows ``c0 : c1`` of ``a`` convolved along axis 0 with the discrete tent 1 - |k|/stretch (zeros beyond
    ``a``'s rows), in place. The rows below ``c1`` are still as they were; ``above[k - 1]`` is (first row,
    those rows up to ``c0`` as they were, times 1 - k/stretch): the up to k rows above (None at the top).
    Returns that for the rows that follow, so an array done by consecutive row ranges of any length sums
    every row as :func:`_tent_prefilter` along axis 0 does, bit for bit: the same products, and per row
    k = 1, 2, ...: the row k below, then the row k above."""
    n = a.shape[0]
    end = min(n, c1 + stretch - 1)
    scaled = [xp.multiply(a[c0:end], 1.0 - k / stretch) for k in range(1, stretch)]  # before any sum
    carry = []
    for k, s in enumerate(scaled, start=1):
        top = min(c1, n - k)  # rows with a row k below
        if top > c0:
            a[c0:top] += s[k : top - c0 + k]
        lo, mid = max(c0, k), min(c1, c0 + k)  # rows whose row k above precedes c0
        first, prev = above[k - 1] if above is not None else (c0, s[:0])
        if mid > lo:
            a[lo:mid] += prev[lo - k - first : mid - k - first]
        if c1 > max(lo, c0 + k):
            a[max(lo, c0 + k) : c1] += s[max(lo, c0 + k) - k - c0 : c1 - k - c0]
        keep = max(0, c1 - k)  # the rows the next range reads above it: keep .. c1 - 1
        if keep >= c0:
            carry.append((keep, s[keep - c0 : c1 - c0]))
        else:
            carry.append((keep, xp.concatenate([prev[keep - first :], s[: c1 - c0]])))
    return carry


def _kept(cmap: Any, key: tuple[Any, ...], make: Callable[..., Any], *args: Any) -> Any:
    """``make(*args)``, kept on ``cmap`` under ``key`` where the map keeps its tap tables
    (:attr:`~pipeline.resample.coords.CoordMap.taps`): the next source resampled with the same map reads
    them instead. ``key`` names everything besides the map that ``make`` depends on (method, row block,
    array module, dtype, source shape). Callers never write into what it returns."""
    kept = cmap.taps
    if kept is None:
        return make(*args)
    found = kept.get(key)
    if found is None:
        found = kept.setdefault(key, make(*args))  # (two threads may both make it: both get the one kept)
    return found
