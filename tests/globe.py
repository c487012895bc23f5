"""Tiles on the grids real archives use at the corners of the globe, for tests: UTM 60N and 1N tiles on
both sides of 180° at 65N (Chukotka, as Sentinel-2 MGRS tiles), 1-degree EPSG:4326 tiles either side of
180° (Fiji, as Copernicus DEM tiles), 4326 tiles up to 90N and polar-stereographic tiles around the South
Pole. Written by GDAL's COG driver; some without a nodata tag (0 is then nodata), as real files are.

Pixel values encode the pixel's place on the sphere (a smooth field of its unit vector, plus ripples), so
they agree across zones and across 180°, and a reprojection error shows. The GDAL answer is
``rasterio.warp.reproject`` of each file onto the grid, fused first-valid in path order.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from tests.realworld import _write_cog, gdal_reference

CHUKOTKA_DATE = "2024-07-15"


def sphere_field(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """The value at (lon, lat) degrees: smooth across 180° and at the poles (a field of the unit vector)."""
    lo, la = np.radians(lon), np.radians(lat)
    x, y, z = np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)
    return 1500 + 400 * x + 300 * y + 200 * z + 150 * np.sin(x * 2500) * np.cos(y * 2100 + z * 1700)


def write_tile(
    path: Path,
    crs: str,
    origin: tuple[float, float],
    res: float | tuple[float, float],
    shape_yx: tuple[int, int],
    *,
    nodata: bool,
) -> str:
    """One uint16 COG in ``crs`` with its corner at ``origin``; 0 where no data (a swath edge along one
    corner); the nodata tag 0, or none."""
    from pyproj import Transformer
    from rasterio.transform import from_origin

    if path.exists():
        return str(path)
    h, w = shape_yx
    x0, y0 = origin
    rx, ry = (res, res) if isinstance(res, int | float) else res
    cols = x0 + (np.arange(w) + 0.5) * rx
    rows = y0 - (np.arange(h) + 0.5) * ry
    xx, yy = np.meshgrid(cols, rows)
    lon, lat = Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(xx, yy)
    data = np.where(np.isfinite(lon), sphere_field(lon, lat), 0).astype("uint16")
    edge = (np.arange(h)[:, None] / h + np.arange(w)[None, :] / w) < 0.15  # the swath edge: no data
    data[edge] = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_cog(str(path), data, crs, from_origin(x0, y0, rx, ry), 0 if nodata else None)
    return str(path)


def _origin_for(crs: str, lon: float, lat: float, snap: float) -> tuple[float, float]:
    """The corner (upper left) in ``crs`` of the point (lon, lat), snapped to ``snap`` metres."""
    from pyproj import Transformer

    x, y = Transformer.from_crs("EPSG:4326", crs, always_xy=True).transform(lon, lat)
    return math.floor(x / snap) * snap, math.ceil(y / snap) * snap


def write_chukotka(
    root: Path, west: float = 179.915, east: float = 180.085, south: float = 64.98, north: float = 65.02
) -> list[str]:
    """UTM 60N tiles from ``west`` to past 180° and UTM 1N tiles from before 180° to ``east`` (longitudes
    past 180 count on), from ``south`` to ``north``: B04 at 10 m, B11 at 20 m; the 60N B11 and the 1N B04
    without a nodata tag. Returns the paths, sorted (the fuse order)."""
    from pyproj import Transformer

    files = []
    for zone, crs, lon0, lon1 in (("60W", "EPSG:32660", west, 180.02), ("01W", "EPSG:32601", 179.98, east)):
        t = Transformer.from_crs("EPSG:4326", crs, always_xy=True)
        xs, ys = t.transform([lon0, lon1, lon0, lon1], [south, south, north, north])
        x0, y1 = min(xs), max(ys)
        width_m, height_m = max(xs) - x0, y1 - min(ys)
        x0, y1 = math.floor(x0 / 60) * 60, math.ceil(y1 / 60) * 60
        for band, res in (("B04", 10), ("B11", 20)):
            shape = (math.ceil(height_m / res) + 2, math.ceil(width_m / res) + 2)
            nodata = not ((zone == "60W" and band == "B11") or (zone == "01W" and band == "B04"))
            path = root / CHUKOTKA_DATE / f"{zone}_{band}.tif"
            files.append(write_tile(path, crs, (x0, y1), res, shape, nodata=nodata))
    return sorted(files)


def write_fiji(root: Path, res: float = 0.0025) -> list[str]:
    """Two 1-degree EPSG:4326 tiles either side of 180° at 17S (as Copernicus DEM tiles are cut), without
    a nodata tag: S17E179 (179..180) and S17W180 (-180..-179)."""
    n = round(1 / res)
    return sorted(
        write_tile(root / CHUKOTKA_DATE / f"{name}_DEM.tif", "EPSG:4326", (x0, -16.0), res, (n, n), nodata=False)
        for name, x0 in (("S17E179", 179.0), ("S17W180", -180.0))
    )


def fused_gdal(files: list[str], dst_crs: str, transform: Any, shape_yx: tuple[int, int], method: str) -> np.ndarray:
    """GDAL's answer: each file reprojected onto the grid (from the level gdalwarp reads), fused
    first-valid in path order (0: nodata)."""
    out = np.zeros(shape_yx, dtype="uint16")
    for path in sorted(files):
        ref = gdal_reference(path, 1, dst_crs, transform, shape_yx, method, 0)
        out = np.where(out == 0, ref, out)
    return out


def compare(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Figures of a cube against GDAL: the share of the pixels GDAL fills that the cube leaves empty, the
    share of pixels filled on one side only, and the mean and p99 |difference| over pixels both fill."""
    got = np.nan_to_num(got.astype("f8"))
    ref = ref.astype("f8")
    both = (got != 0) & (ref != 0)
    diff = np.abs(got[both] - ref[both])
    return {
        "gdal_filled": float((ref != 0).mean()),
        "missing": float(((got == 0) & (ref != 0)).sum() / max((ref != 0).sum(), 1)),
        "mask_mismatch": float(((got != 0) != (ref != 0)).mean()),
        "mean_diff": float(diff.mean()) if diff.size else float("nan"),
        "p99_diff": float(np.percentile(diff, 99)) if diff.size else float("nan"),
        "exact": float((diff == 0).mean()) if diff.size else float("nan"),
    }


