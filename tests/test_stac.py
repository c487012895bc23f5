"""STAC inputs: the same tiles by glob, ItemCollection, catalog.json, stac-geoparquet and a real STAC API
(``rustac serve`` on 127.0.0.1) give bit-identical cubes; the rules as pure functions."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.execute.runner import run
from pipeline.inputs.stac import compute_solar_day, compute_time_steps, resolve_href
from pipeline.tools.stac_items import items_from_files, write_geoparquet, write_item_collection
from tests.helpers import PATTERN, serve_stac

SCALE = {"B02": (0.0001, -0.1)}


# --- pure rules ----------------------------------------------------------------------------------------


def test_solar_days_and_their_labels_are_odc_stacs() -> None:
    """odc-stac's own grouping and labels (its _group_items and _extract_timestamps) on items around
    midnight UTC, at grid-centre longitudes on both sides of the hour steps: the same steps, the same labels."""
    import datetime as dt

    from odc.stac._stac_load import _extract_timestamps, _group_items
    from odc.stac.model import ParsedItem

    texts = ["2024-06-01T22:30", "2024-06-01T23:40", "2024-06-02T00:20", "2024-06-02T01:00", "2024-06-11T10:30"]
    t = np.array(texts, "datetime64[ns]")
    for lon in (-40.0, -7.4, 7.4, 16.0, 31.0, 170.0):

        class Parsed:  # the two fields odc-stac's solar_day grouping reads
            def __init__(self, k: int) -> None:
                self.nominal_datetime = dt.datetime.fromisoformat(texts[k]).replace(tzinfo=dt.UTC)
                self.id = f"item-{k}"

            def solar_date_at(self, lon: float) -> dt.datetime:
                return ParsedItem.solar_date_at(self, lon)  # type: ignore[arg-type]

        parsed = [Parsed(k) for k in range(len(texts))]
        groups = _group_items([None] * len(texts), parsed, "solar_day", lon)  # type: ignore[arg-type]
        labels = _extract_timestamps([[parsed[k] for k in g] for g in groups])  # type: ignore[misc]
        want = np.empty(len(texts), dtype="datetime64[ns]")
        for g, label in zip(groups, labels, strict=True):
            want[g] = np.datetime64(label)
        got = compute_time_steps(t, lon, "solar_day")
        assert list(got) == list(want), lon
    assert compute_solar_day(t[:1], float("nan"))[0] == np.datetime64("2024-06-01")  # no longitude: UTC days


def test_groupby_time_keeps_timestamps_and_none_makes_one_step() -> None:
    t = np.array(["2024-06-01T10:30:00.5", "2024-06-01T10:30:01", "2024-06-11T10:30"], "datetime64[ns]")
    lon = 0.0
    assert np.array_equal(compute_time_steps(t, lon, "time"), t)
    assert len(np.unique(compute_time_steps(t, lon, "solar_day"))) == 2
    one = compute_time_steps(t, lon, "none")
    assert len(np.unique(one)) == 1 and one[0] == t.min()
    with pytest.raises(ValueError):
        compute_time_steps(t, lon, "month")


def test_hrefs_resolve_against_their_document() -> None:
    assert resolve_href("a/b.tif", "/data/stac/items.json") == "/data/stac/a/b.tif"
    assert resolve_href("../b.tif", "/data/stac/cat/item.json") == "/data/stac/b.tif"
    assert resolve_href("file:///x/y.tif", None) == "/x/y.tif"
    assert resolve_href("s3://bucket/k/y.tif", "/data/items.json") == "s3://bucket/k/y.tif"
    assert resolve_href("B04.tif", "https://example.com/stac/item.json") == "https://example.com/stac/B04.tif"


# --- the same cube every way ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stac_dir(small_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Items for the small fixture in every form: relative hrefs (ItemCollection, parquet), a static
    catalog, absolute hrefs (for the API server), and items without the projection/raster extensions."""
    import pystac

    out = tmp_path_factory.mktemp("stac")
    files = sorted(str(p) for p in small_dir.glob("*/*.tif"))
    rel = items_from_files(files, href_base=str(out), scale_offset=SCALE)
    assert rel[0]["assets"]["B02"]["href"].startswith("..")
    write_item_collection(rel, str(out / "items.json"))
    write_geoparquet(rel, str(out / "items.parquet"))
    absolute = items_from_files(files, scale_offset=SCALE)
    write_geoparquet(absolute, str(out / "absolute.parquet"))
    catalog = pystac.Catalog(id="fixtures", description="the small fixture")
    for d in absolute:
        catalog.add_item(pystac.Item.from_dict(copy.deepcopy(d)))
    catalog.normalize_hrefs(str(out / "catalog"))
    catalog.save(catalog_type=pystac.CatalogType.SELF_CONTAINED)
    bare = items_from_files(files, href_base=str(out), projection=False, raster=False)
    write_item_collection(bare, str(out / "bare.json"))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def stac_api(stac_dir: Path) -> Iterator[str]:
    """``rustac serve`` on a free loopback port, serving the stac-geoparquet file from memory."""
    with serve_stac(stac_dir / "absolute.parquet") as url:
        yield url


