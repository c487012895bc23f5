"""Where a worker's memory goes: one process runs, on one thread, the partitions that one of ``N`` worker
processes would run (``bench/split_run.py``'s split; after each partition of either worker, it forgets the
maps no partition left reads, as :mod:`pipeline.execute.maplife` has a worker do), then reports its
resident memory after the warm-up, at its largest after a task and at the end, what Python and NumPy
hold at the end (``tracemalloc``: the coordinate-map cache, the judged mask windows, the rest), and the
same run with GDAL's block cache bounded to 1 MB (``GDAL_CACHEMAX``; a worker's own bound is
:data:`pipeline.execute.workers.WORKER_GDAL_CACHE_MB`), whose difference is what that cache held.

``python bench/memory.py [CONFIG] [N]`` (defaults: ``configs/cloudy.yaml``, 2); writes
``bench/results/memory.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from save import save_json  # noqa: E402
from split_run import my_partitions  # noqa: E402


def measure(config: str, n: int) -> dict[str, float]:
    """This process's figures for worker 0 of ``n`` on ``config`` (run in a fresh process by :func:`main`)."""
    import tracemalloc

    from pipeline.execute.workers import import_rasterio, tune_malloc

    tune_malloc()
    import_rasterio()
    from pipeline.config import load_config
    from pipeline.execute.maplife import MapLives, forget
    from pipeline.execute.masks import MASKS
    from pipeline.execute.runner import _prepare_store, plan_run, task_context
    from pipeline.execute.task import run_partition
    from pipeline.execute.warmup import rss_mb, warm_up
    from pipeline.resample.warp import MAPS

    out = os.path.join(ROOT, "out", "memory")
    cfg = load_config(config, [f"output.path={out}/memory.zarr", "execution.on_error=fail"])
    catalog, plan = plan_run(cfg)
    _prepare_store(cfg, plan, overwrite=True, resume=False)
    ctx = task_context(cfg, plan)
    warm_up(None, ctx, tuple(sorted(set(catalog.tiles["crs"]))), local=True)
    warm = rss_mb()
    parts = list(plan.partitions)
    lives = MapLives(parts)
    mine = set(my_partitions([p.cost_bytes for p in parts], 0, n))
    tracemalloc.start()
    top = warm
    for k in sorted(range(len(parts)), key=lambda k: (-parts[k].cost_bytes, k)):  # (the split's order)
        if k in mine:
            run_partition(parts[k], ctx)
            top = max(top, rss_mb())
        forget(lives.dead(k))  # as a worker is told: the maps no partition left reads
    traced, traced_peak = tracemalloc.get_traced_memory()
    return {
        "rss_warm_mb": warm,
        "rss_top_mb": top,
        "rss_end_mb": rss_mb(),
        "traced_mb": traced / 1e6,
        "traced_peak_mb": traced_peak / 1e6,
        "maps_mb": MAPS.bytes / 1e6,
        "masks_mb": MASKS.bytes / 1e6,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]))))
        return
    config = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "configs/cloudy.yaml")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = {}
    for name, env in (("default", {}), ("gdal_cache_1", {"GDAL_CACHEMAX": "1"})):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", config, str(n)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **env})
        runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
    d, c = runs["default"], runs["gdal_cache_1"]
    gdal = d["rss_end_mb"] - c["rss_end_mb"]
    rest = d["rss_end_mb"] - d["rss_warm_mb"] - d["traced_mb"] - gdal
    print(f"one of {n} workers on {os.path.relpath(config, ROOT)}, its share of the partitions on one thread:")
    print(f"  resident after imports and warm-up   {d['rss_warm_mb']:7.0f} MB")
    print(f"  resident at its largest, after a task {d['rss_top_mb']:6.0f} MB")
    print(f"  resident at the end                  {d['rss_end_mb']:7.0f} MB")
    print(f"    coordinate-map cache (MAPS)        {d['maps_mb']:7.0f} MB")
    print(f"    judged mask windows (MASKS)        {d['masks_mb']:7.0f} MB")
    print(f"    other Python/NumPy (tracemalloc)   {d['traced_mb'] - d['maps_mb'] - d['masks_mb']:7.0f} MB")
    print(f"    GDAL's block cache (vs a 1 MB cap) {gdal:7.0f} MB")
    print(f"    not traced (allocator, GDAL, ...)  {rest:7.0f} MB")
    print("saved", save_json("memory", {"config": config, "workers": n, "runs": runs}))


if __name__ == "__main__":
    main()
