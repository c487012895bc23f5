"""The poles: grids that contain a pole (EPSG:3413 around 90N, EPSG:4326 down to 90S) from sources that
reach it (EPSG:4326 tiles up to 90N, a UTM tile around the North Pole, Antarctic polar-stereographic tiles
meeting at the South Pole), against GDAL (``rasterio.warp.reproject`` per file, fused first-valid)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from pipeline.planning.grid import transform_boxes
from tests.globe import compare, fused_gdal, write_north_pole, write_south_pole
from tests.helpers import PATTERN, run_raw
from tests.test_end_to_end import assert_matches_gdal

NORTH = {"crs": "EPSG:3413", "resolution": 2000, "bounds": [-200000, -200000, 200000, 200000]}
SOUTH = {"crs": "EPSG:4326", "resolution": [0.5, 0.01], "bounds": [-180, -90, 180, -88.5]}


def _run(folder: Path, files: list[str], grid: dict[str, Any], method: str) -> xr.Dataset:
    raw = {
        "inputs": {"paths": files, "pattern": PATTERN},
        "grid": grid,
        "resampling": method,
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 64, "x": 64}},
        "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 1},
    }
    result, ds = run_raw(folder, raw)
    assert result.exit_code == 0 and not result.skipped
    return ds


def _figures(ds: xr.Dataset, files: list[str], crs: str, method: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    import rioxarray  # noqa: F401 - ds.rio

    out = {}
    for band in ds.data_vars:
        ref = fused_gdal(
            [f for f in files if f.endswith(f"_{band}.tif")],
            crs,
            ds.rio.transform(),
            (ds.sizes["y"], ds.sizes["x"]),
            method,
        )
        out[str(band)] = (ds[band].isel(time=0).values, ref)
    return out


@pytest.fixture(scope="module")
def north(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_north_pole(tmp_path_factory.mktemp("north"))


@pytest.fixture(scope="module")
def south(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_south_pole(tmp_path_factory.mktemp("south"))


@pytest.mark.parametrize("method", ["nearest", "bilinear", "average"])
def test_a_polar_grid_around_the_north_pole(method: str, north: list[str], tmp_path: Path) -> None:
    """EPSG:3413 around 90N from 4326 tiles up to 90N and a UTM tile around the pole: every pixel GDAL
    fills is filled (chunks holding the pole read the tiles' rows up to 90N, at every longitude). The
    average too on the seams between the 4326 tiles: a pixel there whose two corners land on one meridian
    (the tiles' edges at 180, -90, 0 and 90) or one parallel has a footprint of no width or height, which
    reads the one source pixel it lies on with weight 1, as GDAL's does."""
    ds = _run(tmp_path, north, NORTH, method)
    for band, (got, ref) in _figures(ds, north, NORTH["crs"], method).items():
        fig = compare(got, ref)
        assert fig["gdal_filled"] > 0.05 and fig["missing"] <= 0.001, (band, fig)
        assert fig["mask_mismatch"] <= 0.005, (band, fig)
        if method == "nearest":  # the same source pixels picked
            assert fig["exact"] > 0.98, (band, fig)
        if method == "bilinear":  # its one stretch per tile measured at the tile's centre, not the pole
            assert fig["mean_diff"] <= 8.0, (band, fig)
        if method == "average":  # (2 pixels of B01: the approximate transformer at the tiles' 88N edge)
            assert fig["missing"] <= 0.0002 and fig["mean_diff"] <= 0.5, (band, fig)
    centre = ds["B01"].isel(time=0).sel(x=slice(-20000, 20000), y=slice(20000, -20000)).values
    assert (centre != 0).mean() > 0.5  # the pole's own chunk has data


@pytest.mark.parametrize("method", ["bilinear", "average"])
def test_a_geographic_grid_down_to_90s_from_polar_stereographic_tiles(
    method: str, south: list[str], tmp_path: Path
) -> None:
    """EPSG:4326 from -88.5 to -90 at every longitude, from EPSG:3031 tiles meeting at the South Pole:
    each tile's footprint holds the pole (every longitude, down to -90), as GDAL reads them."""
    ds = _run(tmp_path, south, SOUTH, method)
    for band, (got, ref) in _figures(ds, south, SOUTH["crs"], method).items():
        fig = compare(got, ref)
        assert fig["missing"] <= 0.001 and fig["mask_mismatch"] <= 0.005, (band, fig)
        if method == "average":
            assert_matches_gdal(got, ref, band)
        else:  # bilinear's kernel at 0.5 degrees by 0.01 from 500 m pixels: a documented gap (docs/resampling.md)
            assert fig["mean_diff"] <= 0.01 * float(ref.max() - ref[ref > 0].min()), (band, fig)


def test_footprints_hold_the_poles() -> None:
    """A box around a pole maps to every longitude up to the pole in a geographic CRS; a 4326 box up to 90N
    maps to a box holding the pole in EPSG:3413; a chunk's box from its edges and inside, not its corners."""
    fp = transform_boxes("EPSG:3413", "EPSG:4326", np.array([[-50000.0, -50000, 50000, 50000]]))[0]
    assert fp[0] == -180 and fp[2] == 180 and fp[3] == 90 and 89.3 < fp[1] < 89.4
    fp = transform_boxes("EPSG:3031", "EPSG:4326", np.array([[0.0, 0, 128000, 128000]]))[0]
    assert fp[1] == -90 and fp[0] == -180 and fp[2] == 180
    fp = transform_boxes("EPSG:32633", "EPSG:3413", np.array([[449200.0, 9946000, 551600, 10049200]]))[0]
    assert fp[0] < 0 < fp[2] and fp[1] < 0 < fp[3]
    fp = transform_boxes("EPSG:4326", "EPSG:3413", np.array([[0.0, 88, 90, 90]]))[0]
    assert fp[0] <= 0 <= fp[2] and fp[1] <= 0 <= fp[3]
    # A box off the pole whose image bulges between the corners: the edges hold the extreme.
    fp = transform_boxes("EPSG:4326", "EPSG:3413", np.array([[-100.0, 80, 20, 81]]))[0]
    corners = transform_boxes("EPSG:4326", "EPSG:3413", np.array([[-100.0, 80, 20, 81]]), n=2, interior=0)[0]
    assert fp[1] < corners[1] - 100000
