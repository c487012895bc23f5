"""Masks judged on each source tile, before resampling: which mask pixels a rule drops, grown by a
dilation, and the mask value at each data pixel's centre (nearest, same tile and CRS, both north-up).

Pure array code for NumPy and CuPy (``xp``). Transforms are rasterio's affine order ``(a, b, c, d, e,
f)``: x = c + a * col, y = f + e * row, with b = d = 0, a > 0 and e < 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.resample.common import get_xp

Affine6 = tuple[float, float, float, float, float, float]


def drop_pixels(values: Any, exclude: Sequence[int] = (), exclude_bits: Sequence[int] = (), xp: Any = None) -> Any:
    """True where a mask value is one of the class values ``exclude`` or has any of the bit positions
    ``exclude_bits`` set."""
    xp = xp or get_xp(values)
    drop = xp.zeros(values.shape, dtype=bool)
    for v in exclude:
        drop |= values == v
    if len(exclude_bits):
        if values.dtype.kind not in "iu":
            raise ValueError(f"mask.exclude_bits needs an integer mask band; this one is {values.dtype}")
        bits = 0
        for b in exclude_bits:
            bits |= 1 << int(b)
        if bits >= 1 << (8 * values.dtype.itemsize):  # a bit the dtype does not have is never set
            bits &= (1 << (8 * values.dtype.itemsize)) - 1
        drop |= (values & values.dtype.type(bits)) != 0
    return drop


def _running_max(drop: Any, radius: int, axis: int, xp: Any) -> Any:
    """Along ``axis``, whether any pixel within ``radius`` is True (outside the array: False), by the
    prefix count of True: O(n) whatever the radius."""
    n = drop.shape[axis]
    counts = xp.cumsum(drop.astype(np.int32), axis=axis)
    zero_shape = list(drop.shape)
    zero_shape[axis] = 1
    counts = xp.concatenate([xp.zeros(zero_shape, dtype=np.int32), counts], axis=axis)
    idx = xp.arange(n)
    hi = xp.minimum(idx + radius + 1, n)
    lo = xp.maximum(idx - radius, 0)
    upper = xp.take(counts, hi, axis=axis)
    lower = xp.take(counts, lo, axis=axis)
    return upper > lower


def dilate(drop: Any, radius: int, xp: Any = None) -> Any:
    """Grow True by ``radius`` pixels: a square of side 2 * radius + 1 (Chebyshev distance), as two
    separable running maxima. Pixels outside the array count as not dropped."""
    if radius <= 0 or drop.size == 0:
        return drop
    xp = xp or get_xp(drop)
    return _running_max(_running_max(drop, radius, 0, xp), radius, 1, xp)


def _index_range(d0: float, d_step: float, n: int, m0: float, m_step: float) -> tuple[int, int]:
    """The first and last mask index (unclipped) that the centres of ``n`` data pixels fall in, along one
    axis: data centres at d0 + d_step * (k + 0.5), mask pixel j covering [m0 + m_step * j, + m_step)."""
    first = math.floor((d0 + d_step * 0.5 - m0) / m_step)
    last = math.floor((d0 + d_step * (n - 0.5) - m0) / m_step)
    return min(first, last), max(first, last)


def mask_window(
    data_transform: Affine6,
    data_shape: tuple[int, int],
    mask_transform: Affine6,
    mask_shape: tuple[int, int],
    pad: int,
) -> tuple[int, int, int, int]:
    """The window (row_off, col_off, height, width) of the whole mask file that holds the mask pixel of
    every data pixel centre of a data window, plus ``pad`` pixels each side (a dilation of ``pad`` then
    gives the same drops whatever the window), clipped to the file; height or width 0 where they miss."""
    a, _, c, _, e, f = data_transform
    ma, _, mc, _, me, mf = mask_transform
    h, w = data_shape
    mh, mw = mask_shape
    c0, c1 = _index_range(c, a, w, mc, ma)
    r0, r1 = _index_range(f, e, h, mf, me)
    c0, r0 = max(c0 - pad, 0), max(r0 - pad, 0)
    c1, r1 = min(c1 + pad, mw - 1), min(r1 + pad, mh - 1)
    return r0, c0, max(r1 - r0 + 1, 0), max(c1 - c0 + 1, 0)


def sample_nearest(
    drop: Any, mask_transform: Affine6, data_transform: Affine6, data_shape: tuple[int, int], xp: Any = None
) -> Any:
    """``drop`` (over a mask window whose top-left is ``mask_transform``) at each data pixel's centre: the
    mask pixel the centre falls in (float64 coordinates); centres outside the window are not dropped."""
    xp = xp or get_xp(drop)
    a, _, c, _, e, f = data_transform
    ma, _, mc, _, me, mf = mask_transform
    h, w = data_shape
    cols = xp.floor((c + a * (xp.arange(w, dtype=np.float64) + 0.5) - mc) / ma).astype(np.int64)
    rows = xp.floor((f + e * (xp.arange(h, dtype=np.float64) + 0.5) - mf) / me).astype(np.int64)
    mh, mw = drop.shape
    col_ok = (cols >= 0) & (cols < mw)
    row_ok = (rows >= 0) & (rows < mh)
    picked = drop[xp.clip(rows, 0, max(mh - 1, 0))[:, None], xp.clip(cols, 0, max(mw - 1, 0))[None, :]]
    return picked & row_ok[:, None] & col_ok[None, :]


def apply_mask(data: Any, drop: Any, nodata: float, xp: Any = None) -> Any:
    """A copy of ``data`` with the dropped pixels set to ``nodata`` (NaN allowed for floats)."""
    xp = xp or get_xp(data)
    fill = 0 if math.isnan(nodata) and data.dtype.kind != "f" else nodata
    return xp.where(drop, xp.asarray(fill).astype(data.dtype), data)
