"""Where each destination pixel falls in the source window: the maps the kernels read.

Source coordinates are continuous pixel units of the source window: pixel
``i`` spans ``[i, i + 1)``, its centre is ``i + 0.5``. A :class:`CoordMap`
comes in two forms:

* separable (``xe``: w+1 column edges, ``ye``: h+1 row edges): same CRS, pure
  scale and offset; no per-pixel transform at all;
* lines: any reprojection. Every destination row is a run of straight
  segments, exact at their ends and linear in between (GDAL's approximate
  transformer, built outside with pyproj; see :mod:`pipeline.resample.transform`). A
  :class:`LineMap` holds the segments and :meth:`LineMap.positions`
  interpolates them here, on whichever array module the kernel runs on.
  Two lattices: pixel centres (nearest, bilinear, cubic) and pixel corners
  (the footprint methods).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LineMap:
    """Piecewise-linear rows: segment ``s`` covers lattice columns ``col[s] : col[s] + count[s]`` of its
    row, and at column ``j`` its position is ``x0 + dx * (t0 + j - col)`` (``y`` likewise).

    ``t0`` is the distance from the segment's anchor (where ``x0`` was transformed exactly) to its first
    column here, a whole number kept as a float: a chunk cut from a longer row evaluates the very same
    expression as the whole row would, so chunk-by-chunk equals whole, bit for bit.

    ``x0`` and ``y0`` are in the pixels of the whole source (the tile at its level), and ``offset_xy`` (the
    window's whole offsets in it) is subtracted once a position is formed, in the position's own type:
    subtracting a whole number is exact, so a pixel's position in any window that reads it is the same
    number moved by a whole number of pixels, and the kernels see the same fractions and weights.
    """

    shape: tuple[int, int]
    row_ptr: Any
    """(rows + 1,) segments of row ``r`` are ``row_ptr[r] : row_ptr[r + 1]``, in column order. The
    layout (``row_ptr``, ``col``, ``count``) is NumPy, on the host, whatever the positions are on."""
    col: Any
    count: Any
    t0: Any
    x0: Any
    dx: Any
    y0: Any
    dy: Any
    offset_xy: tuple[float, float] = (0.0, 0.0)
    """(columns, rows): the source window's whole offsets in the source, subtracted from every position."""

    def to(self, xp: Any) -> LineMap:
        """The same map with its positions on ``xp`` (e.g. CuPy); the segment layout stays on the host."""
        return replace(self, **{k: xp.asarray(getattr(self, k)) for k in ("t0", "x0", "dx", "y0", "dy")})

    def shifted(self, dx: float, dy: float) -> LineMap:
        """The same map moved by (dx, dy) source pixels (a source with another origin)."""
        return replace(self, x0=self.x0 + dx, y0=self.y0 + dy)

    def windowed(self, col_off: int, row_off: int) -> LineMap:
        """The same map read through a window of the source at whole offsets (col_off, row_off)."""
        return replace(self, offset_xy=(float(col_off), float(row_off)))

    def one_per_row(self) -> bool:
        """Whether the map has one segment per destination row (no row is split)."""
        return int(self.row_ptr.shape[0]) - 1 == int(self.count.shape[0])

    def _fill(self, x: Any, y: Any, seg: Any, j: Any, xp: Any, shift: float = 0.0) -> None:
        """``x = x0 + dx * t`` and ``y = y0 + dy * t`` with ``t = t0 + j`` for segments ``seg`` (one per row
        of ``x``/``y``) written in place: ``t`` is formed in ``y``, no temporaries (the same operations in
        the same order as the expressions, so the same bits). Where every ``t0`` is 0 (a segment's anchor
        is its first column here, the usual case), ``t`` is ``j`` itself: one pass fewer, same bits.
        ``shift`` is added to ``x0`` and ``y0`` first (nearest's nudge, without a pass of its own); the window's
        offsets are subtracted last (exact: whole numbers)."""
        dtype = x.dtype
        if xp is np and not self.t0[seg].any():  # (no device sync on CuPy for this)
            # The outer products by einsum: the same one product an element as a broadcast multiply (the
            # same bits), in half its time (NumPy's broadcast loop walks a row at a time).
            np.einsum("i,j->ij", self.dx[seg].astype(dtype), j, out=x)
            np.einsum("i,j->ij", self.dy[seg].astype(dtype), j, out=y)
        else:
            xp.add(self.t0[seg, None].astype(dtype), j[None, :], out=y)
            xp.multiply(self.dx[seg, None].astype(dtype), y, out=x)
            y *= self.dy[seg, None].astype(dtype)
        x0, y0 = self.x0[seg, None], self.y0[seg, None]
        if shift:
            x0, y0 = x0 + shift, y0 + shift
        x += x0.astype(dtype)
        y += y0.astype(dtype)
        ox, oy = self.offset_xy
        if ox:
            x -= x.dtype.type(ox)
        if oy:
            y -= y.dtype.type(oy)

    def bounds(
        self, xp: Any, r0: int = 0, r1: int | None = None, shift: float = 0.0
    ) -> tuple[float, float, float, float]:
        """(least x, greatest x, least y, greatest y) of :meth:`positions` of lattice rows ``r0 : r1`` in
        float64 (with the same ``shift``), without forming them: each segment's positions are monotone in
        its columns (a rounded product and sum are), so they are its ends, evaluated here with the same
        operations in the same order as :meth:`_fill`. NaN where a position is."""
        r1 = self.shape[0] if r1 is None else r1
        s0, s1 = int(self.row_ptr[r0]), int(self.row_ptr[r1])
        t0 = self.t0[s0:s1].astype("f8")
        ends = (t0, xp.add(t0, xp.asarray(self.count[s0:s1] - 1, dtype="f8")))
        found = []
        for start, step, off in ((self.x0, self.dx, self.offset_xy[0]), (self.y0, self.dy, self.offset_xy[1])):
            start, step = start[s0:s1], step[s0:s1].astype("f8")
            start = (start + shift if shift else start).astype("f8")
            at = xp.concatenate([xp.multiply(step, t) + start for t in ends])
            at = at - off if off else at
            found += [float(at.min()), float(at.max())]
        return found[0], found[1], found[2], found[3]

    def positions(
        self, xp: Any, r0: int = 0, r1: int | None = None, dtype: str = "f8", shift: float = 0.0
    ) -> tuple[Any, Any]:
        """Dense (r1 - r0, cols) source x and y of lattice rows ``r0 : r1`` (``dtype``: f8, or f4 where
        a thousandth of a pixel does not matter), ``shift`` added to each segment's start."""
        rows, cols = self.shape
        r1 = rows if r1 is None else r1
        x = xp.empty((r1 - r0, cols), dtype=dtype)
        y = xp.empty((r1 - r0, cols), dtype=dtype)
        if self.one_per_row():  # one segment spanning every row: a rank-one expression, no gathers
            self._fill(x, y, slice(r0, r1), xp.arange(cols, dtype=dtype), xp, shift)
            return x, y
        # Rows split into segments: rows that share a column range are filled together, one
        # rank-one expression per distinct range (few: the splits halve the same row lengths), into
        # a contiguous scratch pair copied into place (filling column slices of the rows directly
        # ran 1.3-1.4x slower at 4096 columns, copies included).
        s0, s1 = int(self.row_ptr[r0]), int(self.row_ptr[r1])
        seg_row = np.repeat(np.arange(r1 - r0), np.diff(self.row_ptr[r0 : r1 + 1]))
        key = self.col[s0:s1] * (cols + 1) + self.count[s0:s1]
        size = (r1 - r0) * cols
        scratch = xp.empty(2 * size, dtype=dtype)
        for k in np.unique(key).tolist():
            sel = np.nonzero(key == k)[0]
            c0, n = divmod(int(k), cols + 1)
            xs = scratch[: len(sel) * n].reshape(len(sel), n)
            ys = scratch[size : size + len(sel) * n].reshape(len(sel), n)
            self._fill(xs, ys, xp.asarray(s0 + sel), xp.arange(n, dtype=dtype), xp, shift)
            if len(sel) == r1 - r0:  # usually every row
                x[:, c0 : c0 + n] = xs
                y[:, c0 : c0 + n] = ys
            else:
                rr = xp.asarray(seg_row[sel])
                x[rr, c0 : c0 + n] = xs
                y[rr, c0 : c0 + n] = ys
        return x, y


@dataclass(frozen=True)
class CoordMap:
    """Destination pixels in source pixel coordinates."""

    shape_yx: tuple[int, int]
    xe: Any = None
    """(w+1,) column edges, separable case."""
    ye: Any = None
    """(h+1,) row edges, separable case."""
    centres: LineMap | None = None
    """(h, w) lattice of pixel centres, general case."""
    corners: LineMap | None = None
    """(h+1, w+1) lattice of pixel corners, general case."""
    scale_xy: tuple[float, float] | None = None
    """Destination pixels per source pixel, when known from the grids themselves (the same for every
    chunk, so kernels that stretch with it leave no seams); else estimated from this map."""
    taps: dict[Any, Any] | None = field(default=None, init=False, compare=False, repr=False)
    """Tap tables the kernels made from this map (by method, row block, array module...), kept for the
    next source resampled with it: a map from :meth:`keeping_taps`. None (the default): made afresh for
    each source, one row block at a time. Never carried over by ``replace`` or :meth:`to`."""

    def keeping_taps(self) -> CoordMap:
        """The same map, keeping the tap tables its kernels make (a map reused across bands and dates)."""
        kept = replace(self)
        object.__setattr__(kept, "taps", {})  # (frozen: set once, here, as a dataclass's own __init__ would)
        return kept

    def nbytes(self) -> int:
        """Bytes of this map's arrays and of the tap tables it keeps."""
        arrays: list[Any] = [self.xe, self.ye]
        for lines in (self.centres, self.corners):
            if lines is not None:
                arrays += [getattr(lines, k) for k in ("row_ptr", "col", "count", "t0", "x0", "dx", "y0", "dy")]
        return _nbytes([arrays, list((self.taps or {}).values())], set())

    @property
    def separable(self) -> bool:
        """Whether x depends only on the column and y only on the row (the map is two vectors)."""
        return self.xe is not None

    def to(self, xp: Any) -> CoordMap:
        """The same map with its arrays on ``xp``."""
        changes: dict[str, Any] = {
            k: xp.asarray(getattr(self, k)) for k in ("xe", "ye") if getattr(self, k) is not None
        }
        for k in ("centres", "corners"):
            if (lines := getattr(self, k)) is not None:
                changes[k] = lines.to(xp)
        return replace(self, **changes)

    def centre_positions(self, xp: Any, r0: int = 0, r1: int | None = None, dtype: str = "f8") -> tuple[Any, Any]:
        """Pixel-centre source coordinates of rows ``r0 : r1``, broadcastable to (rows, w)."""
        r1 = self.shape_yx[0] if r1 is None else r1
        if self.separable:
            xc = (self.xe[:-1] + self.xe[1:]) / 2
            yc = (self.ye[r0:r1] + self.ye[r0 + 1 : r1 + 1]) / 2
            return xc[None, :], yc[:, None]
        if self.centres is None:
            raise ValueError("this map was built without pixel centres")
        return self.centres.positions(xp, r0, r1, dtype)

    def corner_positions(self, xp: Any, r0: int = 0, r1: int | None = None, dtype: str = "f8") -> tuple[Any, Any]:
        """Pixel-corner source coordinates of corner rows ``r0 : r1``, broadcastable to (rows, w + 1)."""
        r1 = self.shape_yx[0] + 1 if r1 is None else r1
        if self.separable:
            return self.xe[None, :], self.ye[r0:r1, None]
        if self.corners is None:
            raise ValueError("this map was built without pixel corners")
        return self.corners.positions(xp, r0, r1, dtype)

    def scale(self, xp: Any) -> tuple[float, float]:
        """Destination pixels per source pixel along x and y (GDAL's XScale/YScale)."""
        if self.scale_xy is not None:
            return self.scale_xy
        h, w = self.shape_yx
        if self.separable:
            return w / abs(float(self.xe[-1] - self.xe[0])), h / abs(float(self.ye[-1] - self.ye[0]))
        x, y = self.centre_positions(xp) if self.centres is not None else self.corner_positions(xp)
        dx = float(abs(x[:, -1] - x[:, 0]).mean()) / max(x.shape[1] - 1, 1)
        dy = float(abs(y[-1, :] - y[0, :]).mean()) / max(y.shape[0] - 1, 1)
        return 1.0 / max(dx, 1e-12), 1.0 / max(dy, 1e-12)


def _nbytes(value: Any, seen: set[int]) -> int:
    """Bytes of the arrays in ``value`` (nested tuples, lists and dicts of arrays, numbers and None): the
    memory they hold, each array a view keeps alive counted once (``seen``: the ids of those counted)."""
    if isinstance(value, dict):
        return _nbytes(list(value.values()), seen)
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v, seen) for v in value)
    while getattr(value, "base", None) is not None and hasattr(value.base, "nbytes"):
        value = value.base
    if not hasattr(value, "nbytes") or id(value) in seen:
        return 0
    seen.add(id(value))
    return int(value.nbytes)
