"""GPU parity and speed of the resample kernels: needs only numpy and cupy (and this package's
pure ``pipeline.resample``), so it runs on a bare GPU machine.

For each kernel method, three maps (``same``: one CRS, a 2x reduction with a quarter-pixel offset;
``reproj``: a rotated 2x reduction given as line maps, the shape of a cross-zone reprojection;
``up3``: one CRS, aligned 3x upsampling reaching 8 pixels past the source's top-left corner, the
footprint methods' cut-and-gather fast path),
sizes 256^2 .. 8192^2 (``GPU_CHECK_SIZES``), uint16 and float32: runs both backends on the same
input, asserts GPU == CPU (nearest, mode, min, max and median exact; the others within 1e-3
relative), and prints CPU time against GPU time including host->device and device->host transfers
(pinned host memory), plus the size from which the GPU wins (break-even). Exit 2 when there is no
usable GPU. ``GPU_CHECK_METHODS`` narrows the methods.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.resample.kernels import KERNEL_METHODS, CoordMap, LineMap, resample  # noqa: E402

SIZES = [int(s) for s in os.environ.get("GPU_CHECK_SIZES", "256,512,1024,2048,4096,8192").split(",")]
METHODS = os.environ.get("GPU_CHECK_METHODS", ",".join(KERNEL_METHODS)).split(",")
EXACT = ("nearest", "mode", "min", "max", "median")


def rotated_lines(n: int, offset: float) -> LineMap:
    """One straight segment per row: a 1.5 degree rotation, 2 source pixels per destination pixel."""
    th = np.radians(1.5)
    r = np.arange(n) + offset
    c, s = 2 * np.cos(th), 2 * np.sin(th)
    return LineMap(shape=(n, n), row_ptr=np.arange(n + 1), col=np.zeros(n, "i8"), count=np.full(n, n, "i8"),
                   t0=np.zeros(n), x0=20.0 + c * offset - s * r, dx=np.full(n, c), y0=20.0 + c * r + s * offset,
                   dy=np.full(n, s))  # fmt: skip


def maps(case: str, n: int, xp: object) -> CoordMap:
    """``same``: a 2x reduction with a quarter-pixel offset (not the aligned block fast path);
    ``reproj``: the rotated line maps, pixel centres and corners; ``up3``: 3 destination pixels per
    source pixel on shared edges, starting 8 destination pixels before the source."""
    if case == "same":
        edges = np.arange(n + 1, dtype="f8") * 2.0 + 0.25
        cmap = CoordMap((n, n), xe=edges, ye=edges, scale_xy=(0.5, 0.5))
    elif case == "up3":
        edges = (np.arange(n + 1, dtype="f8") - 8) / 3
        cmap = CoordMap((n, n), xe=edges, ye=edges, scale_xy=(3.0, 3.0))
    else:
        cmap = CoordMap((n, n), centres=rotated_lines(n, 0.5), corners=rotated_lines(n + 1, 0.0), scale_xy=(0.5, 0.5))
    return cmap.to(xp)


def main() -> int:
    try:
        import cupy
    except Exception as e:  # noqa: BLE001
        print(f"no GPU: CuPy is not importable ({e})")
        return 2
    if cupy.cuda.runtime.getDeviceCount() < 1:
        print("no GPU: no CUDA device")
        return 2
    print(f"{'method':<9}{'map':<7}{'dtype':<8}{'size':>6}{'cpu ms':>10}{'gpu ms':>10}{'speedup':>9}")
    ok = True
    cases = [(m, c, d) for m in METHODS for c in ("same", "reproj", "up3") for d in ("uint16", "float32")]
    for method, case, dtype in cases:
        breakeven = None
        for n in SIZES:
            rng = np.random.default_rng(0)
            src = (rng.random((2 * n + 48, 2 * n + 48)) * 4000 + 1).astype(dtype)
            if method == "mode":  # few distinct values, so the mode means something
                src = (src // 500 * 500 + 1).astype(dtype)
            src[: n // 4, : n // 4] = 0
            t = time.perf_counter()
            cpu = resample(src, 0.0, maps(case, n, np), method)
            cpu_s = time.perf_counter() - t
            pinned = cupy.cuda.alloc_pinned_memory(src.nbytes)
            host = np.frombuffer(pinned, dtype=src.dtype, count=src.size).reshape(src.shape)
            host[:] = src
            resample(cupy.asarray(host), 0.0, maps(case, n, cupy), method)  # warm-up (kernel compilation)
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            gpu = resample(cupy.asarray(host), 0.0, maps(case, n, cupy), method).get()
            gpu_s = time.perf_counter() - t
            same = (
                np.array_equal(cpu, gpu)
                if method in EXACT
                else np.allclose(cpu.astype("f8"), gpu.astype("f8"), rtol=1e-3, atol=1)
            )
            ok &= bool(same)
            if breakeven is None and gpu_s < cpu_s:
                breakeven = n
            print(f"{method:<9}{case:<7}{dtype:<8}{n:>6}{cpu_s * 1e3:10.1f}{gpu_s * 1e3:10.1f}"
                  f"{cpu_s / gpu_s:8.1f}x" + ("" if same else "  MISMATCH"), flush=True)  # fmt: skip
        print(f"{method:<9}{case:<7}{dtype:<8} break-even: {breakeven or 'never'}")
    print("parity:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
