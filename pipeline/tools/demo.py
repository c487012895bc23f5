"""``pipeline demo``: the case study at fixture scale, and what the full scale needs.

The published case study resampled and wrote 192,000 satellite files (7 TB)
in three minutes on a cluster. The ``casestudy`` fixture is 1/1000 of it by
file count. The demo runs it, then sizes the full archive from the measured
costs two ways: by planning a virtual 192,000-file index of the same layout
(exact bytes and windows, no rasters), and by scaling to the case study's 7 TB.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

FULL_FILES = 192_000
FULL_BYTES = 7e12
TARGET_S = 180.0


def run_demo(project_root: str, workers: int | None = None, echo: Callable[[str], Any] = print) -> int:
    """``pipeline demo``: write the case-study fixtures (once), run them, print the breakdown and the
    projection to the full 192,000-file case study; the exit code."""
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run, run, summarise_plan
    from pipeline.report.sizing import estimate_for_plan, format_estimate, project_bytes
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

    full = os.path.join(project_root, "data_fixtures", "casestudy-full")
    if not os.path.exists(os.path.join(full, "index.parquet")):
        write_virtual_index(full, "casestudy", FULL_FILES)
    full_config = load_config(os.path.join(full, "config.yaml"))
    clock = StageClock()
    catalog, plan = plan_run(full_config, clock)
    summary = summarise_plan(full_config, catalog, plan, clock)
    echo("")
    echo(
        format_estimate(
            estimate_for_plan(result.report, summary, TARGET_S),
            f"Full scale, planned: {summary['inputs']['files']:,} files of this layout ({full}/index.parquet), "
            f"{summary['tasks']:,} tasks, planned in {summary['driver_s']:.1f} s",
        )
    )
    echo(
        format_estimate(
            project_bytes(result.report, FULL_FILES, FULL_BYTES, TARGET_S),
            f"Full scale, the case study's bytes: {FULL_FILES:,} files, {FULL_BYTES / 1e12:.0f} TB "
            "(its files are ~70x larger than the fixture's)",
        )
    )
    echo(f"\nstore:  {config.output.path}\nreport: {config.report_path}")
    return result.exit_code
