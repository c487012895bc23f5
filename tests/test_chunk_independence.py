"""The same bits at any chunk size: a pixel's value never depends on ``output.chunks``, ``output.shards``,
``execution.partition_mb``, the worker count or the kernels (compiled or NumPy) that computed it.

The small fixture spans UTM zones 31 and 32 onto a 32632 grid of 219 x 572 pixels, so most of its tiles
are reprojected, read through windows whose offsets in the tile change with the chunking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from pipeline.config import load_config
from pipeline.execute.runner import run
from tests.helpers import write_config

RUNS = {
    # name: (overrides, environment)
    "chunks 128, 2 workers": (["output.chunks={y: 128, x: 128}", "execution.workers=2"], {}),
    "chunks 64, 1 worker, 1 partition": (
        ["output.chunks={y: 64, x: 64}", "execution.workers=1", "execution.partition_mb=256"],
        {},
    ),
    "chunks 96 (no divisor), shards 192, NumPy kernels": (
        ["output.chunks={y: 96, x: 96}", "output.shards={y: 192, x: 192}", "execution.partition_mb=2"],
        {"PIPELINE_COMPILED": "0"},
    ),
}


def _cube(folder: Path, small_dir: Path, method: str, overrides: list[str]) -> dict[str, np.ndarray]:
    settings = [f"resampling={method}", "execution.scheduler=processes", *overrides]
    cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")), settings)
    result = run(cfg)
    assert result.exit_code == 0
    group = zarr.open_group(cfg.output.path, mode="r")
    return {name: group[name][:] for name in ("B01", "B02", "B04", "B11")}


@pytest.mark.parametrize("method", ["average", "bilinear", "nearest", "cubic"])
def test_same_bits_at_any_chunk_size(
    tmp_path: Path, small_dir: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cubes: dict[str, Any] = {}
    for name, (overrides, environment) in RUNS.items():
        with monkeypatch.context() as m:
            for key, value in environment.items():
                m.setenv(key, value)
            folder = tmp_path / f"run{len(cubes)}"
            folder.mkdir()
            cubes[name] = _cube(folder, small_dir, method, overrides)
    first, *others = RUNS
    for band, ref in cubes[first].items():
        assert (ref != 0).mean() > 0.5, band  # real data, not an empty cube
        for other in others:
            got = cubes[other][band]
            differ = int(np.count_nonzero(got != ref))
            assert differ == 0, f"{method} {band}: {differ} pixels differ between '{first}' and '{other}'"
