"""Nothing silent: a glob that matches nothing, bounds that miss every input and an empty STAC query are
exit 2 naming them, from `pipeline plan` and `pipeline run` alike, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_config


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_glob_that_matches_nothing_is_exit_2_even_when_another_matches(
    command: str, tmp_path: Path, small_dir: Path
) -> None:
    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = _cli(command, str(path), "--set", f"inputs.paths=[{small_dir}/**/*.tif, /nonexistent/*.tif]")
    assert r.returncode == 2, r.stderr
    assert "inputs.paths" in r.stderr and "'/nonexistent/*.tif'" in r.stderr and "the other 1 matched 32" in r.stderr
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("command", ["plan", "run"])
def test_bounds_that_miss_every_input_are_exit_2_naming_both_extents(
    command: str, tmp_path: Path, small_dir: Path
) -> None:
    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"), grid={"bounds": [0, 0, 10000, 10000]})
    r = _cli(command, str(path))
    assert r.returncode == 2, r.stderr
    assert "grid.bounds" in r.stderr and "[0.0, 0.0, 10000.0, 10000.0]" in r.stderr and "miss every input" in r.stderr
    assert "cover [" in r.stderr  # the inputs' extent in the grid CRS, to set the bounds inside
    assert "partition_mb" not in r.stdout + r.stderr
    assert not (tmp_path / "out.zarr").exists()


def test_an_empty_item_collection_is_exit_2(tmp_path: Path, small_dir: Path) -> None:
    items = tmp_path / "items.json"
    items.write_text(json.dumps({"type": "FeatureCollection", "features": []}))
    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = _cli("run", str(path), "--set", "inputs.paths=null", "--set", f"inputs.stac={items}")
    assert r.returncode == 2, r.stderr
    assert "inputs.stac" in r.stderr and "holds no STAC item" in r.stderr


def test_a_null_grid_crs_takes_the_inputs_one_or_lists_them(tmp_path: Path, small_dir: Path) -> None:
    """``grid.crs`` null: the inputs' CRS when they share one, else exit 2 listing the CRSs found;
    ``grid.resolution`` null: the finest band's. `pipeline plan` says what it inferred."""
    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = _cli("plan", str(path), "--set", "grid.crs=null")
    assert r.returncode == 2 and "grid.crs" in r.stderr and "EPSG:32631, EPSG:32632" in r.stderr, r.stderr
    zone = str(small_dir / "**" / "T32*.tif")
    r = _cli("plan", str(path), "--set", f"inputs.paths=[{zone}]", "--set", "grid=null", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["grid"]["crs"] == "EPSG:32632" and summary["grid"]["res_xy"] == [10.0, 10.0]
    assert (
        set(summary["inferred"]) == {"grid.crs", "grid.resolution"} and "B02" in summary["inferred"]["grid.resolution"]
    )
    text = _cli("plan", str(path), "--set", f"inputs.paths=[{zone}]", "--set", "grid=null").stdout
    assert "inferred    grid.crs: EPSG:32632 (the inputs' CRS)" in text
