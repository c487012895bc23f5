"""This pipeline against the tools users would pick instead, on the case-study fixture.

* pipeline: ``pipeline run configs/casestudy.yaml --workers 2``;
* odc-stac: STAC items for the fixture (projection extension per asset),
  ``odc.stac.load(..., groupby="solar_day")`` then ``to_zarr`` on 2 Dask threads;
* GDAL: ``gdalwarp`` per band and date into tiled GeoTIFF, 2 at a time (Debian ``gdal-bin``).

Same grid (the pipeline's plan), method (average), fusion (first valid, path order) and
compression (ZSTD level 3) for all. Whole processes, interleaved, medians after a warm-up; then
the outputs are compared so a fast wrong answer cannot win. Writes ``bench/results/peers.json``
(``peers-NAME.json`` and ``out/peers-NAME/`` for ``BENCH_CONFIG=configs/NAME.yaml``).
Needs the ``bench`` extra (odc-stac, pystac) and ``gdalwarp``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from save import run_args, save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIG = os.path.abspath(os.environ.get("BENCH_CONFIG", os.path.join(ROOT, "configs", "casestudy.yaml")))
"""The case study; ``BENCH_CONFIG`` names another config (``make bench-scale``: ``configs/casestudy-x4.yaml``)."""
NAME = os.path.splitext(os.path.basename(CONFIG))[0]
SUFFIX = "" if NAME == "casestudy" else f"-{NAME}"
"""Of the output folder and the results' names, for another config than the case study."""
OUT = os.path.join(ROOT, "out", f"peers{SUFFIX}")
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
TARGETS = {"casestudy": {"gdalwarp": 0.6, "odc-stac": 0.25}, "mixed": {"odc-stac": 0.35}}
"""The pipeline's wall time against each peer's that this bench aims for, per fixture."""
PROJ_EXT = "https://stac-extensions.github.io/projection/v2.0.0/schema.json"


def grid_and_tiles() -> tuple[dict, list[dict]]:
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run

    catalog, plan = plan_run(load_config(CONFIG))
    g = plan.grid
    grid = {"crs": g.crs, "transform": list(g.transform), "shape": list(g.shape_yx), "bounds": list(g.bounds)}
    cols = ["path", "band", "tile", "crs", "a", "b", "c", "d", "e", "f", "width", "height"]
    frame = catalog.tiles.to_pandas()
    tiles = frame[cols].assign(date=frame["date"].dt.strftime("%Y-%m-%d")).to_dict("records")
    return grid, tiles


def write_stac(tiles: list[dict], path: str) -> None:
    """One item per (tile, date), one asset per band, each with its own projection fields."""
    import pystac
    from pyproj import Transformer

    items = {}
    for t in tiles:
        key = (t["tile"], t["date"])
        if key not in items:
            tr = Transformer.from_crs(t["crs"], "EPSG:4326", always_xy=True)
            x0, y1 = t["c"], t["f"]
            x1, y0 = x0 + t["a"] * t["width"], y1 + t["e"] * t["height"]
            lon, lat = tr.transform([x0, x1, x1, x0], [y0, y0, y1, y1])
            bbox = [min(lon), min(lat), max(lon), max(lat)]
            geom = {"type": "Polygon", "coordinates": [[*zip(lon, lat, strict=True), (lon[0], lat[0])]]}
            items[key] = pystac.Item(
                id=f"{t['tile']}_{t['date']}",
                geometry=geom,
                bbox=bbox,
                datetime=pystac.utils.str_to_datetime(t["date"] + "T10:00:00Z"),
                properties={},
                stac_extensions=[PROJ_EXT],
            )
        items[key].add_asset(
            t["band"],
            pystac.Asset(
                href=t["path"],
                media_type=pystac.MediaType.COG,
                roles=["data"],
                extra_fields={
                    "proj:code": t["crs"],
                    "proj:epsg": int(t["crs"].split(":")[1]),
                    "proj:shape": [t["height"], t["width"]],
                    "proj:transform": [t["a"], t["b"], t["c"], t["d"], t["e"], t["f"]],
                },
            ),
        )
    ordered = sorted(items.values(), key=lambda it: min(a.href for a in it.assets.values()))
    with open(path, "w") as f:
        json.dump([it.to_dict() for it in ordered], f)


ODC_SCRIPT = r"""
import json, sys, dask, pystac, odc.stac, zarr
from affine import Affine
from odc.geo.geobox import GeoBox
grid = json.load(open(sys.argv[1])); items = [pystac.Item.from_dict(d) for d in json.load(open(sys.argv[2]))]
gbox = GeoBox(tuple(grid["shape"]), Affine(*grid["transform"]), grid["crs"])
cfg = {"*": {"assets": {"*": {"nodata": 0, "data_type": "uint16"}}}}
ds = odc.stac.load(items, geobox=gbox, groupby="solar_day", resampling="average", chunks={"x": 512, "y": 512},
                   stac_cfg=cfg, preserve_original_order=True, dtype="uint16")
enc = {v: {"compressors": [zarr.codecs.ZstdCodec(level=3)]} for v in ds.data_vars}
with dask.config.set(scheduler="threads", num_workers=2):
    ds.to_zarr(sys.argv[3], mode="w", zarr_format=3, consolidated=False, encoding=enc)
"""


def run_pipeline(out: str | None = None) -> None:
    """The pipeline's run, its cube and report written in ``out`` (default ``OUT``)."""
    out = out or OUT
    subprocess.run(
        [sys.executable, "-m", "pipeline", *run_args(CONFIG, f"{out}/pipeline.zarr", f"{out}/pipeline.report.json")],
        check=True,
        cwd=ROOT,
    )


