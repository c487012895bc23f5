"""The fixture's tiles, computed (no file written here): the presets, where each tile lies and its
clear-sky pixel values.

Each tile is one band in UTM zone 31 or 32 (and 33 for the ``mixed`` preset); the zones' tile blocks
overlap each other and straddle the zone boundary at 6°E. Pixel values are a smooth function of
longitude/latitude (plus small seeded noise), so overlapping tiles agree and a reprojection error is
measurable. Some tiles carry an orbit-edge nodata wedge. :mod:`pipeline.tools.clouds` adds the ``cloudy``
preset's sky; :mod:`pipeline.tools.fixtures` writes the files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

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
    res = S2_BANDS[band]
    xx, yy, lon, lat = compute_pixel_lonlat(spec, res, preset)
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


@functools.lru_cache(maxsize=3)
def compute_pixel_lonlat(
    spec: TileSpec, res: int, preset: Preset
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, lon, lat) of the tile's pixel centres at ``res`` metres, read-only: the projection of a
    tile's grid was most of a band's writing time, and every band of a tile at one resolution shares it
    (the last three grids are kept: a tile's 10, 20 and 60 m bands, written one after another)."""
    from pyproj import Transformer

    xx, yy = compute_pixel_centres(spec, res, preset)
    lon, lat = Transformer.from_crs(f"EPSG:{spec.epsg}", "EPSG:4326", always_xy=True).transform(xx, yy)
    out = (xx, yy, np.asarray(lon), np.asarray(lat))
    for a in out:
        a.setflags(write=False)
    return out


def compute_orbit_edge(spec: TileSpec, xx: np.ndarray, yy: np.ndarray, preset: Preset) -> np.ndarray:
    """Where the swath ends: a diagonal edge through the east of the tile, in map units so every band
    (and the classification bands) agree."""
    return np.asarray((xx - spec.x0) + 0.3 * (spec.y0 - yy) > 0.75 * preset.tile_m)
