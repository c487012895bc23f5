"""Weighted sums over gathered taps, the machinery of the interpolating and averaging kernels: separable
sums for one-CRS maps, framed gathers by row blocks for reprojected ones, lazily prefiltered bands
for large sources."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from pipeline.resample import common
from pipeline.resample.common import (
    BAND_ROWS,
    ONE,
    SPARSE_TAP,
    Footprints,
    Taps,
    _finish,
    _inside,
    _pad,
    _row_blocks,
    _set_frame,
    _take_into,
    _tent_prefilter,
    _tent_rows,
    _work_dtype,
    all_valid,
    get_xp,
    nodata_fill,
    valid_mask,
)
from pipeline.resample.coords import CoordMap


# ------------------------------------------------------------------------------------ weighted methods
def _separable_mean(src: Any, nodata: float, y_taps: Taps, x_taps: Taps, xp: Any) -> Any:
    """Σ w·v / Σ w over 1-D taps: along x, then along y; same CRS only. In blocks of destination rows,
    each reading only the source rows its taps need, so the intermediate stays in cache; pixels are
    gathered in their own dtype and weighted in float."""
    h_s, w_s = src.shape
    h, w = y_taps[0].shape[0], x_taps[0].shape[0]
    ft = _work_dtype(src.dtype, xp)
    valid = None if all_valid(src, nodata, xp) else valid_mask(src, nodata, xp)
    data = src if valid is None else xp.where(valid, src, 0)
    vf = None if valid is None else valid.astype(ft)
    # the x taps once: clipped columns, weights zeroed off the source
    x_cols = [xp.clip(x_taps[0] + k, 0, w_s - 1) for k in range(len(x_taps[1]))]
    x_wts = [
        xp.where((x_taps[0] + k >= 0) & (x_taps[0] + k < w_s), wk, 0.0).astype(ft)[None, :]
        for k, wk in enumerate(x_taps[1])
    ]
    y_wts = [
        xp.where((y_taps[0] + k >= 0) & (y_taps[0] + k < h_s), wk, 0.0).astype(ft) for k, wk in enumerate(y_taps[1])
    ]
    wx_sum = sum(x_wts[1:], x_wts[0].copy())
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        first = y_taps[0][r0:r1]
        s0 = max(0, min(h_s - 1, int(first.min())))
        s1 = max(s0 + 1, min(h_s, int(first.max()) + len(y_wts)))
        rows = [xp.clip(first + k, s0, s1 - 1) - s0 for k in range(len(y_wts))]
        block_wy = [wk[r0:r1, None] for wk in y_wts]
        acc = _two_pass(data[s0:s1], x_cols, x_wts, rows, block_wy, ft, xp)
        if vf is None:  # Σ_k wy_k · (Σ_j wx_j · 1): the gathered sums' own operations, so the same bits
            wsum = xp.zeros((r1 - r0, w), dtype=ft)
            for wk in block_wy:
                wsum += wx_sum * wk
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


def _gather_mean(
    data: Any,
    valid: Any,
    pad: int,
    y_taps: Taps,
    x_taps: Taps,
    ft: Any,
    xp: Any,
    spans: tuple[tuple[int, int], tuple[int, int]],
    valid_wsum: Any = None,
    known: dict[Any, Any] | None = None,
    row0: int = 0,
) -> tuple[Any, Any]:
    """Σ w·v and Σ w·valid (in ``ft``) over per-pixel taps, gathered from ``data`` padded by ``pad`` zeros.

    ``valid``: the padded validity as a 2-D array, or as (rows, columns) 1-D profiles when it is
    separable (no nodata in the window): the weight sum then costs no gathers at all. ``spans``: the
    least and greatest first index of the y and x taps. ``valid_wsum``: with a window that is all valid,
    Σ w·valid made from the taps alone (:func:`valid_weight_sum`), not gathered.
    ``known``: what was found from these taps before (see :meth:`_Weighted.sums`), with ``y_taps``
    counted from source row ``row0``.
    """
    hp, wp = data.shape
    (fy, wy), (fx, wx) = y_taps, x_taps
    index_key = ("index", row0, hp, wp, pad)  # the flat indices depend on the taps and the framing alone
    index = None if known is None else known.get(index_key)
    if index is None:
        iy = xp.clip(fy, -len(wy), hp - 2 * pad) + pad if pad else fy
        ix = xp.clip(fx, -len(wx), wp - 2 * pad) + pad if pad else fx
        if hp * wp >= 1 << 31:  # flat indices past int32
            iy, ix = iy.astype(xp.int64), ix.astype(xp.int64)
        base = iy * wp
        base += ix
        base = base.astype(xp.int64, copy=False)  # take's index type: converted once, not per gather
        index = (iy, ix, base)
        if known is not None:
            known[index_key] = index
    iy, ix, base = index
    separable = isinstance(valid, tuple)
    sources = [data.ravel()] if separable else [data.ravel(), valid.ravel()]
    # A footprint a little over n pixels long reaches an (n+1)-th pixel only for some destination
    # pixels: that last tap is added for those pixels alone, not gathered for all of them. The sums are
    # formed in the same order as with every tap gathered (a tap of weight 0 adds exactly 0), so the
    # result does not depend on which pixels share a block.
    sparse = None if known is None else known.get("sparse")
    if sparse is None:
        sparse = (_sparse_tap(wy, xp), _sparse_tap(wx, xp))
        if known is not None:
            known["sparse"] = sparse
    sparse_y, sparse_x = sparse
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
    if separable and valid_wsum is not None:
        wsum = valid_wsum
    elif separable:
        vy, vx = valid
        (ylo, yhi), (xlo, xhi) = spans  # of the clipped indices: clipping is monotone
        ys = (min(max(ylo, -len(wy)), hp - 2 * pad), min(max(yhi, -len(wy)), hp - 2 * pad)) if pad else spans[0]
        xs = (min(max(xlo, -len(wx)), wp - 2 * pad), min(max(xhi, -len(wx)), wp - 2 * pad)) if pad else spans[1]
        sy, sx = _profile_sum(vy, iy, wy, pad, ys, xp), _profile_sum(vx, ix, wx, pad, xs, xp)
        wsum = sy * sx
    return acc, wsum


def valid_weight_sum(y_taps: Taps, x_taps: Taps, shape: tuple[int, int], ft: Any, xp: Any) -> Any:
    """Σ w·valid of a source of ``shape`` whose pixels are all valid, without gathering: the sums
    :func:`_gather_mean` forms where some are not, with each tap's validity 1 on the source and 0 off it,
    in the same order (along x for each tap row, times that row's weight, rows added in turn), so a
    pixel whose taps all hold data gets the same bits whether or not its window holds nodata elsewhere
    (the value never depends on where a chunk's window ends)."""
    h, w = shape
    (fy, wy), (fx, wx) = y_taps, x_taps

    def on(first: Any, k: int, n: int, wk: Any) -> Any:
        weight = xp.asarray(wk, dtype=ft) if wk is ONE else wk
        return xp.where((first + k >= 0) & (first + k < n), weight, xp.zeros((), dtype=ft)).astype(ft, copy=False)

    row: Any = None
    for k, wk in enumerate(wx):
        term = on(fx, k, w, wk)
        row = term if row is None else row + term
    total: Any = None
    for k, wk in enumerate(wy):
        term = row * on(fy, k, h, wk)
        total = term if total is None else total + term
    return xp.broadcast_to(total, np.broadcast_shapes(fy.shape, fx.shape)) if total is not None else None


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
        ``reach`` rows miss neighbours unless they are the source's own edges. On NumPy, by ranges of
        rows of ~64K values, each made, prefiltered along x and then along y while it is in cache (a
        band is megabytes; whole-band passes went to memory six times): the same sums in the same order
        (:func:`_tent_rows`), so the same bits. On CuPy, the band in one range."""
        sy = self.stretch_xy[1]
        n = a1 - a0
        step = max(sy, common.BLOCK_PX // max(out.shape[1], 1)) if self.xp is np else max(n, 1)
        done, above = 0, None
        for c0 in range(0, n, step):
            c1 = min(n, c0 + step)
            need = min(n, c1 + sy - 1)  # (the y prefilter reads the rows below as they are before it)
            if need > done:
                self._rows(out[done:need], a0 + done, a0 + need, validity)
                done = need
            if sy > 1:
                above = _tent_rows(out, c0, c1, sy, above, self.xp)

    def _rows(self, out: Any, a0: int, a1: int, validity: bool) -> None:
        """Rows ``a0 : a1`` into ``out``, prefiltered along x (each row alone)."""
        if validity:
            out[...] = self.valid[a0:a1]
        elif self.valid is None:
            out[...] = self.src[a0:a1]
        else:
            out[...] = self.xp.where(self.valid[a0:a1], self.src[a0:a1], 0)
        if self.stretch_xy[0] > 1:
            _tent_prefilter(out, self.stretch_xy[0], 1, self.xp)


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

    def __init__(
        self, data: Any, valid: Any, ft: Any, xp: Any, all_valid: bool = False, lazy: _LazyRows | None = None
    ) -> None:
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

    def sums(
        self, y_taps: Taps, x_taps: Taps, footprints: Footprints | None = None, known: dict[Any, Any] | None = None
    ) -> tuple[Any, Any]:
        """Σ w·v and Σ w·valid over the taps. Where every pixel is valid, the weight sums come from the taps
        alone (:func:`valid_weight_sum`), not gathered (``footprints``, the average's, are not needed).
        ``known``: a dict kept with the taps for a source of this shape (see :func:`_general_mean`), where
        what follows from them alone (spans, weight sums, sparse taps) is kept for the next source."""
        xp, (h, w) = self.xp, self.shape
        known = {} if known is None else known
        overlaps = None
        if self.all_valid:
            overlaps = known.get("valid_wsum")
            if overlaps is None:
                overlaps = known["valid_wsum"] = valid_weight_sum(y_taps, x_taps, (h, w), self.ft, xp)
        spans = known.get("spans")
        if spans is None:
            spans = known["spans"] = (_span(y_taps), _span(x_taps))
        (ylo, yhi), (xlo, xhi) = spans
        ny = len(y_taps[1])
        inside = ylo >= 0 and yhi + ny <= h and xlo >= 0 and xhi + len(x_taps[1]) <= w
        if inside and self.lazy is None:  # all taps inside
            return _gather_mean(self.data, self.valid, 0, y_taps, x_taps, self.ft, xp, spans, overlaps, known)
        pad = max(ny, len(x_taps[1])) + 1
        if self.lazy is not None:
            pad = max(pad, self.lazy.reach)  # (the frame holds the neighbour rows a band's prefilter reads)
        if self.lazy is None and self.data.nbytes <= common.WHOLE_FRAME_BYTES:
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
        spans_here = ((ylo - r0, yhi - r0), spans[1])
        return _gather_mean(framed, vframed, pad, rows, x_taps, self.ft, xp, spans_here, overlaps, known, r0)

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


def _general_mean(
    src: Any,
    nodata: float,
    cmap: CoordMap,
    taps_for: Callable[[int, int], BlockTaps],
    inside_test: bool,
    convex: bool = False,
) -> Any:
    """Weighted means over per-pixel taps from a line map, in row blocks; GDAL's renormalisation.

    Pixels are gathered in their own dtype (half the memory traffic of float32 for 16-bit data) and
    weighted in float. ``convex``: the weights are never negative (see :func:`_finish`)."""
    xp = get_xp(src)
    h, w = cmap.shape_yx
    ft = _work_dtype(src.dtype, xp)
    if all_valid(src, nodata, xp):
        ones = (xp.ones(src.shape[0], dtype=ft), xp.ones(src.shape[1], dtype=ft))
        pixels = _Weighted(src, ones, ft, xp, all_valid=True)
    else:
        valid = valid_mask(src, nodata, xp)
        pixels = _Weighted(xp.where(valid, src, 0), valid.astype(ft), ft, xp)
    out = xp.empty((h, w), dtype=src.dtype)
    for r0, r1 in _row_blocks(h, w, xp):
        y_taps, x_taps, footprints = taps_for(r0, r1)
        acc, wsum = pixels.sums(y_taps, x_taps, footprints, _known(cmap, y_taps, src.shape))
        block = _finish(acc, wsum, nodata, src.dtype, xp, convex)
        if inside_test:
            key = ("inside", xp.__name__, src.shape, r0, r1)
            inside = common._kept(cmap, key, _inside_rows, cmap, xp, r0, r1, src.shape)
            block = xp.where(inside, block, nodata_fill(nodata, src.dtype, xp))
        out[r0:r1] = block
    return out


def _inside_rows(cmap: CoordMap, xp: Any, r0: int, r1: int, src_shape: tuple[int, int]) -> Any:
    """Where the centres of destination rows ``r0 : r1`` fall inside the source."""
    xc, yc = cmap.centre_positions(xp, r0, r1, "f4")
    return _inside(xc, yc, src_shape)


def _known(cmap: CoordMap, y_taps: Taps, src_shape: tuple[int, int]) -> dict[Any, Any]:
    """Where a map keeps its taps, the dict kept with these taps for a source of this shape (the taps stay
    in the map's keeping as long as it, so their identity names them); else a fresh one."""
    return common._kept(cmap, ("sums", id(y_taps[0]), src_shape), dict)  # type: ignore[no-any-return]
