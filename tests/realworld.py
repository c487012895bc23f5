"""Tiles and catalogue items as real archives make them, for tests: GDAL's COG driver (which rounds
overview sizes down) at Sentinel-2 and Landsat sizes, files without a nodata tag as Sentinel-2's JP2s
are, and STAC items in the shapes earth-search (STAC 1.0), CDSE (STAC 1.1) and USGS Landsat
Collection 2 publish.

Pixel values encode their map coordinates (a smooth field plus ripples), so a reprojection error shows;
each file has a swath edge of zeros (no data), as real tiles do.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

S2_CRS = "EPSG:32632"
S2_ORIGIN = (600000.0, 5300040.0)  # an MGRS tile's corner, as Sentinel-2 L2A tiles have them
S2_BANDS = {  # band: (resolution m, size px, dtype, earth-search asset key, common name)
    "B04": (10, 10980, "uint16", "red", "red"),
    "B11": (20, 5490, "uint16", "swir16", "swir16"),
    "B01": (60, 1830, "uint16", "coastal", "coastal"),
    "SCL": (20, 5490, "uint8", "scl", None),
}
S2_DATE = "2024-07-15"
S2_TIME = "2024-07-15T10:20:31.024000Z"
SCL_CLASSES = [
    {"value": v, "name": n}
    for v, n in enumerate(
        [
            "no_data",
            "saturated_or_defective",
            "dark_area_pixels",
            "cloud_shadows",
            "vegetation",
            "not_vegetated",
            "water",
            "unclassified",
            "cloud_medium_probability",
            "cloud_high_probability",
            "thin_cirrus",
            "snow",
        ]
    )
]
L_CRS = "EPSG:32633"
L_SIZE = (7131, 8151)  # width, height: an odd-sized Landsat scene
L_SCALE, L_OFFSET = 0.0000275, -0.2  # Landsat Collection 2 surface reflectance
L_TIME = "2024-07-15T09:58:12.345678Z"
REGION = (620000.0, 5200040.0, 660000.0, 5240040.0)
"""The grid's bounds (EPSG:32632) in the tests: 40 km of the Sentinel-2 tile, across its swath edge and
into the Landsat scene."""


@dataclass(frozen=True)
class RealWorld:
    """The written fixture: its folder, the files by band, and where the Landsat scene lies."""

    root: Path
    files: dict[str, str]
    landsat_origin: tuple[float, float]


def _field(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The value field of map coordinates (metres): smooth, with ripples a resampling error shows in."""
    return 1000 + (x % 200000) / 20 + (y % 300000) / 30 + 300 * np.sin(x / 730.0) * np.cos(y / 910.0)


def _edge(x: np.ndarray, y: np.ndarray, x0: float, y0: float) -> np.ndarray:
    """A swath edge: no data below the diagonal 55 km from the tile's corner."""
    return (y0 - y) - (x - x0) > 55000


def _write_cog(path: str, data: np.ndarray, crs: str, transform: Any, nodata: float | None, count: int = 1) -> None:
    """A COG through GDAL's COG driver (overview sizes rounded down, as `gdal_translate -of COG` makes
    them), 512 px blocks, DEFLATE with a predictor, AVERAGE overviews. DEFLATE's fastest level: a third of
    the default's time for the same layout (the tests read the files, they do not weigh them)."""
    import rasterio

    profile = {
        "driver": "COG",
        "width": data.shape[-1],
        "height": data.shape[-2],
        "count": count,
        "dtype": data.dtype,
        "crs": crs,
        "transform": transform,
        "compress": "DEFLATE",
        "level": 1,
        "predictor": 2,
        "blocksize": 512,
        "overview_resampling": "AVERAGE" if data.dtype != np.uint8 or count > 1 else "NEAREST",
        "num_threads": "2",
    }
    if nodata is not None:
        profile["nodata"] = nodata
    tmp = path + ".part"
    with rasterio.open(tmp, "w", **profile) as dst:
        dst.write(data if data.ndim == 3 else data[None])
    os.replace(tmp, path)


