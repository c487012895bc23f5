"""Geometry made once (:class:`pipeline.resample.warp.MapCache`): the case study with coordinate maps and their
tap tables kept, and without.

1. In one process: every partition of ``configs/casestudy.yaml`` run by :func:`pipeline.execute.task.run_partition`
   one after another on one thread, with the cache on (emptied before each run: only a run's own reuse
   counts) and off (``max_bytes = 0``: a map made for each window, as without the cache), taking turns,
   ``BENCH_REPEATS`` times each (default 3) after a warm-up of each. Per run: wall and resample
   task-seconds; the cache's maps reused / made and MB kept; the two cubes compared bit for bit.
2. Whole processes: ``pipeline run configs/casestudy.yaml --workers 2 --set execution.scheduler=threads``
   with the cache on and off (off: the same CLI with ``pipeline.resample.warp.MAPS.max_bytes = 0`` set first),
   taking turns; wall and the report's ``stage_task_s.resample``.

3. Reads: for every (task, file, overview level) of the plan, its windows read one by one through one
   open dataset (as :mod:`pipeline.inputs.read` does) against their union read once and sliced, taking turns;
   and the 256² blocks the windows cover, counted per window and once.

Seconds are medians; ratios are medians of each round's on / off (drift on a shared machine cancels).
``--reads``: section 3 alone. Writes ``bench/results/geometry.json``. Needs ``make fixtures``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
from save import run_args, save_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
OUT = os.path.join(ROOT, "out", "geometry")
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
MODES = ("on", "off")

CLI = (
    "import sys; from pipeline.resample import warp; warp.MAPS.max_bytes = int(sys.argv.pop(1)); "
    "from pipeline.cli import main; main()"
)


def in_process() -> dict[str, Any]:
    from pipeline.config import load_config
    from pipeline.execute.runner import _prepare_store, plan_run, task_context
    from pipeline.execute.task import run_partition
    from pipeline.resample.warp import MAP_CACHE_BYTES, MAPS

    contexts, plan = {}, None
    for mode in MODES:
        cfg = load_config(CONFIG, [f"output.path={OUT}/inprocess-{mode}.zarr", "execution.on_error=fail"])
        _, plan = plan_run(cfg)
        _prepare_store(cfg, plan, overwrite=True, resume=False)
        contexts[mode] = task_context(cfg, plan)
    assert plan is not None
    partitions = list(plan.partitions)

    def run(mode: str) -> dict[str, float]:
        MAPS.clear()
        MAPS.max_bytes = MAP_CACHE_BYTES if mode == "on" else 0
        t, cpu = time.perf_counter(), time.process_time()
        records = [run_partition(p, contexts[mode]) for p in partitions]
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        reused, made = sum(r["maps_reused"] for r in records), sum(r["maps_made"] for r in records)
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "resample_s": sum(r["resample_s"] for r in records),
            "maps_reused": reused,
            "maps_made": made,
            "kept_mb": MAPS.bytes / 1e6,
        }

    for mode in MODES:  # warm-up: page cache, GDAL, PROJ
        run(mode)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(REPEATS):
        for mode in MODES:
            runs[mode].append(run(mode))
    MAPS.max_bytes = MAP_CACHE_BYTES
    same = _same_cubes(contexts["on"].store_path, contexts["off"].store_path, [b.name for b in plan.bands])
    med = {m: {k: statistics.median(r[k] for r in runs[m]) for k in ("wall_s", "cpu_s", "resample_s")} for m in MODES}
    return {
        "partitions": len(partitions),
        "windows": plan.n_pairs,
        "runs": runs,
        "median": med,
        "resample_on_over_off": _paired(runs, "resample_s"),
        "wall_on_over_off": _paired(runs, "wall_s"),
        "cpu_on_over_off": _paired(runs, "cpu_s"),
        "same_cube": same,
    }


def _paired(runs: dict[str, list[dict[str, float]]], key: str) -> float:
    """The median over rounds of on / off (each round's two runs back to back: drift cancels)."""
    return statistics.median(a[key] / b[key] for a, b in zip(runs["on"], runs["off"], strict=True))


def _same_cubes(a: str, b: str, bands: list[str]) -> bool:
    import zarr

    ga, gb = zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r")
    filled = 0
    for band in bands:
        x, y = np.asarray(ga[band][:]), np.asarray(gb[band][:])
        if not np.array_equal(x, y):
            return False
        filled += int(np.count_nonzero(x))
    return filled > 0


def whole_process() -> dict[str, Any]:
    from pipeline.resample.warp import MAP_CACHE_BYTES

    def run(mode: str) -> dict[str, float]:
        report = f"{OUT}/run-{mode}.report.json"
        t = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-c",
                CLI,
                str(MAP_CACHE_BYTES if mode == "on" else 0),
                *run_args(CONFIG, f"{OUT}/run-{mode}.zarr", report, sets=("execution.scheduler=threads",)),
            ],
            check=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - t
        with open(report) as f:
            rep = json.load(f)
        maps = rep["execution"]["maps"]
        return {
            "wall_s": wall,
            "resample_task_s": rep["stage_task_s"]["resample"],
            "maps_reused": maps["reused"],
            "maps_made": maps["made"],
            "kept_mb": maps["kept_mb"],
        }

    for mode in MODES:
        run(mode)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(REPEATS):
        for mode in MODES:
            runs[mode].append(run(mode))
    med = {m: {k: statistics.median(r[k] for r in runs[m]) for k in ("wall_s", "resample_task_s")} for m in MODES}
    same = _same_cubes(f"{OUT}/run-on.zarr", f"{OUT}/run-off.zarr", _bands(f"{OUT}/run-on.zarr"))
    return {
        "runs": runs,
        "median": med,
        "resample_on_over_off": _paired(runs, "resample_task_s"),
        "wall_on_over_off": _paired(runs, "wall_s"),
        "same_cube": same,
    }


