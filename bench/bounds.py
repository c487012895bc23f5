"""How close to gdalwarp's time this pipeline can get on this machine, measured.

Seven whole-process commands, interleaved, medians after a warm-up (as ``bench/peers.py``):

* the pipeline, as ``bench/peers.py`` runs it (2 workers; ``execution.scheduler: auto``: threads up to
  100 MB of planned work, a pool of processes above, so processes for the case study and casestudy-x4);
* the same run with resampling free: ``bench/free_resampling/`` on PYTHONPATH swaps the kernels for a
  copy of each source window, so it reads, plans, schedules and writes as usual (its cube is not
  resampled and is written apart);
* the same tasks on 2 processes, no scheduler: ``bench/split_run.py`` in 2 processes started together,
  each planning and running half the partitions (split by planned cost, longest first) on one thread;
  what the run's executor could reach with no executor at all (no fork server, no pipes, no records
  gathered);
* start-up alone: a Python process that imports what a run imports (the CLI, the config model, the
  stages, rasterio, numcodecs, pyarrow), as ``pipeline run`` does, and exits: the fixed cost of any
  run before its first pixel;
* gdalwarp, 2 at a time (the fastest peer);
* the pipeline and gdalwarp again, each writing its output to memory (a tmpfs folder in ``/dev/shm``,
  where this machine has one): what each run pays the disk for making its files. On an ext4 without a
  journal, as on these machines, each file made scans past the inodes its block group freed in the last
  60-360 s (ext4's ``recently_deleted``), so a loop of runs that replace their outputs makes every file
  slower the more files the loops before deleted; the pipeline's cube is ~420 files and directories,
  gdalwarp's 24 GeoTIFFs.

Then the floor from ``bench/results/floor.json`` (``bench/floor.py``: decode every needed input byte and
encode the output, over the cores): start-up alone plus the floor is a lower bound for any run here.
Writes ``bench/results/bounds.json``. ``BENCH_CONFIG=configs/casestudy-x4.yaml`` (``make bench-scale``):
the same on 4x the work (8 dates), without the floor rows; writes ``bounds-casestudy-x4.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import peers
from save import RESULTS, run_args, save_json

ROOT = peers.ROOT
FREE = os.path.join(ROOT, "bench", "free_resampling")
TARGET = {"casestudy": 0.6, "casestudy-x4": 0.5}.get(peers.NAME)
"""The target against gdalwarp: 0.6x on the case study, 0.5x on 4x its work (`make bench-scale`); the mixed
preset's is against odc-stac (``peers.TARGETS``)."""

START_ALONE = (
    "import gc; gc.disable(); from pipeline.execute.workers import import_rasterio; import_rasterio(); "
    "import pipeline.cli, pipeline.config.model, pipeline.execute.runner, pipeline.execute.task, "
    "pipeline.inputs.catalog, rasterio.warp, numcodecs, pyarrow.parquet"
)
"""What a run imports, the way ``pipeline run`` imports it (the collector off, rasterio without boto3)."""


def run_free() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [FREE, os.environ.get("PYTHONPATH")]))}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            *run_args(peers.CONFIG, f"{peers.OUT}/free.zarr", f"{peers.OUT}/free.report.json"),
        ],
        check=True,
        cwd=ROOT,
        env=env,
    )


def run_split(n: int = 2) -> None:
    script = os.path.join(ROOT, "bench", "split_run.py")
    procs = [
        subprocess.Popen([sys.executable, script, peers.CONFIG, peers.OUT, str(i), str(n)], cwd=ROOT) for i in range(n)
    ]
    if any(p.wait() != 0 for p in procs):
        sys.exit(f"{script} failed")


def run_start_alone() -> None:
    subprocess.run([sys.executable, "-c", START_ALONE], check=True, cwd=ROOT)


def main() -> None:
    os.makedirs(peers.OUT, exist_ok=True)
    grid, tiles = peers.grid_and_tiles()
    tools = {
        "pipeline": peers.run_pipeline,
        "pipeline, resampling free": run_free,
        "same tasks, 2 processes, no scheduler": run_split,
        "start-up alone": run_start_alone,
        "gdalwarp": lambda: peers.run_gdal(grid, tiles),
    }
    memory = tempfile.mkdtemp(prefix="pipeline-bounds-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    if memory is not None:
        tools["pipeline, output in memory"] = lambda: peers.run_pipeline(memory)
        tools["gdalwarp, output in memory"] = lambda: peers.run_gdal(grid, tiles, memory)
    try:
        measure(tools)
    finally:
        if memory is not None:
            shutil.rmtree(memory, ignore_errors=True)


def measure(tools: dict) -> None:
    for fn in tools.values():  # warm-up: page cache, imports, index
        fn()
    resample_s = {}
    for name in ("pipeline", "free"):
        with open(f"{peers.OUT}/{name}.report.json") as f:
            resample_s[name] = json.load(f)["stage_task_s"]["resample"]
    if resample_s["free"] > 0.5 * resample_s["pipeline"]:  # (what remains, fusion and masks, was ~13%)
        sys.exit(f"{FREE} did not replace the kernels in the run's workers: resample task-s {resample_s}")
    times, med = peers.interleaved(tools)
    gdal = med["gdalwarp"]
    rows = dict(med)
    floor_path = os.path.join(RESULTS, "floor.json")
    if os.path.exists(floor_path) and not peers.SUFFIX:  # (the floor is measured on the case study)
        with open(floor_path) as f:
            floor = json.load(f)["floor_s"]
        rows["floor: decode + encode over the cores"] = floor
        rows["lower bound: start-up + floor"] = med["start-up alone"] + floor
    print(f"{'':<40}{'median s':>10}{'vs gdalwarp':>13}")
    for k, v in rows.items():
        print(f"{k:<40}{v:10.2f}{v / gdal:12.2f}x")
    print(f"{peers.REPEATS} interleaved runs")
    memory_rows = ("pipeline, output in memory", "gdalwarp, output in memory")
    in_memory = med[memory_rows[0]] / med[memory_rows[1]] if memory_rows[1] in med else None
    if in_memory is not None:
        print(f"both writing to memory: pipeline / gdalwarp = {in_memory:.2f}")
    if TARGET is not None:
        print(f"target: <= {TARGET} x gdalwarp = {TARGET * gdal:.2f} s")
    peer_path = os.path.join(RESULTS, f"peers{peers.SUFFIX}.json")
    odc_target = peers.TARGETS.get(peers.NAME, {}).get("odc-stac")
    if odc_target and os.path.exists(peer_path):  # (odc-stac is too slow to run here as well: its last median)
        with open(peer_path) as f:
            odc = json.load(f)["medians"]["odc-stac"]
        print(f"target: <= {odc_target} x odc-stac ({odc:.2f} s in peers.py's last run) = {odc_target * odc:.2f} s")
    ratios = {k: v / gdal for k, v in rows.items()}
    if in_memory is not None:
        ratios["pipeline vs gdalwarp, both output in memory"] = in_memory
    save_json(f"bounds{peers.SUFFIX}", {"runs": times, "medians": med, "rows_s": rows, "vs_gdalwarp": ratios})


if __name__ == "__main__":
    main()
