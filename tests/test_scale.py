"""Full scale without the pixels: a virtual 192,000-tile index, planned from the index alone."""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.execute.runner import plan_run, run
from tests.helpers import write_config

FULL = 192_000


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``pipeline ARGS`` in this process (click's runner: the same command, its exit code, stdout and
    stderr, without a second interpreter importing the project for each call)."""
    from click.testing import CliRunner

    from pipeline.cli import main

    r = CliRunner().invoke(main, list(args))
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


@pytest.fixture(scope="module")
def virtual(virtual_casestudy: Path) -> Path:
    """The 192,000-tile index (the session's: the demo's test plans it too)."""
    return virtual_casestudy


def test_index_only_fixture_from_the_cli(tmp_path: Path) -> None:
    r = cli("fixtures", str(tmp_path), "--preset", "casestudy", "--count", "19200", "--index-only")
    assert r.returncode == 0, r.stderr
    index = pd.read_parquet(tmp_path / "index.parquet")
    assert len(index) == 19200 and not list(tmp_path.rglob("*.tif"))
    assert set(index["crs"]) == {"EPSG:32631", "EPSG:32632"}
    assert sorted(set(index["a"])) == [10.0, 20.0, 60.0]
    assert (tmp_path / "config.yaml").exists()
    bad = cli("fixtures", str(tmp_path / "x"), "--count", "1000", "--index-only")
    assert bad.returncode == 2 and "--count" in bad.stderr


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> str:
    """A real run's report (the small fixture's): what the full plan is sized from."""
    folder = tmp_path_factory.mktemp("measured")
    cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")))
    run(cfg)
    return cfg.report_path


@pytest.fixture(scope="module")
def full_plan(virtual: Path, measured: str) -> dict[str, Any]:
    """``pipeline plan --json --from-report --target-time 180`` of the 192,000 tiles: the plan and its
    sizing, planned once for the tests that read either (each planning takes ~4 s)."""
    r = cli("plan", str(virtual / "config.yaml"), "--json", "--from-report", measured, "--target-time", "180")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_plan_192000_tiles_from_the_index_alone(full_plan: dict[str, Any]) -> None:
    plan = full_plan
    # The files do not exist: every figure below came from the index, no raster opened or stat'ed.
    assert plan["inputs"]["files"] == FULL and plan["inputs"]["skipped"] == []
    assert 0 < plan["tasks"] <= 100_000
    assert plan["chunks"] >= plan["jobs"] > 100_000 and plan["windows"] > plan["jobs"]
    assert plan["bytes_to_read"] > 50e9 and plan["bytes_out"] > 50e9
    assert plan["partition_mb"]["max"] <= 3 * plan["partition_mb"]["median"]


def test_every_task_of_the_full_plan_is_small(virtual: Path) -> None:
    _, plan = plan_run(load_config(virtual / "config.yaml"))
    sizes = [len(pickle.dumps(p)) for p in plan.partitions]
    assert len(sizes) == len(plan.partitions) and max(sizes) <= 64 * 1024


def test_sizing_from_a_measured_run(full_plan: dict[str, Any], measured: str, tmp_path: Path, small_dir: Path) -> None:
    """The command sizes the 192,000-tile plan from a real run's report; other target times are sized
    in-process from the same plan (planning it again in a process for each took ~4 s)."""
    from pipeline.report.sizing import estimate_for_plan, format_estimate
    from pipeline.report.summary import read_report

    summary = dict(full_plan)
    sizing = summary.pop("sizing")
    assert sizing["workers_needed"] >= 1 and sizing["limiting_stage"] in ("read", "resample", "write")
    assert sizing["serial_driver_s"] < 180 and sizing["from_report"] == measured
    report = read_report(measured)
    assert estimate_for_plan(report, summary, 180.0, None) == {k: v for k, v in sizing.items() if k != "from_report"}
    text = format_estimate(estimate_for_plan(report, summary, 60.0, None), "sizing:")
    assert "single-threaded workers to finish in 60 s" in text
    write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    small = cli("plan", str(tmp_path / "config.yaml"), "--from-report", measured, "--target-time", "60")
    assert small.returncode == 0 and "single-threaded workers to finish in 60 s" in small.stdout  # the text form
    # Halving the time needs about twice the workers.
    slow = estimate_for_plan(report, summary, 360.0, None)
    assert slow["workers_needed"] < sizing["workers_needed"]


def test_project_wall_spreads_task_seconds_over_workers_and_keeps_the_fixed_parts() -> None:
    from pipeline.report.sizing import project_wall

    report = {
        "stage_task_s": {"read": 2.0, "resample": 3.0, "write": 1.0, "index": 0.1, "plan": 0.1, "finalize": 0.2},
        "stages": {"overhead": 0.5},
        "inputs": {"bytes_read": 100, "files": 10},
        "tasks": [{"bytes_written": 50}],
    }
    same = project_wall(report, {"bytes_to_read": 100, "bytes_out": 50, "driver_s": 0.2}, workers=2)
    assert same["wall_s"] == pytest.approx(0.2 + 0.2 + 6.0 / 2 + 0.5)
    four = project_wall(report, {"bytes_to_read": 400, "bytes_out": 200, "driver_s": 0.3}, workers=4)
    assert four["task_s"] == pytest.approx({"read": 8.0, "mask": 0.0, "resample": 12.0, "reduce": 0.0, "write": 4.0})
    assert four["wall_s"] == pytest.approx(0.3 + 0.2 + 24.0 / 4 + 0.5)


def test_project_wall_prices_maps_per_geometry_and_worker_not_per_byte() -> None:
    """Resampling = per byte + per map made. Tasks whose first ones make the maps separate the two (a
    least-squares fit); the projection then makes as many maps for 4x the dates over the same tiles, and
    twice as many on twice the worker processes."""
    from pipeline.report.sizing import map_costs, project_maps, project_wall

    per_byte, per_map = 4e-9, 2.5e-3  # 4 ms per MB, 2.5 ms per map (the case study's, measured)
    tasks = []
    for pid in (1, 2):  # two worker processes, each making every one of 90 geometries' maps in its first tasks
        for k, made in enumerate([40, 30, 20, 0, 0, 0, 0]):
            read = 10e6 + 1e6 * k
            tasks.append(
                {"pid": pid, "bytes_read": read, "maps_made": made, "resample_s": per_byte * read + per_map * made}
            )
    report = {
        "stage_task_s": {"read": 1.0, "resample": sum(t["resample_s"] for t in tasks), "write": 1.0},
        "stages": {"overhead": 0.2},
        "inputs": {"bytes_read": sum(t["bytes_read"] for t in tasks), "files": 10},
        "tasks": [dict(t, bytes_written=1e6) for t in tasks],
        "plan": {"geometries": 90},
    }
    report["stage_task_s"].update(index=0.0, plan=0.0, finalize=0.0)
    assert map_costs(report) == pytest.approx((per_byte, per_map))
    read = report["inputs"]["bytes_read"]
    x4 = {"bytes_to_read": 4 * read, "bytes_out": 4 * 14e6, "geometries": 90, "windows": 10_000, "driver_s": 0}
    assert project_maps(report, x4, workers=2) == pytest.approx(180)  # the same maps, 4x the bytes
    assert project_maps(report, x4, workers=4) == pytest.approx(360)
    assert project_wall(report, x4, 2)["task_s"]["resample"] == pytest.approx(per_byte * 4 * read + per_map * 180)
    few = dict(x4, windows=100)
    assert project_maps(report, few, workers=4) == 100  # never more maps than windows
    assert map_costs({**report, "tasks": report["tasks"][:3]}) is None  # too few tasks to separate them
