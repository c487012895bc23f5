"""Compiled CPU kernels: the fused kernels of :mod:`pipeline.resample.fused` for nearest and average on
reprojected maps, compiled by numba (detected here, once). The NumPy kernels stay the reference (tests
compare the two: the same bits) and the CuPy path.

Each run chooses whether its tasks use them (:mod:`pipeline.execute.compiled_choice`), by its reprojected
windows per worker process and whether it masks; ``PIPELINE_COMPILED=1`` or ``0`` in the environment
decides instead (docs/performance.md, "Compiled kernels"). Compiled code is cached beside the module (numba's
``cache=True``); :func:`compile_all` compiles every signature they take, which ``make install`` runs, so a
run pays no compilation.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
from typing import Any

import numpy as np

from pipeline.resample import fused
from pipeline.resample.common import _kept, all_valid, nodata_fill
from pipeline.resample.coords import CoordMap

METHODS = ("nearest", "average")
"""Methods with a compiled kernel for reprojected maps."""
SUMMED_F4 = ("u1", "i1", "u2", "i2", "f4")
"""Source types the float32 kernels (bilinear, average) take: those the NumPy kernels also sum in float32."""

_tally = threading.local()


ENV = "PIPELINE_COMPILED"
"""``1``: the kernels run wherever no run chose otherwise (direct calls, benches); a run's choice is
:func:`pipeline.execute.compiled_choice.choose`'s, which reads the same variable."""


def use(on: bool | None) -> bool | None:
    """Whether this thread's resampling uses the compiled kernels (a task sets it from its run's choice;
    None: as :data:`ENV` says); returns what held before."""
    before = getattr(_tally, "on", None)
    _tally.on = on
    return before


def _on() -> bool:
    on = getattr(_tally, "on", None)
    return os.environ.get(ENV) == "1" if on is None else bool(on)


disabled = [False]
"""Set where loading the kernels failed in this process (the fork server), so that it and its workers
run the NumPy kernels whatever their run chose."""


@functools.lru_cache(maxsize=1)
def kernels() -> dict[str, Any] | None:
    """The compiled kernels by name (numba imported and the kernels jitted; their machine code loads on
    first call), or None where numba is not installed or :data:`disabled`."""
    if disabled[0]:
        return None
    try:
        import numba
    except ImportError:
        return None
    jit = numba.njit(nogil=True, cache=True)
    # The helpers first: the kernels call them through the module's globals, compiled as they are.
    for name in ("row_positions_f4", "_footprint_axis_f4", "_clip_f4", "_ordered_corners", "_valid_at"):
        fn = getattr(fused, name)
        setattr(fused, name, jit(getattr(fn, "py_func", fn)))  # (once: a second detection finds them compiled)
    names = ("nearest_lines", "average_reach", "average_taps", "weighted_sums_f4")
    return {name: jit(getattr(fused, name)) for name in names}


def load_in_server() -> float:
    """Import numba and load every signature (:func:`compile_all`) in a process of this pipeline's own (the
    fork server), with SciPy hidden: numba imports ``scipy.linalg`` for its ``np.linalg`` support, which
    these kernels do not use (~0.15 s of the load). Seconds taken."""
    import time

    t = time.perf_counter()
    hidden = "scipy" not in sys.modules
    if hidden:
        sys.modules["scipy"] = None  # type: ignore[assignment]  # (an import of it raises ImportError)
    try:
        if kernels() is not None:
            compile_all()
    finally:
        if hidden and sys.modules.get("scipy", 0) is None:
            del sys.modules["scipy"]
    return time.perf_counter() - t


def available() -> bool:
    """Whether compiled kernels run on this thread: asked for (by the run, or by :data:`ENV`) and installed."""
    return _on() and kernels() is not None


def signatures() -> int:
    """Signatures of the compiled kernels loaded in this process so far (compiled, or read from numba's
    cache); 0 where none is. A task after which there are more paid for loading them."""
    found = kernels() if "numba" in sys.modules else None
    return sum(len(k.signatures) for k in found.values()) if found else 0


def calls() -> int:
    """Windows resampled by compiled kernels on this thread so far (a task runs on one thread)."""
    return int(getattr(_tally, "n", 0))


