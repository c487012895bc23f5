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

from pipeline.resample.kernels import KERNEL_METHODS, resample  # noqa: E402
from pipeline.resample.parity import CASES, DTYPES, agree, build_map, build_source  # noqa: E402

SIZES = [int(s) for s in os.environ.get("GPU_CHECK_SIZES", "256,512,1024,2048,4096,8192").split(",")]
METHODS = os.environ.get("GPU_CHECK_METHODS", ",".join(KERNEL_METHODS)).split(",")


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
    cases = [(m, c, d) for m in METHODS for c in CASES for d in DTYPES]
    for method, case, dtype in cases:
        breakeven = None
        for n in SIZES:
            src = build_source(method, n, dtype)
            t = time.perf_counter()
            cpu = resample(src, 0.0, build_map(case, n, np), method)
            cpu_s = time.perf_counter() - t
            pinned = cupy.cuda.alloc_pinned_memory(src.nbytes)
            host = np.frombuffer(pinned, dtype=src.dtype, count=src.size).reshape(src.shape)
            host[:] = src
            resample(cupy.asarray(host), 0.0, build_map(case, n, cupy), method)  # warm-up (kernel compilation)
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            gpu = resample(cupy.asarray(host), 0.0, build_map(case, n, cupy), method).get()
            gpu_s = time.perf_counter() - t
            same = agree(method, cpu, gpu)
            ok &= bool(same)
            if breakeven is None and gpu_s < cpu_s:
                breakeven = n
            print(
                f"{method:<9}{case:<7}{dtype:<8}{n:>6}{cpu_s * 1e3:10.1f}{gpu_s * 1e3:10.1f}"
                f"{cpu_s / gpu_s:8.1f}x" + ("" if same else "  MISMATCH"),
                flush=True,
            )
        print(f"{method:<9}{case:<7}{dtype:<8} break-even: {breakeven or 'never'}")
    print("parity:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
