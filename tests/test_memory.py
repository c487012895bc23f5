"""What a worker keeps, bounded by what the code sets: GDAL's block cache in the run's own worker processes
(not the machine's 5% default), a caller's ``GDAL_CACHEMAX`` left to rule, and the coordinate-map cache
held to its bound through a run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import pipeline.execute.processes
from pipeline.config import load_config
from pipeline.execute.runner import run
from pipeline.execute.task import run_partition
from pipeline.execute.workers import WORKER_GDAL_CACHE_MB, bound_gdal_cache
from pipeline.resample.warp import MAP_CACHE_BYTES
from tests.helpers import write_config

SEEN = "PIPELINE_TEST_SEEN"


def records_gdal_cache(p: Any, *args: Any) -> dict[str, Any]:
    """Planted in the workers: runs the partition, then notes GDAL's block-cache bound as the task saw it."""
    from rasterio.env import get_gdal_config

    rec = run_partition(p, *args)
    with open(Path(os.environ[SEEN]) / f"{os.getpid()}-{p.key}", "w") as f:
        f.write(str(get_gdal_config("GDAL_CACHEMAX")))
    return rec


def _run(tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[int]]:
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv(SEEN, str(seen))
    monkeypatch.setattr(pipeline.execute.processes, "TASK", records_gdal_cache)
    cfg = load_config(write_config(tmp_path, str(small_dir / "**" / "*.tif")), ["execution.scheduler=processes"])
    result = run(cfg)
    assert result.exit_code == 0
    values = [int(p.read_text()) for p in seen.iterdir()]
    assert len(values) == result.report["plan"]["partitions"]
    return result, values


def test_a_worker_process_bounds_gdals_block_cache(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GDAL_CACHEMAX", raising=False)
    result, values = _run(tmp_path, small_dir, monkeypatch)
    assert set(values) == {WORKER_GDAL_CACHE_MB << 20}
    kept = result.report["execution"]["maps"]["kept_mb"]
    assert 0 < kept <= MAP_CACHE_BYTES / 1e6


def test_a_gdal_cachemax_in_the_environment_rules(
    tmp_path: Path, small_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GDAL_CACHEMAX", "48")  # MB, as GDAL reads it from the environment
    _, values = _run(tmp_path, small_dir, monkeypatch)
    assert set(values) == {48 << 20}
    monkeypatch.setenv("GDAL_CACHEMAX", "25%")
    assert bound_gdal_cache() is None
