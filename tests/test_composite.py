"""Masks and composites against an independent reference.

Tiles are written here with rasterio as archives hold them (no nodata tag; 10 m and 20 m bands; an
SCL-like class band at 20 m; a Landsat-like QA band of bit flags; two UTM zones). The reference is GDAL:
copies of the source tiles in which the pixels the mask drops were set to nodata beforehand, warped with
``rasterio.warp.reproject`` by the same method, fused first-valid per date in path order, then reduced
per pixel and period by NumPy's ``nanmedian`` / ``nanmean`` / ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import xarray as xr
import yaml
from rasterio.enums import Resampling
from rasterio.io import MemoryFile
from rasterio.transform import from_origin
from rasterio.warp import reproject

from pipeline.config import load_config
from pipeline.execute.runner import run
from pipeline.tools.stac_items import items_from_files, write_item_collection
from tests.helpers import PATTERN
from tests.s3server import upload_tree

GRID_CRS = "EPSG:32632"
RES = 20.0
DATES = ("2024-06-03", "2024-06-13", "2024-06-23", "2024-07-03")
TILES = {  # name: (EPSG, west, north): the first in zone 31, east of 6°E's edge, overlapping the second
    "T31A": (32631, 717_960.0, 5_000_040.0),
    "T32B": (32632, 247_010.0, 5_000_590.0),
}
TILE_M = 2400
EXCLUDE = [3, 8, 9, 10]  # cloud shadow, cloud medium and high probability, thin cirrus
DILATE = 2
"""Two 20 m mask pixels: wider than the one-pixel band around edges that the comparisons leave out."""
BITS = {"cirrus": 2, "cloud": 3, "cloud_shadow": 4}  # Landsat QA_PIXEL
SCL_CLASSES = {
    "no_data": 0,
    "cloud_shadows": 3,
    "vegetation": 4,
    "not_vegetated": 5,
    "water": 6,
    "cloud_medium_probability": 8,
    "cloud_high_probability": 9,
    "thin_cirrus": 10,
}
BANDS = ("B04", "B11")
RESOLUTION = {"B04": 10, "B11": 20, "SCL": 20, "QA": 20}


@dataclass
class Cloudy:
    root: Path
    files: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(date, tile, band) -> path."""


