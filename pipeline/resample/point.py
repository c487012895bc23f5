"""Point kernels: nearest, bilinear and cubic sample at destination pixel centres (GDAL's semantics:
nearest floors ``x + 1e-10``; bilinear and cubic stretch over 1/scale when downsampling and renormalise
over valid neighbours)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipeline.resample import common
from pipeline.resample.common import (
    EPS,
    INDEX_BOUND,
    _finish,
    _inside,
    _kept,
    _kernel_taps,
    _pad,
    _prefilter_stretches,
    _row_blocks,
    _take_into,
    _tent_prefilter,
    _tent_profiles,
    _work_dtype,
    all_valid,
    get_xp,
    nodata_fill,
    valid_mask,
)
from pipeline.resample.coords import CoordMap
from pipeline.resample.weighted import BlockTaps, _general_mean, _known, _LazyRows, _separable_mean, _Weighted


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
    lines = cmap.centres
    if lines is None:
        raise ValueError("this map was built without pixel centres")
    flat, framed = src.ravel(), None
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        # GDAL floors x + 1e-10: the nudge is added to each segment's start, not in passes of its own.
        x, y = lines.positions(xp, r0, r1, shift=EPS)
        block = out[r0:r1]
        # The block's least and greatest source pixel, from the ends of the map's segments (floor is
        # monotone): four passes over the block fewer than its min and max.
        xlo, xhi, ylo, yhi = (math.floor(v) if math.isfinite(v) else v for v in lines.bounds(xp, r0, r1, EPS))
        if xlo >= 0 and xhi < w_s and ylo >= 0 and yhi < h_s:
            # The whole block lands inside the source: positions are not negative, so truncating to
            # integers floors them; then a plain gather.
            iy = y.astype(xp.int64)
            iy *= w_s
            iy += x.astype(xp.int64)
            _take_into(flat, iy, block, xp)
            continue
        xp.floor(x, out=x)
        xp.floor(y, out=y)
        if src.nbytes > common.WHOLE_FRAME_BYTES:  # no frame of a large source (a copy of it): a mask instead
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


def _bilinear_general(src: Any, nodata: float, cmap: CoordMap, sx: float, sy: float) -> Any:
    """Reprojected bilinear. With whole-number stretches (10 m -> 20 m: 2) the stretched tent equals a tent
    prefilter on pixel centres followed by plain bilinear interpolation, exactly: the weighted sum is
    piecewise linear between centres. So: two separable passes, then four gathers per pixel."""
    xp = get_xp(src)
    stretch = _prefilter_stretches(sx, sy)
    if stretch is None:  # other stretches: the taps one by one

        def make_direct(r0: int, r1: int) -> BlockTaps:
            xc, yc = cmap.centre_positions(xp, r0, r1)
            return _kernel_taps(yc, sy, "bilinear", xp, "f4"), _kernel_taps(xc, sx, "bilinear", xp, "f4"), None

        def direct(r0: int, r1: int) -> BlockTaps:
            return _kept(cmap, ("bilinear", xp.__name__, r0, r1), make_direct, r0, r1)  # type: ignore[no-any-return]

        return _general_mean(src, nodata, cmap, direct, inside_test=True)
    ft = _work_dtype(src.dtype, xp)
    everywhere = all_valid(src, nodata, xp)
    valid = None if everywhere else valid_mask(src, nodata, xp)
    profiles = _tent_profiles(src.shape, stretch, ft, xp) if everywhere else None  # (separable validity)
    pixels: _Weighted
    if xp is np and src.size * np.dtype(ft).itemsize > common.WHOLE_FRAME_BYTES:
        # A large source (a 4096² output's is 8232², 271 MB in float32): prefiltered by bands of rows into
        # reused buffers, not copied whole into fresh pages (slow to fault in after other work).
        lazy = _LazyRows(src, valid, stretch, xp)
        pixels = _Weighted(None, profiles, ft, xp, lazy=lazy)
    else:
        data = (src if valid is None else xp.where(valid, src, 0)).astype(ft)  # a copy: prefiltered in place
        vf = None if valid is None else valid.astype(ft)
        for axis, s in ((1, stretch[0]), (0, stretch[1])):
            if s > 1:
                data = _tent_prefilter(data, s, axis, xp)
                vf = _tent_prefilter(vf, s, axis, xp) if vf is not None else None
        pixels = _Weighted(data, vf if vf is not None else profiles, ft, xp)
    h, w = cmap.shape_yx
    out = xp.empty((h, w), dtype=src.dtype)

    def make(r0: int, r1: int) -> tuple[Any, Any, Any]:
        xc, yc = cmap.centre_positions(xp, r0, r1, "f4")
        y_taps, x_taps = _kernel_taps(yc, 1.0, "bilinear", xp, ft), _kernel_taps(xc, 1.0, "bilinear", xp, ft)
        return y_taps, x_taps, _inside(xc, yc, src.shape)

    for r0, r1 in _row_blocks(h, w, xp):
        y_taps, x_taps, inside = _kept(cmap, ("prefiltered", xp.__name__, ft, src.shape, r0, r1), make, r0, r1)
        acc, wsum = pixels.sums(y_taps, x_taps, known=_known(cmap, y_taps, src.shape))
        block = _finish(acc, wsum, nodata, src.dtype, xp)
        out[r0:r1] = xp.where(inside, block, nodata_fill(nodata, src.dtype, xp))
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

    def make(r0: int, r1: int) -> BlockTaps:
        xc, yc = cmap.centre_positions(xp, r0, r1, "f4")
        return _kernel_taps(yc, sy, method, xp, ft), _kernel_taps(xc, sx, method, xp, ft), None

    def taps(r0: int, r1: int) -> BlockTaps:
        return _kept(cmap, (method, xp.__name__, ft, r0, r1), make, r0, r1)  # type: ignore[no-any-return]

    return _general_mean(src, nodata, cmap, taps, inside_test=True)


def resample_bilinear(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Bilinear (tent) interpolation at destination centres, weights renormalised over valid pixels."""
    return _interpolate(src, nodata, cmap, "bilinear")


def resample_cubic(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Cubic convolution (Keys, a = -0.5) at destination centres, weights renormalised over valid pixels."""
    return _interpolate(src, nodata, cmap, "cubic")