def _config(folder: Path, inputs: dict[str, Any], resolution: float = 10, **extra: Any) -> Path:
    raw = {
        "inputs": inputs,
        "grid": {"crs": "EPSG:32632", "resolution": resolution},
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 256, "x": 256}},
        "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 4},
        **extra,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(folder: Path, inputs: dict[str, Any], resolution: float = 10) -> tuple[Any, Any]:
    result = run(load_config(_config(folder, inputs, resolution)))
    return result, xr.open_zarr(folder / "out.zarr", mask_and_scale=False)


def _assert_same_cube(got: xr.Dataset, ref: xr.Dataset) -> None:
    assert sorted(got.data_vars) == sorted(ref.data_vars)
    for c in ("y", "x"):
        assert np.array_equal(got[c].values, ref[c].values), c
    # STAC steps are labelled by their earliest item's time (odc-stac's labels), paths by their date
    assert np.array_equal(got["time"].values.astype("datetime64[D]"), ref["time"].values.astype("datetime64[D]"))
    for name in ref.data_vars:
        a, b = got[name].values, ref[name].values
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
        assert int((b != 0).sum()) > 0, name  # compared over real data


@pytest.fixture(scope="module")
def glob_run(small_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, xr.Dataset]:
    """The glob run at 20 m: ``average`` reads the 10 m bands' first overviews."""
    inputs = {"paths": [str(small_dir / "**" / "*.tif")], "pattern": PATTERN}
    return _run(tmp_path_factory.mktemp("glob"), inputs, 20)


def _bytes_read(report: dict[str, Any]) -> int:
    return sum(t["bytes_read"] for t in report["tasks"])


