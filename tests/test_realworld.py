"""Tiles and items as the world makes them (tests/realworld.py): GDAL's COG driver at Sentinel-2 and
Landsat sizes (10980, 5490, 1830, 7131 x 8151; overview sizes rounded down), files without a nodata tag,
STAC 1.0 and 1.1 items shaped like earth-search's, CDSE's and USGS's. Every path (glob, ItemCollection,
stac-geoparquet, a STAC API, a bucket) is checked against GDAL (``rasterio.warp.reproject`` from the
same files, at the overview levels gdalwarp picks), and the STAC paths against the glob's bits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from pipeline.tools.stac_items import write_geoparquet
from tests.helpers import PATTERN, run_raw, serve_stac
from tests.realworld import (
    L_OFFSET,
    L_SCALE,
    REGION,
    S2_CRS,
    RealWorld,
    cdse_item,
    collection,
    earth_search_item,
    gdal_reference,
    landsat_item,
    write_realworld,
)
from tests.test_end_to_end import assert_matches_gdal

RES = 100.0
"""The grid: 100 m, so that B04 (10980 px) reads its 1372 px level (ratio 8.003) and B11 (5490 px) its
1372 px level (4.0015): both sizes rounded down by the COG driver, which the planner once assumed up."""
METHODS = {"*": "average", "SCL": "mode"}
EARTH_SEARCH_ASSETS = {"B04": "red", "B11": "swir16", "B01": "coastal", "SCL": "scl", "TCI_R": "visual.red"}
S2_BANDS = ("B01", "B04", "B11", "SCL")


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> RealWorld:
    return write_realworld(tmp_path_factory.mktemp("realworld"))


def _run(folder: Path, inputs: dict[str, Any], **extra: Any) -> tuple[Any, xr.Dataset]:
    raw = {
        "inputs": inputs,
        "grid": {"crs": S2_CRS, "resolution": RES, "bounds": list(REGION)},
        "resampling": METHODS,
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 128, "x": 128}},
        "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 1},
        **extra,
    }
    return run_raw(folder, raw)


def _check_against_gdal(ds: xr.Dataset, files: dict[str, tuple[str, int]], methods: dict[str, str]) -> None:
    transform = ds.rio.transform()
    shape = (ds.sizes["y"], ds.sizes["x"])
    for band, (path, bidx) in files.items():
        method = methods.get(band, methods["*"])
        ref = gdal_reference(path, bidx, S2_CRS, transform, shape, method, 0)
        got = ds[band].isel(time=0).values
        if method == "mode":  # classes: the same class almost everywhere (GDAL breaks ties its own way)
            both = (got != 0) & (ref != 0)
            assert both.mean() > 0.3 and np.mean(got[both] == ref[both]) > 0.97, band
            assert np.mean((got != 0) != (ref != 0)) <= 0.005, band
        else:
            assert_matches_gdal(got, ref, band)
        assert (ref == 0).any() and (ref != 0).any(), band  # the swath edge is in the grid


def _s2_files(world: RealWorld) -> dict[str, tuple[str, int]]:
    return {b: (world.files[b], 1) for b in S2_BANDS}


@pytest.fixture(scope="module")
def glob_run(world: RealWorld, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, xr.Dataset]:
    """The files by glob: Sentinel-2's declare no nodata, so the user gives ``inputs.nodata: 0``."""
    inputs = {
        "paths": [str(world.root / "*" / "T32TNS_*.tif")],
        "pattern": PATTERN,
        "bands": list(S2_BANDS),
        "nodata": 0,
    }
    return _run(tmp_path_factory.mktemp("glob"), inputs)


def test_glob_matches_gdal_at_rounded_down_overview_levels(glob_run: tuple[Any, xr.Dataset], world: RealWorld) -> None:
    result, ds = glob_run
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    # B04 read at its third level and B11 at its second: 1372 px each, as the COG driver sized them
    assert result.report["plan"]["levels_used"] == {"full": 2, "overview 1": 1, "overview 2": 1}
    assert result.report["plan"]["resampling"] == {"B01": "average", "B04": "average", "B11": "average", "SCL": "mode"}
    assert result.report["inputs"]["bands"]["B04"]["nodata_from"] == "config"
    _check_against_gdal(ds, _s2_files(world), METHODS)


