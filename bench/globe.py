"""The pipeline against GDAL at the corners of the globe: the figures of docs/resampling.md ("At the
antimeridian, the poles and domain edges").

Writes the fixtures of tests/globe.py under OUT (UTM 60N/1N tiles at 65N across 180 on the issue's
grid, and onto Web Mercator past its east edge; 4326 tiles up to 90N with a UTM tile around the pole,
EPSG:3031 tiles meeting at the South Pole, a UTM 60S tile across an orthographic grid's horizon), runs the
pipeline onto each grid and prints, per band and method, the share of the pixels GDAL fills that the cube
leaves empty, the mask mismatch, and the mean and p99 |difference| where both have data
(GDAL: rasterio.warp.reproject per file, fused first-valid).

    PYTHONPATH=. .venv/bin/python bench/globe.py /tmp/globe [case ...]
    # cases: utm-180 mercator-180 north south horizon horizon-average
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import xarray as xr
import yaml

from pipeline.config import load_config
from pipeline.execute.runner import run
from tests.globe import (
    CHUKOTKA_DATE,
    compare,
    fused_gdal,
    write_chukotka,
    write_north_pole,
    write_south_pole,
    write_tile,
)
from tests.helpers import PATTERN

ORTHO = "+proj=ortho +lat_0=65 +lon_0=180 +datum=WGS84"
"""An orthographic grid centred on Chukotka: its horizon is a domain edge."""


def _horizon_tile(root: Path) -> str:
    """A UTM 60S tile (400 m, 500 px) across the orthographic grid's horizon."""
    return write_tile(
        root / CHUKOTKA_DATE / "60S_B04.tif", "EPSG:32760", (400000.0, 7335000.0), 400, (500, 500), nodata=True
    )


CASES: dict[str, tuple[Any, dict[str, Any], tuple[str, ...]]] = {
    "utm-180": (
        lambda root: write_chukotka(root, west=179.45, east=180.55, south=64.93, north=65.12),
        {"crs": "EPSG:4326", "resolution": 0.0004, "bounds": [179.45, 64.93, 180.55, 65.12]},
        ("bilinear", "average", "nearest"),
    ),
    "mercator-180": (
        lambda root: write_chukotka(root, west=179.45, east=180.55, south=64.93, north=65.12),
        # the same place in Web Mercator, x continuous past its east edge (20037508.34 m): 179.45..180.55
        {"crs": "EPSG:3857", "resolution": 40, "bounds": [19976280, 9589920, 20098760, 9640080]},
        ("bilinear", "average", "nearest"),
    ),
    "north": (
        write_north_pole,
        {"crs": "EPSG:3413", "resolution": 2000, "bounds": [-200000, -200000, 200000, 200000]},
        ("bilinear", "average", "nearest"),
    ),
    "horizon": (
        lambda root: [_horizon_tile(root)],
        {"crs": ORTHO, "resolution": 250},
        ("nearest", "bilinear"),
    ),
    "horizon-average": (
        lambda root: [_horizon_tile(root)],
        {"crs": ORTHO, "resolution": 2000, "bounds": [-500000, -6380000, -100000, -6300000]},
        ("nearest", "average"),
    ),
    "south": (
        write_south_pole,
        {"crs": "EPSG:4326", "resolution": [0.5, 0.01], "bounds": [-180, -90, 180, -88.5]},
        ("bilinear", "average", "nearest"),
    ),
}


def main(out: Path, cases: list[str]) -> None:
    import rioxarray  # noqa: F401 - ds.rio

    for case in cases or list(CASES):
        write, grid, methods = CASES[case]
        files = write(out / case / "tiles")
        for method in methods:
            folder = out / case / method
            folder.mkdir(parents=True, exist_ok=True)
            raw = {
                "inputs": {"paths": files, "pattern": PATTERN},
                "grid": grid,
                "resampling": method,
                "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 256, "x": 256}},
                "execution": {"scheduler": "threads", "workers": 2},
            }
            (folder / "config.yaml").write_text(yaml.safe_dump(raw))
            result = run(load_config(folder / "config.yaml"), overwrite=True)
            ds = xr.open_zarr(folder / "out.zarr", mask_and_scale=False)
            shape = (ds.sizes["y"], ds.sizes["x"])
            for band in ds.data_vars:
                mine = [f for f in files if f.endswith(f"_{band}.tif")]
                ref = fused_gdal(mine, grid["crs"], ds.rio.transform(), shape, method)
                fig = compare(ds[band].isel(time=0).values, ref)
                print(
                    f"{case:8s} {method:9s} {band} exit {result.exit_code} {shape[1]}x{shape[0]}  GDAL fills "
                    f"{fig['gdal_filled']:.1%}, left empty {fig['missing']:.2%}, mask mismatch "
                    f"{fig['mask_mismatch']:.2%}, |diff| mean {fig['mean_diff']:.3f} p99 {fig['p99_diff']:.0f}, "
                    f"equal {fig['exact']:.1%}",
                    flush=True,
                )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
