"""The small fixture end to end, checked against GDAL (rasterio.warp.reproject) as the reference."""

from __future__ import annotations

import glob
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import rioxarray  # noqa: F401
import xarray as xr
import zarr
from rasterio.enums import Resampling
from rasterio.warp import reproject, transform_bounds

from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.execute.runner import run
from pipeline.resample.warp import GDAL_NAMES
from tests.helpers import write_config


def reference_cube(files: list[str], grid_crs: str, transform: Any, shape: tuple[int, int], method: str) -> np.ndarray:
    """GDAL's answer: reproject each whole tile onto the grid, fuse 'first' in path order."""
    out = np.zeros(shape, "u2")
    for f in sorted(files):
        with rasterio.open(f) as src:
            dst = np.zeros(shape, "u2")
            reproject(
                rasterio.band(src, 1),
                dst,
                dst_transform=transform,
                dst_crs=grid_crs,
                dst_nodata=0,
                resampling=Resampling[GDAL_NAMES.get(method, method)],
            )
        out = np.where(out == 0, dst, out)
    return out


def assert_matches_gdal(got: np.ndarray, ref: np.ndarray, what: Any) -> None:
    """The acceptance bounds: mean |diff| <= 0.1% and p99 <= 1% of the value range, masks within 0.5%."""
    both = (got != 0) & (ref != 0)
    value_range = float(ref[both].max()) - float(ref[both].min())
    diff = np.abs(got[both].astype("f8") - ref[both])
    assert diff.mean() <= 0.001 * value_range, what
    assert np.percentile(diff, 99) <= 0.01 * value_range, what
    assert np.mean((got != 0) != (ref != 0)) <= 0.005, what
    assert both.mean() > 0.5, what  # the comparison is over real data, not an empty cube