def test_files_without_nodata_and_no_inputs_nodata_warn(world: RealWorld, tmp_path: Path) -> None:
    """Without any nodata value the reads take the output's fill (0) as nodata: the run says so and names
    the key; setting it removes the warning (and here, where 0 is the fill, changes no pixel)."""
    inputs = {"paths": [str(world.root / "*" / "T32TNS_B01.tif")], "pattern": PATTERN}
    result, _ = _run(tmp_path, inputs, resampling="average")
    assert result.report["inputs"]["bands"]["B01"]["nodata_from"] == "none"
    check = next(d for d in result.report["diagnostics"] if d["check"] == "nodata")
    assert check["status"] == "warn" and "B01" in check["detail"] and "inputs.nodata" in check["advice"]
    ds = xr.open_zarr(tmp_path / "out.zarr", mask_and_scale=False)
    fixed, fixed_ds = _run(tmp_path / "fixed", {**inputs, "nodata": 0}, resampling="average")  # the advice
    assert next(d for d in fixed.report["diagnostics"] if d["check"] == "nodata")["status"] == "ok"
    assert fixed.report["inputs"]["bands"]["B01"]["nodata_from"] == "config"
    assert np.array_equal(ds["B01"].values, fixed_ds["B01"].values)


def _same_bits(ds: xr.Dataset, ref: xr.Dataset, bands: tuple[str, ...] = S2_BANDS) -> None:
    for band in bands:
        a, b = ds[band].values, ref[band].values
        assert a.dtype == b.dtype and np.array_equal(a, b), band


def _bytes_read(report: dict[str, Any]) -> int:
    return sum(t["bytes_read"] for t in report["tasks"])


@pytest.mark.parametrize("form", ["json", "parquet", "api"])
def test_earth_search_items_give_the_glob_bits_and_gdals_answer(
    form: str, world: RealWorld, glob_run: tuple[Any, xr.Dataset], tmp_path: Path
) -> None:
    """STAC 1.0 items as earth-search publishes them: planned from the projection extension, nodata and
    scale from ``raster:bands``, SCL resampled by mode, the visual asset's red band by its name."""
    item = earth_search_item(world, base=tmp_path)
    docs = tmp_path / "items.json"
    docs.write_text(json.dumps(collection(item)))
    if form == "json":
        inputs: dict[str, Any] = {"stac": str(docs)}
        result, ds = _run(tmp_path / "run", {**inputs, "assets": EARTH_SEARCH_ASSETS})
    else:
        absolute = earth_search_item(world)  # parquet and the API carry absolute hrefs
        write_geoparquet([absolute], str(tmp_path / "items.parquet"))
        if form == "parquet":
            result, ds = _run(
                tmp_path / "run", {"stac": str(tmp_path / "items.parquet"), "assets": EARTH_SEARCH_ASSETS}
            )
        else:
            with serve_stac(tmp_path / "items.parquet") as url:
                search = {"url": url, "collections": ["sentinel-2-l2a"], "max_items": 10}
                result, ds = _run(tmp_path / "run", {"stac_search": search, "assets": EARTH_SEARCH_ASSETS})
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    glob_result, glob_ds = glob_run
    _same_bits(ds, glob_ds)
    assert result.report["plan"]["levels_used"]["overview 2"] == 1
    assert result.report["inputs"]["bands"]["B04"]["nodata_from"] == "stac"
    assert (
        result.report["inputs"]["bytes"] > 0 and result.report["inputs"]["bytes_unknown"] == 1
    )  # visual: no file:size
    assert ds["B04"].attrs["scale_factor"] == 0.0001 and ds["B04"].attrs["add_offset"] == -0.1
    assert "scale_factor" not in ds["SCL"].attrs
    _check_against_gdal(ds, {"TCI_R": (world.files["TCI"], 1), "B04": (world.files["B04"], 1)}, METHODS)


def test_a_resampling_band_no_input_carries_is_exit_2(world: RealWorld, tmp_path: Path) -> None:
    """A misspelt band in a per-band ``resampling`` is an error naming it, not a band silently averaged."""
    from pipeline.errors import ConfigError

    inputs = {"paths": [str(world.root / "*" / "T32TNS_SCL.tif")], "pattern": PATTERN}
    with pytest.raises(ConfigError, match=r"'resampling'.*\['scl'\].*bands: \['SCL'\]"):
        _run(tmp_path, inputs, resampling={"*": "average", "scl": "mode"})


