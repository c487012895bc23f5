"""Temporal reductions (``pipeline/resample/reduce.py``) on one core.

1. The median of a (n_dates, 1024, 1024) uint16 stack with ~40% nodata (0), n = 8, 16, 32:
   ``np.nanmedian`` on the float32 stack with NaN (what a composite would call without this module), the
   stack sorted along the dates (transposed to (pixels, dates) first), the :class:`Reduction`'s sorting
   network, and a numba kernel per pixel (insertion sort of the clear values; compiled here, not cached,
   its first call timed apart). Each checked to give the same values as the network.
2. The streaming reducers' cost per layer added (mean, min, max, first, last, count) and their result.

Medians of ``BENCH_REPEATS`` (default 5; 3 for nanmedian) after a warm call, ms per 1024² chunk and
Mpx/s (output pixels per second), with the workers' malloc settings. ``python bench/reduce.py``;
writes ``bench/results/reduce.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from save import save_json  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pipeline.execute.workers import tune_malloc  # noqa: E402
from pipeline.resample.reduce import Reduction  # noqa: E402

SHAPE = (1024, 1024)
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))


def timed(fn, repeats: int = REPEATS, setup=None) -> float:  # type: ignore[no-untyped-def]
    """Median seconds of ``repeats`` calls ``fn(setup())`` (``fn()`` without ``setup``; ``setup`` untimed)
    after a warm one."""
    times = []
    for i in range(repeats + 1):
        args = (setup(),) if setup else ()
        t = time.perf_counter()
        fn(*args)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def stack_u16(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    stack = rng.integers(1, 10000, (n, *SHAPE), dtype="uint16")
    stack[rng.random(stack.shape) < 0.4] = 0
    return stack


def median_network(stack: np.ndarray) -> np.ndarray:
    return added(stack).result()[0]


def added(stack: np.ndarray) -> Reduction:
    """A median :class:`Reduction` with every layer of ``stack`` added (each copied, nodata mapped)."""
    red = Reduction("median", SHAPE, stack.dtype, 0.0)
    for layer in stack:
        red.add(layer)
    return red


def median_sort(stack: np.ndarray) -> np.ndarray:
    """Nodata to 65535 (sorts last), (pixels, dates) sorted per row, the middle one or two gathered."""
    n = stack.shape[0]
    rows = np.ascontiguousarray(np.where(stack == 0, np.uint16(65535), stack).reshape(n, -1).T)
    rows.sort(axis=1)
    count = (stack != 0).sum(axis=0, dtype="i4").reshape(-1)
    lo = np.take_along_axis(rows, (np.maximum(count - 1, 0) // 2)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(rows, (count // 2)[:, None], axis=1)[:, 0]
    out = np.rint((lo.astype("f8") + hi) / 2).astype("uint16")
    out[count == 0] = 0
    return out.reshape(SHAPE)


def median_nan(floats: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels
        return np.nanmedian(floats, axis=0)


def numba_kernel():  # type: ignore[no-untyped-def]
    """The per-pixel insertion sort, or None without numba."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(nogil=True)
    def median_pixels(stack, nodata, out):  # type: ignore[no-untyped-def]
        n, size = stack.shape
        buf = np.empty(n, stack.dtype)
        for p in range(size):
            k = 0
            for d in range(n):
                v = stack[d, p]
                if v != nodata:
                    j = k
                    while j > 0 and buf[j - 1] > v:
                        buf[j] = buf[j - 1]
                        j -= 1
                    buf[j] = v
                    k += 1
            if k == 0:
                out[p] = nodata
            else:
                out[p] = np.rint((np.float64(buf[(k - 1) // 2]) + np.float64(buf[k // 2])) / 2.0)

    return median_pixels


def medians() -> list[dict]:
    rows = []
    kernel = numba_kernel()
    for n in (8, 16, 32):
        stack = stack_u16(n)
        floats = stack.astype("float32")
        floats[stack == 0] = np.nan
        want = median_network(stack)
        assert np.array_equal(median_sort(stack), want)
        ref = median_nan(floats)
        assert np.array_equal(np.where(np.isnan(ref), 0, np.rint(ref)).astype("uint16"), want)
        row = {
            "n": n,
            "nanmedian_s": timed(lambda f=floats: median_nan(f), min(REPEATS, 3)),
            "sort_s": timed(lambda s=stack: median_sort(s)),
            "network_s": timed(lambda s=stack: median_network(s)),
            "network_adds_s": timed(lambda s=stack: added(s)),
        }
        row["network_result_s"] = timed(lambda red: red.result(), setup=lambda s=stack: added(s))
        if kernel is not None:
            flat = stack.reshape(n, -1)
            out = np.empty(flat.shape[1], "uint16")
            if not rows:  # numba compiles on the first call of a signature: on 2 x 2 pixels, timed apart
                t = time.perf_counter()
                kernel(flat[:, :4].copy(), np.uint16(0), out[:4])
                row["numba_compile_s"] = time.perf_counter() - t
            kernel(flat, np.uint16(0), out)
            assert np.array_equal(out.reshape(SHAPE), want)
            row["numba_s"] = timed(lambda f=flat, o=out: kernel(f, np.uint16(0), o))
        rows.append(row)
    return rows


def streaming() -> list[dict]:
    rows = []
    layers = stack_u16(8, seed=1)
    for reducer in ("mean", "min", "max", "first", "last", "count"):

        def fold(reducer: str = reducer) -> Reduction:
            red = Reduction(reducer, SHAPE, "uint16", 0.0)
            for layer in layers:
                red.add(layer)
            return red

        add_s = timed(fold) / len(layers)
        result_s = timed(lambda red: red.result(), setup=fold)
        rows.append({"reducer": reducer, "add_s": add_s, "result_s": result_s})
    return rows


def main() -> None:
    tune_malloc()  # as a worker process runs (large arrays reuse the heap rather than fresh mappings)
    px = SHAPE[0] * SHAPE[1]
    med = medians()
    print("median of (n, 1024, 1024) uint16, ~40% nodata, one thread: ms per chunk (Mpx/s)")
    heads = ("np.nanmedian", "sort by date", "network: all", "(its adds)", "(its result)", "numba")
    print(f"{'n':>3}  " + "  ".join(f"{h:>16}" for h in heads))
    for r in med:
        cells = [r[k] for k in ("nanmedian_s", "sort_s", "network_s", "network_adds_s", "network_result_s")]
        text = [f"{1e3 * s:8.1f} ({px / s / 1e6:5.1f})" for s in [*cells, r.get("numba_s", 0.0)] if s]
        print(f"{r['n']:>3}  " + "  ".join(f"{t:>16}" for t in text))
    if "numba_compile_s" in med[0]:
        print(f"numba's compilation (first call, not cached): {med[0]['numba_compile_s']:.2f} s")
    stream = streaming()
    print("\nstreaming reducers, uint16 1024², one thread: ms per layer added (Mpx/s); ms for the result")
    for r in stream:
        print(f"{r['reducer']:>6}  {1e3 * r['add_s']:6.2f} ({px / r['add_s'] / 1e6:6.1f})  {1e3 * r['result_s']:6.2f}")
    print(save_json("reduce", {"shape": SHAPE, "repeats": REPEATS, "median": med, "streaming": stream}))


if __name__ == "__main__":
    main()
