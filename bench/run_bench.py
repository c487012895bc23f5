"""First benchmark: ``pipeline run configs/casestudy.yaml`` with 1 and 2 workers, side by side.

Whole-process runs (cluster start included), interleaved 1/2/1/2... after a
warm-up, medians reported with the 2-worker speedup. Writes
``bench/results/casestudy.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from save import run_args, save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))


def one_run(workers: int) -> dict[str, float]:
    out = os.path.join(ROOT, "out", f"bench-w{workers}.zarr")
    report = os.path.join(ROOT, "out", f"bench-w{workers}.report.json")
    cmd = [sys.executable, "-m", "pipeline", *run_args(CONFIG, out, report, workers)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    wall = time.perf_counter() - t
    with open(report) as f:
        rep = json.load(f)
    px = rep["output"]["shape"]["time"] * rep["output"]["shape"]["y"] * rep["output"]["shape"]["x"]
    px *= len(rep["output"]["bands"])
    return {
        "process_s": wall,
        "run_s": rep["wall_s"],
        "input_MB_s": rep["inputs"]["bytes"] / 1e6 / rep["wall_s"],
        "decoded_MB_s": rep["inputs"]["bytes_read"] / 1e6 / rep["wall_s"],
        "output_Mpx_s": px / 1e6 / rep["wall_s"],
    }


def main() -> None:
    one_run(2)  # warm-up: page cache, index, imports
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for _ in range(REPEATS):
        for w in (1, 2):
            runs[w].append(one_run(w))
    med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
    print(f"{'workers':<8}{'process s':>10}{'run s':>8}{'input MB/s':>12}{'decoded MB/s':>14}{'out Mpx/s':>11}")
    for w, m in med.items():
        print(
            f"{w:<8}{m['process_s']:10.2f}{m['run_s']:8.2f}{m['input_MB_s']:12.1f}"
            f"{m['decoded_MB_s']:14.1f}{m['output_Mpx_s']:11.1f}"
        )
    speedup = med[1]["run_s"] / med[2]["run_s"]
    print(f"speedup 2 vs 1 worker: {speedup:.2f}x (medians of {REPEATS} interleaved runs)")
    save_json("casestudy", {"medians": med, "runs": runs, "speedup_2v1": speedup})


if __name__ == "__main__":
    main()
