"""The antimeridian: UTM 60N and 1N tiles (Chukotka) and 1-degree EPSG:4326 tiles (Fiji) on both sides of
180°, onto geographic grids that run past 180, from files, STAC items whose bbox crosses 180 (an
ItemCollection, stac-geoparquet and a STAC API search), against GDAL (``rasterio.warp.reproject`` per
file, fused first-valid). Also the plan-coverage check, and tiles outside the grid CRS's domain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import yaml

from pipeline.config import load_config
from pipeline.planning.globe import PlanCoverageError, check_coverage, infer_bounds, wrap_copies
from pipeline.planning.grid import compute_grid
from pipeline.planning.planner import compute_plan
from pipeline.tools.stac_items import write_geoparquet, write_item_collection
from tests.globe import antimeridian_items, compare, fused_gdal, write_chukotka, write_fiji, write_tile
from tests.helpers import PATTERN, run_raw, serve_stac, virtual_tiles
from tests.test_end_to_end import assert_matches_gdal

BOUNDS = [179.92, 64.985, 180.08, 65.015]
"""The grid across 180 at 65N: 0.16 x 0.03 degrees (7.5 x 3.3 km)."""
RES = 0.0002
METHODS = {"*": "bilinear", "B11": "average"}
TIMES = {"60W": "2024-07-14T23:10:00Z", "01W": "2024-07-15T00:20:00Z"}
"""One overpass across midnight UTC, as a pass over 180 at local noon is."""


@pytest.fixture(scope="module")
def chukotka(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_chukotka(tmp_path_factory.mktemp("chukotka"))


def _run(folder: Path, inputs: dict[str, Any], grid: dict[str, Any], resampling: Any = None) -> tuple[Any, Any]:
    raw = {
        "inputs": inputs,
        "grid": grid,
        "resampling": resampling or METHODS,
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 128, "x": 256}},
        "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 1},
    }
    return run_raw(folder, raw)


def _against_gdal(ds: xr.Dataset, files: list[str], methods: dict[str, str], crs: str = "EPSG:4326") -> None:
    import rioxarray  # noqa: F401 - ds.rio

    transform, shape = ds.rio.transform(), (ds.sizes["y"], ds.sizes["x"])
    east = ds["x"].values > 180.0
    for band in ds.data_vars:
        method = methods.get(str(band), methods["*"])
        ref = fused_gdal([f for f in files if f.endswith(f"_{band}.tif")], crs, transform, shape, method)
        got = ds[band].isel(time=0).values
        assert (ref[:, east] != 0).mean() > 0.3, band  # GDAL fills past 180: the test covers the other side
        assert compare(got, ref)["missing"] <= 0.005, band
        assert_matches_gdal(got, ref, band)


@pytest.fixture(scope="module")
def glob_run(chukotka: list[str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, xr.Dataset]:
    root = Path(chukotka[0]).parents[1]
    inputs = {"paths": [str(root / "**" / "*.tif")], "pattern": PATTERN}
    return _run(tmp_path_factory.mktemp("glob"), inputs, {"crs": "EPSG:4326", "resolution": RES, "bounds": BOUNDS})


@pytest.fixture(scope="module")
def glob_inferred(chukotka: list[str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, xr.Dataset]:
    """The glob run with grid.bounds null (inferred: one range across 180)."""
    root = Path(chukotka[0]).parents[1]
    inputs = {"paths": [str(root / "**" / "*.tif")], "pattern": PATTERN}
    return _run(tmp_path_factory.mktemp("inferred"), inputs, {"crs": "EPSG:4326", "resolution": RES})


def test_utm_60n_and_1n_tiles_onto_a_grid_past_180_match_gdal(
    glob_run: tuple[Any, xr.Dataset], chukotka: list[str]
) -> None:
    """Both zones' tiles are read on both sides of 180 (the 1N tiles, at -180..-179.9, past 180 on the
    grid), bilinear and average, as GDAL warps them: no pixel GDAL fills is left empty."""
    result, ds = glob_run
    assert result.exit_code == 0 and not result.skipped
    assert ds["x"].values.max() > 180.0
    _against_gdal(ds, chukotka, METHODS)


def test_inferred_bounds_are_one_range_past_180(chukotka: list[str], tmp_path: Path) -> None:
    """grid.bounds null: the tiles either side of 180 give one range across it, not the whole world."""
    import pipeline

    root = Path(chukotka[0]).parents[1]
    raw = {
        "inputs": {"paths": [str(root / "**" / "*.tif")], "pattern": PATTERN},
        "grid": {"crs": "EPSG:4326", "resolution": RES},
        "output": {"path": str(tmp_path / "out.zarr")},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    plan = pipeline.plan(load_config(tmp_path / "c.yaml"))
    x0, y0, x1, y1 = plan.grid["bounds"] if isinstance(plan.grid, dict) else plan.grid.bounds
    assert 179.85 < x0 < 179.95 and 180.05 < x1 < 180.15, (x0, x1)
    assert 64.95 < y0 < 64.99 and 65.01 < y1 < 65.05, (y0, y1)


def test_inferred_bounds_on_a_circle() -> None:
    """The shortest arc of longitudes holding every footprint; the whole world where they leave no gap."""
    fp = np.array([[179.9, 1, 180.02, 2], [-180.0, 1, -179.9, 2], [np.nan] * 4])
    assert infer_bounds(fp, "EPSG:4326") == (179.9, 1.0, 180.1, 2.0)
    fp = np.array([[10.0, 1, 20, 2], [-20.0, 1, -10, 2]])
    assert infer_bounds(fp, "EPSG:4326") == (-20.0, 1.0, 20.0, 2.0)
    fp = np.array([[170.0, 1, 190, 2], [-100.0, 1, 170, 2]])  # 170..190 runs past 180 over -180..-170
    assert infer_bounds(fp, "EPSG:4326") == (-100.0, 1.0, 190.0, 2.0)
    fp = np.array([[-180.0, 1, 0, 2], [0.0, 1, 180, 2]])
    assert infer_bounds(fp, "EPSG:4326") == (-180.0, 1.0, 180.0, 2.0)
    assert infer_bounds(np.array([[1e5, 1, 3e5, 2], [-1e5, 1, 0, 2]]), "EPSG:32660") == (-1e5, 1.0, 3e5, 2.0)


def test_a_tile_on_both_edges_of_a_world_grid_is_planned_twice() -> None:
    """A tile across 180 on a grid of [-180, 180] meets both of its edges: one row each, a turn apart."""
    grid = compute_grid("EPSG:4326", (0.5, 0.5), (64, 64), (-180.0, 0.0, 180.0, 10.0))
    fp = np.array([[179.0, 1, 181, 2], [10.0, 1, 11, 2], [-181.0, 1, -179, 2], [200.0, 1, 201, 2]])
    tile, shift = wrap_copies(fp, grid)
    assert tile.tolist() == [0, 0, 1, 2, 2, 3]
    assert shift.tolist() == [-360.0, 0.0, 0.0, 0.0, 360.0, -360.0]


def test_fiji_dem_tiles_either_side_of_180(tmp_path_factory: pytest.TempPathFactory) -> None:
    """1-degree EPSG:4326 tiles (S17E179, S17W180), grid CRS and bounds inferred: one grid from 179 to 181,
    the W180 tile read past 180 (a turn over), as GDAL reads it onto the same grid."""
    root = tmp_path_factory.mktemp("fiji")
    files = write_fiji(root)
    inputs = {"paths": [str(root / "**" / "*.tif")], "pattern": PATTERN}
    for method in ("bilinear", "nearest"):
        result, ds = _run(root / method, inputs, {"crs": None, "resolution": 0.004}, method)
        assert result.exit_code == 0
        assert float(ds["x"].min()) == pytest.approx(179.002) and float(ds["x"].max()) == pytest.approx(180.998)
        _against_gdal(ds, files, {"*": method})
        if method == "nearest":  # the tiles' own values, picked
            got = ds["DEM"].isel(time=0).values
            ref = fused_gdal(files, "EPSG:4326", ds.rio.transform(), got.shape, method)
            assert compare(got, ref)["exact"] > 0.999


@pytest.fixture(scope="module")
def stac_items(chukotka: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stac")
    items = antimeridian_items(chukotka, TIMES)
    assert all(i["bbox"][0] > i["bbox"][2] and i["geometry"]["type"] == "MultiPolygon" for i in items)
    write_item_collection(items, str(out / "items.json"))
    write_geoparquet(items, str(out / "items.parquet"))
    return out


@pytest.mark.parametrize("source", ["items.json", "items.parquet", "api"])
def test_stac_items_across_180_are_selected_and_grouped(
    source: str, stac_items: Path, glob_inferred: tuple[Any, xr.Dataset], chukotka: list[str], tmp_path: Path
) -> None:
    """Items whose bbox crosses 180 (west > east, MultiPolygon geometry): found by a search whose bbox
    crosses 180 too, one solar day (the items' middle is near 180, not 0: a pass over 180 at 23:10 and
    00:20 UTC is one step), grid bounds inferred as one range: GDAL's pixels, and the glob run's."""
    grid = {"crs": "EPSG:4326", "resolution": RES}
    if source == "api":
        with serve_stac(stac_items / "items.parquet") as url:
            search = {"url": url, "collections": ["pipeline-fixtures"], "bbox": [179.95, 64.9, -179.95, 65.1]}
            result, ds = _run(tmp_path, {"stac_search": search}, grid)
    else:
        result, ds = _run(tmp_path, {"stac": str(stac_items / source)}, grid)
    assert result.exit_code == 0 and result.report["inputs"]["files"] == 4
    assert ds.sizes["time"] == 1
    assert 179.85 < float(ds["x"].min()) < 179.95 and 180.05 < float(ds["x"].max()) < 180.15
    _against_gdal(ds, chukotka, METHODS)
    glob_cube = glob_inferred[1]
    assert ds.sizes == glob_cube.sizes
    for band in ("B04", "B11"):  # the glob run's bits
        assert np.array_equal(ds[band].values, glob_cube[band].values), band


def test_a_search_bbox_across_180_is_searched_as_its_two_sides(stac_items: Path) -> None:
    from pipeline.inputs.stac_items import search_item_dicts, split_bbox

    assert split_bbox([179.5, 64, -179.5, 66]) == [[179.5, 64, 180, 66], [-180, 64, -179.5, 66]]
    assert split_bbox([179.5, 64, 180.5, 66]) == [[179.5, 64, 180, 66], [-180, 64, -179.5, 66]]
    assert split_bbox([10, 0, 20, 1]) == [[10, 0, 20, 1]]
    with serve_stac(stac_items / "items.parquet") as url:
        for bbox in ([179.95, 64.9, -179.95, 65.1], [-179.99, 64.9, -179.95, 65.1], [179.5, 64.9, 180.0, 65.1]):
            got = search_item_dicts({"url": url, "bbox": bbox})
            assert sorted(i["id"] for i in got) == ["01W_20240715", "60W_20240715"], bbox


def test_a_tile_outside_the_projections_domain_is_named_and_counted(chukotka: list[str], tmp_path: Path) -> None:
    """A grid in an orthographic projection centred on Chukotka: a tile on the far side of the Earth has no
    footprint there. It is listed in inputs.skipped with why (exit 3), never dropped unseen."""
    far = write_tile(
        tmp_path / "tiles" / "2024-07-15" / "31D_B04.tif",
        "EPSG:32731",
        (500000.0, 2800000.0),  # 65S 3E: by the antipode of the grid centre
        100,
        (64, 64),
        nodata=True,
    )
    root = Path(chukotka[0]).parents[1]
    inputs = {"paths": [str(root / "**" / "*B04.tif"), str(Path(far).parents[1] / "**" / "*.tif")], "pattern": PATTERN}
    grid = {
        "crs": "+proj=ortho +lat_0=65 +lon_0=180 +datum=WGS84",
        "resolution": 20,
        "bounds": [-3500, -1700, 3500, 1700],
    }
    result, ds = _run(tmp_path / "run", inputs, grid, "bilinear")
    assert result.exit_code == 3
    skipped = {s["path"]: s["error"] for s in result.skipped}
    assert list(skipped) == [far] and "outside the projection's domain" in skipped[far]
    assert result.report["inputs"]["skipped"] == result.skipped
    assert int((ds["B04"].isel(time=0).values != 0).sum()) > 0


# --- the plan-coverage check -----------------------------------------------------------------------------


def _plan_pairs(plan: Any) -> tuple[np.ndarray, ...]:
    t = plan.tables
    per_job = np.diff(t.job_start)
    return t.pair_tile, np.repeat(t.job_cy, per_job), np.repeat(t.job_cx, per_job), t.pair_win


def test_the_coverage_check_fires_on_a_broken_plan() -> None:
    """A sound plan passes; the same plan without one (tile, chunk) pair, or with a window cut short,
    leaves part of a source unread: a PlanCoverageError naming the file."""
    tiles = virtual_tiles(
        [
            ("EPSG:32660", 640000.0, 7210000.0, 256, 256, 20.0, "B04", "2024-07-15"),
            ("EPSG:32601", 355000.0, 7215000.0, 256, 256, 20.0, "B04", "2024-07-15"),
        ]
    )
    kw = {"crs": "EPSG:4326", "res_xy": (0.0004, 0.0004), "chunks_yx": (32, 32), "bounds": None}
    plan = compute_plan(tiles, **kw, resampling="bilinear", fuse="first", partition_mb=1)
    aff, origin = plan.tables.aff, np.arange(len(tiles))
    tile, cy, cx, win = _plan_pairs(plan)
    check_coverage(plan.grid, tiles, aff, tile, cy, cx, win, origin)
    keep = ~((tile == 1) & (cy == cy[tile == 1][0]) & (cx == cx[tile == 1][0]))
    with pytest.raises(PlanCoverageError, match="planning bug: /virtual/.*0001_B04.tif"):
        check_coverage(plan.grid, tiles, aff, tile[keep], cy[keep], cx[keep], win[keep], origin)
    short = win.copy()
    short[:, 3] = short[:, 1] + 1
    with pytest.raises(PlanCoverageError):
        check_coverage(plan.grid, tiles, aff, tile, cy, cx, short, origin)


def test_solar_days_of_items_across_180() -> None:
    """The middle of a bbox across 180 is near 180, and so is the middle of items either side of it: a pass
    over 180 at 23:10 and 00:20 UTC is one solar day (+12 h), as it is at the grid's centre."""
    from pipeline.inputs.stac_fields import bbox_longitude, compute_time_steps, longitude_middle

    lon = bbox_longitude(np.array([179.91, 179.97, 170.0]), np.array([-179.97, -179.91, 171.0]))
    assert np.allclose(lon, [179.97, -179.97, 170.5])
    assert longitude_middle(lon[:2]) == pytest.approx(180.0)
    assert longitude_middle(np.array([10.0, 20.0, np.nan])) == 15.0
    assert longitude_middle(np.array([np.nan])) == 0.0
    times = np.array(["2024-07-14T23:10", "2024-07-15T00:20"], "datetime64[ns]")
    steps = compute_time_steps(times, longitude_middle(lon[:2]), "solar_day")
    assert len(np.unique(steps)) == 1 and steps[0] == times[0]
    assert len(np.unique(compute_time_steps(times, 0.0, "solar_day"))) == 2  # what a middle of 0 made of it