def expected_grid(small_dir: Path, res: float = 20.0) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres of the union of all tile footprints in EPSG:32632, snapped outward."""
    boxes = []
    for f in glob.glob(str(small_dir / "*" / "*.tif")):
        with rasterio.open(f) as src:
            boxes.append(transform_bounds(src.crs, "EPSG:32632", *src.bounds, densify_pts=21))
    b = np.array(boxes)
    x0, y0 = math.floor(b[:, 0].min() / res) * res, math.floor(b[:, 1].min() / res) * res
    x1, y1 = math.ceil(b[:, 2].max() / res) * res, math.ceil(b[:, 3].max() / res) * res
    return np.arange(x0, x1, res) + res / 2, (y1 - res / 2) - np.arange(0, y1 - y0, res)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> dict[str, Any]:
    """One run per method (2 workers, 1 MB partitions), plus one with 1 worker and 256 MB partitions."""
    out: dict[str, Any] = {}
    for name, overrides in {
        "average": ["resampling=average"],
        "nearest": ["resampling=nearest"],
        "bilinear": ["resampling=bilinear"],
        "average-w1-p256": ["resampling=average", "execution.workers=1", "execution.partition_mb=256"],
    }.items():
        folder = tmp_path_factory.mktemp(name)
        cfg = load_config(write_config(folder, str(small_dir / "**" / "*.tif")), overrides)
        out[name] = (cfg, run(cfg))
    return out


@pytest.mark.parametrize("method", ["average", "nearest", "bilinear"])
def test_cube_matches_gdal(runs: dict[str, Any], small_dir: Path, method: str) -> None:
    cfg, result = runs[method]
    assert result.exit_code == 0
    ds = xr.open_zarr(cfg.output.path, mask_and_scale=False)
    transform = ds.rio.transform()
    for band in ("B01", "B02", "B04", "B11"):
        for ti, t in enumerate(ds.time.values):
            date = np.datetime_as_string(t, unit="D")
            files = glob.glob(str(small_dir / date / f"*_{band}.tif"))
            ref = reference_cube(files, "EPSG:32632", transform, ds[band].shape[1:], method)
            assert_matches_gdal(ds[band].isel(time=ti).values, ref, (band, date))


def test_store_layout_and_georeferencing(runs: dict[str, Any], small_dir: Path) -> None:
    cfg, result = runs["average"]
    ds = xr.open_zarr(cfg.output.path)
    assert ds.rio.crs == rasterio.crs.CRS.from_user_input("EPSG:32632")
    x, y = expected_grid(small_dir)
    np.testing.assert_allclose(ds.x.values, x)
    np.testing.assert_allclose(ds.y.values, y)
    assert list(ds.data_vars) == ["B01", "B02", "B04", "B11"]
    assert [str(t)[:10] for t in ds.time.values] == ["2024-06-01", "2024-06-11"]
    raw = zarr.open_group(cfg.output.path, mode="r")
    assert raw.attrs["pipeline_complete"] is True
    assert raw.attrs["pipeline_config_hash"] == cfg.output_hash()
    for band in ("B01", "B02"):
        arr = raw[band]
        assert arr.dtype == np.dtype("uint16") and arr.fill_value == 0 and arr.chunks == (1, 128, 128)
        assert arr.attrs["grid_mapping"] == "spatial_ref"
    assert "GeoTransform" in raw["spatial_ref"].attrs and "crs_wkt" in raw["spatial_ref"].attrs
    assert not os.path.exists(os.path.join(cfg.output.path, ".pipeline-journal"))
    # GDAL's CF reading keys: the WKT and the geotransform of pixel corners.
    gt = [float(v) for v in raw["spatial_ref"].attrs["GeoTransform"].split()]
    assert gt[0] == x[0] - 10 and gt[1] == 20 and gt[3] == y[0] + 10 and gt[5] == -20


def test_same_cube_for_any_worker_count_and_partitioning(runs: dict[str, Any]) -> None:
    (a_cfg, a), (b_cfg, b) = runs["average"], runs["average-w1-p256"]
    assert a.report["plan"]["partitions"] > 1 and b.report["plan"]["partitions"] == 1
    assert len(a.report["workers"]) == 2 and len(b.report["workers"]) == 1
    za, zb = zarr.open_group(a_cfg.output.path, mode="r"), zarr.open_group(b_cfg.output.path, mode="r")
    for band in ("B01", "B02", "B04", "B11"):
        np.testing.assert_array_equal(za[band][:], zb[band][:])


def test_report_accounts_for_the_wall_time(runs: dict[str, Any]) -> None:
    cfg, result = runs["average"]
    rep = json.loads(Path(cfg.report_path).read_text())
    assert set(rep["stages"]) == {
        "index",
        "plan",
        "read",
        "mask",
        "resample",
        "reduce",
        "write",
        "finalize",
        "overhead",
    }
    # overhead is what is left of wall_s; what was measured must fit in it (not be clamped away)...
    measured = sum(v for k, v in rep["stages"].items() if k != "overhead")
    assert 0 < measured <= rep["wall_s"] * 1.02 and rep["stages"]["overhead"] >= 0
    # ...and each task's stages fit in its own span, and the tasks ran inside the run.
    span = max(t["end"] for t in rep["tasks"]) - min(t["start"] for t in rep["tasks"])
    assert span <= rep["wall_s"]
    assert rep["inputs"]["files"] == 32 and rep["inputs"]["skipped"] == []
    assert rep["output"]["chunks_written"] == sum(t["chunks"] for t in rep["tasks"]) > 0
    assert {t["worker"] for t in rep["tasks"]} == set(rep["workers"])
    for t in rep["tasks"]:
        assert t["end"] >= t["start"] and t["read_s"] > 0 and t["bytes_written"] > 0
        assert t["read_s"] + t["resample_s"] + t["write_s"] <= (t["end"] - t["start"]) * 1.001 + 1e-3
    assert rep["devices"]["cpu"] == len(rep["tasks"]) and rep["devices"]["decisions"]
    assert {d["check"] for d in rep["diagnostics"]} >= {"workers_used", "long_tail", "io_vs_compute"}


def test_each_file_is_opened_once_per_worker_not_per_chunk(runs: dict[str, Any]) -> None:
    cfg, result = runs["average"]
    tasks = result.report["tasks"]
    windows = result.report["plan"]["windows"]
    opened = sum(t["files_opened"] for t in tasks)
    workers = {t["worker"] for t in tasks}
    # 32 files, each read at one level; at most once per worker, far fewer than the windows read.
    assert opened <= 32 * len(workers)
    assert opened < windows


def test_existing_store_is_refused_without_overwrite(runs: dict[str, Any]) -> None:
    cfg, _ = runs["average"]
    with pytest.raises(ConfigError, match=r"pass overwrite=True to replace it"):
        run(cfg)
    assert zarr.open_group(cfg.output.path, mode="r").attrs["pipeline_complete"] is True


def test_bad_input_is_skipped_and_reported(tmp_path: Path, small_dir: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    (data / "2024-06-01" / "T99Z0_B02.tif").write_bytes(b"")
    cfg = load_config(write_config(tmp_path, str(data / "**" / "*.tif")), ["execution.workers=1"])
    result = run(cfg)
    assert result.exit_code == 3
    assert [os.path.basename(s["path"]) for s in result.report["inputs"]["skipped"]] == ["T99Z0_B02.tif"]
    assert zarr.open_group(cfg.output.path, mode="r").attrs["pipeline_complete"] is True


@pytest.mark.parametrize(
    ("method", "engine"),
    [(m, "auto") for m in ("cubic", "mode", "min", "max", "median")] + [("nearest", "kernels"), ("bilinear", "gdal")],
)
def test_other_methods_and_the_kernel_engine_match_gdal(
    tmp_path: Path, small_dir: Path, method: str, engine: str
) -> None:
    cfg = load_config(
        write_config(tmp_path, str(small_dir / "**" / "*.tif")),
        [
            f"resampling={method}",
            f"resampling_engine={engine}",
            "execution.workers=1",
            "execution.partition_mb=256",
            "inputs.bands=[B02, B11]",
        ],
    )
    assert run(cfg).exit_code == 0
    ds = xr.open_zarr(cfg.output.path, mask_and_scale=False)
    for band in ("B02", "B11"):
        files = glob.glob(str(small_dir / "2024-06-11" / f"*_{band}.tif"))
        ref = reference_cube(files, "EPSG:32632", ds.rio.transform(), ds[band].shape[1:], method)
        assert_matches_gdal(ds[band].isel(time=1).values, ref, band)


@pytest.mark.parametrize(
    ("fuse", "method"), [("first", "average"), ("last", "average"), ("last", "nearest"), ("first", "cubic")]
)
def test_skipping_covered_tiles_changes_nothing(tmp_path: Path, small_dir: Path, fuse: str, method: str) -> None:
    """first/last resample a tile only where the chunk is still empty: the same cube as resampling every
    tile whole and fusing afterwards, bit for bit, and some tiles are in fact skipped."""
    from dataclasses import replace

    from pipeline.execute.runner import _prepare_store, plan_run, task_context
    from pipeline.execute.task import run_partition

    data = tmp_path / "data"
    shutil.copytree(small_dir, data)
    for f in list(data.glob("*/*.tif")):  # every tile twice: one of each pair is covered where the other has data
        tile, band = f.name.split("_")
        shutil.copy(f, f.with_name(f"{tile}x_{band}"))
    cubes, skipped = [], []
    for skip in (True, False):
        folder = tmp_path / str(skip)
        folder.mkdir()
        settings = [f"fuse={fuse}", f"resampling={method}", "output.chunks={y: 64, x: 64}"]
        cfg = load_config(write_config(folder, str(data / "**" / "*.tif")), settings)
        _, plan = plan_run(cfg)
        _prepare_store(cfg, plan, overwrite=False, resume=False)
        ctx = replace(task_context(cfg, plan), on_error="fail", skip_covered=skip)  # (the store is made above)
        skipped.append(sum(run_partition(p, ctx)["windows_skipped"] for p in plan.partitions))
        group = zarr.open_group(cfg.output.path, mode="r")
        cubes.append({b.name: group[b.name][:] for b in plan.bands})
    assert skipped[0] > 0 and skipped[1] == 0, skipped
    for name, cube in cubes[0].items():
        np.testing.assert_array_equal(cube, cubes[1][name], err_msg=name)
