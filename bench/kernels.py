"""Array kernels against GDAL's warper on the same arrays: Mpx/s per method, one core.

Per method, output size (1024^2, 4096^2) and case (cross-CRS: 10 m zone 31 onto 20 m zone 32;
same-CRS: 10 m onto 20 m, half-pixel offset), both engines run interleaved ``REPEATS`` times on
identical inputs; medians and the kernels/GDAL speed ratio. ``aligned``: same CRS, shared pixel
edges. Each kernel call builds its coordinate map afresh (the pipeline's cache of maps shared by a
tile's bands is cleared), and the process runs with the workers' allocator settings. Rates by wall
time and by the thread's CPU time (both engines run on the calling thread; on a shared virtual
machine CPU time leaves out the time the host gave the core to someone else). Writes
``bench/results/kernels.json`` (``BENCH_SAVE_AS`` renames it). ``BENCH_METHODS``,
``BENCH_SIZES``, ``BENCH_CASES`` and ``BENCH_REPEATS`` narrow or lengthen a run.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from save import save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

from pipeline.execute.workers import tune_malloc  # noqa: E402
from pipeline.planning.grid import transform_points  # noqa: E402
from pipeline.planning.jobs import SourceWindow  # noqa: E402
from pipeline.resample.kernels import KERNEL_METHODS  # noqa: E402
from pipeline.resample.warp import _origin_free_lines, warp_window  # noqa: E402

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
METHODS = tuple(os.environ.get("BENCH_METHODS", ",".join(KERNEL_METHODS)).split(","))
SIZES = tuple(int(n) for n in os.environ.get("BENCH_SIZES", "1024,4096").split(","))
CASES = tuple(os.environ.get("BENCH_CASES", "cross,same,aligned").split(","))


def case(name: str, n_out: int) -> tuple[np.ndarray, SourceWindow, tuple[float, ...]]:
    n_src = 2 * n_out + 40
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:n_src, 0:n_src]
    src = np.clip(2000 + 800 * np.sin(xx / 37.0) * np.cos(yy / 53.0) + rng.normal(0, 2, (n_src, n_src)), 1, None)
    src = src.astype("u2")
    if name == "cross":
        crs, x0, y0 = "EPSG:32631", 700_000.0, 4_990_000.0
        tx, ty = transform_points(crs, "EPSG:32632", np.array([x0 + 200.0]), np.array([y0 - 200.0]))
        dst = (20.0, 0.0, round(tx[0] / 20) * 20, 0.0, -20.0, round(ty[0] / 20) * 20)
    elif name == "same":
        crs, x0, y0 = "EPSG:32632", 300_000.0, 4_990_000.0
        dst = (20.0, 0.0, x0 + 205.0, 0.0, -20.0, y0 - 205.0)
    else:  # aligned: 10 m onto 20 m with shared pixel edges, the usual case for one sensor's bands
        crs, x0, y0 = "EPSG:32632", 300_000.0, 4_990_000.0
        dst = (20.0, 0.0, x0 + 200.0, 0.0, -20.0, y0 - 200.0)
    return src, SourceWindow("mem", -1, (0, 0, n_src, n_src), (10.0, 0.0, x0, 0.0, -10.0, y0), crs, 0.0), dst


def main() -> None:
    tune_malloc()  # the allocator settings the pipeline's workers run with
    rows = []
    for n in SIZES:
        for name in CASES:
            src, win, dst = case(name, n)
            for method in METHODS:
                wall: dict[str, list[float]] = {"kernels": [], "gdal": []}
                cpu: dict[str, list[float]] = {"kernels": [], "gdal": []}
                for _ in range(REPEATS):
                    for engine in ("kernels", "gdal"):
                        _origin_free_lines.cache_clear()  # each call maps afresh, as GDAL does
                        t, c = time.perf_counter(), time.thread_time()
                        warp_window(src, win, (n, n), dst, "EPSG:32632", 0.0, method, engine=engine)
                        wall[engine].append(time.perf_counter() - t)
                        cpu[engine].append(time.thread_time() - c)
                mpx = {e: n * n / 1e6 / statistics.median(v) for e, v in wall.items()}
                mpx_cpu = {e: n * n / 1e6 / statistics.median(v) for e, v in cpu.items()}
                rows.append(
                    {
                        "size": n,
                        "case": name,
                        "method": method,
                        "kernels_Mpx_s": mpx["kernels"],
                        "gdal_Mpx_s": mpx["gdal"],
                        "ratio": mpx["kernels"] / mpx["gdal"],
                        "kernels_Mpx_cpu_s": mpx_cpu["kernels"],
                        "gdal_Mpx_cpu_s": mpx_cpu["gdal"],
                        "ratio_cpu": mpx_cpu["kernels"] / mpx_cpu["gdal"],
                    }
                )
                r = rows[-1]
                print(
                    f"{n:>5} {name:<8}{method:<9} kernels {r['kernels_Mpx_s']:7.1f} Mpx/s  "
                    f"gdal {r['gdal_Mpx_s']:7.1f} Mpx/s  ratio {r['ratio']:.2f}x  "
                    f"(CPU time: {r['kernels_Mpx_cpu_s']:.1f} / {r['gdal_Mpx_cpu_s']:.1f}, {r['ratio_cpu']:.2f}x)",
                    flush=True,
                )
    save_json(os.environ.get("BENCH_SAVE_AS", "kernels"), rows)


if __name__ == "__main__":
    main()
