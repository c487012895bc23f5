"""Who reads the store: GDAL (the one rasterio's wheel installs with the project), xarray and rioxarray,
for Zarr v3 (the default) and Zarr v2 (``output.zarr_format: 2``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
import rioxarray  # noqa: F401  (ds.rio)
import xarray as xr
from rasterio.crs import CRS
from rasterio.errors import RasterioIOError

import pipeline
from pipeline.store.zarr2 import GDAL_READS_FROM, gdal_reads

CASES = [
    ("v3", "zstd"),
    ("v3", "blosc"),
    ("v3", "gzip"),
    ("v3-sharded", "zstd"),
    ("v2", "zstd"),
    ("v2", "blosc"),
    ("v2", "gzip"),
    ("v2", "none"),
]


def _run(small_config: Any, layout: str, codec: str) -> Any:
    sets = [f"output.compression={{codec: {codec}, level: 3}}", "execution.scheduler=threads"]
    if layout == "v2":
        sets.append("output.zarr_format=2")
    if layout == "v3-sharded":
        sets.append("output.shards={y: 256, x: 256}")
    cfg = small_config(*sets)
    result = pipeline.run(cfg)
    assert result.exit_code == 0
    return cfg


@pytest.mark.parametrize(("layout", "codec"), CASES)
def test_gdal_reads_the_values_and_georeferencing_xarray_reads(small_config: Any, layout: str, codec: str) -> None:
    cfg = _run(small_config, layout, codec)
    grid = pipeline.plan(cfg).grid
    cube = xr.open_zarr(cfg.output.path, mask_and_scale=False)
    band = "B02"
    name = f'ZARR:"{cfg.output.path}":/{band}'
    if layout not in gdal_reads(rasterio.__gdal_version__):  # docs/output.md's table: it must fail
        with pytest.raises(RasterioIOError, match="Unsupported codec"):
            rasterio.open(name)
        return
    with rasterio.open(name) as src:
        values = src.read()  # GDAL's classic view: one raster band per time step
        assert src.driver == "Zarr" and src.count == cube.sizes["time"]
        assert tuple(src.transform)[:6] == pytest.approx(tuple(grid.transform))
        assert src.crs == CRS.from_user_input(grid.crs)
        assert src.nodata == cube[band].attrs["_FillValue"]
    np.testing.assert_array_equal(values, cube[band].values)
    assert np.count_nonzero(values != src.nodata) > values.size // 2  # a cube with data, not only fill


def test_the_reader_table_by_version() -> None:
    assert gdal_reads("3.6.2") == gdal_reads("3.10.3") == ["v2"] and gdal_reads("3.3.0") == []
    assert gdal_reads("3.12.2") == ["v2", "v3"] and gdal_reads("3.13.0") == list(GDAL_READS_FROM)


def test_zarr_v2_holds_the_v3_cube_for_xarray_and_rioxarray(small_config: Any) -> None:
    v3 = _run(small_config, "v3", "blosc").output.path
    v2 = str(Path(v3).with_name("v2.zarr"))
    cfg2 = small_config("output.compression={codec: blosc, level: 3}", "output.zarr_format=2", f"output.path={v2}")
    assert pipeline.run(cfg2).exit_code == 0
    for mask_and_scale in (True, False):
        a, b = (xr.open_zarr(p, mask_and_scale=mask_and_scale) for p in (v3, v2))
        assert a.rio.crs == b.rio.crs == CRS.from_user_input(cfg2.grid.crs)
        assert b.attrs["pipeline_complete"] is True
        a.attrs, b.attrs = {}, {}
        for name in b.data_vars:
            assert b[name].attrs.pop("_CRS") == {"wkt": b.spatial_ref.attrs["crs_wkt"]}
        xr.testing.assert_identical(a, b)
    keys = sorted(p.relative_to(v2).as_posix() for p in Path(v2).rglob("*") if p.is_file())
    assert "B02/0.0.0" in keys and ".zmetadata" in keys and not any("/c/" in k or "zarr.json" in k for k in keys)
    # the same chunk bytes under v2's keys: B02/c/0/1/2 is B02/0.1.2
    chunks3 = {(p.parts[-5], ".".join(p.parts[-3:])): p.read_bytes() for p in Path(v3).glob("B*/c/*/*/*")}
    chunks2 = {(p.parent.name, p.name): p.read_bytes() for p in Path(v2).glob("B*/*.*.*")}
    assert len(chunks3) > 20 and chunks2 == chunks3


def test_zarr_v2_metadata_is_what_xarray_writes(small_config: Any, tmp_path: Path) -> None:
    """Every ``.zarray`` and ``.zattrs`` as xarray (zarr-python) writes the same cube (the attributes,
    GDAL's ``_CRS`` on the bands included, copied from ours); ``.zmetadata`` holds every document."""
    import numcodecs

    cfg = small_config("output.compression={codec: zstd, level: 3}", "output.zarr_format=2")
    assert pipeline.run(cfg).exit_code == 0
    ours = Path(cfg.output.path)
    ds = xr.open_zarr(ours)
    for name, v in ds.variables.items():
        keep = {k: v.encoding[k] for k in ("chunks", "_FillValue", "dtype", "units", "calendar") if k in v.encoding}
        level = 3 if name in ds.data_vars else 0 if name == "spatial_ref" else None  # coordinates: uncompressed
        v.encoding = keep | {"compressors": None if level is None else [numcodecs.Zstd(level=level)]}
    ds.to_zarr(tmp_path / "ref.zarr", zarr_format=2, consolidated=True)
    ref = tmp_path / "ref.zarr"
    for doc in sorted(p.relative_to(ref) for p in ref.rglob(".za*")):
        want, got = (json.loads((root / doc).read_text()) for root in (ref, ours))
        if doc.name == ".zattrs" and doc.parent.name in ds.data_vars:
            assert got["_CRS"] == {"wkt": ds.spatial_ref.attrs["crs_wkt"]}
        if doc.name == ".zattrs" and doc.parent.name == "time":
            want.pop("units"), got.pop("units")  # xarray picks days; the pipeline writes seconds
        if doc.name == ".zarray" and doc.parent.name in ("x", "y"):
            want["fill_value"] = None  # xarray's NaN; ours none, so x and y have no _FillValue, as in v3
        if doc == Path(".zattrs"):
            continue  # the group's attributes: the pipeline's own
        assert got == want, doc
    consolidated = json.loads((ours / ".zmetadata").read_text())["metadata"]
    on_disk = {p.relative_to(ours).as_posix(): json.loads(p.read_text()) for p in ours.rglob(".z[ag]*")}
    assert consolidated == on_disk
