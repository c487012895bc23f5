"""The compiled kernels (C, ``pipeline/resample/_fused.c``) against the NumPy kernels, two ways.

1. Kernel calls on one core: nearest, bilinear and average on a rotated line map (``resample/parity.py``'s
   ``reproj``: the shape of a cross-zone reprojection, 2 source pixels per destination pixel), uint16,
   256² and 1024² outputs; each with a map made afresh per call and with a map that keeps its taps
   (what the pipeline's map cache gives most windows). Medians of 7 after a warm call.
2. Whole case-study runs: ``pipeline run configs/casestudy.yaml`` on threads (1 and 2 workers) and on 2
   worker processes, ``PIPELINE_COMPILED`` 0 and 1, ``BENCH_REPEATS`` (default 3) interleaved rounds;
   medians of wall and the report's task-seconds per stage: what the kernels save a whole run, and
   whether GIL-free kernels make 2 threads do twice one thread's work.

``python bench/compiled.py`` (``BENCH_PART=1`` or ``2`` runs one part). Writes ``bench/results/compiled.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import peers
from save import run_args, save_json

ROOT = peers.ROOT
OUT = os.path.join(ROOT, "out", "compiled")


def _median_ms(fn, *args) -> float:  # type: ignore[no-untyped-def]
    """Median of 7 calls ``fn(*args)``, milliseconds."""
    times = []
    for _ in range(7):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def kernel_calls() -> list[dict]:
    os.environ.pop("PIPELINE_COMPILED", None)
    sys.path.insert(0, ROOT)
    from pipeline.execute.workers import tune_malloc
    from pipeline.resample import compiled
    from pipeline.resample.footprint import resample_average
    from pipeline.resample.parity import build_map, build_source
    from pipeline.resample.point import resample_bilinear, resample_nearest

    tune_malloc()
    reference = {"nearest": resample_nearest, "bilinear": resample_bilinear, "average": resample_average}
    rows = []
    for n in (256, 1024):
        for method, numpy_kernel in reference.items():
            src = build_source(method, n, "uint16")
            fresh, kept = build_map("reproj", n, np), build_map("reproj", n, np).keeping_taps()
            kept_c = build_map("reproj", n, np).keeping_taps()
            numpy_kernel(src, 0.0, kept)
            compiled.resample(src, 0.0, kept_c, method)
            row = {
                "method": method,
                "size": n,
                "numpy_fresh_ms": _median_ms(numpy_kernel, src, 0.0, fresh),
                "compiled_fresh_ms": _median_ms(compiled.resample, src, 0.0, fresh, method),
                "numpy_kept_ms": _median_ms(numpy_kernel, src, 0.0, kept),
                "compiled_kept_ms": _median_ms(compiled.resample, src, 0.0, kept_c, method),
            }
            rows.append(row)
            print(
                f"{method:8} {n:5}²  fresh: numpy {row['numpy_fresh_ms']:7.1f} ms, compiled "
                f"{row['compiled_fresh_ms']:7.1f} ms ({row['numpy_fresh_ms'] / row['compiled_fresh_ms']:.2f}x)   "
                f"taps kept: numpy {row['numpy_kept_ms']:7.1f} ms, compiled {row['compiled_kept_ms']:7.1f} ms "
                f"({row['numpy_kept_ms'] / row['compiled_kept_ms']:.2f}x)",
                flush=True,
            )
    return rows


def runs() -> dict:
    os.makedirs(OUT, exist_ok=True)
    config = os.path.join(ROOT, "configs", "casestudy.yaml")

    def tool(flag: str, workers: int, scheduler: str = "threads"):  # type: ignore[no-untyped-def]
        name = f"c{flag}-w{workers}" + ("-processes" if scheduler == "processes" else "")

        def run() -> None:
            args = run_args(
                config, f"{OUT}/{name}.zarr", f"{OUT}/{name}.json", workers, (f"execution.scheduler={scheduler}",)
            )
            env = dict(os.environ, PIPELINE_COMPILED=flag)
            subprocess.run([sys.executable, "-m", "pipeline", *args], check=True, cwd=ROOT, env=env)

        return name, run

    tools = dict(tool(flag, w) for flag in ("0", "1") for w in (1, 2))
    tools |= dict(tool(flag, 2, "processes") for flag in ("0", "1"))
    for fn in tools.values():
        fn()
    task_s: dict[str, list[dict]] = {k: [] for k in tools}
    times: dict[str, list[float]] = {k: [] for k in tools}
    for _ in range(peers.REPEATS):
        for name, fn in tools.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
            with open(f"{OUT}/{name}.json") as f:
                rep = json.load(f)
            assert rep["execution"]["compiled_kernels"]["ran"] == name.startswith("c1"), rep["execution"]
            task_s[name].append(rep["stage_task_s"])
    out = {}
    for name in tools:
        st = {s: statistics.median(t[s] for t in task_s[name]) for s in ("read", "resample", "write")}
        out[name] = {"wall_s": statistics.median(times[name]), "task_s": st, "task_total_s": sum(st.values())}
        print(
            f"{name}: wall {out[name]['wall_s']:.2f} s, task-s read {st['read']:.2f} resample {st['resample']:.2f} "
            f"write {st['write']:.2f} (sum {out[name]['task_total_s']:.2f})",
            flush=True,
        )
    for flag in ("0", "1"):
        one, two = out[f"c{flag}-w1"], out[f"c{flag}-w2"]
        # 2 threads do (1-thread task-s / 2-thread task-s) x 2 of one thread's work per wall second
        print(
            f"PIPELINE_COMPILED={flag}: 2 threads' task-s {two['task_total_s'] / one['task_total_s']:.2f}x one "
            f"thread's (resample {two['task_s']['resample'] / one['task_s']['resample']:.2f}x); 2 threads do "
            f"{2 * one['task_total_s'] / two['task_total_s']:.2f}x one thread's work",
            flush=True,
        )
    on, off = out["c1-w2-processes"], out["c0-w2-processes"]
    print(
        f"2 worker processes: compiled {on['wall_s']:.2f} s against NumPy {off['wall_s']:.2f} s "
        f"({on['wall_s'] / off['wall_s']:.2f}x the wall); resample task-s {on['task_s']['resample']:.2f} "
        f"against {off['task_s']['resample']:.2f} ({on['task_s']['resample'] / off['task_s']['resample']:.2f}x)",
        flush=True,
    )
    return out


def main() -> None:
    part = os.environ.get("BENCH_PART", "")
    doc = {"load": os.getloadavg()}
    if part in ("", "1"):
        doc["kernel_calls"] = kernel_calls()
    if part in ("", "2"):
        doc["runs"] = runs()
    print("saved", save_json("compiled", doc))


if __name__ == "__main__":
    main()