def test_a_4326_tile_past_180_is_judged_by_its_mask_a_turn_over() -> None:
    """A 4326 tile planned a turn over (at 180..181) is read with its transform a turn over, and its mask
    tile (mask.band) is moved as far, so the mask is sampled where the data is."""
    specs = [
        ("EPSG:4326", x0, -16.0, 400, 400, 0.0025, band, "2024-07-15")
        for x0 in (179.0, -180.0)
        for band in ("DEM", "SCL")
    ]
    tiles = virtual_tiles(specs)
    tiles = tiles.assign(tile=np.array([f"{c:g}" for c in tiles["c"]], dtype=object))  # a band and its mask share it
    plan = compute_plan(
        tiles,
        crs="EPSG:4326",
        res_xy=(0.004, 0.004),
        chunks_yx=(64, 64),
        bounds=(179.5, -17.0, 180.5, -16.0),
        resampling="bilinear",
        fuse="first",
        partition_mb=1,
        mask_band="SCL",
        bands_order=("DEM",),
    )
    sources = [s for p in plan.partitions for j in p.jobs for s in j.sources]
    east = [s for s in sources if s.transform[2] >= 180.0]
    assert east and all(s.mask is not None and s.mask.transform[2] == 180.0 for s in east)
    assert all(s.mask is not None and s.mask.transform[2] == 179.0 for s in sources if s.transform[2] < 180.0)


