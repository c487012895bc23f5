"""Threads, a pool of processes and a local cluster, whole ``pipeline run`` processes, on fixtures of growing
size: the measurement behind ``execution.scheduler: auto`` (:func:`pipeline.execute.schedulers.choose_scheduler`).

For each config (``configs/small.yaml``, ``configs/casestudy.yaml``, and ``configs/casestudy-x4.yaml``
where its fixture exists): ``pipeline run CONFIG --workers 2 --set execution.scheduler=S`` for S in
threads, processes and local-cluster, taking turns, ``BENCH_REPEATS`` times (default 3) after a warm-up of
each; medians, each one's ratio to threads, and the planned work (MB to read plus MB to write) that auto
compares with its bounds. Also each run's peak memory (driver, workers) from its report.
Writes ``bench/results/scheduler.json``. ``BENCH_CONFIGS`` (comma-separated paths) picks the configs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import peers
from save import run_args, save_json

ROOT = peers.ROOT
OUT = os.path.join(ROOT, "out", "scheduler")
SCHEDULERS = tuple(os.environ.get("BENCH_SCHEDULERS", "threads,processes,local-cluster").split(","))


def planned_mb(config: str) -> float:
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run

    _, plan = plan_run(load_config(config))
    return float(plan.partitions.costs().sum()) / 1e6


def runner(config: str, scheduler: str) -> tuple[str, object]:
    name = os.path.splitext(os.path.basename(config))[0]
    report = f"{OUT}/{name}-{scheduler}.report.json"

    out = f"{OUT}/{name}-{scheduler}.zarr"

    def run() -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline",
                *run_args(config, out, report, sets=(f"execution.scheduler={scheduler}",)),
            ],
            check=True,
            cwd=ROOT,
        )

    return report, run


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    default = [os.path.join(ROOT, "configs", f"{n}.yaml") for n in ("small", "casestudy", "casestudy-x4")]
    configs = os.environ.get("BENCH_CONFIGS", "").split(",") if os.environ.get("BENCH_CONFIGS") else default
    configs = [c for c in configs if os.path.exists(c)]
    if not os.path.isdir(os.path.join(ROOT, "data_fixtures", "casestudy-x4")):
        configs = [c for c in configs if "casestudy-x4" not in c]
    results = {}
    for config in configs:
        name = os.path.splitext(os.path.basename(config))[0]
        tools, reports = {}, {}
        for s in SCHEDULERS:
            reports[s], tools[s] = runner(config, s)
        for fn in tools.values():  # warm-up: page cache, imports, index
            fn()
        times, med = peers.interleaved(tools)
        memory = {}
        for s in SCHEDULERS:
            with open(reports[s]) as f:
                rep = json.load(f)
            assert rep["execution"]["scheduler"] == s, rep["execution"]
            memory[s] = {
                "driver_peak_mb": rep["memory"]["driver_peak_mb"],
                "worker_peak_mb": max(rep["memory"]["worker_peak_mb"].values(), default=0.0),
            }
        results[name] = {
            "planned_mb": planned_mb(config),
            "times_s": times,
            "median_s": med,
            "over_threads": {s: med[s] / med["threads"] for s in SCHEDULERS if "threads" in med},
            "memory": memory,
        }
        r = results[name]
        cols = "   ".join(f"{s} {med[s]:6.2f} s ({r['over_threads'].get(s, 0):.2f}x)" for s in SCHEDULERS)
        print(f"{name:<14} planned {r['planned_mb']:7.1f} MB   {cols}   ({peers.REPEATS} interleaved runs)", flush=True)
    print("saved", save_json("scheduler", {"repeats": peers.REPEATS, "cores": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
