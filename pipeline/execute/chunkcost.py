"""This machine's fixed cost per output chunk, measured once and cached (as the GPU verdict is).

A run's own chunks cannot tell a chunk's fixed cost (a file written, windows read, maps and kernel calls
set up) from its cost per MB when they all have one size: the least-squares line through points of one
size has no slope to find. So the ``chunk_size`` diagnostic and ``pipeline plan`` take the fixed part
from here: the real task code (:func:`~pipeline.execute.task.run_partition`) runs a small synthetic job
(the ``calibration`` fixture preset: two tiles in two UTM zones, a 10 m and a 20 m band, average onto a
20 m grid) on one thread at two chunk sizes, 32² and 256², and the line through all those chunks gives
(fixed seconds per chunk, seconds per MB read and written). About a second, once per machine and package
version; cached in :data:`CACHE`.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
import time
from typing import Any

from pipeline import __version__

logger = logging.getLogger(__name__)

CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pipeline", "chunk_cost.json")
PATTERN = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$"
"""The fixture's layout, ``<date>/<tile>_<band>.tif``."""
CHUNK_SIDES = (32, 256)
"""The two chunk sizes the calibration job writes (pixels a side)."""


def machine_key() -> str:
    """What a calibration holds for: this host, its CPU model and count, Python, this package's version and
    the kernels that run (the compiled library's version, or NumPy's): faster kernels make it stale."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    from pipeline.resample import compiled

    kernels = f"compiled-{compiled.ABI}" if compiled.choose()[0] else "numpy"
    return f"{platform.node()}|{model}|{os.cpu_count()}|{platform.python_version()}|{__version__}|{kernels}"


def measure_chunk_cost() -> dict[str, Any]:
    """Run the calibration job now: ``{fixed_s, per_mb_s, chunks, seconds}``."""
    from pipeline.execute.prepare import job_records
    from pipeline.report.diagnostics import compute_chunk_costs
    from pipeline.tools.fixtures import write_fixtures

    t0 = time.perf_counter()
    records = []
    with tempfile.TemporaryDirectory(prefix="pipeline-chunk-cost-") as tmp:
        write_fixtures(os.path.join(tmp, "tiles"), "calibration", workers=1)
        for side in CHUNK_SIDES:
            records += job_records(
                {
                    "inputs": {"paths": [os.path.join(tmp, "tiles", "**", "*.tif")], "pattern": PATTERN},
                    "grid": {"crs": "EPSG:32632", "resolution": 20},
                    "output": {"path": os.path.join(tmp, f"c{side}.zarr"), "chunks": {"y": side, "x": side}},
                    "execution": {"on_error": "fail"},
                }
            )
    fit = compute_chunk_costs(records)
    if fit is None:  # cannot happen with two chunk sizes; a machine that says otherwise gets no figure
        raise RuntimeError("the calibration job's chunks did not vary in size")
    fixed, per_mb, n = fit
    return {"fixed_s": fixed, "per_mb_s": per_mb, "chunks": n, "seconds": time.perf_counter() - t0}


def chunk_cost(cache: str | None = None, measure: bool = True) -> dict[str, Any] | None:
    """This machine's ``{fixed_s, per_mb_s, source, ...}``: from the cache, else measured now and cached
    (``measure``: False gives None instead of measuring)."""
    cache = cache or CACHE
    key = machine_key()
    known: dict[str, Any] = {}
    try:
        with open(cache) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    if key in known:
        return {**known[key], "source": f"calibrated ({cache})"}
    if not measure:
        return None
    try:
        measured = measure_chunk_cost()
    except Exception as e:  # noqa: BLE001 - the figure is advice: without it the check falls back on the run's fit
        logger.info("per-chunk cost not measured: %s", e)
        return None
    known[key] = measured
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = f"{cache}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(known, f, indent=1)
        os.replace(tmp, cache)
    except OSError as e:
        logger.info("per-chunk cost not cached at %s: %s", cache, e)
    return {**measured, "source": "calibrated now"}


def planned_chunk(plan: Any) -> tuple[int, float]:
    """(bytes of one output chunk, MB read and written per chunk) as the plan has them."""
    import numpy as np

    ch, cw = plan.grid.chunks_yx
    itemsize = max((np.dtype(b.dtype).itemsize for b in plan.bands), default=1)
    return ch * cw * itemsize, (plan.bytes_read + plan.bytes_out) / max(plan.n_jobs, 1) / 1e6


def small_chunks(chunk_bytes: int, n_chunks: int) -> bool:
    """Whether chunks are small enough, and many enough, for the ``chunk_size`` check to judge (only then
    is this machine's fixed cost per chunk looked up, or measured)."""
    from pipeline.report.diagnostics import GUIDE_CHUNK_BYTES, MIN_CHUNKS_TIMED

    return 0 < chunk_bytes < GUIDE_CHUNK_BYTES and n_chunks >= MIN_CHUNKS_TIMED


def plan_chunk_advice(plan: Any) -> str | None:
    """``pipeline plan``'s advice on ``output.chunks``, by the rule the run's ``chunk_size`` check applies:
    this machine's fixed cost per chunk against the planned chunk's time (fixed + per MB); None where the
    share is under :data:`~pipeline.report.diagnostics.CHUNK_FIXED_SHARE`."""
    from pipeline.report.diagnostics import CHUNK_FIXED_SHARE, chunk_fixed_share, chunk_size_advice

    chunk_bytes, mb = planned_chunk(plan)
    cost = chunk_cost() if small_chunks(chunk_bytes, plan.n_jobs) else None
    if cost is None:
        return None
    share = chunk_fixed_share(cost["fixed_s"], cost["per_mb_s"], mb)
    if share <= CHUNK_FIXED_SHARE:
        return None
    to_set = chunk_size_advice(
        plan.grid.chunks_yx, chunk_bytes, (cost["fixed_s"], cost["per_mb_s"], mb), plan.grid.shape_yx
    )
    return (
        f"chunks of {chunk_bytes / 1024:.0f} KiB: fixed costs ({cost['fixed_s'] * 1e3:.2f} ms a chunk on this "
        f"machine) ~{share:.0%} of a chunk's time; {to_set}"
    )
