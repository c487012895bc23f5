"""Fuse the warped tiles of one chunk (same band and date) into one array.

``first``/``last`` follow the order given (the input paths' sorted order);
``min``/``max``/``mean`` ignore nodata; a pixel no tile covers stays nodata.
The result depends only on the arrays and their order, never on timing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


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


def fuse_arrays(arrays: Sequence[Any], nodata: float, method: str) -> Any:
    """Fuse same-shape arrays of one dtype with ``method`` (first | last | min | max | mean)."""
    if not arrays:
        raise ValueError("fuse_arrays needs at least one array")
    xp = get_xp(arrays[0])
    first = arrays[0]
    if len(arrays) == 1:
        return first
    fill = xp.asarray(nodata).astype(first.dtype) if not math.isnan(nodata) or first.dtype.kind == "f" else 0
    out = xp.full(first.shape, fill, dtype=first.dtype)
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