@pytest.mark.parametrize("source", ["items.json", "catalog/catalog.json", "items.parquet", "api"])
def test_stac_sources_give_the_glob_cube(
    source: str, stac_dir: Path, glob_run: tuple[Any, xr.Dataset], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Planned from the projection extension, with one header read per (collection, band, shape) group
    for the overviews: the glob run's bits, from the same overview levels (the same bytes read)."""
    if source == "api":
        inputs: dict[str, Any] = {
            "stac_search": {
                "url": request.getfixturevalue("stac_api"),
                "collections": ["pipeline-fixtures"],
                "max_items": 1000,
            }
        }
    else:
        inputs = {"stac": str(stac_dir / source)}
    glob_result, glob_cube = glob_run
    result, ds = _run(tmp_path, inputs, 20)
    assert result.exit_code == 0
    assert result.report["inputs"]["headers_read"] == 4  # one sample per band: all tiles of a band share a shape
    assert result.report["inputs"]["files"] == 32
    assert result.report["plan"]["levels_used"] == glob_result.report["plan"]["levels_used"]
    assert _bytes_read(result.report) == _bytes_read(glob_result.report) > 0
    _assert_same_cube(ds, glob_cube)
    # raster:bands scale/offset: CF attributes on the band, stored values untouched.
    assert ds["B02"].attrs["scale_factor"] == 0.0001 and ds["B02"].attrs["add_offset"] == -0.1
    assert "scale_factor" not in ds["B04"].attrs
    decoded = xr.open_zarr(tmp_path / "out.zarr")["B02"].isel(time=0).values
    raw = ds["B02"].isel(time=0).values
    valid = raw != 0
    assert np.allclose(decoded[valid], raw[valid] * 0.0001 - 0.1)


def test_items_without_projection_are_opened(small_dir: Path, stac_dir: Path, tmp_path: Path) -> None:
    """Opened items get the files' real overviews: at 20 m (average reads the 10 m bands' overviews) the
    cube still equals the glob one."""
    _, ref = _run(tmp_path / "glob", {"paths": [str(small_dir / "**" / "*.tif")], "pattern": PATTERN}, 20)
    result, ds = _run(tmp_path / "bare", {"stac": str(stac_dir / "bare.json")}, 20)
    assert result.exit_code == 0
    assert result.report["inputs"]["headers_read"] == 32
    _assert_same_cube(ds, ref)


def test_groupby_none_makes_one_time_step(stac_dir: Path, tmp_path: Path) -> None:
    from pipeline.inputs.catalog import build_catalog

    cfg = load_config(_config(tmp_path, {"stac": str(stac_dir / "items.parquet"), "groupby": "none"}))
    assert len(np.unique(build_catalog(cfg.inputs, cfg.storage).tiles["date"])) == 1
    cfg = load_config(_config(tmp_path, {"stac": str(stac_dir / "items.json"), "groupby": "time"}))
    dates = np.unique(build_catalog(cfg.inputs, cfg.storage).tiles["date"])
    assert list(dates.astype(str)) == ["2024-06-01T10:30:00.000000000", "2024-06-11T10:30:00.000000000"]


def test_missing_asset_and_broken_href_are_skipped_and_listed(stac_dir: Path, tmp_path: Path) -> None:
    items = json.loads((stac_dir / "items.json").read_text())["features"]
    del items[0]["assets"]["B04"]  # an item without a wanted asset
    items[1]["assets"]["B02"]["href"] = "nowhere/T31A1_B02.tif"  # planned from metadata: fails at read
    bare = items[2]["assets"]["B11"]
    bare["href"] = "nowhere/T32A0_B11.tif"  # no projection: fails when its header is read
    for k in [k for k in bare if k.startswith(("proj:", "raster:"))]:
        del bare[k]
    write_item_collection(items, str(tmp_path / "items.json"))
    cfg = _config(
        tmp_path / "run", {"stac": str(tmp_path / "items.json"), "assets": {"B02": "B02", "B04": "B04", "B11": "B11"}}
    )
    r = CliRunner().invoke(main, ["run", str(cfg), "--report", str(tmp_path / "report.json"), "-q"])
    assert r.exit_code == 3, r.output
    report = json.loads((tmp_path / "report.json").read_text())
    errors = {s["path"]: s["error"] for s in report["inputs"]["skipped"]}
    assert "'B04'" in errors[items[0]["id"]]
    assert any(p.endswith("nowhere/T31A1_B02.tif") for p in errors)
    assert any(p.endswith("nowhere/T32A0_B11.tif") for p in errors)
    assert len(errors) == 3
    # the bare asset, a sample for each of the 3 bands, and B02's next asset after its sample (the broken href) failed
    assert report["inputs"]["headers_read"] == 5
    ds = xr.open_zarr(tmp_path / "run" / "out.zarr")
    assert sorted(ds.data_vars) == ["B02", "B04", "B11"]


def test_a_missing_stac_file_is_a_config_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path, {"stac": str(tmp_path / "nothing.json")})
    r = CliRunner().invoke(main, ["plan", str(cfg)])
    assert r.exit_code == 2
    assert "inputs.stac" in r.output


