"""Temporal reductions: a composite's layers (one per date, each the date's fused chunk, nodata where no
clear observation) reduced to one step per pixel. Pure array code for NumPy and CuPy (``xp``).

``mean``, ``min``, ``max``, ``first``, ``last`` and ``count`` stream: a layer is folded in as it comes and
none is kept. ``median`` keeps the layers and, at the end, sorts each pixel's values with the invalid
ones mapped past every valid one, then averages the middle two of the valid ones: ``numpy.nanmedian``'s
answer at about a fifth of its time (``bench/reduce.py``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pipeline.resample.common import get_xp, valid_mask

REDUCERS = ("median", "mean", "min", "max", "first", "last", "count")


def output_dtype(reducer: str, dtype: Any) -> str:
    """The dtype of a reduction's values: ``count`` is uint16; the others keep the layers' dtype (an integer
    mean or median is rounded half to even)."""
    return "uint16" if reducer == "count" else str(np.dtype(dtype))


def output_nodata(reducer: str, nodata: float) -> float:
    """The fill of pixels with no clear observation: 0 for ``count``, else the layers' nodata."""
    return 0.0 if reducer == "count" else nodata


def peak_bytes(reducer: str, n_layers: int, pixels: int, itemsize: int) -> int:
    """The most a reduction of ``n_layers`` layers of ``pixels`` holds: ``median`` its layers and their
    sorted copy; the streaming reducers their running values (float64 sums for ``mean``) and a count."""
    if reducer == "median":
        return 2 * n_layers * pixels * itemsize + pixels * (8 + 2)
    return pixels * (8 + 2 + itemsize)


def _to_dtype(values: Any, dtype: Any, xp: Any) -> Any:
    """Float results into ``dtype``: rounded half to even and clipped for integers."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return xp.clip(xp.rint(values), info.min, info.max).astype(dt)
    return values.astype(dt)


class Reduction:
    """One chunk's reduction over dates: :meth:`add` each date's layer in ascending date order, then
    :meth:`result` gives (values, count of clear observations per pixel)."""

    def __init__(self, reducer: str, shape: tuple[int, int], dtype: Any, nodata: float, xp: Any = None) -> None:
        if reducer not in REDUCERS:
            raise ValueError(f"unknown reducer {reducer!r}; one of {', '.join(REDUCERS)}")
        self.reducer, self.shape, self.dtype, self.nodata = reducer, shape, np.dtype(dtype), nodata
        self.xp = xp or np
        self.count = self.xp.zeros(shape, dtype=np.uint16)
        self.acc: Any = None
        self.layers: list[Any] = []

    def add(self, layer: Any) -> None:
        """Fold in one date's layer (the layers' dtype; nodata where it has no clear observation)."""
        xp, r = self.xp, self.reducer
        ok = valid_mask(layer, self.nodata, xp)
        self.count += ok
        if r == "median":
            self.layers.append(layer)
        elif r == "mean":
            if self.acc is None:
                self.acc = xp.zeros(self.shape, dtype=np.float64)
            self.acc += xp.where(ok, layer, 0).astype(np.float64)
        elif r in ("min", "max", "first", "last"):
            if self.acc is None:
                self.acc = xp.array(layer, copy=True)
                if self.acc.dtype.kind == "f":  # any NaN other than nodata's is no observation either
                    self.acc[~ok] = self._fill()
                return
            if r == "first":
                take = ok & (self.count == 1)
            elif r == "last":
                take = ok
            else:
                better = layer < self.acc if r == "min" else layer > self.acc
                take = ok & ((self.count == 1) | better)
            xp.copyto(self.acc, layer, where=take)

    def _fill(self) -> Any:
        return self.xp.asarray(0 if math.isnan(self.nodata) and self.dtype.kind != "f" else self.nodata).astype(
            self.dtype
        )

    def result(self) -> tuple[Any, Any]:
        """(values of :func:`output_dtype`, clear observations per pixel as uint16); pixels with none hold
        :func:`output_nodata`."""
        xp, r, count = self.xp, self.reducer, self.count
        none = count == 0
        if r == "count":
            return count.copy(), count
        if r == "median":
            median = median_of_layers(self.layers, self.nodata, count, xp)
            values = _to_dtype(xp.where(none, 0.0, median), self.dtype, xp)  # NaN where none: filled below
        elif r == "mean":
            acc = self.acc if self.acc is not None else xp.zeros(self.shape, dtype=np.float64)
            values = _to_dtype(acc / xp.maximum(count, 1), self.dtype, xp)
        else:
            values = self.acc if self.acc is not None else xp.zeros(self.shape, dtype=self.dtype)
        values[none] = self._fill()
        return values, count


def median_of_layers(layers: list[Any], nodata: float, count: Any = None, xp: Any = None) -> Any:
    """Per pixel, the median of the valid values of ``layers`` (float64; the mean of the middle two for an
    even count, ``numpy.nanmedian``'s answer); NaN where none is valid. ``count``: the valid values per
    pixel, where already known.

    Invalid values are mapped past every valid one (NaN for floats, the type's largest value for
    integers: a valid largest value sorts among them, and is still among the ``count`` smallest), each
    pixel's values are sorted (pixels as rows: one short contiguous sort each), and the middle two of
    the first ``count`` are averaged."""
    if not layers:
        raise ValueError("median_of_layers needs at least one layer")
    xp = xp or get_xp(layers[0])
    h, w = layers[0].shape
    dtype = layers[0].dtype
    stack = xp.empty((h * w, len(layers)), dtype=dtype)
    past = xp.asarray(np.nan if dtype.kind == "f" else np.iinfo(dtype).max).astype(dtype)
    counted = xp.zeros(h * w, dtype=np.int64) if count is None else None
    for k, layer in enumerate(layers):
        ok = valid_mask(layer, nodata, xp).reshape(-1)
        stack[:, k] = xp.where(ok, layer.reshape(-1), past)
        if counted is not None:
            counted += ok
    n = counted if counted is not None else count.reshape(-1).astype(np.int64)
    stack.sort(axis=1)
    lo = xp.take_along_axis(stack, xp.maximum((n - 1) // 2, 0)[:, None], axis=1)[:, 0].astype(np.float64)
    hi = xp.take_along_axis(stack, (n // 2).clip(0, len(layers) - 1)[:, None], axis=1)[:, 0].astype(np.float64)
    out = (lo + hi) / 2
    out[n == 0] = np.nan
    return out.reshape(h, w)
