"""The sizing model checked on this machine (``pipeline/report/sizing.py``, :func:`project_wall`): the
wall time of casestudy-x4 projected from a case-study run (same workers), and of a 2-worker run projected
from a 1-worker run (same config); then each run made and the error reported.

``python bench/projection.py``: whole ``pipeline run`` processes, ``BENCH_REPEATS`` (default 3) of each,
interleaved; medians of the report's ``wall_s`` (the run itself, without interpreter start). Needs the
casestudy and casestudy-x4 fixtures (``make fixtures``, ``make bench-scale``). Writes
``bench/results/projection.json``. ``BENCH_SCHEDULER`` (default processes) picks the executor.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import peers
from save import run_args, save_json

ROOT = peers.ROOT
OUT = os.path.join(ROOT, "out", "projection")
SCHEDULER = os.environ.get("BENCH_SCHEDULER", "processes")


def run(config: str, workers: int, name: str) -> dict:
    report = f"{OUT}/{name}.report.json"
    sets = (f"execution.scheduler={SCHEDULER}",)
    args = run_args(os.path.join(ROOT, "configs", config), f"{OUT}/{name}.zarr", report, workers, sets)
    subprocess.run([sys.executable, "-m", "pipeline", *args], check=True, cwd=ROOT)
    with open(report) as f:
        return json.load(f)


def plan_summary(config: str, workers: int) -> dict:
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run, summarise_plan
    from pipeline.report.summary import StageClock

    cfg = load_config(os.path.join(ROOT, "configs", config), [f"execution.workers={workers}"])
    clock = StageClock()
    catalog, plan = plan_run(cfg, clock)
    return summarise_plan(cfg, catalog, plan, clock)


def main() -> None:
    from pipeline.report.sizing import project_wall

    os.makedirs(OUT, exist_ok=True)
    cases = [("casestudy.yaml", 2, "casestudy-x4.yaml", 2), ("casestudy.yaml", 1, "casestudy.yaml", 2)]
    results = []
    for src_cfg, src_w, dst_cfg, dst_w in cases:
        base, target = f"{src_cfg[:-5]}-w{src_w}", f"{dst_cfg[:-5]}-w{dst_w}"
        run(src_cfg, src_w, base)  # warm-up: page cache, index
        run(dst_cfg, dst_w, target)
        reports: dict[str, list[dict]] = {base: [], target: []}
        for _ in range(peers.REPEATS):
            reports[base].append(run(src_cfg, src_w, base))
            reports[target].append(run(dst_cfg, dst_w, target))
        measured = {k: statistics.median(r["wall_s"] for r in v) for k, v in reports.items()}
        summary = plan_summary(dst_cfg, dst_w)
        projections = [project_wall(r, summary, dst_w)["wall_s"] for r in reports[base]]
        projected = statistics.median(projections)
        error = projected / measured[target] - 1
        results.append({"from": base, "to": target, "measured_s": measured, "projected_s": projected, "error": error})
        print(
            f"{base} ({measured[base]:.2f} s) -> {target}: projected {projected:.2f} s, measured "
            f"{measured[target]:.2f} s, error {error:+.1%} ({peers.REPEATS} interleaved runs, {SCHEDULER})",
            flush=True,
        )
    print("saved", save_json("projection", {"repeats": peers.REPEATS, "load": os.getloadavg(), "results": results}))


if __name__ == "__main__":
    main()