def run_odc() -> None:
    subprocess.run(
        [sys.executable, "-c", ODC_SCRIPT, f"{OUT}/grid.json", f"{OUT}/items.json", f"{OUT}/odc.zarr"],
        check=True,
        cwd=ROOT,
    )


def run_gdal(grid: dict, tiles: list[dict], out: str | None = None) -> None:
    """gdalwarp per band and date, 2 at a time, its GeoTIFFs written in ``out``/gdal (default ``OUT``)."""
    out = out or OUT
    os.makedirs(f"{out}/gdal", exist_ok=True)
    xmin, ymin, xmax, ymax = grid["bounds"]
    res_x, res_y = abs(grid["transform"][0]), abs(grid["transform"][4])  # the config's grid.resolution
    groups: dict[tuple[str, str], list[str]] = {}
    for t in tiles:
        groups.setdefault((t["band"], t["date"]), []).append(t["path"])
    cmds = []
    for (band, date), paths in sorted(groups.items()):
        # gdalwarp lets later inputs overwrite earlier ones: reversed path order makes the first path win.
        cmds.append(
            [
                "gdalwarp",
                "-q",
                "-overwrite",
                "-t_srs",
                grid["crs"],
                "-te",
                str(xmin),
                str(ymin),
                str(xmax),
                str(ymax),
                "-tr",
                str(res_x),
                str(res_y),
                "-r",
                "average",
                "-srcnodata",
                "0",
                "-dstnodata",
                "0",
                "-co",
                "TILED=YES",
                "-co",
                "COMPRESS=ZSTD",
                "-co",
                "ZSTD_LEVEL=3",
                *sorted(paths, reverse=True),
                f"{out}/gdal/{band}_{date}.tif",
            ]
        )
    with ThreadPoolExecutor(2) as pool:
        for r in pool.map(lambda c: subprocess.run(c, capture_output=True, text=True), cmds):
            if r.returncode:
                raise RuntimeError(r.stderr)


def agreement(grid: dict, tiles: list[dict]) -> dict[str, float]:
    """Mean |difference| against the pipeline's cube over pixels both have, as a share of the value range."""
    import rasterio
    import xarray as xr

    ours = xr.open_zarr(f"{OUT}/pipeline.zarr", mask_and_scale=False)
    odc = xr.open_zarr(f"{OUT}/odc.zarr", mask_and_scale=False, consolidated=False)
    out: dict[str, list[float]] = {"odc-stac": [], "gdalwarp": []}
    for band in ours.data_vars:
        for ti, t in enumerate(ours.time.values):
            date = np.datetime_as_string(t, unit="D")
            a = ours[band].isel(time=ti).values
            b = np.nan_to_num(odc[band].isel(time=ti).values, nan=0)
            with rasterio.open(f"{OUT}/gdal/{band}_{date}.tif") as src:
                c = src.read(1)
            for name, other in (("odc-stac", b), ("gdalwarp", c)):
                both = (a != 0) & (other != 0)
                rng = float(a[both].max()) - float(a[both].min())
                out[name].append(float(np.abs(a[both].astype("f8") - other[both]).mean()) / rng)
    return {k: max(v) for k, v in out.items()}


def interleaved(
    tools: dict[str, Callable[[], Any]], repeats: int | None = None
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each tool ``repeats`` (default ``REPEATS``) times, taking turns (so the machine's drift falls on
    all alike): the wall seconds of every run, and their medians."""
    times: dict[str, list[float]] = {k: [] for k in tools}
    for _ in range(REPEATS if repeats is None else repeats):
        for name, fn in tools.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times, {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    if shutil.which("gdalwarp") is None:
        sys.exit("gdalwarp not found: install Debian's gdal-bin (make bench does)")
    os.makedirs(OUT, exist_ok=True)
    grid, tiles = grid_and_tiles()
    with open(f"{OUT}/grid.json", "w") as f:
        json.dump(grid, f)
    write_stac(tiles, f"{OUT}/items.json")
    tools = {"pipeline": run_pipeline, "odc-stac": run_odc, "gdalwarp": lambda: run_gdal(grid, tiles)}
    for fn in tools.values():  # warm-up: page cache, imports, index
        fn()
    times, med = interleaved(tools)
    agree = agreement(grid, tiles)
    in_mb = sum(os.path.getsize(t["path"]) for t in tiles) / 1e6
    fastest_peer = min(med["odc-stac"], med["gdalwarp"])
    print(f"{'tool':<10}{'median s':>10}{'vs pipeline':>13}{'input MB/s':>12}{'max MAD vs pipeline':>22}")
    for k, v in med.items():
        mad = "" if k == "pipeline" else f"{agree[k]:.4%} of range"
        print(f"{k:<10}{v:10.2f}{v / med['pipeline']:12.2f}x{in_mb / v:12.1f}{mad:>22}")
    for peer in ("gdalwarp", "odc-stac"):
        target = TARGETS.get(NAME, {}).get(peer)
        goal = f" (target <= {target})" if target else ""
        print(f"pipeline / {peer}: {med['pipeline'] / med[peer]:.2f}{goal}")
    print(f"pipeline / fastest peer: {med['pipeline'] / fastest_peer:.2f}; {REPEATS} interleaved runs")
    save_json(f"peers{SUFFIX}", {"runs": times, "medians": med, "max_mad_vs_pipeline": agree, "input_mb": in_mb})


if __name__ == "__main__":
    main()