# pipeline/resample/warp.py's exact transform multiplies the infinities PROJ returns past the horizon by 0
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
def test_a_tile_across_the_edge_of_the_projections_domain(tmp_path: Path) -> None:
    """A UTM 60S tile across the horizon of an orthographic grid centred on Chukotka: the part that projects
    is planned whole (chunks across the horizon search from the tile's side, as GDAL does) and read as GDAL
    reads it (nearest: the same pixels); grid bounds inferred from that part."""
    tile = write_tile(
        tmp_path / "tiles" / "2024-07-15" / "60S_B04.tif",
        "EPSG:32760",
        (400000.0, 7335000.0),
        400,
        (500, 500),
        nodata=True,
    )
    ortho = "+proj=ortho +lat_0=65 +lon_0=180 +datum=WGS84"
    result, ds = _run(
        tmp_path / "run", {"paths": [tile], "pattern": PATTERN}, {"crs": ortho, "resolution": 250}, "nearest"
    )
    assert result.exit_code == 0
    import rioxarray  # noqa: F401 - ds.rio

    got = ds["B04"].isel(time=0).values
    ref = fused_gdal([tile], ortho, ds.rio.transform(), got.shape, "nearest")
    fig = compare(got, ref)
    assert (ref != 0).sum() > 1000 and fig["missing"] <= 0.005 and fig["exact"] > 0.98, fig
