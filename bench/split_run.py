"""One of ``n`` processes that together run a config's partitions with no scheduler at all: the bound on
what a run's threads could reach if they scaled as separate processes do (``bench/bounds.py``).

``python bench/split_run.py CONFIG OUT I N``: imports as ``pipeline run`` does (the collector off, rasterio
without boto3, glibc's allocator tuned), plans, writes its own store ``OUT/split-I.zarr`` and runs, on one
thread, the partitions that the longest-first greedy split of their planned cost gives process ``I`` of
``N``. The ``N`` processes start together; the bound is the wall time until the last one exits.
"""

from __future__ import annotations

import gc
import os
import sys


def my_partitions(costs: list[int], i: int, n: int) -> list[int]:
    """Indices of the partitions process ``i`` of ``n`` runs: each partition, costliest first, goes to the
    process with the least planned cost so far (ties to the lowest index), as a scheduler balances them."""
    loads = [0] * n
    mine = []
    for k in sorted(range(len(costs)), key=lambda k: (-costs[k], k)):
        j = min(range(n), key=lambda j: (loads[j], j))
        loads[j] += costs[k]
        if j == i:
            mine.append(k)
    return mine


def main() -> None:
    config, out, i, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    gc.disable()
    from pipeline.execute.workers import import_rasterio, tune_malloc

    tune_malloc()
    import_rasterio()
    from pipeline.config import load_config
    from pipeline.execute.runner import _prepare_store, plan_run, task_context
    from pipeline.execute.task import run_partition

    cfg = load_config(config, [f"output.path={out}/split-{i}.zarr", "execution.on_error=fail"])
    _, plan = plan_run(cfg)
    _prepare_store(cfg, plan, overwrite=True, resume=False)
    gc.freeze()
    gc.enable()
    ctx = task_context(cfg, plan)
    partitions = list(plan.partitions)
    for k in my_partitions([p.cost_bytes for p in partitions], i, n):
        run_partition(partitions[k], ctx)
    sys.stdout.flush()
    os._exit(0)  # as `pipeline run` leaves


if __name__ == "__main__":
    main()