def _count() -> None:
    _tally.n = calls() + 1


def _segments(lines: Any) -> tuple[Any, ...]:
    return tuple(
        np.ascontiguousarray(getattr(lines, k), dtype="i8" if k in ("row_ptr", "col", "count") else "f8")
        for k in ("row_ptr", "col", "count", "t0", "x0", "dx", "y0", "dy")
    )


def _range(dtype: Any) -> tuple[float, float]:
    """(least, greatest) value of an integer type, as float32 (0, 0 for a float type)."""
    if np.dtype(dtype).kind == "f":
        return 0.0, 0.0
    info = np.iinfo(dtype)
    return float(np.float32(info.min)), float(np.float32(info.max))


def _nodata_test(dtype: np.dtype, nodata: float) -> tuple[bool, float, bool]:
    """How the kernels tell a value without data as ``common.valid_mask``'s ``array != nodata`` does:
    (compare with the value; that value in the type NumPy compares in, given in float64: a Python float
    takes a float source's type, a NumPy scalar keeps its own, an integer source compares in float64;
    test for NaN)."""
    if math.isnan(nodata):
        return False, 0.0, dtype.kind == "f"
    return True, float(np.asarray(nodata).astype(np.result_type(dtype, nodata))), dtype.kind == "f"


def _average_taps(found: dict[str, Any], cmap: CoordMap, src_shape: tuple[int, int]) -> tuple[Any, ...]:
    """Every pixel's footprint taps on ``cmap`` for a source of ``src_shape`` (kept with a map that keeps taps)."""
    h, w = cmap.shape_yx
    segments = _segments(cmap.corners)
    ky, kx = found["average_reach"](*segments, h, w)
    first = np.empty((h, w, 2), np.int32)
    wy, wx = np.empty((h, w, ky), np.float32), np.empty((h, w, kx), np.float32)
    overlap = np.empty((h, w), np.float32)
    found["average_taps"](*segments, src_shape[0], src_shape[1], first, wy, wx, overlap)
    return first, wy, wx, overlap


def resample(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any | None:
    """``method`` on a reprojected map by a compiled kernel; None where none applies (a one-CRS map, a
    CuPy array, a type or stretch the kernels do not take, not chosen for this run, numba not installed)."""
    found = kernels() if _on() else None
    if found is None or method not in METHODS or cmap.separable or not isinstance(src, np.ndarray):
        return None
    fill = nodata_fill(nodata, src.dtype, np)[()]  # a scalar of the source's type
    out = np.empty(cmap.shape_yx, dtype=src.dtype)
    if method == "nearest":
        if cmap.centres is None:
            return None
        found["nearest_lines"](src, fill, *_segments(cmap.centres), out)
        _count()
        return out
    if src.dtype.str[1:] not in SUMMED_F4:
        return None
    if cmap.corners is None:
        return None
    first, wy, wx, overlap = _kept(cmap, ("fused-average", src.shape), _average_taps, found, cmap, src.shape)
    everywhere = all_valid(src, nodata, np)
    unsigned_convex = src.dtype.kind == "u" and src.dtype.itemsize <= 4
    lo_hi = np.array(_range(src.dtype), np.float32)
    test_value, value, test_nan = _nodata_test(src.dtype, nodata)
    found["weighted_sums_f4"](
        src, test_value, value, test_nan, everywhere, first, wy, wx, overlap, fill, unsigned_convex, lo_hi, out
    )
    _count()
    return out


def compile_all() -> float:
    """Compile (or load from the cache) every signature the pipeline uses; the seconds it took."""
    import time

    t = time.perf_counter()
    from pipeline.resample.parity import build_map

    before = use(True)
    try:
        cmap = build_map("reproj", 16, np)
        for dtype in ("u1", "i1", "u2", "i2", "f4", "u4", "i4", "f8"):
            src = (np.arange(40 * 40) % 50).astype(dtype).reshape(40, 40)
            for method in METHODS:
                resample(src, 0.0 if dtype[0] != "f" else math.nan, cmap, method)
    finally:
        use(before)
    return time.perf_counter() - t
