"""Temporal reductions: the layers (dates) of one period reduced per pixel into one composite, over the
clear observations only (a layer's nodata, NaN included for floats, is "no clear observation"). Pure
array code for NumPy and CuPy (``xp``).

``mean``, ``min``, ``max``, ``first``, ``last`` and ``count`` stream: each layer is folded into a
constant-size state and not kept. ``median`` keeps the layers and sorts each pixel's values at
:meth:`Reduction.result` with a sorting network run on whole layers (``xp.minimum``/``xp.maximum``
over blocks of pixels that stay in cache): nodata is mapped to a value that sorts last, each pixel's
count of clear values picks its middle one or two. That is ``numpy.nanmedian`` over the clear values
(the two middle values averaged in the layer's float type, or in float64 and rounded half-to-even for
integers), bit for bit, 10-30x faster for 8-32 layers (``bench/reduce.py``; docs/performance.md,
"Temporal reductions"). A numba kernel per pixel (insertion sort) took 2.6-5.5x the network's time
there, so none is kept.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from pipeline.resample.common import nodata_fill, valid_mask
from pipeline.resample.mask import filled, put

REDUCERS = ("median", "mean", "min", "max", "first", "last", "count")
"""The reducers a composite may use."""

MEDIAN_BLOCK_BYTES = 2 << 20
"""Bytes of kept layers the median's network sorts at once on the CPU (a block's layers stay in cache:
measured fastest at 1-4 MiB for 8-32 uint16 layers of 1024², slower at 256 KiB and 8 MiB); a device
sorts whole layers."""

COUNT_DTYPE = "uint16"
"""The dtype of a count of clear observations (a period holds far fewer than 65,535 dates)."""


def output_dtype(reducer: str, dtype: Any) -> str:
    """The composite's dtype: ``uint16`` for ``count``, the layers' dtype otherwise."""
    _check(reducer)
    return COUNT_DTYPE if reducer == "count" else np.dtype(dtype).name


def output_nodata(reducer: str, nodata: float) -> float:
    """The composite's nodata: 0 for ``count`` (no clear observation), the layers' nodata otherwise."""
    _check(reducer)
    return 0.0 if reducer == "count" else float(nodata)


def _check(reducer: str) -> None:
    if reducer not in REDUCERS:
        raise ValueError(f"unknown reducer {reducer!r}: one of {', '.join(REDUCERS)}")


def _highest(dtype: Any) -> Any:
    """A value of ``dtype`` that sorts after (or with) every other: its largest, or +inf."""
    d = np.dtype(dtype)
    return np.iinfo(d).max if d.kind in "iu" else (True if d.kind == "b" else math.inf)


def _lowest(dtype: Any) -> Any:
    d = np.dtype(dtype)
    return np.iinfo(d).min if d.kind in "iu" else (False if d.kind == "b" else -math.inf)


@functools.lru_cache(maxsize=64)
def sorting_network(n: int, keep: int | None = None) -> tuple[tuple[int, int], ...]:
    """Comparators (i, j), i < j, that sort ``n`` values ascending (Batcher's odd-even merge sort on the
    next power of two, comparators past ``n`` dropped: those positions would hold values sorting last).
    With ``keep``, only the comparators the first ``keep`` sorted positions depend on."""
    size = 1
    while size < n:
        size *= 2
    pairs: list[tuple[int, int]] = []

    def merge(lo: int, length: int, step: int) -> None:
        twice = step * 2
        if twice < length:
            merge(lo, length, twice)
            merge(lo + step, length, twice)
            pairs.extend((i, i + step) for i in range(lo + step, lo + length - step, twice))
        else:
            pairs.append((lo, lo + step))

    def sort(lo: int, length: int) -> None:
        if length > 1:
            half = length // 2
            sort(lo, half)
            sort(lo + half, half)
            merge(lo, length, 1)

    sort(0, size)
    network = [(i, j) for i, j in pairs if j < n]
    if keep is None:
        return tuple(network)
    needed, kept = set(range(keep)), []
    for i, j in reversed(network):
        if i in needed or j in needed:
            kept.append((i, j))
            needed |= {i, j}
    return tuple(reversed(kept))


def median_sorted(layers: list[Any], count: Any, xp: Any = np) -> Any:
    """The median per pixel of ``layers`` (flat, one dtype, nodata already mapped to :func:`_highest`),
    ``count`` (int) clear values each; float64 for integer layers, the layers' type for floats. Pixels
    with no clear value hold garbage: the caller masks them. The layers are sorted in place."""
    n = len(layers)
    dtype = layers[0].dtype
    network = sorting_network(n, n // 2 + 1)
    tmp = xp.empty_like(layers[0])
    for i, j in network:
        xp.minimum(layers[i], layers[j], out=tmp)
        xp.maximum(layers[i], layers[j], out=layers[j])
        layers[i], tmp = tmp, layers[i]
    half = count.astype("i4") // 2
    lo = xp.maximum(count.astype("i4") - 1, 0) // 2
    middle = xp.stack(layers[: n // 2 + 1])
    a = xp.take_along_axis(middle, lo[None], axis=0)[0]
    b = xp.take_along_axis(middle, half[None], axis=0)[0]
    if dtype.kind == "f":
        return (a + b) / dtype.type(2)  # in the layers' float type, as numpy's median averages
    return (a.astype("f8") + b) / 2.0


class Reduction:
    """One reducer over the layers of one period, given in ascending date order with :meth:`add`; then
    :meth:`result`. Layers are ``shape`` arrays of ``dtype`` with ``nodata`` (NaN for floats where nodata
    is NaN) where there is no clear observation. Every reducer considers all the clear observations, so
    the count :meth:`result` returns is theirs for every reducer."""

    def __init__(self, reducer: str, shape: tuple[int, int], dtype: Any, nodata: float, xp: Any = np) -> None:
        _check(reducer)
        self.reducer, self.shape, self.dtype, self.nodata, self.xp = reducer, shape, np.dtype(dtype), nodata, xp
        self.count = xp.zeros(shape, dtype=COUNT_DTYPE)
        self.layers: list[Any] = []
        self.n = 0
        self.state: Any = None
        if reducer == "mean":
            self.state = xp.zeros(shape, dtype="f8")
        elif reducer == "min":
            self.state = xp.full(shape, _highest(self.dtype), dtype=self.dtype)
        elif reducer == "max":
            self.state = xp.full(shape, _lowest(self.dtype), dtype=self.dtype)
        elif reducer in ("first", "last"):
            self.state = xp.full(shape, nodata_fill(nodata, self.dtype, xp), dtype=self.dtype)

    def add(self, layer: Any) -> None:
        """Fold in the next date's layer (never written into, nor kept: the median keeps a copy)."""
        xp = self.xp
        if tuple(layer.shape) != tuple(self.shape) or layer.dtype != self.dtype:
            raise ValueError(
                f"a layer of {layer.dtype} {tuple(layer.shape)}: the reduction takes {self.dtype} {self.shape}"
            )
        ok = valid_mask(layer, self.nodata, xp)
        r = self.reducer
        if r == "median":
            self.layers.append(filled(layer, ~ok, _highest(self.dtype), xp).reshape(-1))
        elif r == "mean":
            self.state += filled(layer, ~ok, 0, xp)
        elif r == "min":
            xp.minimum(self.state, filled(layer, ~ok, _highest(self.dtype), xp), out=self.state)
        elif r == "max":
            xp.maximum(self.state, filled(layer, ~ok, _lowest(self.dtype), xp), out=self.state)
        elif r == "first":
            put(self.state, ok & (self.count == 0), layer, xp)
        elif r == "last":
            put(self.state, ok, layer, xp)
        self.count += ok
        self.n += 1

    def result(self) -> tuple[Any, Any]:
        """(values of :func:`output_dtype`, count uint16): the composite, output nodata where a pixel had no
        clear observation, and each pixel's count of clear observations. Call once: the state becomes
        the result."""
        xp, count = self.xp, self.count
        out_dtype = output_dtype(self.reducer, self.dtype)
        empty = count == 0
        if self.reducer == "count":
            return count.copy(), count
        if self.reducer == "median":
            values = xp.full(self.shape, nodata_fill(self.nodata, self.dtype, xp), dtype=self.dtype)
            if self.layers:
                self._median_into(values.reshape(-1), count.reshape(-1))
                put(values, empty, nodata_fill(self.nodata, self.dtype, xp), xp)
            self.layers = []
            return values, count
        values = self.state
        if self.reducer == "mean":
            xp.divide(values, xp.maximum(count, 1), out=values)
            values = _to_dtype(values, self.dtype, xp)
        put(values, empty, nodata_fill(self.nodata, self.dtype, xp), xp)
        return values.astype(out_dtype, copy=False), count

    def _median_into(self, out: Any, count: Any) -> None:
        """The median of the kept layers into ``out`` (flat), block by block on the CPU."""
        xp, n = self.xp, len(self.layers)
        size = out.size
        step = size if xp.__name__ != "numpy" else max(1, MEDIAN_BLOCK_BYTES // (n * self.dtype.itemsize))
        for s in range(0, size, step):
            e = min(size, s + step)
            block = [layer[s:e].copy() for layer in self.layers]
            out[s:e] = _to_dtype(median_sorted(block, count[s:e], xp), self.dtype, xp)

    @property
    def nbytes_peak(self) -> int:
        """The most bytes this reduction holds (see :func:`peak_bytes`), for the layers added so far."""
        return peak_bytes(self.reducer, max(self.n, 1), self.shape, self.dtype)


def _to_dtype(values: Any, dtype: np.dtype, xp: Any) -> Any:
    """float64 values as ``dtype``: integers rounded half-to-even and clipped to the type's range."""
    if dtype.kind not in "iu":
        return values.astype(dtype, copy=False)
    info = np.iinfo(dtype)
    rounded = xp.rint(values)
    xp.clip(rounded, info.min, info.max, out=rounded)
    return rounded.astype(dtype)


def peak_bytes(reducer: str, n_layers: int, shape: tuple[int, int], dtype: Any) -> int:
    """The most bytes a :class:`Reduction` holds at once over ``n_layers`` layers of ``shape`` and
    ``dtype`` (besides the layer being added), its state and temporaries and the result: what the planner
    sizes a partition by. Streaming reducers hold the same whatever ``n_layers``; the median holds every
    layer. Checked against tracemalloc's peak (tests/test_composite_kernels.py)."""
    _check(reducer)
    px = int(shape[0]) * int(shape[1])
    size = np.dtype(dtype).itemsize
    counts = 2 * px * np.dtype(COUNT_DTYPE).itemsize + px  # count, its copy or the result's mask; a bool mask
    if reducer == "count":
        return counts + px
    if reducer == "mean":  # the float64 sum, the layer's masked copy; at the end the rounded float64 copy
        return counts + px * (8 + max(size, 8)) + px * size
    if reducer == "median":  # the kept layers, the result; per block: its copies, a stacked half, float64s
        block = max(1, MEDIAN_BLOCK_BYTES // (n_layers * size))
        per_block = min(block, px) * ((n_layers + 1 + n_layers // 2 + 3) * size + 4 * 8)
        return counts + px * size * (n_layers + 2) + per_block
    return counts + 2 * px * size  # the state, the layer's masked copy