def test_cdse_stac_1_1_items_give_the_glob_bits(
    world: RealWorld, glob_run: tuple[Any, xr.Dataset], tmp_path: Path
) -> None:
    """STAC 1.1 items as CDSE publishes them: ``bands`` entries and asset-level nodata, data_type,
    raster:scale/offset; ``proj:code`` with a null ``proj:epsg``; a 9-value ``proj:transform``; relative
    hrefs though the ``self`` link points to the API; SCL marked by ``classification:classes`` takes
    mode without being named."""
    item = cdse_item(world, base=tmp_path)
    (tmp_path / "items.json").write_text(json.dumps(collection(item)))
    result, ds = _run(tmp_path / "run", {"stac": str(tmp_path / "items.json")}, resampling="average")
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert result.report["plan"]["resampling"]["SCL"] == "mode"
    assert result.report["inputs"]["bands"]["SCL"]["categorical"] is True
    assert result.report["inputs"]["headers_read"] == 4  # one per band's shape group, for the overviews
    _same_bits(ds, glob_run[1])
    assert _bytes_read(result.report) == _bytes_read(glob_run[0].report)
    for band in ("B04", "B11", "B01"):
        assert ds[band].attrs["scale_factor"] == 0.0001 and ds[band].attrs["add_offset"] == -0.1, band
    assert ds["B04"].attrs["units"] == "1"


