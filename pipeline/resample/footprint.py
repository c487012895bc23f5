"""Footprint kernels: average weighs the source pixels under each destination pixel's footprint by
area (nodata ignored); aligned integer factors reduce blocks by strided slices."""

from __future__ import annotations

from typing import Any

from pipeline.resample import common
from pipeline.resample.common import _finish, _kept, _ordered, _row_blocks, get_xp, valid_mask
from pipeline.resample.coords import CoordMap
from pipeline.resample.weighted import BlockTaps, _general_mean, _separable_mean


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
        y_taps = common._footprint_taps(ylo[:, 0], yhi[:, 0], xp)
        x_taps = common._footprint_taps(xlo[0], xhi[0], xp)
        return _separable_mean(src, nodata, y_taps, x_taps, xp)

    src_h, src_w = src.shape[-2:]

    def make(r0: int, r1: int) -> BlockTaps:
        xlo, xhi, ylo, yhi = _footprints(cmap, xp, r0, r1)
        (ylo, yhi), (xlo, xhi) = _ordered(ylo, yhi, xp), _ordered(xlo, xhi, xp)
        # Footprints bounded a source's size beyond it (GDAL clamps them to the source window): at the edge of
        # a projection's domain a corner lands millions of pixels away, whose taps would never end.
        ylo, yhi = (xp.clip(v, -src_h - 2, 2 * src_h + 2) for v in (ylo, yhi))
        xlo, xhi = (xp.clip(v, -src_w - 2, 2 * src_w + 2) for v in (xlo, xhi))
        return (
            common._footprint_taps(ylo, yhi, xp, True),
            common._footprint_taps(xlo, xhi, xp, True),
            (ylo, yhi, xlo, xhi),
        )

    def taps(r0: int, r1: int) -> BlockTaps:
        return _kept(cmap, ("average", xp.__name__, r0, r1), make, r0, r1)  # type: ignore[no-any-return]

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
    if not (
        f >= 1
        and abs(fx - f) < 1e-9
        and abs(fy - f) < 1e-9
        and abs(x0 - round(x0)) < 1e-9
        and abs(y0 - round(y0)) < 1e-9
    ):
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
