"""Compiled CPU kernels: nearest, bilinear and average on reprojected maps in C (``_fused.c``, built with the package
and called through ctypes, which releases the GIL for each call). The NumPy kernels stay the reference (tests
compare the two: the same bits) and the CuPy path.

Loading them costs under 1 ms, once per process, so every run uses them where they are built;
``PIPELINE_COMPILED=0`` in the environment turns them off (:func:`choose`; the report's
``execution.compiled_kernels`` says which ran and why). numba compiled the same loops to the same
speed, but loading it took ~0.4 s a process (docs/performance.md, "Compiled kernels").
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import os
import threading
from typing import Any

import numpy as np

from pipeline.resample.common import _kept, all_valid, nodata_fill
from pipeline.resample.coords import CoordMap

METHODS = ("nearest", "bilinear", "average")
"""Methods with a compiled kernel for reprojected maps."""
SUMMED_F4 = ("u1", "i1", "u2", "i2", "f4")
"""Source types the float32 kernels (bilinear, average) take: those the NumPy kernels also sum in float32."""

_tally = threading.local()


ENV = "PIPELINE_COMPILED"
"""``0``: the kernels stay off (a run's choice, :func:`choose`, and direct calls alike)."""


def use(on: bool | None) -> bool | None:
    """Whether this thread's resampling uses the compiled kernels (a task sets it from its run's choice;
    None: as :data:`ENV` says); returns what held before."""
    before = getattr(_tally, "on", None)
    _tally.on = on
    return before


def _on() -> bool:
    on = getattr(_tally, "on", None)
    return os.environ.get(ENV) != "0" if on is None else bool(on)


_P, _I, _D, _F, _B = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_float, ctypes.c_int
_SEGMENTS = [*[_P] * 8, _D, _D]  # row_ptr, col, count, t0, x0, dx, y0, dy; the window's offsets x, y
_WEIGHTED = [_P, _I, _I, _B, _D, _B, _B, _P, _I, _I, _I, _D, _B, _F, _F, _P, _I, _I]
_BILINEAR = [_P, _I, _I, _B, _D, _B, _B, _I, _I, _P, _P, _P, _P, _P, _P, _P, *_SEGMENTS, _D, _F, _F, _P, _I, _I]
_SIGNATURES: dict[str, list[Any]] = {  # the argument types of each function in _fused.c
    "nearest_lines": [_P, _I, _I, _I, _P, *_SEGMENTS, _P, _I, _I],
    "average_reach": [*_SEGMENTS, _I, _I, _P],
    "average_taps": [*_SEGMENTS, _I, _I, _I, _I, _P, _I, _I, _I],
    **{f"weighted_sums_{t}": _WEIGHTED for t in SUMMED_F4},
    **{f"bilinear_{t}": _BILINEAR for t in SUMMED_F4},
}


ABI = 8
"""``kernels_abi()`` of the library this module calls (``KERNELS_ABI`` in ``_fused.c``): another value is a
library built from another version of the file (a failed rebuild leaves the old one in place)."""
_unusable: list[str] = []


@functools.lru_cache(maxsize=1)
def kernels() -> Any | None:
    """The compiled kernels' library (its functions typed), or None where it was not built (an install
    without a C compiler) or cannot be used (another version, a broken file: why is in :func:`choose`)."""
    _unusable.clear()
    spec = importlib.util.find_spec("pipeline.resample._fused")
    if spec is None or spec.origin is None:
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
        abi = getattr(lib, "kernels_abi", None)
        if abi is None or abi() != ABI:
            _unusable.append(f"{spec.origin} was built from another version of _fused.c")
            return None
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
    except (OSError, AttributeError) as e:  # a library for another platform, or missing a function
        _unusable.append(f"{spec.origin} cannot be loaded ({e})")
        return None
    return lib


def choose() -> tuple[bool, str]:
    """Whether a run's tasks use the compiled kernels, and why: wherever they were built, unless :data:`ENV`
    is ``0``. They are faster than the NumPy kernels on the windows they take, and load in under 1 ms."""
    if os.environ.get(ENV) == "0":
        return False, f"{ENV}=0"
    if kernels() is None and _unusable:
        return False, f"{_unusable[0]}: the NumPy kernels ran; `pip install -e .` rebuilds it"
    if kernels() is None:
        return False, (
            "not built (the package was installed without a C compiler): the NumPy kernels ran; "
            "`pip install -e .` with gcc builds them"
        )
    return True, "built with the package: compiled C for nearest, bilinear and average on reprojected windows"


def available() -> bool:
    """Whether compiled kernels run on this thread: asked for (by the run, or by :data:`ENV`) and installed."""
    return _on() and kernels() is not None


def calls() -> int:
    """Windows resampled by compiled kernels on this thread so far (a task runs on one thread)."""
    return int(getattr(_tally, "n", 0))


def _count() -> None:
    _tally.n = calls() + 1


def _segments(lines: Any, shape: tuple[int, int]) -> tuple[Any, ...]:
    """A line map's segment arrays in the kernels' types (int64 and float64), C-contiguous, checked against
    ``shape`` (the map's rows and columns the kernel loops over) first: the kernels index with them
    unchecked, so a map out of shape would have them read and write past their arrays (ValueError instead)."""
    arrays = tuple(
        np.ascontiguousarray(getattr(lines, k), dtype="i8" if k in ("row_ptr", "col", "count") else "f8")
        for k in ("row_ptr", "col", "count", "t0", "x0", "dx", "y0", "dy")
    )
    row_ptr, col, count = arrays[:3]
    rows, cols = shape
    n = len(col)
    fits = (
        tuple(lines.shape) == tuple(shape)
        and len(row_ptr) == rows + 1
        and all(len(a) == n for a in arrays[2:])
        and (n == 0 or (int(row_ptr[0]) == 0 and int(row_ptr[-1]) == n and bool((np.diff(row_ptr) >= 0).all())))
        and (n == 0 or (int(col.min()) >= 0 and int(count.min()) >= 0 and int((col + count).max()) <= cols))
    )
    if not fits:
        raise ValueError(f"line map of shape {lines.shape} has segments that do not fit a {shape} lattice")
    return arrays


def _addresses(arrays: tuple[Any, ...], lines: Any) -> list[Any]:
    """The kernels' segment arguments: the arrays' addresses, then the window's offsets (``lines.offset_xy``)."""
    return [*(a.ctypes.data for a in arrays), *(float(v) for v in lines.offset_xy)]


def _check(rc: int, name: str) -> None:
    if rc != 0:
        raise MemoryError(f"compiled kernel {name}: out of memory for its row buffers")


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


def _plane_stride(n: int) -> int:
    """Values from one plane of taps to the next for planes of ``n`` values: ``n`` rounded up to a cache
    line (16 float32), then on by lines until the planes no longer start within 256 bytes of one another
    modulo 4 KiB, where they would share the L1 cache's sets and a pixel's ~8 reads would evict each other
    (planes of 512 x 476 pixels are exactly 238 pages)."""
    stride = -(-n // 16) * 16
    while min((stride * 4) % 4096, 4096 - (stride * 4) % 4096) < 256:
        stride += 16
    return stride


TAPS_BLOCK_PX = 1 << 18
"""Pixels of a map (whole rows) whose average taps are made and summed at a time: a block's taps (~9 MB at
three taps a side) are still in the cache when the sums read them. A case-study window (512 x 476) is
one block; a 4096² map's taps whole were ~600 MB of fresh pages a call, and the compiled average ran
slower than NumPy's (18.5 against 22.3 Mpx/s, ``bench/kernels.py`` across CRSs)."""


def _block_segments(segments: tuple[Any, ...], r0: int, r1: int) -> tuple[Any, ...]:
    """The segments of lattice rows ``r0`` to ``r1`` (inclusive: a block of pixel rows r0..r1-1 and the
    corner row below its last), their row offsets counted from the block's first segment."""
    row_ptr = segments[0]
    s0, s1 = int(row_ptr[r0]), int(row_ptr[r1 + 1])
    return (np.ascontiguousarray(row_ptr[r0 : r1 + 2] - s0), *(a[s0:s1] for a in segments[1:]))


def _average_taps(
    lib: Any, cmap: CoordMap, src_shape: tuple[int, int], r0: int, r1: int
) -> tuple[Any, int, int, int] | None:
    """Every footprint's taps in rows ``r0:r1`` of ``cmap`` for a source of ``src_shape`` (kept with a map
    that keeps taps): one float32 buffer of planes (:func:`_plane_stride` apart) holding the first row and
    column (int32), the weights along y (ky planes) and x (kx planes), and the weight sum of a source
    without nodata (as ``weighted.valid_weight_sum`` gives it); with the stride,
    ky and kx. None where the map's corners are NaN, infinite or absurdly far apart (the NumPy kernel
    judges those)."""
    h, w = r1 - r0, cmap.shape_yx[1]
    h_map, w_map = cmap.shape_yx
    segments = _block_segments(_segments(cmap.corners, (h_map + 1, w_map + 1)), r0, r1)
    reach = np.empty(2, np.int64)
    rc = lib.average_reach(*_addresses(segments, cmap.corners), h, w, reach.ctypes.data)
    if rc == -4:  # corners NaN, infinite or absurdly far apart: left to the NumPy kernel
        return None
    _check(rc, "average_reach")
    ky, kx = int(reach[0]), int(reach[1])
    stride = _plane_stride(h * w)
    taps = np.empty((3 + ky + kx) * stride, np.float32)
    rc = lib.average_taps(*_addresses(segments, cmap.corners), h, w, *src_shape, taps.ctypes.data, stride, ky, kx)
    _check(rc, "average_taps")
    return taps, stride, ky, kx


def resample(src: Any, nodata: float, cmap: CoordMap, method: str) -> Any | None:
    """``method`` on a reprojected map by a compiled kernel; None where none applies (a one-CRS map, a
    CuPy array, a type the kernels do not take, turned off for this run, the kernels not built)."""
    lib = kernels() if _on() else None
    if lib is None or method not in METHODS or cmap.separable or not isinstance(src, np.ndarray) or src.ndim != 2:
        return None
    if not src.dtype.isnative or src.dtype.hasobject:  # (swapped bytes, Python objects: the NumPy kernels)
        return None
    kind = src.dtype.str[1:]
    if method == "nearest" and (cmap.centres is None or src.itemsize not in (1, 2, 4, 8)):
        return None
    if method == "average" and (kind not in SUMMED_F4 or cmap.corners is None):
        return None
    if method == "bilinear":
        return _bilinear(lib, src, nodata, cmap) if kind in SUMMED_F4 and cmap.centres is not None else None
    src = np.require(src, requirements=["C", "A"])  # C-contiguous and aligned
    h, w = cmap.shape_yx
    out = np.empty((h, w), dtype=src.dtype)
    if method == "nearest":
        fill_px = np.array(nodata_fill(nodata, src.dtype, np), dtype=src.dtype)  # the fill in the source's type
        segments = _segments(cmap.centres, cmap.shape_yx)
        rc = lib.nearest_lines(
            src.ctypes.data, *src.shape, src.itemsize, fill_px.ctypes.data, *_addresses(segments, cmap.centres),
            out.ctypes.data, h, w,
        )  # fmt: skip
        if rc == -3:  # a source of 2^31 pixels a side or more: the NumPy kernel
            return None
        _check(rc, "nearest_lines")
        _count()
        return out
    lo, hi = _range(src.dtype)
    test_value, value, test_nan = _nodata_test(src.dtype, nodata)
    fill = float(nodata_fill(nodata, src.dtype, np))
    everywhere = all_valid(src, nodata, np)
    sums = getattr(lib, f"weighted_sums_{kind}")
    step = max(1, TAPS_BLOCK_PX // max(w, 1))
    for r0 in range(0, h, step):
        r1 = min(h, r0 + step)
        taps = _kept(cmap, ("fused-average", src.shape, r0, r1), _average_taps, lib, cmap, src.shape, r0, r1)
        if taps is None:
            return None
        buffer, stride, ky, kx = taps
        rc = sums(
            src.ctypes.data, *src.shape, test_value, value, test_nan, everywhere,
            buffer.ctypes.data, stride, ky, kx, fill, src.dtype.kind == "u", lo, hi, out[r0:r1].ctypes.data, r1 - r0, w,
        )  # fmt: skip
        _check(rc, "weighted_sums")
    _count()
    return out


SCRATCH_KEPT_BYTES = 64 << 20
"""Bytes of float32 scratch (the bilinear's prefiltered planes) each thread keeps between calls (fresh pages
are slow to fault in on virtual machines that hand freed memory back to their host). A source whose planes
need more is left to the NumPy kernel, which prefilters a large source by bands of rows: a 4096² output's
source is 8232², 271 MB a plane."""
_scratch = threading.local()


def _planes(n: int, count: int) -> list[Any]:
    """``count`` float32 arrays of ``n`` values (at most :data:`SCRATCH_KEPT_BYTES` in all), from this thread's
    kept scratch."""
    need = n * count
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < need:
        buf = _scratch.buf = np.empty(need, np.float32)
    return [buf[i * n : (i + 1) * n] for i in range(count)]


def _bilinear(lib: Any, src: Any, nodata: float, cmap: CoordMap) -> Any | None:
    """Bilinear on a reprojected map where each axis's stretch is a whole number (as the NumPy kernel's
    prefiltered path, ``point._bilinear_general``: the same prefilter, taps, sums and rounding); None for
    other stretches (the NumPy kernel weighs their taps one by one) and for sources whose prefiltered planes
    would pass :data:`SCRATCH_KEPT_BYTES`."""
    from pipeline.resample.common import _prefilter_stretches, _tap_polynomials, _tent_profiles

    stretch = _prefilter_stretches(*cmap.scale(np))
    if stretch is None:
        return None
    kx, ky = stretch
    src = np.require(src, requirements=["C", "A"])
    h_s, w_s = src.shape
    everywhere = all_valid(src, nodata, np)
    if h_s * w_s * 4 * (1 if everywhere else 2) > SCRATCH_KEPT_BYTES:
        return None
    # (without nodata, the NumPy kernel's separable validity: its profiles prefiltered; else unread)
    vy, vx = _tent_profiles(src.shape, stretch, np.float32, np) if everywhere else (np.ones(1, np.float32),) * 2
    planes = _planes(h_s * w_s, 1 if everywhere else 2)
    data, valid = planes[0], planes[-1]
    tents = [np.array([1.0 - k / s for k in range(1, s)] or [0.0], np.float32) for s in (kx, ky)]
    coef = np.array([c for tap in _tap_polynomials("bilinear", 1) for c in tap], np.float32)
    lo, hi = _range(src.dtype)
    test_value, value, test_nan = _nodata_test(src.dtype, nodata)
    fill = float(nodata_fill(nodata, src.dtype, np))
    h, w = cmap.shape_yx
    out = np.empty((h, w), dtype=src.dtype)
    rc = getattr(lib, f"bilinear_{src.dtype.str[1:]}")(
        src.ctypes.data, h_s, w_s, test_value, value, test_nan, everywhere, kx, ky,
        tents[0].ctypes.data, tents[1].ctypes.data, vx.ctypes.data, vy.ctypes.data, data.ctypes.data,
        valid.ctypes.data, coef.ctypes.data, *_addresses(_segments(cmap.centres, (h, w)), cmap.centres), fill, lo, hi,
        out.ctypes.data, h, w,
    )  # fmt: skip
    _check(rc, "bilinear")
    _count()
    return out
