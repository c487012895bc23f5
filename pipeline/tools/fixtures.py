"""Deterministic synthetic Sentinel-2-like tiles.

Each tile is a single-band COG (256-px internal tiles, ZSTD, internal average
overviews, nodata=0) in UTM zone 31 or 32 (and 33 for the ``mixed`` preset); the
zones' tile blocks overlap each other and straddle the zone boundary at 6°E. Pixel values are a smooth
function of longitude/latitude (plus small seeded noise), so overlapping tiles
agree and a reprojection error is measurable. Some tiles carry an orbit-edge
nodata wedge. The ``cloudy`` preset adds moving clouds, seen in the data bands and
classified in ``SCL`` and ``QA`` bands, and STAC items (:mod:`pipeline.tools.clouds`).
Same preset and seed: byte-identical files.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

# Sentinel-2 MSI bands and their native pixel size in metres.
S2_BANDS: dict[str, int] = {
    "B01": 60,
    "B02": 10,
    "B03": 10,
    "B04": 10,
    "B05": 20,
    "B06": 20,
    "B07": 20,
    "B08": 10,
    "B8A": 20,
    "B09": 60,
    "B11": 20,
    "B12": 20,
}

# The scene-classification bands of the ``cloudy`` preset (:mod:`pipeline.tools.clouds`) and their pixel size.
CLASS_BANDS: dict[str, int] = {"SCL": 20, "QA": 20}

NODATA = 0
CENTRE_LAT = 45.0
ZONE_BOUNDARY_LON = 6.0


@dataclass(frozen=True)
class Preset:
    """A fixture layout: bands, tile size, tiles per UTM zone, zones, dates and grid settings."""

    bands: tuple[str, ...]
    tile_m: int
    """Tile edge in metres (a multiple of 60, so every band's grid is whole)."""
    tiles_per_zone_xy: tuple[int, int]
    dates: tuple[str, ...]
    overlap_m: int
    zones: tuple[int, ...] = (31, 32)
    """UTM zones (north); zone 33's block lies south of the others', overlapping both."""
    clouds: bool = False
    """Clouds, shadows and cirrus that move from date to date, seen in the data bands and classified in
    the ``SCL`` and ``QA`` bands (:mod:`pipeline.tools.clouds`); STAC items written beside the tiles."""


PRESETS: dict[str, Preset] = {
    "small": Preset(
        bands=("B01", "B02", "B04", "B11"),
        tile_m=3840,
        tiles_per_zone_xy=(2, 1),
        dates=("2024-06-01", "2024-06-11"),
        overlap_m=480,
    ),
    # 2 zones x 2x2 tiles x 12 bands x 2 dates = 192 files: 1/1000 of the case study.
    "casestudy": Preset(
        bands=tuple(S2_BANDS),
        tile_m=10980,
        tiles_per_zone_xy=(2, 2),
        dates=("2024-06-01", "2024-06-11"),
        overlap_m=960,
    ),
    # The same tiles on 8 dates (a 5-day revisit): 768 files, 4x the case study's work, for
    # `make bench-scale`, where start-up weighs a quarter as much against the work.
    "casestudy-x4": Preset(
        bands=tuple(S2_BANDS),
        tile_m=10980,
        tiles_per_zone_xy=(2, 2),
        dates=tuple(str(np.datetime64("2024-06-01") + np.timedelta64(5 * i, "D")) for i in range(8)),
        overlap_m=960,
    ),
    # One 3.84 km tile per zone, a 10 m and a 20 m band, one date: the job that measures this machine's fixed
    # cost per chunk (:mod:`pipeline.execute.chunkcost`), across CRSs as the case study reads.
    "calibration": Preset(
        bands=("B02", "B11"),
        tile_m=3840,
        tiles_per_zone_xy=(1, 1),
        dates=("2024-06-01",),
        overlap_m=0,
    ),
    # Made to differ from the case study on every axis the planner and kernels care about: smaller
    # tiles (7.68 km), three UTM zones, two 60 m bands among five, three dates (3 x 2x2 x 5 x 3 = 180 files).
    "mixed": Preset(
        bands=("B01", "B02", "B05", "B09", "B11"),
        tile_m=7680,
        tiles_per_zone_xy=(2, 2),
        dates=("2024-07-01", "2024-07-06", "2024-07-11"),
        overlap_m=600,
        zones=(31, 32, 33),
    ),
    # The case-study tiles under moving clouds, for masks and composites: 4 bands at 10 m, B11 at 20 m,
    # B09 at 60 m, a Sentinel-2 L2A-like SCL and a Landsat-like QA_PIXEL band at 20 m, on 8 dates of a
    # 5-day revisit, 4 in June and 4 in July (a monthly composite has 2 steps): 2 x 2x2 x 8 x 8 = 512 files.
    "cloudy": Preset(
        bands=("B02", "B03", "B04", "B08", "B09", "B11", "SCL", "QA"),
        tile_m=10980,
        tiles_per_zone_xy=(2, 2),
        dates=tuple(str(np.datetime64("2024-06-11") + np.timedelta64(5 * i, "D")) for i in range(8)),
        overlap_m=960,
        clouds=True,
    ),
}


def band_resolution(band: str) -> int:
    """The band's pixel size in metres: a Sentinel-2 band's, or a classification band's."""
    return S2_BANDS[band] if band in S2_BANDS else CLASS_BANDS[band]


@dataclass(frozen=True)
class TileSpec:
    """One fixture tile: its name, UTM zone and where it lies."""

    name: str
    epsg: int
    x0: float
    """West edge in the tile's UTM CRS."""
    y0: float
    """North edge in the tile's UTM CRS."""
    orbit_edge_dates: tuple[int, ...]
    """Indices of the dates on which this tile has an orbit-edge nodata wedge."""


def compute_tile_specs(preset: Preset) -> list[TileSpec]:
    """Tile footprints: a block per zone, each block straddling 6°E."""
    from pyproj import Transformer

    t, ov = preset.tile_m, preset.overlap_m
    nx, ny = preset.tiles_per_zone_xy
    block_w, block_h = nx * t - (nx - 1) * ov, ny * t - (ny - 1) * ov
    specs = []
    for zone in preset.zones:
        epsg = 32600 + zone
        tr = Transformer.from_crs("EPSG:4326", f"EPSG:{epsg}", always_xy=True)
        bx, by = tr.transform(ZONE_BOUNDARY_LON, CENTRE_LAT)
        # zone 31's block ends 40% of a tile east of the boundary; zone 32's starts 40% west of it;
        # zone 33's is centred on it, half a block further south.
        if zone == 31:
            left = bx + 0.4 * t - block_w
        elif zone == 32:
            left = bx - 0.4 * t
        else:
            left = bx - block_w / 2
            by -= block_h / 2
        left = round(left / 60) * 60
        top = round((by + block_h / 2) / 60) * 60
        for j in range(ny):
            for i in range(nx):
                specs.append(
                    TileSpec(
                        name=f"T{zone}{'ABCDEFGH'[j]}{i}" if ny <= 8 else f"T{zone}R{j:03d}C{i:03d}",
                        epsg=epsg,
                        x0=left + i * (t - ov),
                        y0=top - j * (t - ov),
                        # The easternmost zone-32 tiles see the swath edge on the second date.
                        orbit_edge_dates=(1,) if zone == 32 and i == nx - 1 else (),
                    )
                )
    return specs


def compute_tile_values(spec: TileSpec, band: str, date_idx: int, preset: Preset, seed: int) -> np.ndarray:
    """The tile's pixel values (uint16): smooth in lon/lat, small seeded noise, nodata wedge."""
    from pyproj import Transformer

    res = S2_BANDS[band]
    xx, yy = compute_pixel_centres(spec, res, preset)
    tr = Transformer.from_crs(f"EPSG:{spec.epsg}", "EPSG:4326", always_xy=True)
    lon, lat = tr.transform(xx, yy)
    k = list(S2_BANDS).index(band)
    phase = 0.7 * date_idx + 0.3 * k
    value = (
        2500.0
        + 150.0 * k
        + 900.0 * np.sin(2 * np.pi * lon / 0.061 + phase) * np.cos(2 * np.pi * lat / 0.043)
        + 3000.0 * (lat - CENTRE_LAT)
        + 200.0 * date_idx
    )
    # Seeds must be non-negative: a tile far west of its zone (zone 33 at 6°E) has x0 < 0.
    rng = np.random.default_rng([seed, spec.epsg, int(spec.x0) % 2**32, int(spec.y0) % 2**32, k, date_idx])
    value += rng.normal(0.0, 2.0, size=value.shape)
    out = np.clip(np.rint(value), 1, 65535).astype(np.uint16)
    if date_idx in spec.orbit_edge_dates:
        out[compute_orbit_edge(spec, xx, yy, preset)] = NODATA
    return out


def compute_pixel_centres(spec: TileSpec, res: int, preset: Preset) -> tuple[np.ndarray, np.ndarray]:
    """The map coordinates (x, y) of the tile's pixel centres at ``res`` metres, as 2-D arrays."""
    centres = (np.arange(preset.tile_m // res) + 0.5) * res
    xx, yy = np.meshgrid(spec.x0 + centres, spec.y0 - centres)
    return xx, yy


def compute_orbit_edge(spec: TileSpec, xx: np.ndarray, yy: np.ndarray, preset: Preset) -> np.ndarray:
    """Where the swath ends: a diagonal edge through the east of the tile, in map units so every band
    (and the classification bands) agree."""
    return np.asarray((xx - spec.x0) + 0.3 * (spec.y0 - yy) > 0.75 * preset.tile_m)


def _write_one(job: tuple[str, TileSpec, str, int, Preset, int]) -> str:
    return write_tile(*job)


def write_tile(path: str, spec: TileSpec, band: str, date_idx: int, preset: Preset, seed: int) -> str:
    """One file of the preset: the tile's band on the date, as a COG at ``path`` (written beside it, then
    moved there)."""
    import rasterio
    from rasterio.transform import from_origin

    nodata, overview_resampling = NODATA, "AVERAGE"
    if preset.clouds:
        from pipeline.tools.clouds import compute_cloudy_values, file_nodata

        values = compute_cloudy_values(spec, band, date_idx, preset, seed)
        if band in CLASS_BANDS:  # categorical: an overview pixel is one of its source pixels, not their mean
            nodata, overview_resampling = file_nodata(band), "NEAREST"
    else:
        values = compute_tile_values(spec, band, date_idx, preset, seed)
    res = band_resolution(band)
    profile = {
        "driver": "COG",
        "width": values.shape[1],
        "height": values.shape[0],
        "count": 1,
        "dtype": values.dtype.name,
        "crs": f"EPSG:{spec.epsg}",
        "transform": from_origin(spec.x0, spec.y0, res, res),
        "nodata": nodata,
        "compress": "ZSTD",
        "level": 9,
        "predictor": 2,
        "blocksize": 256,
        "overview_resampling": overview_resampling,
    }
    tmp = path + ".part"
    with rasterio.Env(GDAL_NUM_THREADS=1), rasterio.open(tmp, "w", **profile) as dst:
        dst.write(values, 1)
        dst.update_tags(BAND=band, DATE=preset.dates[date_idx], TILE=spec.name)
    os.replace(tmp, path)
    return path


def write_fixtures(
    out: str | os.PathLike[str],
    preset: str = "small",
    seed: int = 0,
    workers: int | None = None,
    tiles: Iterable[str] | None = None,
) -> list[str]:
    """Write the preset's tiles under ``out/<date>/<tile>_<band>.tif``; return their paths.

    ``tiles``: only the tiles of these names (a test's subset; each tile's files are the same as in the
    whole preset). A preset with clouds also writes its STAC items, ``out/items.json`` and (where rustac is
    installed) ``out/items.parquet``. Existing files are rewritten (the result is deterministic, so this is
    idempotent).
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    p = PRESETS[preset]
    root = Path(out)
    wanted = None if tiles is None else set(tiles)
    jobs = []
    for d_idx, date in enumerate(p.dates):
        (root / date).mkdir(parents=True, exist_ok=True)
        for spec in compute_tile_specs(p):
            if wanted is not None and spec.name not in wanted:
                continue
            for band in p.bands:
                path = str(root / date / f"{spec.name}_{band}.tif")
                jobs.append((path, spec, band, d_idx, p, seed))
    from pipeline.execute.workers import usable_cores

    workers = workers or min(len(jobs), usable_cores())
    if workers <= 1:
        paths = [_write_one(j) for j in jobs]
    else:
        with ProcessPoolExecutor(workers) as pool:
            paths = list(pool.map(_write_one, jobs, chunksize=4))
    logger.info("wrote %d tiles (%s preset, seed %d) under %s", len(paths), preset, seed, root)
    if p.clouds:
        from pipeline.tools.clouds import write_cloudy_items

        write_cloudy_items(root, paths)
    return paths


def _cog_overview_sizes(size: int, block: int = 256) -> list[int]:
    """The overview sizes GDAL's COG driver makes for a square ``size`` (OVERVIEWS=AUTO), flat [w0, h0,
    ...]: halve, rounding down, until one block holds a level."""
    sizes, level = [], size
    while level > block:
        level //= 2
        sizes += [level, level]
    return sizes


def _grid_for(count: int, per: int) -> tuple[int, int]:
    """Tiles per zone as (nx, ny), the divisor pair of count/per closest to a square."""
    if count % per:
        raise ValueError(f"--count must be a multiple of {per} (2 zones x bands x dates), got {count}")
    n = count // per
    nx = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return nx, n // nx


def write_virtual_index(
    out: str | os.PathLike[str], preset: str = "casestudy", count: int = 192_000
) -> tuple[str, str]:
    """A Parquet tile index of ``count`` tiles in the preset's layout, with no rasters written.

    Same zones, bands, dates, tile sizes, block shape, overviews and (estimated) file sizes as
    the real preset; more tiles per zone. Writes ``out/index.parquet`` and ``out/config.yaml``
    (which trusts the index, so planning opens and stats no file). Returns both paths.
    """
    import dataclasses

    import yaml

    from pipeline.inputs.index import write_index
    from pipeline.inputs.tiles import INDEX_COLUMNS, TileTable

    base = PRESETS[preset]
    nx, ny = _grid_for(count, 2 * len(base.bands) * len(base.dates))
    p = dataclasses.replace(base, tiles_per_zone_xy=(nx, ny))
    root = Path(out).resolve()
    root.mkdir(parents=True, exist_ok=True)
    specs = compute_tile_specs(p)
    rows = []
    for date in p.dates:
        for spec in specs:
            for band in p.bands:
                res = S2_BANDS[band]
                n = p.tile_m // res
                rows.append(
                    {
                        "path": str(root / date / f"{spec.name}_{band}.tif"),
                        "crs": f"EPSG:{spec.epsg}",
                        "a": float(res),
                        "b": 0.0,
                        "c": spec.x0,
                        "d": 0.0,
                        "e": -float(res),
                        "f": spec.y0,
                        "width": n,
                        "height": n,
                        "xmin": spec.x0,
                        "ymin": spec.y0 - p.tile_m,
                        "xmax": spec.x0 + p.tile_m,
                        "ymax": spec.y0,
                        "dtype": "uint16",
                        "file_nodata": float(NODATA),
                        "block_x": 256,
                        "block_y": 256,
                        "overview_sizes": _cog_overview_sizes(n),
                        "tag_date": date,
                        # ZSTD+predictor on these values compresses to ~44% (measured on the real preset).
                        "size": int(n * n * 2 * 0.44),
                        "mtime": 0,
                    }
                )
    index = root / "index.parquet"
    table = TileTable.from_records(rows, INDEX_COLUMNS)
    write_index(str(index), table)
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "inputs": {
                    "paths": ["**/*.tif"],
                    "pattern": r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$",
                    "index": "index.parquet",
                    "trust_index": True,
                },
                "grid": {"crs": "EPSG:32632", "resolution": 20},
                "resampling": "average",
                "output": {"path": "out.zarr", "chunks": {"y": 512, "x": 512}},
            },
            sort_keys=False,
        )
    )
    logger.info("virtual index of %d tiles (%dx%d per zone) in %s", len(table), nx, ny, index)
    return str(index), str(config)
