"""Compiled CPU kernels: the fused kernels of :mod:`pipeline.resample.fused` for nearest and average on
reprojected maps, compiled by numba (detected here, once). The NumPy kernels stay the reference (tests
compare the two: the same bits) and the CuPy path.

Each run chooses whether its tasks use them (:func:`choose`, the report's ``compiled_kernels.reason``)
by its reprojected windows per worker process: past :data:`MIN_MB_PER_WORKER_MASKED` where sources are
masked, since the NumPy kernels then gather each tap's validity as well as its value and the compiled
ones test it in the same pass (the cloudy preset's resampling took 0.51x the task-seconds, and the run
0.94x the wall, load included); past :data:`MIN_MB_PER_WORKER` without a mask. Below those, importing
numba and loading the compiled code (~0.4 s of LLVM's and numba's set-up before the first task, paid by
the fork server: :mod:`pipeline.execute.server_compiled`) costs more than they save (the case study 1.21x
the wall, 4x its dates 1.03x). ``PIPELINE_COMPILED=1`` or ``0`` in the environment decides
instead (docs/performance.md, "Compiled kernels"). Compiled code is cached beside the module (numba's
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
"""``1``: every run uses the compiled kernels; ``0``: none does; unset (or ``auto``): each run chooses."""


def asked() -> bool | None:
    """What :data:`ENV` says: True (``1``), False (``0``), None (unset or ``auto``: the run chooses)."""
    return {"1": True, "0": False}.get(os.environ.get(ENV, "auto"))


def installed() -> bool:
    """Whether numba can be imported here (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("numba") is not None


MIN_MB_PER_WORKER = 1000.0
"""Reprojected windows (MB decoded) per worker process past which a run without a mask uses the compiled
kernels: their ~0.4 s load is then a small part of what they save (~0.2 of the NumPy kernels' resampling
on windows without nodata). casestudy-x4 on one worker, 496 MB, ran in 1.006x the wall with them (the
break-even); the case study's full scale reads gigabytes per worker."""
MIN_MB_PER_WORKER_MASKED = 150.0
"""The same for a masked run, where they save ~half the resampling: the cloudy preset on 2 workers, 188 MB
a process, ran in 0.94x the wall with them; its June alone, 94 MB a process, in 1.047x."""


def choose(masked: bool, reprojected_mb_per_worker: float | None = None) -> tuple[bool, str]:
    """Whether a run's tasks use the compiled kernels, and why. ``masked``: the run drops pixels by a
    ``mask`` rule, so that its reprojected windows have nodata within. ``reprojected_mb_per_worker``: the
    plan's windows in another CRS than the grid's (``Plan.bytes_reprojected``) over the worker processes;
    None before the plan (what the fork server preloads): masked runs then."""
    said = asked()
    if said is False:
        return False, f"{ENV}=0"
    if not installed():
        return False, "numba is not installed (pip install 'pipeline[compiled]')"
    if said:
        return True, f"{ENV}=1"
    mb = reprojected_mb_per_worker
    if mb is None:
        return masked, "masked sources" if masked else "no mask"
    least = MIN_MB_PER_WORKER_MASKED if masked else MIN_MB_PER_WORKER
    saving = (
        "masked sources, whose nodata the compiled kernels test in the same pass as each value (0.51x the "
        "NumPy kernels' resampling task-seconds on the cloudy preset)"
        if masked
        else "no mask (on windows without nodata they save ~0.2 of the NumPy kernels' resampling)"
    )
    if mb >= least:
        return True, (
            f"{saving}; {mb:,.0f} MB of reprojected windows per worker process, past {least:,.0f} MB, where "
            "they save more than their ~0.4 s load"
        )
    return False, (
        f"{saving}; {mb:,.0f} MB of reprojected windows per worker process, below {least:,.0f} MB, where "
        "loading numba (~0.4 s before the first task) costs more than they save; PIPELINE_COMPILED=1 turns "
        "them on"
    )


def use(on: bool) -> None:
    """Whether this thread's resampling uses the compiled kernels (a task sets it from its run's choice)."""
    _tally.on = on


def _on() -> bool:
    on = getattr(_tally, "on", None)
    return asked() is True if on is None else bool(on)


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
    """How the kernels tell a value without data (``common.valid_mask``): (compare with the value, that
    value as the source's type holds it, in float64; test for NaN)."""
    if dtype.kind == "f":
        return not math.isnan(nodata), float(np.asarray(nodata).astype(dtype)), True
    return not math.isnan(nodata), nodata, False


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

    before = getattr(_tally, "on", None)
    use(True)
    try:
        cmap = build_map("reproj", 16, np)
        for dtype in ("u1", "i1", "u2", "i2", "f4", "u4", "i4", "f8"):
            src = (np.arange(40 * 40) % 50).astype(dtype).reshape(40, 40)
            for method in METHODS:
                resample(src, 0.0 if dtype[0] != "f" else math.nan, cmap, method)
    finally:
        _tally.on = before
    return time.perf_counter() - t