def _scl(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Classes with blobs of cloud (8, 9), shadow (3) and cirrus (10) that move with the date ``k``."""
    yy, xx = np.mgrid[0:n, 0:n]
    scl = np.where((xx + yy) % 7 < 4, 4, 5).astype("uint8")
    scl[(xx // 9 + yy // 11) % 13 == 0] = 6
    for cls, radius in ((9, 22), (8, 14), (10, 18), (3, 12)):
        for _ in range(2):
            cy, cx = rng.integers(0, n, 2)
            blob = (yy - cy) ** 2 + (xx - cx - 23 * k) ** 2 < radius**2
            scl[blob] = cls
    return scl


def write_cloudy(root: Path, seed: int = 7) -> Cloudy:
    """Two tiles x four dates: B04 (10 m), B11 (20 m), SCL and QA (20 m); no nodata tags; an orbit-edge
    wedge of zeros on the second date of the zone-31 tile."""
    rng = np.random.default_rng(seed)
    out = Cloudy(root)
    for k, date in enumerate(DATES):
        for tile, (epsg, west, north) in TILES.items():
            scl20 = _scl(rng, TILE_M // 20, k)
            wedge20 = None
            if tile == "T31A" and k == 1:
                yy, xx = np.mgrid[0 : TILE_M // 20, 0 : TILE_M // 20]
                wedge20 = xx + 0.5 * yy > 150
                scl20[wedge20] = 0
            qa = np.zeros(scl20.shape, dtype="uint16")
            qa[np.isin(scl20, (8, 9))] |= 1 << BITS["cloud"]
            qa[scl20 == 3] |= 1 << BITS["cloud_shadow"]
            qa[scl20 == 10] |= 1 << BITS["cirrus"]
            qa[scl20 != 0] |= 1 << 6  # clear-ish flag that no rule drops
            for band in (*BANDS, "SCL", "QA"):
                res = RESOLUTION[band]
                f = 20 // res
                n = TILE_M // res
                if band == "SCL":
                    values = scl20
                elif band == "QA":
                    values = qa
                else:
                    yy, xx = np.mgrid[0:n, 0:n]
                    base = 800 + 300 * np.sin(xx / 37.0 + k) + 200 * np.cos(yy / 23.0) + (50 if band == "B11" else 0)
                    classes = np.repeat(np.repeat(scl20, f, 0), f, 1)
                    base = np.where(np.isin(classes, (8, 9)), 7000 + 5 * xx % 900, base)  # clouds are bright
                    base = np.where(classes == 10, base + 1500, base)
                    base = np.where(classes == 3, base * 0.3, base)
                    values = np.where(classes == 0, 0, np.maximum(base, 1)).astype("uint16")
                path = root / date / f"{tile}_{band}.tif"
                path.parent.mkdir(parents=True, exist_ok=True)
                with rasterio.open(
                    path,
                    "w",
                    driver="GTiff",
                    width=n,
                    height=n,
                    count=1,
                    dtype=values.dtype,
                    crs=f"EPSG:{epsg}",
                    transform=from_origin(west, north, res, res),
                    tiled=True,
                    blockxsize=128,
                    blockysize=128,
                    compress="deflate",
                ) as ds:
                    ds.write(values, 1)
                out.files[(date, tile, band)] = str(path)
    return out


@pytest.fixture(scope="module")
def cloudy(tmp_path_factory: pytest.TempPathFactory) -> Cloudy:
    return write_cloudy(tmp_path_factory.mktemp("cloudy"))


def _grid(c: Cloudy) -> tuple[Any, tuple[int, int]]:
    """The grid the runs use: 20 m in zone 32 over both tiles (bounds given, so the reference knows them)."""
    return from_origin(245_800.0, 5_001_400.0, RES, RES), (160, 180)


def _config(c: Cloudy, folder: Path, **extra: Any) -> Any:
    transform, (h, w) = _grid(c)
    raw: dict[str, Any] = {
        "inputs": {"paths": [str(c.root / "*" / "*.tif")], "pattern": PATTERN, "bands": list(BANDS), "nodata": 0},
        "grid": {
            "crs": GRID_CRS,
            "resolution": RES,
            "bounds": [transform.c, transform.f - RES * h, transform.c + RES * w, transform.f],
        },
        "resampling": "average",
        "mask": {"band": "SCL", "exclude": EXCLUDE, "dilate": DILATE},
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 64, "x": 64}},
        "execution": {"scheduler": "threads", "workers": 2, "partition_mb": 1},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = raw[key] | value
        else:
            raw[key] = value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(raw))
    return load_config(folder / "config.yaml")


def _run(c: Cloudy, folder: Path, **extra: Any) -> tuple[Any, xr.Dataset]:
    result = run(_config(c, folder, **extra))
    return result, xr.open_zarr(folder / "out.zarr", mask_and_scale=False)


def _dilate(drop: np.ndarray, r: int) -> np.ndarray:
    """Brute force: every pixel within Chebyshev distance r of a dropped one."""
    out = drop.copy()
    n0, n1 = drop.shape
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            src = drop[max(dy, 0) : n0 + min(dy, 0), max(dx, 0) : n1 + min(dx, 0)]
            out[max(-dy, 0) : n0 + min(-dy, 0), max(-dx, 0) : n1 + min(-dx, 0)] |= src
    return out


def reference_layer(c: Cloudy, date: str, band: str, exclude: list[int] | None, dilate: int = 2) -> np.ndarray:
    """GDAL's answer for one date: each tile's masked copy warped by average onto the grid, then the first
    valid value in path order (0: none)."""
    transform, shape = _grid(c)
    out = np.zeros(shape, dtype="uint16")
    for tile in sorted(TILES):
        with rasterio.open(c.files[(date, tile, band)]) as ds:
            data, profile = ds.read(1), ds.profile
        if exclude is not None:
            with rasterio.open(c.files[(date, tile, "SCL")]) as ds:
                drop = _dilate(np.isin(ds.read(1), exclude), dilate)
            f = 20 // RESOLUTION[band]  # the SCL pixel at each data pixel's centre: aligned, f x f per class
            data = np.where(np.repeat(np.repeat(drop, f, 0), f, 1), 0, data).astype(data.dtype)
        profile.update(nodata=0)
        warped = np.zeros(shape, dtype="uint16")
        with MemoryFile() as mem, mem.open(**profile) as copy:
            copy.write(data, 1)
            reproject(
                rasterio.band(copy, 1),
                warped,
                src_nodata=0,
                dst_transform=transform,
                dst_crs=GRID_CRS,
                dst_nodata=0,
                resampling=Resampling.average,
            )
        out = np.where(out == 0, warped, out)
    return out


def assert_close(got: np.ndarray, ref: np.ndarray, what: str, spread: float = 1.0) -> None:
    """The resampling tests' bounds (tests/test_end_to_end.py: mean |diff| <= 0.1% and p99 <= 1% of the
    value range) away from the edges of the reference's data. A mask makes many such edges (every cloud's),
    and there GDAL's average takes in the row or column just outside a footprint where the edges align
    (as at the aligned tile's top edge, unmasked too): where data and nodata disagree must be within one
    pixel of such an edge, and few. ``spread`` widens the value bounds where a reduction picks between
    dates (a median of two values moves with either)."""
    valid = ref != 0
    edge = _dilate(valid, 1) & _dilate(~valid, 1)
    both = (got != 0) & valid & ~edge
    assert both.mean() > 0.3, what  # a comparison over real data, not an empty cube
    value_range = float(ref[both].max()) - float(ref[both].min())
    diff = np.abs(got[both].astype("f8") - ref[both])
    assert diff.mean() <= 0.001 * value_range * spread, (what, diff.mean(), value_range)
    assert np.percentile(diff, 99) <= 0.01 * value_range * spread, (what, np.percentile(diff, 99))
    differ = (got != 0) != valid
    assert not (differ & ~edge).any(), (what, np.argwhere(differ & ~edge)[:5])
    assert differ.mean() <= 0.02, (what, differ.mean())


@pytest.fixture(scope="module")
def masked_run(cloudy: Cloudy, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, xr.Dataset]:
    return _run(cloudy, tmp_path_factory.mktemp("masked"))


def test_masking_equals_gdal_on_copies_with_dropped_pixels_set_to_nodata(
    masked_run: tuple[Any, xr.Dataset], cloudy: Cloudy
) -> None:
    result, ds = masked_run
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert "SCL" not in ds  # the mask band is written only if inputs.bands lists it
    for t, date in enumerate(DATES):
        for band in BANDS:
            got = ds[band].isel(time=t).values
            ref = reference_layer(cloudy, date, band, EXCLUDE)
            assert_close(got, ref, f"{band} {date}")
            unmasked = reference_layer(cloudy, date, band, None)
            # what the mask changed is what a regression would put back: bright clouds
            assert (got > 5000).mean() < 0.001, (band, date)
            assert (unmasked > 5000).mean() > 0.02, (band, date)
            undilated = reference_layer(cloudy, date, band, EXCLUDE, dilate=0)
            assert ((got != 0) != (undilated != 0)).mean() > 0.01, (band, date)  # the dilation shows


def test_report_has_mask_stage_and_dropped_fractions(masked_run: tuple[Any, xr.Dataset], cloudy: Cloudy) -> None:
    report = masked_run[0].report
    assert report["stages"]["mask"] > 0 and report["stage_task_s"]["mask"] > 0
    assert report["stages"]["reduce"] == 0
    mask = report["mask"]
    assert mask["band"] == "SCL" and mask["exclude"] == EXCLUDE and mask["dilate"] == DILATE
    for band in BANDS:
        fractions = mask["dropped_fraction"][band]
        assert sorted(fractions) == [f"{d}T00:00:00" for d in DATES]
        assert all(0.05 < v < 0.95 for v in fractions.values()), fractions
    # what each rule matched, before the dilation: the classes' shares of the SCL files the grid covers
    scl = np.concatenate(
        [rasterio.open(cloudy.files[(d, t, "SCL")]).read(1).ravel() for d in DATES for t in TILES]  # noqa: SIM115
    )
    assert set(mask["matched_share"]) == {f"class {v}" for v in EXCLUDE}
    for v in EXCLUDE:
        assert abs(mask["matched_share"][f"class {v}"] - float(np.mean(scl == v))) < 0.015, (v, mask["matched_share"])


@pytest.mark.parametrize("reducer", ["median", "mean", "first", "max", "count"])
def test_composite_equals_numpy_over_the_gdal_reference_stack(reducer: str, cloudy: Cloudy, tmp_path: Path) -> None:
    result, ds = _run(cloudy, tmp_path, composite={"period": "P1M", "reducer": reducer, "count": True})
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert [str(t)[:10] for t in ds["time"].values] == ["2024-06-01", "2024-07-01"]
    periods = {0: DATES[:3], 1: DATES[3:]}
    for band in BANDS:
        assert ds[band].dtype == ("uint16" if reducer != "count" else "uint16")
        for t, dates in periods.items():
            stack = np.stack([reference_layer(cloudy, d, band, EXCLUDE) for d in dates]).astype("f8")
            stack[stack == 0] = np.nan
            n = np.sum(~np.isnan(stack), axis=0)
            with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
                __import__("warnings").simplefilter("ignore")
                expected = {
                    "median": np.nanmedian(stack, axis=0),
                    "mean": np.nanmean(stack, axis=0),
                    "max": np.nanmax(stack, axis=0),
                    "count": n.astype("f8"),
                    "first": np.choose(np.argmax(~np.isnan(stack), axis=0), np.nan_to_num(stack)),
                }[reducer]
            expected = np.where(n > 0, np.rint(np.nan_to_num(expected)), 0)
            got = ds[band].isel(time=t).values
            what = f"{reducer} {band} {dates[0][:7]}"
            if reducer == "count":
                # observations per pixel: equal but where a tile's edge or a cloud's edge falls differently
                assert np.mean(got != expected) < 0.01, what
                assert got.max() == len(dates), what
            else:
                assert_close(got, expected, what, spread=2.0 if reducer in ("median", "mean") else 1.0)
        if reducer != "count":
            count = ds["clear_count"].isel(time=0).values
            assert count.max() == 3 and (count == 0).mean() < 0.5
    comp = result.report["composite"]
    assert comp["reducer"] == reducer and comp["steps"] == 2 and comp["dates"] == 4
    assert result.report["stages"]["reduce"] > 0


def test_first_takes_the_earliest_clear_observation(cloudy: Cloudy, tmp_path: Path) -> None:
    _, ds = _run(cloudy, tmp_path, composite={"period": "all", "reducer": "first"})
    got = ds["B04"].isel(time=0).values
    layers = [reference_layer(cloudy, d, "B04", EXCLUDE) for d in DATES]
    # Pixels clear on the first date take it; pixels clouded then and clear on the second take the second.
    first_clear = layers[0] != 0
    second_only = (layers[0] == 0) & (layers[1] != 0)
    assert np.mean(np.abs(got[first_clear].astype("f8") - layers[0][first_clear]) <= 2) > 0.99
    assert second_only.mean() > 0.05
    assert np.mean(np.abs(got[second_only].astype("f8") - layers[1][second_only]) <= 2) > 0.97


def test_results_do_not_depend_on_partitions_workers_or_strips(cloudy: Cloudy, tmp_path: Path) -> None:
    comp = {"period": "P1M", "reducer": "median", "count": True}
    _, a = _run(cloudy, tmp_path / "a", composite=comp)
    split, b = _run(
        cloudy,
        tmp_path / "b",
        composite={**comp, "stack_mb": 0.02},
        execution={"scheduler": "processes", "workers": 1, "partition_mb": 64},
    )
    plan = split.report["composite"]
    assert plan["strips"] > 1 and "split in space, never in time" in plan["split"]
    assert plan["stack_mb"] <= 0.02
    for name in (*BANDS, "clear_count"):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_exclude_bits_on_a_qa_band_equals_the_classes(cloudy: Cloudy, tmp_path: Path) -> None:
    comp = {"period": "P1M", "reducer": "median"}
    _, by_class = _run(cloudy, tmp_path / "classes", composite=comp)
    _, by_bits = _run(
        cloudy,
        tmp_path / "bits",
        composite=comp,
        mask={"band": "QA", "exclude_bits": list(BITS.values()), "dilate": DILATE},
    )
    for band in BANDS:
        np.testing.assert_array_equal(by_class[band].values, by_bits[band].values, err_msg=band)


def _items(c: Cloudy, folder: Path) -> Path:
    """earth-search-shaped items: the SCL asset with classification:classes, QA with bitfields."""
    items = items_from_files([p for p in c.files.values()], pattern=PATTERN)
    for item in items:
        item["stac_extensions"] = [
            *item.get("stac_extensions", []),
            "https://stac-extensions.github.io/classification/v2.0.0/schema.json",
        ]
        item["assets"]["SCL"]["classification:classes"] = [{"value": v, "name": k} for k, v in SCL_CLASSES.items()]
        item["assets"]["QA"]["classification:bitfields"] = [
            {"offset": off, "length": 1, "name": name, "classes": [{"value": 1, "name": name}]}
            for name, off in BITS.items()
        ]
    return Path(write_item_collection(items, str(folder / "items.json")))


def test_stac_items_by_class_names_and_a_bucket_give_the_glob_bits(
    cloudy: Cloudy, tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    comp = {"period": "P1M", "reducer": "median", "count": True}
    _, glob = _run(cloudy, tmp_path / "glob", composite=comp)
    items = _items(cloudy, tmp_path)
    names = ["cloud_shadows", "cloud_medium_probability", "cloud_high_probability", "thin_cirrus"]
    stac_inputs = {"paths": None, "stac": str(items), "bands": list(BANDS), "nodata": 0, "groupby": "time"}
    result, stac = _run(
        cloudy,
        tmp_path / "stac",
        inputs=stac_inputs,
        composite=comp,
        mask={"band": "SCL", "exclude": names, "dilate": DILATE},
    )
    assert result.report["mask"]["exclude"] == EXCLUDE
    _, bits = _run(
        cloudy,
        tmp_path / "stac-bits",
        inputs=stac_inputs,
        composite=comp,
        mask={"band": "QA", "exclude_bits": ["cloud", "cloud_shadow", "cirrus"], "dilate": DILATE},
    )
    upload_tree(s3_server.client(), cloudy.root, s3_bucket, "tiles")
    _, s3 = _run(
        cloudy,
        tmp_path / "s3",
        inputs={"paths": [f"s3://{s3_bucket}/tiles/**/*.tif"]},
        storage={"endpoint_url": s3_server.endpoint_url},
        composite=comp,
    )
    for name in (*BANDS, "clear_count"):
        for other in (stac, bits, s3):
            np.testing.assert_array_equal(glob[name].values, other[name].values, err_msg=name)


def test_unknown_class_name_and_names_without_stac_are_exit_2(cloudy: Cloudy, tmp_path: Path) -> None:
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=r"mask.exclude.*carries no STAC classification:classes: give numbers"):
        run(_config(cloudy, tmp_path / "a", mask={"band": "SCL", "exclude": ["cloud_high_probability"]}))
    with pytest.raises(ConfigError, match=r"mask.band.*no input carries band 'CLOUDS'"):
        run(_config(cloudy, tmp_path / "b", mask={"band": "CLOUDS", "exclude": [9]}))
    _config(cloudy, tmp_path / "c")
    with pytest.raises(ConfigError, match=r"mask.exclude.*needs exclude"):
        load_config(tmp_path / "c" / "config.yaml", ["mask={band: SCL}"])
    with pytest.raises(ConfigError, match=r"composite.reducer"):
        _config(cloudy, tmp_path / "d", composite={"reducer": "mode"})


def test_clear_observations_warns_on_thin_periods_and_a_longer_one_clears_it(cloudy: Cloudy, tmp_path: Path) -> None:
    thin, _ = _run(cloudy, tmp_path / "p16d", composite={"period": "P16D", "reducer": "first"})
    check = next(d for d in thin.report["diagnostics"] if d["check"] == "clear_observations")
    assert check["status"] == "warn", check
    assert "composite.period: P1M" in check["advice"] and "mask.exclude" in check["advice"]
    matched = check["advice"].split("these rules matched ")[1]  # which classes cost the most pixels, most first
    shares = [float(part.rsplit(" ", 1)[1].rstrip("%")) for part in matched.split(", ")]
    assert len(shares) == len(EXCLUDE) and shares == sorted(shares, reverse=True) and shares[0] > 0
    whole, _ = _run(cloudy, tmp_path / "all", composite={"period": "all", "reducer": "first"})
    check = next(d for d in whole.report["diagnostics"] if d["check"] == "clear_observations")
    assert check["status"] == "ok", check


def test_plan_says_how_a_composite_is_split(cloudy: Cloudy, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pipeline.cli import main

    _config(cloudy, tmp_path, composite={"period": "P1M", "reducer": "median", "stack_mb": 0.02})
    out = CliRunner().invoke(main, ["plan", str(tmp_path / "config.yaml")])
    assert out.exit_code == 0, out.output
    assert "composite   median over P1M: 4 dates into 2 steps" in out.output
    assert "row strips" in out.output and "never in time" in out.output
    as_json = json.loads(CliRunner().invoke(main, ["plan", str(tmp_path / "config.yaml"), "-q", "--json"]).output)
    assert as_json["composite"]["strips"] > 1


def test_masked_runs_give_the_numpy_kernels_bits_with_the_compiled_kernels(
    cloudy: Cloudy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A masked composite runs the compiled kernels (which test each tap's validity where they read it),
    and its cube is the NumPy kernels' (``PIPELINE_COMPILED=0``) bit for bit; each report says which ran."""
    comp = {"period": "P1M", "reducer": "median"}
    monkeypatch.delenv("PIPELINE_COMPILED", raising=False)
    chosen, a = _run(cloudy, tmp_path / "auto", composite=comp)
    kernels = chosen.report["execution"]["compiled_kernels"]
    assert kernels["chosen"] and kernels["ran"] and kernels["windows"] > 0
    monkeypatch.setenv("PIPELINE_COMPILED", "0")
    numpy_run, b = _run(cloudy, tmp_path / "numpy", composite=comp)
    kernels = numpy_run.report["execution"]["compiled_kernels"]
    assert not kernels["chosen"] and not kernels["ran"] and kernels["reason"] == "PIPELINE_COMPILED=0"
    for band in BANDS:
        np.testing.assert_array_equal(a[band].values, b[band].values)