def _bands(path: str) -> list[str]:
    import zarr

    return [
        name for name, _ in zarr.open_group(path, mode="r").arrays() if name not in ("x", "y", "time", "spatial_ref")
    ]


def reads() -> dict[str, Any]:
    import rasterio
    from rasterio.windows import Window

    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run

    _, plan = plan_run(load_config(CONFIG, [f"output.path={OUT}/reads.zarr"]))
    groups: dict[tuple[int, str, int], list[tuple[int, int, int, int]]] = {}
    for p in plan.partitions:
        for job in p.jobs:
            for src in job.sources:
                groups.setdefault((p.index, src.path, src.overview_level), []).append(src.window)

    def union(ws: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
        r0, c0 = min(w[0] for w in ws), min(w[1] for w in ws)
        return r0, c0, max(w[0] + w[2] for w in ws) - r0, max(w[1] + w[3] for w in ws) - c0

    def blocks(w: tuple[int, int, int, int], side: int = 256) -> set[tuple[int, int]]:
        return {
            (i, j)
            for i in range(w[0] // side, (w[0] + w[2] - 1) // side + 1)
            for j in range(w[1] // side, (w[1] + w[3] - 1) // side + 1)
        }

    def one_by_one() -> None:
        for (_, path, level), ws in groups.items():
            with rasterio.open(path, **({} if level < 0 else {"overview_level": level})) as ds:
                for r0, c0, h, w in ws:
                    ds.read(1, window=Window(c0, r0, w, h))

    def at_once() -> None:
        for (_, path, level), ws in groups.items():
            u = union(ws)
            with rasterio.open(path, **({} if level < 0 else {"overview_level": level})) as ds:
                a = ds.read(1, window=Window(u[1], u[0], u[3], u[2]))
            for r0, c0, h, w in ws:
                a[r0 - u[0] : r0 - u[0] + h, c0 - u[1] : c0 - u[1] + w].copy()

    tools = {"one_by_one": one_by_one, "union": at_once}
    for fn in tools.values():
        fn()
    from peers import interleaved

    times, med = interleaved(tools, REPEATS)
    paired = statistics.median(u / o for u, o in zip(times["union"], times["one_by_one"], strict=True))
    return {
        "file_levels": len(groups),
        "windows": sum(len(ws) for ws in groups.values()),
        "window_px": sum(w[2] * w[3] for ws in groups.values() for w in ws),
        "union_px": sum(union(ws)[2] * union(ws)[3] for ws in groups.values()),
        "blocks_per_window": sum(len(blocks(w)) for ws in groups.values() for w in ws),
        "blocks_once": sum(len(set().union(*map(blocks, ws))) for ws in groups.values()),
        "times_s": times,
        "median_s": med,
        "union_over_one_by_one": paired,
    }


def main() -> None:
    if not os.path.isdir(os.path.join(ROOT, "data_fixtures", "casestudy")):
        sys.exit("no case study fixture: run `make fixtures`")
    os.makedirs(OUT, exist_ok=True)
    if sys.argv[1:] == ["--reads"]:  # the reads alone (e.g. under GDAL_CACHEMAX=0: without GDAL's block cache)
        rd = reads()
        print(
            f"reads: one by one {rd['median_s']['one_by_one']:.3f} s, union once {rd['median_s']['union']:.3f} s, "
            f"ratio {rd['union_over_one_by_one']:.2f}"
        )
        return
    inproc = in_process()
    r, m = inproc["runs"]["on"][-1], inproc["median"]
    print(f"in one process, one thread, {inproc['partitions']} partitions, {REPEATS} interleaved runs each:")
    print(
        f"  resample s  on {m['on']['resample_s']:.3f}  off {m['off']['resample_s']:.3f}  "
        f"ratio {inproc['resample_on_over_off']:.2f}"
    )
    print(
        f"  wall s      on {m['on']['wall_s']:.3f}  off {m['off']['wall_s']:.3f}  "
        f"ratio {inproc['wall_on_over_off']:.2f}"
    )
    print(
        f"  cpu s       on {m['on']['cpu_s']:.3f}  off {m['off']['cpu_s']:.3f}  ratio {inproc['cpu_on_over_off']:.2f}"
    )
    print(
        f"  maps reused {r['maps_reused']} of {r['maps_reused'] + r['maps_made']} windows, "
        f"kept {r['kept_mb']:.1f} MB; same cube: {inproc['same_cube']}"
    )
    whole = whole_process()
    w, r = whole["median"], whole["runs"]["on"][-1]
    print(f"pipeline run, threads scheduler, 2 workers, {REPEATS} interleaved runs each:")
    print(
        f"  resample task-s  on {w['on']['resample_task_s']:.3f}  off {w['off']['resample_task_s']:.3f}  "
        f"ratio {whole['resample_on_over_off']:.2f}"
    )
    print(
        f"  wall s           on {w['on']['wall_s']:.3f}  off {w['off']['wall_s']:.3f}  "
        f"ratio {whole['wall_on_over_off']:.2f}"
    )
    print(
        f"  maps reused {r['maps_reused']} of {r['maps_reused'] + r['maps_made']}, kept {r['kept_mb']:.1f} MB; "
        f"same cube: {whole['same_cube']}"
    )
    rd = reads()
    print(f"reads, {rd['file_levels']} (task, file, level) groups, {rd['windows']} windows, {REPEATS} runs each:")
    print(
        f"  one by one through one open {rd['median_s']['one_by_one']:.3f} s, union once "
        f"{rd['median_s']['union']:.3f} s, ratio {rd['union_over_one_by_one']:.2f}; 256² blocks covered "
        f"{rd['blocks_per_window']} by window, {rd['blocks_once']} once"
    )
    print(
        "saved",
        save_json(
            "geometry",
            {"repeats": REPEATS, "cores": os.cpu_count(), "in_process": inproc, "whole_process": whole, "reads": rd},
        ),
    )


if __name__ == "__main__":
    main()