def _s2_band(band: str) -> tuple[np.ndarray, Any]:
    from rasterio.transform import from_origin

    res, size, dtype, _, _ = S2_BANDS[band]
    x0, y0 = S2_ORIGIN
    c = x0 + (np.arange(size) + 0.5) * res
    r = y0 - (np.arange(size) + 0.5) * res
    out = np.empty((size, size), dtype=dtype)
    for k in range(0, size, 1024):  # by row blocks: a 10980² float field is 1 GB
        y = r[k : k + 1024, None]
        if band == "SCL":
            v = ((c[None, :] // 700 + y // 1100) % 11 + 1).astype(dtype)
        else:
            v = _field(c[None, :], y).astype(dtype)
        v[_edge(c[None, :], y, x0, y0)] = 0
        out[k : k + 1024] = v
    return out, from_origin(x0, y0, res, res)


def landsat_origin() -> tuple[float, float]:
    """The Landsat scene's corner (EPSG:32633), so that the test region lies inside it."""
    from pyproj import Transformer

    cx, cy = (REGION[0] + REGION[2]) / 2, (REGION[1] + REGION[3]) / 2
    x, y = Transformer.from_crs(S2_CRS, L_CRS, always_xy=True).transform(cx, cy)
    return (round((x - 2000 * 30) / 30) * 30 + 15, round((y + 2500 * 30) / 30) * 30 - 15)


def write_realworld(root: Path) -> RealWorld:
    """Write the fixture under ``root/<date>/<tile>_<band>.tif`` (once; existing files are kept)."""
    from rasterio.transform import from_origin

    folder = root / S2_DATE
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for band in S2_BANDS:  # no nodata tag: Sentinel-2's JP2s declare none
        path = str(folder / f"T32TNS_{band}.tif")
        if not os.path.exists(path):
            data, transform = _s2_band(band)
            _write_cog(path, data, S2_CRS, transform, None)
        files[band] = path
    visual = str(folder / "T32TNS_TCI.tif")  # a true-colour picture: three uint8 bands, at 60 m here
    if not os.path.exists(visual):
        b01, transform = _s2_band("B01")
        rgb = np.stack([(b01 // k % 251 + (b01 > 0)).astype(np.uint8) for k in (40, 50, 60)])
        rgb[:, b01 == 0] = 0
        _write_cog(visual, rgb, S2_CRS, transform, 0, count=3)
    files["TCI"] = visual
    lx, ly = landsat_origin()
    path = str(folder / "LC09_193026_SR-B4.tif")  # Landsat declares nodata 0
    if not os.path.exists(path):
        w, h = L_SIZE
        c = lx + (np.arange(w) + 0.5) * 30
        data = np.empty((h, w), dtype=np.uint16)
        for k in range(0, h, 1024):
            r = ly - (np.arange(k, min(k + 1024, h)) + 0.5) * 30
            v = (_field(c[None, :] * 1.1, r[:, None] * 0.9) * 3).astype(np.uint16)
            v[(c[None, :] - lx) < 60000 - (ly - r[:, None]) * 0.2] = 0  # the scene's slanted west edge
            data[k : k + 1024] = v
        _write_cog(path, data, L_CRS, from_origin(lx, ly, 30, 30), 0)
    files["SR-B4"] = path
    return RealWorld(root=root, files=files, landsat_origin=(lx, ly))


# --- items as public catalogues publish them ------------------------------------------------------------


def _proj(path: str) -> dict[str, Any]:
    import rasterio

    with rasterio.open(path) as ds:
        t = ds.transform
        return {"shape": [ds.height, ds.width], "transform": [t.a, t.b, t.c, t.d, t.e, t.f], "bounds": list(ds.bounds)}


def _bbox(crs: str, bounds: list[float]) -> list[float]:
    from pyproj import Transformer

    return list(Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform_bounds(*bounds))


def _href(path: str, base: Path | None) -> str:
    return os.path.relpath(path, base) if base is not None else path


def earth_search_item(fx: RealWorld, base: Path | None = None) -> dict[str, Any]:
    """A Sentinel-2 L2A item as earth-search (STAC 1.0) publishes it: assets by common name, ``proj:epsg``,
    6-value ``proj:transform``, ``raster:bands`` with nodata, scale and offset, ``eo:bands``, a
    three-band ``visual`` asset, and ``self`` links to the API."""
    assets: dict[str, Any] = {}
    for band, (res, _, dtype, key, common) in S2_BANDS.items():
        p = _proj(fx.files[band])
        asset: dict[str, Any] = {
            "href": _href(fx.files[band], base),
            "type": "image/tiff; application=geotiff; profile=cloud-optimized",
            "title": band,
            "proj:shape": p["shape"],
            "proj:transform": p["transform"],
            "raster:bands": [{"nodata": 0, "data_type": dtype, "spatial_resolution": res}],
            "file:size": os.path.getsize(fx.files[band]),
            "roles": ["data", "reflectance"] if band != "SCL" else ["data"],
        }
        if common:
            asset["eo:bands"] = [{"name": band, "common_name": common}]
            asset["raster:bands"][0].update({"scale": 0.0001, "offset": -0.1, "bits_per_sample": 15})
        else:
            asset["classification:classes"] = SCL_CLASSES
        assets[key] = asset
    p = _proj(fx.files["TCI"])
    assets["visual"] = {
        "href": _href(fx.files["TCI"], base),
        "type": "image/tiff; application=geotiff; profile=cloud-optimized",
        "title": "True color image",
        "proj:shape": p["shape"],
        "proj:transform": p["transform"],
        "eo:bands": [{"name": n, "common_name": c} for n, c in (("B04", "red"), ("B03", "green"), ("B02", "blue"))],
        "raster:bands": [{"nodata": 0, "data_type": "uint8"}] * 3,
        "roles": ["visual"],
    }
    assets["thumbnail"] = {"href": "https://example.invalid/thumb.jpg", "type": "image/jpeg", "roles": ["thumbnail"]}
    bbox = _bbox(S2_CRS, _proj(fx.files["B04"])["bounds"])
    return {
        "type": "Feature",
        "stac_version": "1.0.0",
        "stac_extensions": [
            "https://stac-extensions.github.io/eo/v1.1.0/schema.json",
            "https://stac-extensions.github.io/projection/v1.1.0/schema.json",
            "https://stac-extensions.github.io/raster/v1.1.0/schema.json",
            "https://stac-extensions.github.io/classification/v1.1.0/schema.json",
            "https://stac-extensions.github.io/file/v2.1.0/schema.json",
        ],
        "id": "S2B_32TNS_20240715_0_L2A",
        "collection": "sentinel-2-l2a",
        "bbox": bbox,
        "geometry": _polygon(bbox),
        "properties": {"datetime": S2_TIME, "platform": "sentinel-2b", "proj:epsg": 32632, "eo:cloud_cover": 12.5},
        "links": [
            {"rel": "self", "href": "https://earth-search.example.invalid/v1/collections/sentinel-2-l2a/items/x"},
            {"rel": "collection", "href": "https://earth-search.example.invalid/v1/collections/sentinel-2-l2a"},
        ],
        "assets": assets,
    }


def cdse_item(fx: RealWorld, base: Path | None = None) -> dict[str, Any]:
    """The same acquisition as CDSE (STAC 1.1) publishes it: assets by band id, ``proj:code``, 9-value
    ``proj:transform``, per-band ``bands`` entries with ``nodata``, ``data_type``, ``raster:scale``,
    ``raster:offset`` (B04), the same fields on the asset itself (B11, B01), ``classification:classes``
    on SCL, and a null ``proj:epsg`` left over."""
    assets: dict[str, Any] = {}
    for band, (res, _, dtype, _, common) in S2_BANDS.items():
        p = _proj(fx.files[band])
        asset: dict[str, Any] = {
            "href": _href(fx.files[band], base),
            "type": "image/tiff; application=geotiff; profile=cloud-optimized",
            "proj:code": S2_CRS,
            "proj:epsg": None,
            "proj:shape": p["shape"],
            "proj:transform": [*p["transform"], 0.0, 0.0, 1.0],
            "gsd": res,
            "roles": ["data"],
        }
        if band == "B04":
            asset["bands"] = [
                {
                    "name": "B04",
                    "eo:common_name": common,
                    "nodata": 0,
                    "data_type": dtype,
                    "raster:scale": 0.0001,
                    "raster:offset": -0.1,
                    "unit": "1",
                }
            ]
        elif band == "SCL":
            asset.update({"nodata": 0, "data_type": dtype, "classification:classes": SCL_CLASSES})
        else:
            asset.update({"nodata": 0, "data_type": dtype, "raster:scale": 0.0001, "raster:offset": -0.1})
            asset["bands"] = [{"name": band, "eo:common_name": common}]
        assets[band] = asset
    bbox = _bbox(S2_CRS, _proj(fx.files["B04"])["bounds"])
    return {
        "type": "Feature",
        "stac_version": "1.1.0",
        "stac_extensions": [
            "https://stac-extensions.github.io/eo/v2.0.0/schema.json",
            "https://stac-extensions.github.io/projection/v2.0.0/schema.json",
            "https://stac-extensions.github.io/raster/v2.0.0/schema.json",
            "https://stac-extensions.github.io/classification/v2.0.0/schema.json",
        ],
        "id": "S2B_MSIL2A_20240715T102031_N0511_R065_T32TNS_20240715T131522",
        "collection": "sentinel-2-l2a",
        "bbox": bbox,
        "geometry": _polygon(bbox),
        "properties": {"datetime": S2_TIME, "platform": "sentinel-2b"},
        "links": [{"rel": "self", "href": "https://stac.dataspace.example.invalid/v1/items/x.json"}],
        "assets": assets,
    }


def landsat_item(fx: RealWorld, https_base: str, s3_base: str | None = None) -> dict[str, Any]:
    """A Landsat Collection 2 Level-2 item as USGS publishes it (STAC 1.0): ``https`` hrefs with an
    ``alternate.s3`` href, ``proj:epsg`` on the item, ``raster:bands`` with Collection 2's scale and
    offset (0.0000275, -0.2)."""
    path = fx.files["SR-B4"]
    p = _proj(path)
    name = os.path.basename(path)
    asset: dict[str, Any] = {
        "href": f"{https_base}/{name}",
        "type": "image/vnd.stac.geotiff; cloud-optimized=true",
        "title": "Red Band",
        "eo:bands": [{"name": "SR_B4", "common_name": "red", "gsd": 30}],
        "raster:bands": [
            {
                "data_type": "uint16",
                "nodata": 0,
                "unit": "watt/steradian/square_meter/micrometer",
                "scale": L_SCALE,
                "offset": L_OFFSET,
            }
        ],
        "roles": ["data"],
    }
    if s3_base is not None:
        asset["alternate"] = {"s3": {"storage:platform": "AWS", "href": f"{s3_base}/{name}"}}
    bbox = _bbox(L_CRS, p["bounds"])
    return {
        "type": "Feature",
        "stac_version": "1.0.0",
        "stac_extensions": [
            "https://stac-extensions.github.io/projection/v1.0.0/schema.json",
            "https://stac-extensions.github.io/raster/v1.0.0/schema.json",
            "https://stac-extensions.github.io/eo/v1.0.0/schema.json",
            "https://stac-extensions.github.io/alternate-assets/v1.1.0/schema.json",
        ],
        "id": "LC09_L2SP_193026_20240715_20240716_02_T1_SR",
        "collection": "landsat-c2l2-sr",
        "bbox": bbox,
        "geometry": _polygon(bbox),
        "properties": {
            "datetime": L_TIME,
            "proj:epsg": 32633,
            "proj:shape": p["shape"],
            "proj:transform": p["transform"],
        },
        "links": [],
        "assets": {"red": asset},
    }


def _polygon(bbox: list[float]) -> dict[str, Any]:
    x0, y0, x1, y1 = bbox
    return {"type": "Polygon", "coordinates": [[[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]]}


def collection(*items: dict[str, Any]) -> dict[str, Any]:
    """An ItemCollection of deep copies of ``items``."""
    return {"type": "FeatureCollection", "features": [copy.deepcopy(i) for i in items]}


# --- GDAL's answer ---------------------------------------------------------------------------------------


def gdalwarp_level(path: str, dst_crs: str, dst_res: float) -> int:
    """The overview level gdalwarp reads for this output resolution (-1: full): its loop over the levels'
    width ratios against the target ratio from GDAL's suggested output (apps/gdalwarp_lib.cpp)."""
    import rasterio
    from rasterio.warp import calculate_default_transform

    with rasterio.open(path) as ds:
        natural, _, _ = calculate_default_transform(ds.crs, dst_crs, ds.width, ds.height, *ds.bounds)
        target = dst_res / natural.a
        widths = []
        for k in range(len(ds.overviews(1))):
            with rasterio.open(path, overview_level=k) as ovr:
                widths.append(ovr.width)
        if target <= 1.0 or not widths:
            return -1
        level = -1
        while level < len(widths) - 1:
            ratio = 1.0 if level < 0 else ds.width / widths[level]
            following = ds.width / widths[level + 1]
            if ratio < target < following or abs(ratio - target) < 1e-1:
                break
            level += 1
        return level


def gdal_reference(
    path: str, band: int, dst_crs: str, transform: Any, shape: tuple[int, int], method: str, nodata: float
) -> np.ndarray:
    """``rasterio.warp.reproject`` of one file's band onto the grid, from the level gdalwarp picks for a
    blending method (value-picking ones read full resolution, as gdalwarp with ``-ovr NONE``)."""
    import rasterio
    from rasterio.enums import Resampling
    from rasterio.warp import reproject

    from pipeline.resample.warp import GDAL_NAMES

    level = gdalwarp_level(path, dst_crs, transform.a) if method in ("average", "bilinear", "cubic") else -1
    kwargs = {} if level < 0 else {"overview_level": level}
    with rasterio.open(path, **kwargs) as ds:
        dst = np.zeros(shape, dtype=ds.dtypes[band - 1])
        reproject(
            rasterio.band(ds, band),
            dst,
            src_nodata=nodata,
            dst_transform=transform,
            dst_crs=dst_crs,
            dst_nodata=nodata,
            resampling=Resampling[GDAL_NAMES.get(method, method)],
        )
    return dst
