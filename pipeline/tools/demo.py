"""``pipeline demo``: the case study at fixture scale, and what the full scale needs.

The published case study resampled and wrote 192,000 satellite files (7 TB)
in three minutes on a cluster. The ``casestudy`` fixture is 1/1000 of it by
file count. The demo runs it, then answers "what would 7 TB in 3 minutes take": the
measured per-byte costs scaled to the case study's 7 TB, with the driver's serial
planning measured on a virtual 192,000-file index of the same layout (no rasters), and the bucket
priced at stated assumptions (the fixture is read from local disk: :mod:`pipeline.report.network_sizing`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any


def run_demo(
    project_root: str,
    workers: int | None = None,
    echo: Callable[[str], Any] = print,
    latency_ms: float | None = None,
) -> int:
    """``pipeline demo``: write the case-study fixtures (once), run them, print the breakdown and the answer
    to "what would 7 TB in 3 minutes take" at the measured costs, the bucket's requests priced at
    ``latency_ms`` each (default :data:`~pipeline.report.network_sizing.DEFAULT_LATENCY_MS`); the exit code."""
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run, run, summarise_plan
    from pipeline.report.sizing import CASE_STUDY_QUESTION, FULL_FILES, format_estimate, project_case_study
    from pipeline.report.summary import StageClock, format_report
    from pipeline.tools.fixtures import write_fixtures, write_virtual_index

    fixture = os.path.join(project_root, "data_fixtures", "casestudy")
    if len(glob.glob(os.path.join(fixture, "*", "*.tif"))) < 192:
        echo(f"making the casestudy fixture under {fixture} ...")
        write_fixtures(fixture, "casestudy", seed=0)
    overrides = [f"execution.workers={workers}"] if workers else []
    config = load_config(os.path.join(project_root, "configs", "casestudy.yaml"), overrides)
    echo(f"running {config.source}: {config.inputs.paths[0]} -> {config.output.path}")
    result = run(config, overwrite=True)
    echo(format_report(result.report))

    # The driver's serial work at full scale, measured: a virtual index of 192,000 tiles of this layout,
    # planned as a run would plan it (no raster needed).
    full = os.path.join(project_root, "data_fixtures", "casestudy-full")
    if not os.path.exists(os.path.join(full, "index.parquet")):
        write_virtual_index(full, "casestudy", FULL_FILES)
    full_config = load_config(os.path.join(full, "config.yaml"))
    clock = StageClock()
    catalog, plan = plan_run(full_config, clock)
    summary = summarise_plan(full_config, catalog, plan, clock)
    estimate = project_case_study(result.report, driver_s=summary["driver_s"], latency_ms=latency_ms)
    echo("")
    echo(
        format_estimate(
            estimate,
            f"{CASE_STUDY_QUESTION}\n  (this run's per-byte costs scaled to 7 TB; the driver's planning of "
            f"{summary['inputs']['files']:,} indexed files measured: {summary['driver_s']:.1f} s)",
        )
    )
    echo(f"\nstore:  {config.output.path}\nreport: {config.report_path}")
    return result.exit_code