def test_dict_and_arrow_readers_agree(stac_dir: Path, tmp_path: Path) -> None:
    """The JSON path and the stac-geoparquet path make the same asset table and skip the same items,
    also with ``assets: null`` (every raster asset wanted) and one item short of a band."""
    import pyarrow.parquet as pq

    from pipeline.inputs.stac import ASSET_COLUMNS, _as_arrays, asset_rows_from_items
    from pipeline.inputs.stac_parquet import asset_rows_from_arrow, read_geoparquet_table

    items = json.loads((stac_dir / "items.json").read_text())["features"]
    del items[3]["assets"]["B11"]
    items[4]["assets"]["thumbnail"] = {"href": "t.png", "type": "image/png", "roles": ["thumbnail"]}
    write_geoparquet(items, str(tmp_path / "items.parquet"))
    base = str(stac_dir / "items.json")
    for assets in (None, {"blue": "B02", "swir": "B11"}):
        skipped_d: list[dict[str, str]] = []
        skipped_a: list[dict[str, str]] = []
        d = _as_arrays(asset_rows_from_items(items, assets, base, skipped_d))
        a = asset_rows_from_arrow(pq.read_table(tmp_path / "items.parquet"), assets, base, skipped_a)
        assert [s["path"] for s in skipped_d] == [s["path"] for s in skipped_a] == [items[3]["id"]]
        order_d = np.lexsort((d["band"].astype(str), d["href"].astype(str)))
        order_a = np.lexsort((a["band"].astype(str), a["href"].astype(str)))
        assert len(order_d) == len(order_a) == (len(items) - 1) * (4 if assets is None else 2)
        for c in ASSET_COLUMNS:
            x, y = d[c][order_d], a[c][order_a]
            same = np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else list(x) == list(y)
            assert same, c
        # The planner's reader: only the planning fields of the wanted (or raster) assets, same table.
        skipped_p: list[dict[str, str]] = []
        p = asset_rows_from_arrow(
            read_geoparquet_table(str(tmp_path / "items.parquet"), None, assets), assets, base, skipped_p
        )
        assert skipped_p == skipped_a
        for c in ASSET_COLUMNS:
            same = np.array_equal(p[c], a[c], equal_nan=True) if a[c].dtype.kind == "f" else list(p[c]) == list(a[c])
            assert same, c