def antimeridian_items(files: list[str], times: dict[str, str]) -> list[dict[str, Any]]:
    """STAC items for ``files`` (one per tile) as catalogues publish a footprint across 180°: ``bbox`` with
    west > east and a MultiPolygon split at 180 (RFC 7946); ``times``: each tile's datetime."""
    from pyproj import Transformer

    from pipeline.tools.stac_items import items_from_files

    items = items_from_files(files)
    for item in items:
        asset = next(iter(item["assets"].values()))
        tr = Transformer.from_crs(asset["proj:code"], "EPSG:4326", always_xy=True)
        west, south, east, north = tr.transform_bounds(*asset["proj:bbox"], densify_pts=21)
        item["bbox"] = [west, south, east, north]
        if west > east:  # the two sides of 180, each a polygon
            parts = [[west, 180.0], [-180.0, east]]
            item["geometry"] = {
                "type": "MultiPolygon",
                "coordinates": [
                    [[[x0, south], [x1, south], [x1, north], [x0, north], [x0, south]]] for x0, x1 in parts
                ],
            }
        tile = item["id"].rsplit("_", 1)[0]
        item["properties"]["datetime"] = times[tile]
    return items


def write_north_pole(root: Path) -> list[str]:
    """Sources up to 90N: four EPSG:4326 tiles of 90 x 2 degrees (88-90N, 0.1 x 0.01 degree pixels, as a
    global product is cut), and a UTM 33N tile (400 m, 256 px) around the pole itself."""
    files = [
        write_tile(
            root / CHUKOTKA_DATE / f"G{k}_B01.tif", "EPSG:4326", (x0, 90.0), (0.1, 0.01), (200, 900), nodata=False
        )
        for k, x0 in enumerate((-180.0, -90.0, 0.0, 90.0))
    ]
    files.append(
        write_tile(
            root / CHUKOTKA_DATE / "U33_B02.tif", "EPSG:32633", (449200.0, 10049200.0), 400, (256, 256), nodata=True
        )
    )
    return sorted(files)


def write_south_pole(root: Path) -> list[str]:
    """Antarctic polar-stereographic (EPSG:3031) tiles meeting at the South Pole: four of 256 px at 500 m,
    one a quadrant around (0, 0)."""
    return sorted(
        write_tile(root / CHUKOTKA_DATE / f"Q{k}_B01.tif", "EPSG:3031", (x0, y0), 500, (256, 256), nodata=k % 2 == 0)
        for k, (x0, y0) in enumerate(((-128000.0, 128000.0), (0.0, 128000.0), (-128000.0, 0.0), (0.0, 0.0)))
    )
