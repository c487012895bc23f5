"""Resampling kernels: one implementation for NumPy and CuPy, imitating GDAL's warper.

Source coordinates are continuous pixel units of the source window: pixel
``i`` spans ``[i, i + 1)``, its centre is ``i + 0.5``. A :class:`CoordMap`
gives, for every destination pixel *corner*, where it falls in the source:

* separable (``xe``: w+1 column edges, ``ye``: h+1 row edges): same CRS, pure
  scale and offset; no per-pixel transform at all;
* general (``X``, ``Y``: (h+1, w+1)): any reprojection, interpolated here from
  a coarse grid of exact positions computed outside (see :func:`densify_grid`).

Nodata follows GDAL: bilinear renormalises its weights over valid neighbours;
average ignores nodata; a pixel with no valid source is nodata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pipeline.resample.fuse import get_xp, valid_mask

KERNEL_METHODS = ("nearest", "bilinear", "average")
EPS = 1e-10


@dataclass(frozen=True)
class CoordMap:
    """Destination pixel corners in source pixel coordinates."""

    shape_yx: tuple[int, int]
    xe: Any = None
    """(w+1,) column edges, separable case."""
    ye: Any = None
    """(h+1,) row edges, separable case."""
    X: Any = None
    """(h+1, w+1) corner x, general case."""
    Y: Any = None
    scale_xy: tuple[float, float] | None = None
    """Destination pixels per source pixel, when known from the grids themselves (the same for every
    chunk, so kernels that stretch with it leave no seams); else estimated from this map."""

    @property
    def separable(self) -> bool:
        return self.xe is not None

    def centres(self, xp: Any) -> tuple[Any, Any]:
        """Pixel-centre source coordinates, broadcastable to (h, w)."""
        if self.separable:
            xc = (self.xe[:-1] + self.xe[1:]) / 2
            yc = (self.ye[:-1] + self.ye[1:]) / 2
            return xc[None, :], yc[:, None]
        X, Y = self.X, self.Y
        return (X[:-1, :-1] + X[1:, 1:] + X[:-1, 1:] + X[1:, :-1]) / 4, (
            Y[:-1, :-1] + Y[1:, 1:] + Y[:-1, 1:] + Y[1:, :-1]
        ) / 4

    def scale(self) -> tuple[float, float]:
        """Destination pixels per source pixel along x and y (GDAL's XScale/YScale), chunk mean."""
        if self.scale_xy is not None:
            return self.scale_xy
        h, w = self.shape_yx
        if self.separable:
            return w / abs(float(self.xe[-1] - self.xe[0])), h / abs(float(self.ye[-1] - self.ye[0]))
        dx = float(abs(self.X[:, -1] - self.X[:, 0]).mean())
        dy = float(abs(self.Y[-1, :] - self.Y[0, :]).mean())
        return w / dx, h / dy


def densify_grid(coarse: Any, rows: Any, cols: Any, shape: tuple[int, int], xp: Any) -> Any:
    """Interpolate values known at coarse nodes (``rows`` x ``cols`` of a (h+1, w+1) lattice) to all nodes."""
    ny, nx = shape

    def lerp_matrix(nodes: Any, n: int) -> Any:
        nodes = xp.asarray(nodes, dtype="f8")
        t = xp.arange(n, dtype="f8")
        k = xp.clip(xp.searchsorted(nodes, t, side="right") - 1, 0, len(nodes) - 2)
        f = (t - nodes[k]) / (nodes[k + 1] - nodes[k])
        m = xp.zeros((n, len(nodes)), dtype="f8")
        m[xp.arange(n), k] = 1 - f
        m[xp.arange(n), k + 1] = f
        return m

    return lerp_matrix(rows, ny) @ xp.asarray(coarse, dtype="f8") @ lerp_matrix(cols, nx).T


def _finish(acc: Any, wsum: Any, nodata: float, dtype: Any, xp: Any) -> Any:
    ok = wsum > 1e-6
    value = acc / xp.where(ok, wsum, 1.0)
    if xp.dtype(dtype).kind in "iu":
        info = xp.iinfo(dtype)
        value = xp.clip(xp.floor(value + 0.5), info.min, info.max)  # GDAL rounds half up
    fill = 0 if math.isnan(nodata) and xp.dtype(dtype).kind != "f" else nodata
    return xp.where(ok, value, fill).astype(dtype)


def _inside(xc: Any, yc: Any, src_shape: tuple[int, int], xp: Any) -> Any:
    h, w = src_shape
    return (xc >= 0) & (xc < w) & (yc >= 0) & (yc < h)


def _weighted_mean(
    src: Any, nodata: float, shape: tuple[int, int], y_taps: tuple[list[Any], list[Any]],
    x_taps: tuple[list[Any], list[Any]], xp: Any,
) -> Any:  # fmt: skip
    """Sum of weight x value over every (y tap, x tap) pair, divided by the valid weight.

    Taps outside the source or on nodata weigh nothing: GDAL's renormalisation around nodata.
    """
    h_s, w_s = src.shape
    valid = valid_mask(src, nodata, xp)
    data = src.astype("f8")
    acc = xp.zeros(shape, dtype="f8")
    wsum = xp.zeros(shape, dtype="f8")
    for iy, wy in zip(*y_taps, strict=True):
        oky = (iy >= 0) & (iy < h_s)
        iyc = xp.clip(iy, 0, h_s - 1)
        for ix, wx in zip(*x_taps, strict=True):
            ixc = xp.clip(ix, 0, w_s - 1)
            w = xp.where(oky & (ix >= 0) & (ix < w_s) & valid[iyc, ixc], wy * wx, 0.0)
            acc += w * data[iyc, ixc]
            wsum += w
    return _finish(acc, wsum, nodata, src.dtype, xp)


def resample_nearest(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """The source pixel containing each destination centre."""
    xp = get_xp(src)
    h_s, w_s = src.shape
    xc, yc = cmap.centres(xp)
    ix, iy = xp.floor(xc).astype(xp.int64), xp.floor(yc).astype(xp.int64)
    fill = xp.asarray(0 if math.isnan(nodata) and src.dtype.kind != "f" else nodata).astype(src.dtype)
    if cmap.separable:  # outer indexing: one gather per pixel, no per-pixel coordinates
        okx, oky = (ix >= 0) & (ix < w_s), (iy >= 0) & (iy < h_s)
        out = src[xp.clip(iy, 0, h_s - 1)[:, 0][:, None], xp.clip(ix, 0, w_s - 1)[0][None, :]]
        return xp.where(oky & okx, out, fill)
    inside = _inside(xc, yc, src.shape, xp)
    out = src[xp.clip(iy, 0, h_s - 1), xp.clip(ix, 0, w_s - 1)]
    return xp.where(inside, out, fill)


def _taps(c: Any, n_src: int, scale: float, xp: Any) -> tuple[list[Any], list[Any]]:
    """Tent taps around sample positions ``c``: (indices, weights) per tap, GDAL's bilinear rule."""
    if scale >= 0.95:  # GDAL's 4-sample formula
        s = c - 0.5
        i0 = xp.floor(s)
        f = s - i0
        i0 = i0.astype(xp.int64)
        return [i0, i0 + 1], [1 - f, f]
    radius = 1.0 / scale  # downsampling: the tent stretches over 1/scale source pixels
    first = xp.floor(c - 0.5 - radius).astype(xp.int64) + 1
    idx, wts = [], []
    for k in range(int(math.ceil(2 * radius)) + 1):
        i = first + k
        wts.append(xp.maximum(0.0, 1.0 - xp.abs(i + 0.5 - c) * scale))
        idx.append(i)
    return idx, wts


def resample_bilinear(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Bilinear (tent) interpolation at destination centres, weights renormalised over valid pixels."""
    xp = get_xp(src)
    h_s, w_s = src.shape
    xc, yc = cmap.centres(xp)
    sx, sy = cmap.scale()
    xi, xw = _taps(xc, w_s, sx, xp)
    yi, yw = _taps(yc, h_s, sy, xp)
    out = _weighted_mean(src, nodata, cmap.shape_yx, (yi, yw), (xi, xw), xp)
    inside = _inside(xc, yc, src.shape, xp)
    fill = xp.asarray(0 if math.isnan(nodata) and src.dtype.kind != "f" else nodata).astype(src.dtype)
    return xp.where(inside, out, fill)


def _footprint_taps(lo: Any, hi: Any, n_src: int, xp: Any) -> tuple[list[Any], list[Any]]:
    """Source pixels overlapping [lo, hi) and the length of each overlap (GDAL's average weights)."""
    a, b = xp.minimum(lo, hi), xp.maximum(lo, hi)
    i0 = xp.clip(xp.floor(a + EPS), 0, n_src).astype(xp.int64)
    i1 = xp.clip(xp.ceil(b - EPS), 0, n_src).astype(xp.int64)
    i1 = xp.where((i0 == i1) & (i1 < n_src), i1 + 1, i1)  # GDAL: at least one pixel when inside
    k_max = int((i1 - i0).max()) if i1.size else 0
    idx, wts = [], []
    for k in range(k_max):
        i = i0 + k
        w = xp.clip(xp.minimum(i + 1.0, b) - xp.maximum(i * 1.0, a), 0.0, 1.0)
        idx.append(i)
        wts.append(xp.where(i < i1, w, 0.0))
    return idx, wts


def resample_average(src: Any, nodata: float, cmap: CoordMap) -> Any:
    """Area-weighted mean of the source pixels under each destination footprint, nodata ignored."""
    xp = get_xp(src)
    h_s, w_s = src.shape
    fast = _block_reduce(src, nodata, cmap, xp)
    if fast is not None:
        return fast
    if cmap.separable:
        xlo, xhi = cmap.xe[:-1][None, :], cmap.xe[1:][None, :]
        ylo, yhi = cmap.ye[:-1][:, None], cmap.ye[1:][:, None]
    else:  # GDAL: the box spanned by the top-left and bottom-right corners
        xlo, xhi = cmap.X[:-1, :-1], cmap.X[1:, 1:]
        ylo, yhi = cmap.Y[:-1, :-1], cmap.Y[1:, 1:]
    xi, xw = _footprint_taps(xlo, xhi, w_s, xp)
    yi, yw = _footprint_taps(ylo, yhi, h_s, xp)
    return _weighted_mean(src, nodata, cmap.shape_yx, (yi, yw), (xi, xw), xp)


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
    """Fast path: same CRS, integer factor, aligned edges, fully inside: a reshape-and-mean (f=1: a copy)."""
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
    acc = xp.zeros((h, w), dtype=acc_dtype)
    count = xp.zeros((h, w), dtype="u2" if f * f < 65536 else "u4")
    for dy in range(f):
        for dx in range(f):
            part = block[dy::f, dx::f]
            ok = valid_mask(part, nodata, xp)
            acc += xp.where(ok, part, 0).astype(acc_dtype, copy=False)
            count += ok
    return _finish(acc.astype("f8"), count.astype("f8"), nodata, src.dtype, xp)


RESAMPLERS = {"nearest": resample_nearest, "bilinear": resample_bilinear, "average": resample_average}


def resample(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any:
    """Resample ``src`` onto the destination described by ``cmap`` with ``method``."""
    if method not in RESAMPLERS:
        raise ValueError(f"no array kernel for {method!r} yet; kernels: {', '.join(KERNEL_METHODS)}")
    return RESAMPLERS[method](src, nodata, cmap)