def test_s2_tiles_in_a_bucket_give_the_glob_bits(
    world: RealWorld, glob_run: tuple[Any, xr.Dataset], tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    """The tiles in the S3 test server, read through GDAL's /vsis3/ by a glob and by items: the glob's
    bits and bytes."""
    client = s3_server.client()
    for band in S2_BANDS:
        client.upload_file(world.files[band], s3_bucket, f"s2/2024-07-15/{Path(world.files[band]).name}")
    storage = {"endpoint_url": s3_server.endpoint_url}
    inputs = {"paths": [f"s3://{s3_bucket}/s2/**/*.tif"], "pattern": PATTERN, "nodata": 0}
    result, ds = _run(tmp_path / "glob", inputs, storage=storage)
    assert result.exit_code == 0 and result.report["network"]["requests"] > 0
    _same_bits(ds, glob_run[1])
    assert _bytes_read(result.report) == _bytes_read(glob_run[0].report)
    item = earth_search_item(world)
    for asset in item["assets"].values():
        if asset["href"].startswith("/"):
            asset["href"] = f"s3://{s3_bucket}/s2/2024-07-15/{Path(asset['href']).name}"
    (tmp_path / "items.json").write_text(json.dumps(collection(item)))
    assets = {k: v for k, v in EARTH_SEARCH_ASSETS.items() if k != "TCI_R"}
    result, ds = _run(tmp_path / "stac", {"stac": str(tmp_path / "items.json"), "assets": assets}, storage=storage)
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    _same_bits(ds, glob_run[1])
    assert _bytes_read(result.report) == _bytes_read(glob_run[0].report)


def test_landsat_item_with_s3_alternates_matches_gdal(
    world: RealWorld, tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    """A Landsat Collection 2 item (7131 x 8151 px, another UTM zone): ``https`` hrefs that are never
    fetched, the ``alternate.s3`` ones read instead (``inputs.alternate: s3``), Collection 2's scale and
    offset recorded, the level gdalwarp picks for 100 m (3565 px, rounded down) read."""
    name = Path(world.files["SR-B4"]).name
    s3_server.client().upload_file(world.files["SR-B4"], s3_bucket, f"landsat/{name}")
    item = landsat_item(world, "https://landsatlook.example.invalid/data", f"s3://{s3_bucket}/landsat")
    (tmp_path / "items.json").write_text(json.dumps(collection(item)))
    inputs = {"stac": str(tmp_path / "items.json"), "alternate": "s3"}
    result, ds = _run(tmp_path / "run", inputs, storage={"endpoint_url": s3_server.endpoint_url}, resampling="average")
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert result.report["plan"]["levels_used"] == {"overview 0": 1}
    assert ds["red"].attrs["scale_factor"] == L_SCALE and ds["red"].attrs["add_offset"] == L_OFFSET
    assert result.report["inputs"]["bands"]["red"]["nodata_from"] == "stac"
    _check_against_gdal(ds, {"red": (world.files["SR-B4"], 1)}, {"*": "average"})
    decoded = xr.open_zarr(tmp_path / "run" / "out.zarr")["red"].isel(time=0).values
    raw = ds["red"].isel(time=0).values
    valid = raw != 0
    assert np.allclose(decoded[valid], raw[valid] * L_SCALE + L_OFFSET, rtol=1e-5)


@pytest.mark.parametrize("shape", ["earth-search", "cdse", "landsat"])
def test_dict_and_arrow_readers_agree_on_real_item_shapes(shape: str, world: RealWorld, tmp_path: Path) -> None:
    """The stac-geoparquet reader finds every field where the JSON reader does, in each catalogue's shape:
    STAC 1.1 bands and asset-level fields, nulls, 9-value transforms, multi-band selection, alternates."""
    import pyarrow.parquet as pq

    from pipeline.inputs.stac import ASSET_COLUMNS, _as_arrays, asset_rows_from_items
    from pipeline.inputs.stac_parquet import asset_rows_from_arrow, read_geoparquet_table

    assets: dict[str, str] | None
    if shape == "earth-search":
        item, assets, alternate = earth_search_item(world), EARTH_SEARCH_ASSETS, None
    elif shape == "cdse":
        item, assets, alternate = cdse_item(world), None, None
    else:
        item, assets, alternate = landsat_item(world, "https://example.invalid/l", "s3://bucket/l"), None, "s3"
    write_geoparquet([item], str(tmp_path / "items.parquet"))
    base = str(tmp_path / "items.json")
    skipped_d: list[dict[str, str]] = []
    d = _as_arrays(asset_rows_from_items([item], assets, base, skipped_d, alternate))
    for table in (
        pq.read_table(tmp_path / "items.parquet"),
        read_geoparquet_table(str(tmp_path / "items.parquet"), None, assets),
    ):
        skipped_a: list[dict[str, str]] = []
        a = asset_rows_from_arrow(table, assets, base, skipped_a, alternate)
        assert skipped_a == skipped_d == []
        order_d, order_a = np.argsort(d["band"].astype(str)), np.argsort(a["band"].astype(str))
        for c in ASSET_COLUMNS:
            x, y = d[c][order_d], a[c][order_a]
            if c == "time":  # rustac writes stac-geoparquet's timestamps in milliseconds
                x, y = x.astype("datetime64[ms]"), y.astype("datetime64[ms]")
            same = np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else list(x) == list(y)
            assert same, (c, list(x), list(y))
    if shape == "cdse":
        assert sorted(d["band"]) == ["B01", "B04", "B11", "SCL"]
        assert set(d["crs"]) == {S2_CRS} and (d["nodata"] == 0).all() and d["categorical"].sum() == 1
        assert np.allclose(d["scale"][d["band"] != "SCL"], 0.0001)
    if shape == "landsat":
        assert list(d["href"]) == ["s3://bucket/l/LC09_193026_SR-B4.tif"] and d["scale"][0] == L_SCALE
    if shape == "earth-search":
        assert (
            int(d["bidx"][list(d["band"]).index("TCI_R")]) == 1 and d["dtype"][list(d["band"]).index("SCL")] == "uint8"
        )


def test_overview_sizes_by_gdal_and_by_rasterio_agree(world: RealWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sizes read through GDAL's C API equal rasterio's per-level opens, which serve where the
    library cannot be loaded; both are the COG driver's rounded-down sizes."""
    import rasterio

    import pipeline.inputs.netstats as netstats
    from pipeline.inputs.headers import _overview_sizes

    path = world.files["B11"]
    with rasterio.open(path) as ds:
        count = len(ds.overviews(1))
    fast = _overview_sizes(path, count)
    monkeypatch.setattr(netstats, "gdal_library", lambda: None)
    assert fast == _overview_sizes(path, count) == [2745, 2745, 1372, 1372, 686, 686, 343, 343]