def test_stac_geoparquet_in_a_bucket_with_s3_alternates_gives_the_glob_cube(
    small_dir: Path, glob_run: tuple[Any, xr.Dataset], tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    """The fixture tiles and their stac-geoparquet both in the S3 test server, shaped as public
    catalogues publish them: ``https``-style hrefs with an ``alternate.s3.href``. With ``inputs.alternate:
    s3`` the tiles are read through GDAL's /vsis3/, at the overview levels the glob run reads, and give
    its cube bit for bit."""
    from tests.s3server import upload_tree

    client = s3_server.client()
    upload_tree(client, small_dir, s3_bucket, "tiles")
    files = sorted(str(p) for p in small_dir.glob("*/*.tif"))
    items = items_from_files(files, scale_offset=SCALE)
    for item in items:
        for asset in item["assets"].values():
            rel = Path(asset["href"]).relative_to(small_dir).as_posix()
            asset["href"] = f"https://nowhere.invalid/{s3_bucket}/tiles/{rel}"  # never fetched
            asset["alternate"] = {"s3": {"href": f"s3://{s3_bucket}/tiles/{rel}"}}
    write_geoparquet(items, str(tmp_path / "items.parquet"))
    client.upload_file(str(tmp_path / "items.parquet"), s3_bucket, "stac/items.parquet")
    cfg = _config(
        tmp_path / "run",
        {"stac": f"s3://{s3_bucket}/stac/items.parquet", "alternate": "s3"},
        20,
        storage={"endpoint_url": s3_server.endpoint_url},
    )
    result = run(load_config(cfg))
    glob_result, glob_cube = glob_run
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert result.report["inputs"]["headers_read"] == 4 and result.report["inputs"]["files"] == 32
    assert all(p.startswith("s3://") for p in build_paths(load_config(cfg)))
    assert result.report["network"]["requests"] > 0  # the tiles really came over HTTP
    assert _bytes_read(result.report) == _bytes_read(glob_result.report)
    _assert_same_cube(xr.open_zarr(tmp_path / "run" / "out.zarr", mask_and_scale=False), glob_cube)


def build_paths(config: Any) -> list[str]:
    from pipeline.inputs.catalog import build_catalog

    return list(build_catalog(config.inputs, config.storage).tiles["path"])


def test_stac_field_rules_old_and_new() -> None:
    """Where each field is found: STAC 1.1 ``bands[k]`` first, then the asset, then 1.0 ``raster:bands[k]``,
    then the item; CRS from proj:code, else proj:epsg (nulls skipped); a band of a multi-band asset by
    index, name or common name."""
    from pipeline.inputs.stac_fields import band_field, band_index, crs_of, split_asset_key

    asset = {
        "bands": [{"name": "B8", "nodata": 1}, {"name": "nir", "eo:common_name": "nir08", "raster:scale": 2.0}],
        "nodata": 3,
        "raster:scale": 4.0,
        "raster:bands": [{"nodata": 5, "scale": 6.0, "data_type": "int16"}, {"offset": 7.0}],
    }
    props = {"raster:offset": 8.0, "data_type": "uint16"}
    assert band_field(asset, props, 1, "nodata") == 1 and band_field(asset, props, 2, "nodata") == 3
    assert band_field(asset, props, 1, "scale") == 4.0 and band_field(asset, props, 2, "scale") == 2.0
    assert band_field(asset, props, 2, "offset") == 7.0 and band_field(asset, props, 1, "offset") == 8.0
    assert band_field(asset, props, 1, "dtype") == "int16" and band_field(asset, props, 2, "dtype") == "uint16"
    assert band_field({}, {}, 1, "unit") is None
    assert band_index(asset, None) == 1 and band_index(asset, "2") == 2 and band_index(asset, "3") is None
    assert band_index(asset, "nir") == 2 and band_index(asset, "nir08") == 2 and band_index(asset, "red") is None
    assert split_asset_key("visual.2", {"visual": 1}) == ("visual", "2")
    assert split_asset_key("B01.jp2", {"B01.jp2": 1}) == ("B01.jp2", None)
    assert crs_of({"proj:code": None, "proj:epsg": None}, {"proj:epsg": 32633}) == "EPSG:32633"
    assert crs_of({"proj:code": "EPSG:32632", "proj:epsg": 32633}, {}) == "EPSG:32632"
    assert crs_of({"proj:code": None}, {}) is None


def test_relative_hrefs_of_a_copied_item_resolve_beside_its_document(tmp_path: Path) -> None:
    """An item copied from a catalogue keeps its ``self`` link there: a relative href that exists beside
    the local document is that file; one that does not follows the ``self`` link, as the spec says."""
    (tmp_path / "tiles").mkdir()
    (tmp_path / "tiles" / "B04.tif").write_bytes(b"")
    doc = str(tmp_path / "items.json")
    remote = "https://stac.example.invalid/v1/items/x.json"
    assert resolve_href("tiles/B04.tif", remote, doc) == str(tmp_path / "tiles" / "B04.tif")
    assert resolve_href("tiles/B08.tif", remote, doc) == "https://stac.example.invalid/v1/items/tiles/B08.tif"
    assert resolve_href("B04.tif", str(tmp_path / "tiles" / "item.json"), doc) == str(tmp_path / "tiles" / "B04.tif")


def test_a_stac_search_that_matches_nothing_is_exit_2(stac_api: str, tmp_path: Path) -> None:
    cfg = _config(tmp_path, {"stac_search": {"url": stac_api, "collections": ["no-such-collection"]}})
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "plan", str(cfg)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert "inputs.stac_search" in r.stderr and "matched no item" in r.stderr and "no-such-collection" in r.stderr


def test_dict_and_arrow_readers_agree_on_awkward_items(tmp_path: Path) -> None:
    """Items that differ from each other as real catalogues' do: relative hrefs with absolute and relative
    ``self`` links, a key first seen late, bands listed in another order per item, null and empty
    ``proj:code``, a 3-D bbox. Both readers make the same asset table."""
    import pyarrow.parquet as pq

    from pipeline.inputs.stac import ASSET_COLUMNS, _as_arrays, asset_rows_from_items
    from pipeline.inputs.stac_parquet import asset_rows_from_arrow, read_geoparquet_table

    def item(k: int) -> dict[str, Any]:
        names = ["red", "nir"] if k % 2 else ["nir", "red"]
        assets: dict[str, Any] = {
            "ms": {
                "href": f"tiles/{k}_ms.tif",
                "type": "image/tiff; application=geotiff",
                "proj:code": "" if k == 1 else None if k == 2 else "EPSG:32632",
                "proj:shape": [100, 100],
                "proj:transform": [10.0, 0.0, 300000.0 + k, 0.0, -10.0, 5000000.0],
                "bands": [{"name": n, "nodata": 0, "data_type": "uint16"} for n in names],
                "roles": ["data"],
            }
        }
        if k == 3:  # a key first seen in the last item
            assets["late"] = {"href": "tiles/late.tif", "type": "image/tiff", "roles": ["data"]}
        links = [{"rel": "self", "href": "https://cat.invalid/items/x.json" if k == 0 else "./items/x.json"}]
        return {
            "type": "Feature",
            "stac_version": "1.1.0",
            "id": f"item-{k}",
            "collection": "c",
            "bbox": [9.0, 45.0, 0.0, 10.0, 46.0, 100.0] if k == 2 else [9.0, 45.0, 10.0, 46.0],
            "geometry": {"type": "Point", "coordinates": [9.5, 45.5]},
            "properties": {"datetime": f"2024-06-0{k + 1}T10:30:00Z", "proj:epsg": 32632},
            "links": links,
            "assets": assets,
        }

    items = [item(k) for k in range(4)]
    write_geoparquet(items, str(tmp_path / "items.parquet"))
    base = str(tmp_path / "items.json")
    for assets in ({"red": "ms.red", "nir": "ms.2"}, None):
        skipped_d: list[dict[str, str]] = []
        d = _as_arrays(asset_rows_from_items(items, assets, base, skipped_d))
        for table in (
            pq.read_table(tmp_path / "items.parquet"),
            read_geoparquet_table(str(tmp_path / "items.parquet"), None, assets),
        ):
            skipped_a: list[dict[str, str]] = []
            a = asset_rows_from_arrow(table, assets, base, skipped_a)
            assert [s["path"] for s in skipped_a] == [s["path"] for s in skipped_d]
            order_d = np.lexsort((d["band"].astype(str), d["item"].astype(str)))
            order_a = np.lexsort((a["band"].astype(str), a["item"].astype(str)))
            for c in ASSET_COLUMNS:
                x, y = d[c][order_d], a[c][order_a]
                same = np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else list(x) == list(y)
                assert same, (assets, c, list(x), list(y))
    red = asset_rows_from_items(items, {"red": "ms.red"}, base, [])
    assert red["bidx"] == [2, 1, 2, 1]  # by name, item by item
    assert red["crs"] == ["EPSG:32632"] * 4  # an empty or null proj:code falls back to the item's proj:epsg
    assert red["href"][0] == "https://cat.invalid/items/tiles/0_ms.tif"
    assert red["href"][1] == str(tmp_path / "items" / "tiles" / "1_ms.tif")  # a relative self link, joined first
    assert red["lon"][2] == 9.5  # the 3-D bbox's xmin and xmax


def test_a_group_whose_samples_fail_opens_each_asset(stac_dir: Path, tmp_path: Path) -> None:
    """Four broken hrefs where the B04 group's samples would be: the group still gets the files'
    overviews, from each of its assets' own headers, and only the broken ones are skipped."""
    from pipeline.inputs.catalog import build_catalog

    items = json.loads((stac_dir / "items.json").read_text())["features"]
    for it in items[:4]:
        it["assets"]["B04"]["href"] = "nowhere/B04.tif"
    write_item_collection(items, str(tmp_path / "items.json"))
    cfg = load_config(_config(tmp_path / "run", {"stac": str(tmp_path / "items.json")}, 20))
    catalog = build_catalog(cfg.inputs, cfg.storage)
    b04 = catalog.tiles.rows(catalog.tiles["band"] == "B04")
    assert len(b04) == len(items) - 4 and all(len(s) > 0 for s in b04["overview_sizes"])
    assert sum("nowhere/B04.tif" in s["path"] for s in catalog.skipped) == 4


def test_an_item_collection_in_a_bucket_is_read(
    small_dir: Path, glob_run: tuple[Any, xr.Dataset], tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    """``inputs.stac`` may be an object: the ItemCollection in the S3 test server, its hrefs absolute."""
    files = sorted(str(p) for p in small_dir.glob("*/*.tif"))
    write_item_collection(items_from_files(files, scale_offset=SCALE), str(tmp_path / "items.json"))
    s3_server.client().upload_file(str(tmp_path / "items.json"), s3_bucket, "stac/items.json")
    cfg = _config(
        tmp_path / "run",
        {"stac": f"s3://{s3_bucket}/stac/items.json"},
        20,
        storage={"endpoint_url": s3_server.endpoint_url},
    )
    result = run(load_config(cfg))
    assert result.exit_code == 0 and result.report["inputs"]["files"] == 32
    _assert_same_cube(xr.open_zarr(tmp_path / "run" / "out.zarr", mask_and_scale=False), glob_run[1])
    missing = _config(
        tmp_path / "gone",
        {"stac": f"s3://{s3_bucket}/stac/nothing.json"},
        20,
        storage={"endpoint_url": s3_server.endpoint_url},
    )
    with pytest.raises(ConfigError, match="inputs.stac.*no such object"):
        run(load_config(missing))
