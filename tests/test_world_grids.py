"""Cylindrical grids whose x wraps with the globe (Web Mercator, EPSG:3857): a grid past the east edge of
its x range (20,037,508 m, longitude 180) reads the tiles on both sides of 180, as GDAL warps them: UTM
60N/1N tiles (Chukotka) and 1-degree EPSG:4326 tiles (Fiji). Also how a CRS's x wraps, points keeping
their turn between two such CRSs, and inferred bounds as one range across the edge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from pipeline.planning.globe import infer_bounds
from pipeline.planning.grid import transform_points, x_turn
from tests.globe import compare, fused_gdal, write_chukotka, write_fiji, write_tile
from tests.helpers import PATTERN, run_raw
from tests.test_end_to_end import assert_matches_gdal

EDGE = 20037508.342789244
"""Web Mercator's east edge (longitude 180), in metres."""


def _mercator_box(west: float, south: float, east: float, north: float, res: float) -> list[float]:
    """A box in longitudes (east past 180 allowed) as EPSG:3857 bounds snapped to ``res``, x continuous."""
    x = np.array([west, east]) / 360.0 * 2 * EDGE
    _, y = transform_points("EPSG:4326", "EPSG:3857", np.array([0.0, 0.0]), np.array([south, north]))
    return [
        float(np.floor(x[0] / res) * res),
        float(np.floor(y[0] / res) * res),
        float(np.ceil(x[1] / res) * res),
        float(np.ceil(y[1] / res) * res),
    ]


def _run(folder: Path, files: list[str], grid: dict[str, Any], method: str) -> tuple[Any, xr.Dataset]:
    raw = {
        "inputs": {"paths": [str(Path(files[0]).parents[1] / "**" / "*.tif")], "pattern": PATTERN},
        "grid": grid,
        "resampling": method,
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 128, "x": 128}},
        "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 1},
    }
    return run_raw(folder, raw)


def _against_gdal(ds: xr.Dataset, files: list[str], method: str) -> None:
    """Each band against GDAL's warp of the same files onto the same grid; GDAL fills past the edge too."""
    import rioxarray  # noqa: F401 - ds.rio

    transform, shape = ds.rio.transform(), (ds.sizes["y"], ds.sizes["x"])
    east = ds["x"].values > EDGE
    for band in ds.data_vars:
        ref = fused_gdal([f for f in files if f.endswith(f"_{band}.tif")], "EPSG:3857", transform, shape, method)
        got = ds[band].isel(time=0).values
        assert (ref[:, east] != 0).mean() > 0.3, band  # the test covers the side past the edge
        assert (got[:, east] != 0).mean() > 0.3, band
        assert compare(got, ref)["missing"] <= 0.005, band
        assert_matches_gdal(got, ref, band)


@pytest.mark.parametrize("method", ["bilinear", "average"])
def test_utm_60n_and_1n_tiles_onto_web_mercator_past_its_edge_match_gdal(
    tmp_path_factory: pytest.TempPathFactory, method: str
) -> None:
    """Both zones' tiles, the 1N ones (-180..-179.9) read past the grid's 20,037,508 m: before, the plan
    put them at the west edge of the world and left the grid's east half empty, exit 0."""
    files = write_chukotka(tmp_path_factory.getbasetemp() / "chukotka-3857")
    grid = {"crs": "EPSG:3857", "resolution": 40, "bounds": _mercator_box(179.92, 64.985, 180.08, 65.015, 40)}
    result, ds = _run(tmp_path_factory.mktemp(method), files, grid, method)
    assert result.exit_code == 0 and not result.skipped
    assert ds["x"].values.min() < EDGE < ds["x"].values.max()
    _against_gdal(ds, files, method)


