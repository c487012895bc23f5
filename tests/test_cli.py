"""The command line as a user runs it: real processes, exit codes, messages."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import write_config


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["colour=red"], "colour"),
        (["grid.crs=EPSG:0"], "grid.crs"),
        (["inputs.pattern=(?P<date>x).tif"], "inputs.pattern"),
        (["inputs.paths=[/nonexistent/**/*.tif]"], "inputs.paths"),
    ],
)
def test_config_errors_exit_2_naming_the_key(tmp_path: Path, small_dir: Path, sets: list[str], key: str) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    args = [a for s in sets for a in ("--set", s)]
    r = cli("run", str(cfg), *args)
    assert r.returncode == 2, r.stderr
    assert f"config key '{key}'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out.zarr").exists()


def test_plan_json_reads_no_pixels(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = cli("plan", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["inputs"]["files"] == 32
    h, w = plan["grid"]["shape_yx"]
    spatial = -(-h // 128) * -(-w // 128)
    assert plan["chunks"] == 4 * 2 * spatial  # bands x dates x spatial chunks
    assert plan["tasks"] >= 2 and 0 < plan["jobs"] <= plan["chunks"]
    assert plan["bytes_to_read"] > 0 and plan["grid"]["crs"] == "EPSG:32632"
    assert not (tmp_path / "out.zarr").exists()
    text = cli("plan", str(cfg))
    assert text.returncode == 0 and "tasks" in text.stdout and "grid" in text.stdout


def test_run_then_report_html(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = cli("run", str(cfg), "--workers", "2", "--set", "output.chunks={y: 256, x: 256}")
    assert r.returncode == 0, r.stderr
    for stage in ("index", "plan", "read", "resample", "write", "finalize", "overhead"):
        assert stage in r.stdout
    report = tmp_path / "out.report.json"
    assert report.exists()
    again = cli("run", str(cfg))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    html = tmp_path / "page" / "report.html"
    r = cli("report", str(report), "--html", str(html))
    assert r.returncode == 0, r.stderr
    assert html.exists() and sorted(p.name for p in html.parent.iterdir()) == ["report.html"]  # no PNG beside it
    assert html.read_text().count("data:image/png;base64,") == 4  # stages, timeline, durations, memory

    # a second run with other settings, compared with the first: text and HTML
    r = cli(
        "run",
        str(cfg),
        "--overwrite",
        "-q",
        "--report",
        str(tmp_path / "new.json"),
        "--set",
        "execution.partition_mb=0.5",
    )
    assert r.returncode == 0, r.stderr
    r = cli("report", str(tmp_path / "new.json"), "--compare", str(report), "--html", str(tmp_path / "cmp.html"))
    assert r.returncode == 0, r.stderr
    assert "the new run took " in r.stdout and "x the old one's wall" in r.stdout
    for stage in ("wall", "index", "read", "resample", "write", "overhead"):
        assert any(line.split()[:1] == [stage] for line in r.stdout.splitlines()), stage
    assert "diagnostics (old -> new):" in r.stdout and "  chunk_size " in r.stdout
    assert "execution.partition_mb: 1 -> 0.5" in r.stdout or "execution.partition_mb: 1.0 -> 0.5" in r.stdout
    page = (tmp_path / "cmp.html").read_text()
    assert "Compared with" in page and "Diagnostic by diagnostic" in page and "execution.partition_mb" in page


def test_fixtures_are_deterministic(tmp_path: Path) -> None:
    def digest(folder: Path) -> dict[str, str]:
        return {
            str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.tif"))
        }

    assert cli("fixtures", str(tmp_path / "a"), "--preset", "small", "--seed", "3").returncode == 0
    assert cli("fixtures", str(tmp_path / "b"), "--preset", "small", "--seed", "3").returncode == 0
    a, b = digest(tmp_path / "a"), digest(tmp_path / "b")
    assert len(a) == 32 and a == b


def test_every_fixture_preset_is_offered_by_the_command() -> None:
    from pipeline.cli import fixtures
    from pipeline.tools.fixtures import PRESETS

    (preset,) = [p for p in fixtures.params if p.name == "preset"]
    assert list(preset.type.choices) == list(PRESETS)  # type: ignore[attr-defined]


def test_doctor_and_version() -> None:
    r = cli("doctor")
    assert r.returncode == 0 and "GDAL" in r.stdout and "gpu" in r.stdout
    assert cli("--version").returncode == 0


def test_a_run_imports_neither_pandas_in_the_driver_nor_zarr_in_the_workers(tmp_path: Path, small_dir: Path) -> None:
    """Start-up is most of a small run: pandas cost the driver ~0.3-0.5 s (through the tile table and
    distributed's forkserver preload), zarr-python every worker ~0.2 s. A run needs neither, nor, without
    a terminal to show a progress bar on, tqdm."""
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    driver = (
        "import sys\n"
        "from pipeline.config import load_config\n"
        "from pipeline.execute.runner import run\n"
        f"assert run(load_config({str(cfg)!r})).exit_code == 0\n"
        "print(sorted(m for m in ('pandas', 'zarr', 'tqdm') if m in sys.modules))\n"
    )
    worker = (  # a worker's imports and tasks, in one process, on the store the driver made
        "import importlib, sys\n"
        "from pipeline.config import load_config\n"
        "from pipeline.execute.runner import plan_run\n"
        "from pipeline.execute.task import TaskContext, run_partition\n"
        "from pipeline.execute.warmup import warm_up\n"
        "from pipeline.execute.workers import WORKER_PRELOAD\n"
        "for m in WORKER_PRELOAD: importlib.import_module(m)\n"
        f"cfg = load_config({str(cfg)!r})\n"
        "catalog, plan = plan_run(cfg)\n"
        "ctx = TaskContext(store_path=cfg.output.path, grid_crs=plan.grid.crs, grid_transform=plan.grid.transform,\n"
        "                  bands=plan.bands, resampling=plan.resampling, fuse=plan.fuse, on_error='fail',\n"
        "                  grid_width=plan.grid.shape_yx[1])\n"
        "warm_up(None, ctx, tuple(sorted(set(catalog.tiles['crs']))))\n"
        "assert sum(run_partition(p, ctx)['chunks'] for p in plan.partitions) > 0\n"
        "print(sorted(m for m in ('pandas', 'zarr') if m in sys.modules))\n"
    )
    for script in (driver, worker):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[]", r.stdout


def test_no_process_of_a_run_outlives_it(tmp_path: Path, small_dir: Path) -> None:
    """`pipeline run` ends with ``os._exit``: its fork server, workers and resource tracker must be gone
    right after, with nothing for the tracker to clean up. (Leaving the local cluster to stop by itself
    saved ~0.08 s but left the workers' semaphores to the tracker, which warned on stderr.)"""
    import psutil

    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    mark = f"pipeline-test-{os.getpid()}-{tmp_path.name}"
    r = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "pipeline"), "run", str(cfg), "-q", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PIPELINE_TEST_MARK": mark},
    )
    assert r.returncode == 0, r.stderr
    assert "leaked" not in r.stderr, r.stderr

    def left() -> list[int]:
        pids = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if p.environ().get("PIPELINE_TEST_MARK") == mark:
                    pids.append(p.pid)
        return pids

    deadline = time.time() + 10
    while left() and time.time() < deadline:
        time.sleep(0.1)
    assert left() == []
    report = json.loads((tmp_path / "out.report.json").read_text())
    assert report["output"]["chunks_written"] > 0
