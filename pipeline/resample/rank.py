"""Rank kernels: min, max, median and mode pick among the valid source pixels under each destination
pixel's footprint (median: rank (n - 1) / 2; mode: first value to reach the highest count, GDAL's tie rule)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline.resample import common
from pipeline.resample.common import _kept, _pad, _row_blocks, get_xp, nodata_fill, valid_mask
from pipeline.resample.coords import CoordMap
from pipeline.resample.footprint import _footprints, block_factor


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
    (fy, wy), (fx, wx) = _kept(cmap, ("footprint", xp.__name__, r0, r1), _rank_taps, cmap, xp, r0, r1)
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


def _rank_taps(cmap: CoordMap, xp: Any, r0: int, r1: int) -> tuple[Any, Any]:
    """The footprint taps of rows ``r0 : r1`` along y and x."""
    xlo, xhi, ylo, yhi = _footprints(cmap, xp, r0, r1)
    return common._footprint_taps(ylo, yhi, xp), common._footprint_taps(xlo, xhi, xp)


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
