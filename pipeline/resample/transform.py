"""GDAL's approximate transformer, vectorised over scanlines.

GDAL's warper maps each destination scanline to the source approximately
(``GDALApproxTransform``): the first, middle and last points exactly; when the
middle lies within ``max_error`` (0.125 source pixel, L1) of the straight line
through the ends, every point of the line is interpolated on that line; else
each half is treated alike, recursively, and halves of five points or fewer are
transformed exactly.

:func:`approx_lines` does the same for all rows of a grid at once (one pyproj
call per recursion step, not per row) and descends only into the part of each
row that the caller needs. The rows are the *whole grid's* rows: a chunk's map
is the grid's map restricted to the chunk's columns, so chunk-by-chunk equals
whole, and the positions are the ones GDAL uses when it warps the grid in one
go (what ``rasterio.warp.reproject`` onto the grid does).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.resample.coords import LineMap

MAX_ERROR = 0.125
"""GDAL's default error threshold, in source pixels (``gdalwarp -et``)."""

FAR = -1e9
"""Where an unprojectable point goes: far outside any source, so it reads as nodata."""

Exact = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def approx_lines(
    exact: Exact,
    rows: np.ndarray,
    n_cols: int,
    lo: int,
    hi: int,
    offset: float,
    max_error: float = MAX_ERROR,
) -> LineMap:
    """Piecewise-linear source positions of lattice columns ``lo : hi`` of each row in ``rows``.

    ``exact(cols, rows)`` gives exact source positions; a row is ``n_cols`` lattice points at
    column coordinates ``j + offset`` (0.5 for pixel centres, 0 for corners) and row coordinate ``rows[i]``.
    """
    rows = np.asarray(rows, dtype="f8")
    m = len(rows)
    out: list[tuple[np.ndarray, ...]] = []

    def transform(r: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact positions, shape (len(r), len(cols)); unprojectable points sent far away."""
        cc = np.broadcast_to(cols + offset, (len(r), len(cols)))
        rr = np.broadcast_to(rows[r][:, None], cc.shape)
        x, y = exact(cc.ravel(), rr.ravel())
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = np.where(ok, x, FAR), np.where(ok, y, FAR)
        return x.reshape(cc.shape), y.reshape(cc.shape)

    def exact_points(r: np.ndarray, start: int, count: int) -> None:
        a, b = max(start, lo), min(start + count, hi)
        if a >= b or not len(r):
            return
        cols = np.arange(a, b)
        x, y = transform(r, cols)
        n = len(cols)
        zeros = np.zeros(x.size)
        out.append(
            (np.repeat(r, n), np.tile(cols, len(r)), np.ones(x.size, "i8"), zeros, x.ravel(), zeros, y.ravel(), zeros)
        )

    if n_cols <= 5:
        exact_points(np.arange(m), 0, n_cols)
        return _assemble(out, m, lo, hi)
    mid = (n_cols - 1) // 2
    sx, sy = transform(np.arange(m), np.array([0, mid, n_cols - 1]))
    stack = [(np.arange(m), 0, n_cols, sx, sy)]
    while stack:
        r, start, count, sx, sy = stack.pop()
        if start >= hi or start + count <= lo or not len(r):
            continue
        mid = (count - 1) // 2
        ddx = (sx[:, 2] - sx[:, 0]) / (count - 1)
        ddy = (sy[:, 2] - sy[:, 0]) / (count - 1)
        err = np.abs(sx[:, 0] + ddx * mid - sx[:, 1]) + np.abs(sy[:, 0] + ddy * mid - sy[:, 1])
        bad = err > max_error
        good = ~bad
        a, b = max(start, lo), min(start + count, hi)
        k = int(good.sum())
        if k:
            out.append(
                (
                    r[good],
                    np.full(k, a),
                    np.full(k, b - a),
                    np.full(k, float(a - start)),
                    sx[good, 0],
                    ddx[good],
                    sy[good, 0],
                    ddy[good],
                )
            )
        if not bad.any():
            continue
        r, sx, sy = r[bad], sx[bad], sy[bad]
        left, right = mid, count - mid  # [start, start + mid) and [start + mid, start + count)
        if left <= 5:
            exact_points(r, start, left)
        elif start < hi and start + left > lo:
            px, py = transform(r, np.array([start + (left - 1) // 2, start + left - 1]))
            stack.append((r, start, left, np.column_stack([sx[:, 0], px]), np.column_stack([sy[:, 0], py])))
        if right <= 5:
            exact_points(r, start + mid, right)
        elif start + mid < hi and start + count > lo:
            px, py = transform(r, np.array([start + mid + (right - 1) // 2]))
            stack.append(
                (
                    r,
                    start + mid,
                    right,
                    np.column_stack([sx[:, 1], px[:, 0], sx[:, 2]]),
                    np.column_stack([sy[:, 1], py[:, 0], sy[:, 2]]),
                )
            )
    return _assemble(out, m, lo, hi)


def _assemble(parts: list[tuple[np.ndarray, ...]], m: int, lo: int, hi: int) -> LineMap:
    """Segments sorted by (row, column) into a :class:`LineMap` over columns ``lo : hi``."""
    row, col, count, t0, x0, dx, y0, dy = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.lexsort((col, row))
    row_ptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=m))])
    return LineMap(
        shape=(m, hi - lo),
        row_ptr=row_ptr,
        col=(col[order] - lo).astype("i8"),
        count=count[order].astype("i8"),
        t0=t0[order].astype("f8"),
        x0=x0[order],
        dx=dx[order],
        y0=y0[order],
        dy=dy[order],
    )
