"""How much of the coordinate-map cache a run holds that it will not use again: the ceiling of any eviction.

``.venv/bin/python -W ignore bench/map_liveness.py CONFIG [CONFIG ...]``

Runs each config in this process on one thread (``execution.scheduler=threads``, one worker: the plan's
order), recording every use of each map of :data:`pipeline.resample.warp.MAPS` and its size once kept.
Prints the peak bytes the cache holds with no eviction under its bound (what a run holds now, the bound
not reached), with each map dropped right after its last use (perfect eviction: what a run would hold
if it knew its future), and with each map dropped once every map of its destination block has had its
last use (the block's chunks done: what a driver counting finished chunks could tell its workers).
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def peak(events: list[tuple[float, int]]) -> int:
    """The largest running sum of (time, +/- bytes) events in time order."""
    level = top = 0
    for _, b in sorted(events):
        level += b
        top = max(top, level)
    return top


def measure(config_path: str) -> dict[str, Any]:
    import pipeline.resample.warp as warp
    from pipeline.config import load_config
    from pipeline.execute.runner import run

    uses: dict[Any, list[float]] = collections.defaultdict(list)
    sizes: dict[Any, int] = {}
    get, settle = warp.MapCache.get, warp.MapCache.settle
    import pipeline.execute.task as task

    inner = task._run_partition
    current: list[Any] = [None]
    ends: dict[Any, float] = {}
    used_in: dict[Any, set[Any]] = collections.defaultdict(set)

    def tracked(partition: Any, *args: Any, **kwargs: Any) -> Any:
        current[0] = partition.key
        try:
            return inner(partition, *args, **kwargs)
        finally:
            ends[partition.key] = time.perf_counter()

    def counted_get(self: Any, *args: Any, **kwargs: Any) -> Any:
        key, cmap = get(self, *args, **kwargs)
        uses[key].append(time.perf_counter())
        used_in[key].add(current[0])
        return key, cmap

    def sized_settle(self: Any, key: Any, cmap: Any) -> None:
        settle(self, key, cmap)
        sizes[key] = cmap.nbytes()

    warp.MapCache.get, warp.MapCache.settle = counted_get, sized_settle  # type: ignore[method-assign]
    task._run_partition = tracked  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sets = [f"output.path={tmp}/cube.zarr", "execution.scheduler=threads", "execution.workers=1"]
            run(load_config(config_path, sets), overwrite=True)
    finally:
        warp.MapCache.get, warp.MapCache.settle = get, settle  # type: ignore[method-assign]
        task._run_partition = inner  # type: ignore[assignment]
    block_end: dict[Any, float] = collections.defaultdict(float)
    for key, times in uses.items():
        block_end[key[2]] = max(block_end[key[2]], times[-1])  # key[2]: the destination block's transform
    eps = 1e-9
    kept = [(t[0], sizes.get(k, 0)) for k, t in uses.items()]
    last_use = kept + [(t[-1] + eps, -sizes.get(k, 0)) for k, t in uses.items()]
    block_done = kept + [(block_end[k[2]] + eps, -sizes.get(k, 0)) for k in uses]
    part_done = kept + [(max(ends[p] for p in used_in[k]) + eps, -sizes.get(k, 0)) for k in uses]
    return {
        "after_partition_done_mb": peak(part_done) / 1e6,
        "partitions": len(ends),
        "maps": len(uses),
        "uses": sum(len(t) for t in uses.values()),
        "blocks": len(block_end),
        "no_eviction_mb": peak(kept) / 1e6,
        "after_last_use_mb": peak(last_use) / 1e6,
        "after_block_done_mb": peak(block_done) / 1e6,
    }


def main() -> None:
    for path in sys.argv[1:] or [os.path.join(ROOT, "configs", "cloudy.yaml")]:
        m = measure(path)
        print(
            f"{path}: {m['maps']} maps used {m['uses']} times over {m['blocks']} destination blocks; peak held "
            f"{m['no_eviction_mb']:.0f} MB with no eviction, {m['after_last_use_mb']:.0f} MB dropping each map "
            f"after its last use, {m['after_partition_done_mb']:.0f} MB after the last partition using it, "
            f"{m['after_block_done_mb']:.0f} MB dropping them when their block is done ({m['partitions']} partitions)"
        )


if __name__ == "__main__":
    main()
