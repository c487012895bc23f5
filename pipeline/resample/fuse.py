"""Fuse the warped tiles of one chunk (same band and date) into one array.

``first``/``last`` follow the order given (the input paths' sorted order);
``min``/``max``/``mean`` ignore nodata; a pixel no tile covers stays nodata.
The result depends only on the arrays and their order, never on timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.resample.common import get_xp, nodata_fill, valid_mask


class FirstValid:
    """``first`` fusion one tile at a time, tiles given in priority order: each fills only the pixels
    still empty, and :meth:`pending` says which part of a tile's window still needs data, so that a
    tile that would change nothing is neither read nor resampled (the same result as
    :func:`fuse_arrays`, tested). ``last`` is this with the tiles in reverse order.
    """

    def __init__(self, shape: tuple[int, int], nodata: float) -> None:
        self.shape, self.nodata = shape, nodata
        self.out: Any = None
        self.filled: Any = None

    def pending(self, window: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
        """The bounding box of the still-empty pixels of ``window`` (row, col, height, width), or None."""
        if self.filled is None:
            return window
        r, c, h, w = window
        xp = get_xp(self.filled)
        empty = ~self.filled[r : r + h, c : c + w]
        rows = xp.flatnonzero(empty.any(axis=1))
        if not rows.size:
            return None
        cols = xp.flatnonzero(empty.any(axis=0))
        r0, r1, c0, c1 = int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])
        return r + r0, c + c0, r1 - r0 + 1, c1 - c0 + 1

    def add(self, part: Any, row: int, col: int) -> None:
        """Fill the empty pixels under ``part`` (placed at ``row``, ``col``) with its valid ones. A first
        ``part`` that covers the chunk and owns its memory is kept as the mosaic and written into: hand
        over an array nothing else uses (a view of another array is never written into)."""
        xp = get_xp(part)
        h, w = part.shape
        take = valid_mask(part, self.nodata, xp)  # a fresh array: written into below
        if self.out is None and part.shape == self.shape and _own(part):
            # The first tile covers the chunk: it becomes the mosaic, nodata where it is not valid (an
            # integer's invalid pixels already hold it; a float's may be NaN or another NaN than nodata's).
            if part.dtype.kind == "f":
                xp.copyto(part, nodata_fill(self.nodata, part.dtype, xp), where=~take)
            self.out, self.filled = part, take
            return
        if self.out is None:
            self.out = xp.full(self.shape, nodata_fill(self.nodata, part.dtype, xp), dtype=part.dtype)
            self.filled = xp.zeros(self.shape, dtype=bool)
        else:  # valid and not yet filled (for booleans, a > b is a and not b): one pass, no temporaries
            xp.greater(take, self.filled[row : row + h, col : col + w], out=take)
        # copyto(where=) writes in place; out[take] = part[take] gathers both sides into temporaries
        xp.copyto(self.out[row : row + h, col : col + w], part, where=take)
        self.filled[row : row + h, col : col + w] |= take

    def result(self) -> Any:
        """The fused chunk; None if no tile was added."""
        return self.out


def _own(a: Any) -> bool:
    """A NumPy array that owns its (writable, contiguous) memory: a tile's warped pixels, which nothing
    else holds, so the mosaic may take them over."""
    return isinstance(a, np.ndarray) and a.flags.owndata and a.flags.writeable and a.flags.c_contiguous


def fuse_arrays(arrays: Sequence[Any], nodata: float, method: str) -> Any:
    """Fuse same-shape arrays of one dtype with ``method`` (first | last | min | max | mean)."""
    if not arrays:
        raise ValueError("fuse_arrays needs at least one array")
    xp = get_xp(arrays[0])
    first = arrays[0]
    if len(arrays) == 1:
        return first
    out = xp.full(first.shape, nodata_fill(nodata, first.dtype, xp), dtype=first.dtype)
    filled = xp.zeros(first.shape, dtype=bool)
    if method == "mean":
        total = xp.zeros(first.shape, dtype="f8")
        count = xp.zeros(first.shape, dtype="i4")
        for a in arrays:
            ok = valid_mask(a, nodata, xp)
            total += xp.where(ok, a, 0).astype("f8")
            count += ok
        mean = total / xp.maximum(count, 1)
        if first.dtype.kind in "iu":
            mean = xp.rint(mean)
        return xp.where(count > 0, mean.astype(first.dtype), out)
    for a in arrays:
        ok = valid_mask(a, nodata, xp)
        if method == "first":
            take = ok & ~filled
        elif method == "last":
            take = ok
        elif method == "min":
            take = ok & (~filled | (a < out))
        elif method == "max":
            take = ok & (~filled | (a > out))
        else:
            raise ValueError(f"unknown fuse method {method!r}")
        out = xp.where(take, a, out)
        filled |= ok
    return out