def test_geographic_tiles_onto_web_mercator_past_its_edge_and_bounds_inferred(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """1-degree EPSG:4326 tiles either side of 180 (Fiji), grid bounds inferred: one range across the
    edge (not the width of the world), the W180 tile read past it, as GDAL warps it."""
    root = tmp_path_factory.mktemp("fiji-3857")
    files = write_fiji(root, res=0.01)
    result, ds = _run(root / "run", files, {"crs": "EPSG:3857", "resolution": 1000}, "bilinear")
    assert result.exit_code == 0
    x = ds["x"].values
    assert EDGE - 112_000 < x.min() < EDGE - 110_000 and EDGE + 110_000 < x.max() < EDGE + 112_000
    _against_gdal(ds, files, "bilinear")


def test_a_web_mercator_tile_is_read_a_turn_over(tmp_path: Path) -> None:
    """A tile in the grid's own CRS at the west edge, on a grid past the east edge: the pipeline reads it a
    turn over (the same place on the globe), where GDAL, taking the two CRSs as one and x as it is, reads
    nothing. Its pixels are GDAL's warp of the tile georeferenced a turn over."""
    import rasterio
    from rasterio.transform import from_origin

    path = write_tile(
        tmp_path / "t" / "2024-07-15" / "W_B04.tif", "EPSG:3857", (-EDGE, 9.0e6), 100, (200, 200), nodata=True
    )
    moved = tmp_path / "moved.tif"
    with rasterio.open(path) as src:
        profile, data = src.profile, src.read(1)
    profile.update(transform=from_origin(EDGE, 9.0e6, 100, 100), driver="GTiff")
    with rasterio.open(moved, "w", **profile) as dst:
        dst.write(data, 1)
    grid = {"crs": "EPSG:3857", "resolution": 100, "bounds": [EDGE - 6000, 8.99e6 - 9000, EDGE + 9000, 9.0e6]}
    result, ds = _run(tmp_path / "run", [path], grid, "nearest")
    assert result.exit_code == 0
    got = ds["B04"].isel(time=0).values
    ref = fused_gdal([str(moved)], "EPSG:3857", ds.rio.transform(), got.shape, "nearest")
    assert (got[:, ds["x"].values > EDGE] != 0).mean() > 0.9
    assert np.array_equal(got, ref)


def test_how_a_crs_wraps() -> None:
    """Geographic CRSs every 360 degrees; cylindrical projections every length of the equator, from their
    own central meridian; any other projection not at all."""
    assert x_turn("EPSG:4326") is not None and x_turn("EPSG:4326").period == 360.0  # type: ignore[union-attr]
    merc = x_turn("EPSG:3857")
    assert merc is not None and merc.period == pytest.approx(2 * EDGE) and merc.west == pytest.approx(-EDGE)
    pdc = x_turn("EPSG:3832")  # PDC Mercator, central meridian 150
    assert pdc is not None and pdc.west_lon == -30.0
    for crs in ("EPSG:4087", "EPSG:6933"):  # Plate Carree, EASE-Grid 2.0 global (equal-area cylindrical)
        assert x_turn(crs) is not None, crs
    for crs in ("EPSG:32601", "EPSG:3413", "ESRI:54008"):  # UTM, polar stereographic, sinusoidal
        assert x_turn(crs) is None, crs


def test_points_keep_their_turn_between_two_wrapping_crss() -> None:
    """PROJ brings longitude 181 back to -179; between two CRSs that wrap, a point keeps its turn."""
    x, _ = transform_points("EPSG:4326", "EPSG:3857", np.array([181.0, -181.0, 179.0]), np.zeros(3))
    assert x == pytest.approx(np.array([181.0, -181.0, 179.0]) / 180.0 * EDGE)
    lon, _ = transform_points("EPSG:3857", "EPSG:4326", np.array([EDGE + 1e5, -EDGE - 1e5]), np.zeros(2))
    assert lon == pytest.approx([180.0 + 1e5 / EDGE * 180.0, -180.0 - 1e5 / EDGE * 180.0])
    lon, _ = transform_points("EPSG:3832", "EPSG:4326", np.array([0.0, 20.1e6]), np.zeros(2))
    assert lon[0] == pytest.approx(150.0) and lon[1] > 180.0  # east of PDC Mercator's x range: past 180
    x, _ = transform_points("EPSG:4326", "EPSG:32601", np.array([181.0]), np.array([65.0]))  # UTM: as PROJ
    assert x == pytest.approx(transform_points("EPSG:4326", "EPSG:32601", np.array([-179.0]), np.array([65.0]))[0])


def test_inferred_web_mercator_bounds_are_one_range_across_the_edge() -> None:
    fp = np.array([[EDGE - 1e4, 1, EDGE + 2e3, 2], [-EDGE, 1, -EDGE + 5e3, 2]])
    assert infer_bounds(fp, "EPSG:3857") == pytest.approx((EDGE - 1e4, 1.0, EDGE + 5e3, 2.0))
