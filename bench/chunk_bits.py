"""What the same bits at any chunk size cost: this tree against another (``BENCH_BASE``, e.g. a checkout of
main before the change), side by side, taking turns.

1. Coordinate maps and kernels, in one process per tree and round: the case study's plan
   (``configs/casestudy.yaml``, its 512² chunks) gives every (source window, chunk block) pair that is
   reprojected across zones; for each distinct one, its map made afresh (``compute_coord_map``, the map
   caches emptied first) and the method's kernel run on a synthetic all-valid uint16 window of its shape
   (``warp._resample_kernels``, compiled kernels where built, the taps made with each map). Seconds
   (wall, and the thread's CPU time) summed over the windows, the least of ``BENCH_PASSES`` passes
   (default 10).
2. Whole processes: ``pipeline run configs/casestudy.yaml --workers 2`` with each tree on ``PYTHONPATH``;
   wall and the report's ``stage_task_s.resample``.

``BENCH_REPEATS`` rounds (default 3) after a warm-up of each; medians, and medians of each round's ratio
(this tree / base: drift on a shared machine cancels). Writes ``bench/results/chunk_bits.json``.

    BENCH_BASE=/path/to/main .venv/bin/python bench/chunk_bits.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from save import run_args, save_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
METHODS = os.environ.get("BENCH_METHODS", "average,bilinear,nearest").split(",")
PASSES = int(os.environ.get("BENCH_PASSES", "10"))
MAPS = os.environ.get("BENCH_MAPS", "1") != "0"
"""``BENCH_MAPS=0``: section 2 alone."""


def measure_maps(index: str) -> dict[str, float]:
    """Section 1 in this process (whichever tree ``PYTHONPATH`` names): seconds of maps and kernels."""
    import numpy as np

    import pipeline
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run
    from pipeline.planning.grid import offset_transform
    from pipeline.resample import warp

    if not pipeline.__file__.startswith(os.environ["PYTHONPATH"]):
        raise SystemExit(f"imported {pipeline.__file__}, not the tree on PYTHONPATH")
    cfg = load_config(CONFIG, [f"inputs.index={index}"])
    _, plan = plan_run(cfg)
    grid_t, grid_crs, grid_w = plan.grid.transform, plan.grid.crs, plan.grid.shape_yx[1]
    pairs: dict[Any, Any] = {}
    for part in plan.partitions:
        for job in part.jobs:
            r0, c0, h, w = job.window
            for src in job.sources:
                if warp.same_crs(src.crs, grid_crs):
                    continue
                dr, dc, dh, dw = src.dst_window or (0, 0, h, w)
                key = (src.transform, src.window, (r0 + dr, c0 + dc, dh, dw))
                pairs.setdefault(key, src)
    rng = np.random.default_rng(0)
    pixels = {key: rng.integers(1, 10000, size=src.window[2:], dtype="u2") for key, src in pairs.items()}
    out: dict[str, float] = {"windows": float(len(pairs))}
    for method in METHODS:
        passes = []
        for _ in range(PASSES):
            spent = [0.0, 0.0, 0.0, 0.0]  # maps wall, maps CPU, kernels wall, kernels CPU
            warp.MAPS.clear()
            warp._origin_free_lines.cache_clear()
            for key, src in pairs.items():
                r, c, h, w = key[2]
                span = warp.RowSpan(grid_t, grid_w, r, c)
                dst_t = offset_transform(grid_t, r, c)
                t0, c0 = time.perf_counter(), time.thread_time()
                cmap = warp.compute_coord_map(src, (h, w), dst_t, grid_crs, method, span)
                t1, c1 = time.perf_counter(), time.thread_time()
                warp._resample_kernels(pixels[key], src, cmap, 0.0, method)
                t2, c2 = time.perf_counter(), time.thread_time()
                for k, d in enumerate((t1 - t0, c1 - c0, t2 - t1, c2 - c1)):
                    spent[k] += d
            passes.append(spent)
        for k, name in enumerate(("maps_s", "maps_cpu_s", "kernels_s", "kernels_cpu_s")):
            out[f"{method}_{name}"] = min(p[k] for p in passes)
    return out


def run_tree(tree: str, index: str) -> dict[str, float]:
    """Section 1 in a fresh process importing ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    code = f"import sys, json; sys.path.insert(0, {os.path.dirname(__file__)!r}); import chunk_bits; "
    code += f"print(json.dumps(chunk_bits.measure_maps({index!r})))"
    # (cwd: the tree, which ``-c`` puts first on sys.path, before PYTHONPATH)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def whole_run(tree: str, work: str, name: str) -> dict[str, float]:
    """Section 2: one ``pipeline run`` of the case study importing ``tree``."""
    out, report = os.path.join(work, f"{name}.zarr"), os.path.join(work, f"{name}.json")
    sets = (f"inputs.index={os.path.join(work, name + '.tiles.parquet')}",)
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "pipeline", *run_args(CONFIG, out, report, 2, sets)]
    subprocess.run(cmd, env=env, cwd=tree, check=True)  # (cwd: the tree, which -m puts first on sys.path)
    wall = time.perf_counter() - t
    with open(report) as f:
        rep = json.load(f)
    return {"wall_s": wall, "resample_task_s": float(rep["stage_task_s"]["resample"])}


def main() -> None:
    base = os.environ.get("BENCH_BASE")
    if not base:
        sys.exit("set BENCH_BASE to the other tree (e.g. a checkout of main)")
    trees = {"base": os.path.abspath(base), "this": ROOT}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as work:
        for k in range(REPEATS + 1):  # round 0: warm-up
            for name, tree in trees.items():
                maps = run_tree(tree, os.path.join(work, f"{name}.maps.tiles.parquet")) if MAPS else {}
                run = whole_run(tree, work, name)
                if k:
                    rounds[name].append(maps)
                    runs[name].append(run)
                print(f"round {k} {name}: {maps} {run}", flush=True)
    result: dict[str, Any] = {"base": trees["base"], "repeats": REPEATS, "median": {}, "ratio_this_over_base": {}}
    for source in (rounds, runs) if MAPS else (runs,):
        for key in source["this"][0]:
            series = {n: [r[key] for r in source[n]] for n in trees}
            result["median"][key] = {n: statistics.median(v) for n, v in series.items()}
            ratios = [t / b for t, b in zip(series["this"], series["base"], strict=True) if b]
            result["ratio_this_over_base"][key] = statistics.median(ratios) if ratios else None
    print(json.dumps(result, indent=1))
    print("wrote", save_json("chunk_bits", result))


if __name__ == "__main__":
    main()
