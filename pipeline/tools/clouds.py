"""Clouds for the ``cloudy`` fixture preset: where they are, how the data bands show them, and the two
ways catalogues classify them.

The sky of each date is one field over the whole fixture (in kilometres from 6°E 45°N, so overlapping
tiles of a date see the same clouds): a sum of seeded random waves, 3-9 km long, that drift with a wind
and change phase from date to date, so the clouds move and change shape. Where the field is high there
is cloud (its core ``cloud_high_probability``, its rim ``cloud_medium_probability``); a cloud's shadow is
the cloud shifted away from the sun (azimuth 140°, about 0.9 km, as a 1.5 km cloud casts it at 10:30 in
June); a second field of long streaks is thin cirrus. The rest is a fixed landscape of vegetation, bare
ground and water. Cloud, shadow and cirrus cover 20-80% of each tile on each date.

* Data bands show them as imagery does: cloud bright (6000-9000), shadow dark, cirrus brighter, each
  judged at the band's own pixel centres (a 10 m band's cloud edge is finer than the 20 m ``SCL``'s).
* ``SCL``: Sentinel-2 L2A Scene Classification values (uint8, 0 = no data where the swath ends).
* ``QA``: Landsat Collection 2 ``QA_PIXEL`` bit flags (uint16, the same classes; fill = 1, its nodata).
* STAC: the ``SCL`` asset carries ``classification:classes`` and ``QA`` ``classification:bitfields``
  (the classification extension v2, as Earth Search and Planetary Computer publish them).
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from pipeline.tools.fixture_tiles import (
    CLASS_BANDS,
    NODATA,
    S2_BANDS,
    Preset,
    TileSpec,
    band_resolution,
    compute_orbit_edge,
    compute_pixel_lonlat,
    compute_tile_values,
)

SCL_CLASSES: list[dict[str, Any]] = [
    {"value": 0, "name": "no_data", "description": "No data", "nodata": True},
    {"value": 1, "name": "saturated_or_defective", "description": "Saturated or defective pixel"},
    {"value": 2, "name": "dark_area_pixels", "description": "Dark area pixels"},
    {"value": 3, "name": "cloud_shadows", "description": "Cloud shadows"},
    {"value": 4, "name": "vegetation", "description": "Vegetation"},
    {"value": 5, "name": "not_vegetated", "description": "Not vegetated"},
    {"value": 6, "name": "water", "description": "Water"},
    {"value": 7, "name": "unclassified", "description": "Unclassified"},
    {"value": 8, "name": "cloud_medium_probability", "description": "Cloud medium probability"},
    {"value": 9, "name": "cloud_high_probability", "description": "Cloud high probability"},
    {"value": 10, "name": "thin_cirrus", "description": "Thin cirrus"},
    {"value": 11, "name": "snow", "description": "Snow or ice"},
]
"""Sentinel-2 L2A Scene Classification, as ``classification:classes``."""


def _flag(offset: int, name: str, description: str, no: str, yes: str) -> dict[str, Any]:
    return {
        "offset": offset,
        "length": 1,
        "name": name,
        "description": description,
        "classes": [
            {"value": 0, "name": f"not_{name}", "description": no},
            {"value": 1, "name": name, "description": yes},
        ],
    }


def _confidence(offset: int, name: str, what: str) -> dict[str, Any]:
    levels = ("none", "low", "medium", "high")
    return {
        "offset": offset,
        "length": 2,
        "name": name,
        "description": f"{what} confidence levels",
        "classes": [
            {"value": v, "name": level, "description": f"{level.capitalize()} confidence"}
            for v, level in enumerate(levels)
        ],
    }


QA_BITFIELDS: list[dict[str, Any]] = [
    _flag(0, "fill", "Image or fill data", "Image data", "Fill data"),
    _flag(1, "dilated_cloud", "Dilated cloud", "Cloud is not dilated or no cloud", "Cloud dilation"),
    _flag(2, "cirrus", "Cirrus mask", "Cirrus confidence is not high", "High confidence cirrus"),
    _flag(3, "cloud", "Cloud mask", "Cloud confidence is not high", "High confidence cloud"),
    _flag(4, "cloud_shadow", "Cloud shadow mask", "Cloud shadow confidence is not high", "High confidence shadow"),
    _flag(5, "snow", "Snow/Ice mask", "Snow/Ice confidence is not high", "High confidence snow cover"),
    _flag(6, "clear", "Clear mask", "Cloud or dilated cloud bits are set", "Cloud and dilated cloud bits not set"),
    _flag(7, "water", "Water mask", "Land or cloud", "Water"),
    _confidence(8, "cloud_confidence", "Cloud"),
    _confidence(10, "cloud_shadow_confidence", "Cloud shadow"),
    _confidence(12, "snow_ice_confidence", "Snow/Ice"),
    _confidence(14, "cirrus_confidence", "Cirrus"),
]
"""Landsat Collection 2 ``QA_PIXEL``, as ``classification:bitfields``."""

QA_FILL = 1
"""``QA``'s value where there is no image (the fill bit alone), its nodata as Landsat declares it."""

SUN_AZIMUTH_DEG = 140.0
SHADOW_KM = 0.9
CLOUD_RIM = 0.6
"""How far above the cloud threshold (in the field's standard deviations) a cloud's rim reaches: the rim
is ``cloud_medium_probability``, the rest ``cloud_high_probability``."""
KM_PER_DEG_LAT = 110.57
KM_PER_DEG_LON = 111.32 * math.cos(math.radians(45.0))


def file_nodata(band: str) -> int:
    """The nodata a classification band declares: 0 for ``SCL``, the fill value for ``QA``."""
    return QA_FILL if band == "QA" else NODATA


def _waves(seed: int, stream: int, count: int, lengths_km: tuple[float, float], spread: float) -> np.ndarray:
    """Seeded waves as rows (kx, ky, phase, phase drift per date): wavelengths in ``lengths_km``, their
    directions within ``spread`` radians of a common one (``pi``: any direction)."""
    rng = np.random.default_rng([seed, 30, stream])
    k = 2 * np.pi / rng.uniform(*lengths_km, count)
    angle = rng.uniform(0, 2 * np.pi) + rng.uniform(-spread, spread, count)
    phase, drift = rng.uniform(0, 2 * np.pi, count), rng.uniform(0.6, 1.4, count)
    return np.stack([k * np.cos(angle), k * np.sin(angle), phase, drift], 1)


def _field(
    x_km: np.ndarray, y_km: np.ndarray, waves: np.ndarray, date_idx: int, wind_km: tuple[float, float]
) -> np.ndarray:
    """The sum of the waves (unit variance, near normal) on ``date_idx``, moved by the wind since date 0."""
    x = np.asarray(x_km - wind_km[0] * date_idx, np.float32)  # float32: a tenth of the time; the phases stay exact
    y = np.asarray(y_km - wind_km[1] * date_idx, np.float32)  # to ~1e-5 rad over the fixture
    out = np.zeros(x.shape, np.float32)
    arg = np.empty_like(out)
    for kx, ky, phase, drift in waves:
        np.multiply(x, np.float32(kx), out=arg)
        arg += np.float32(ky) * y
        arg += np.float32(phase + drift * date_idx)
        out += np.cos(arg, out=arg)
    return out * np.float32(math.sqrt(2.0 / len(waves)))


def _date_cover(seed: int, date_idx: int) -> tuple[float, float]:
    """The date's share of cloud and of cirrus over the whole fixture (each tile's varies about them)."""
    rng = np.random.default_rng([seed, 31, date_idx])
    return float(rng.uniform(0.25, 0.40)), float(rng.uniform(0.05, 0.12))


def compute_sky(x_km: np.ndarray, y_km: np.ndarray, date_idx: int, seed: int) -> tuple[np.ndarray, ...]:
    """The sky at these points (km from 6°E 45°N) on ``date_idx``: the cloud field's height above its
    threshold (cloud where > 0), the same at the point toward the sun (shadow where > 0), and the cirrus
    field's (cirrus where > 0)."""
    cloud_share, cirrus_share = _date_cover(seed, date_idx)
    normal = NormalDist()
    wind = (2.5, 1.0)  # km a date: west winds
    clouds = _waves(seed, 0, 24, (3.0, 9.0), math.pi)
    cirrus = _waves(seed, 1, 12, (2.0, 6.0), 0.25)
    to_sun = math.radians(SUN_AZIMUTH_DEG)
    dx, dy = SHADOW_KM * math.sin(to_sun), SHADOW_KM * math.cos(to_sun)
    t_cloud = normal.inv_cdf(1.0 - cloud_share)
    t_cirrus = normal.inv_cdf(1.0 - cirrus_share)
    return (
        _field(x_km, y_km, clouds, date_idx, wind) - t_cloud,
        _field(x_km + dx, y_km + dy, clouds, date_idx, wind) - t_cloud,
        _field(x_km, y_km, cirrus, date_idx, (4.0, 0.5)) - t_cirrus,
    )


def compute_ground(x_km: np.ndarray, y_km: np.ndarray, seed: int) -> np.ndarray:
    """The clear-sky classes (the same on every date): water, bare ground (not vegetated), vegetation."""
    land = _field(x_km, y_km, _waves(seed, 2, 16, (2.0, 12.0), math.pi), 0, (0.0, 0.0))
    return np.where(land < -1.3, 6, np.where(land < -0.5, 5, 4)).astype(np.uint8)


def compute_scene_classes(sky: tuple[np.ndarray, ...], ground: np.ndarray) -> np.ndarray:
    """``SCL`` values from the sky and the ground: cloud over shadow over cirrus over the ground."""
    cloud, shadow, cirrus = sky
    scl = ground.copy()
    scl[cirrus > 0] = 10
    scl[shadow > 0] = 3
    scl[cloud > 0] = 8
    scl[cloud > CLOUD_RIM] = 9
    return scl


def _dilate(mask: np.ndarray) -> np.ndarray:
    """The mask grown by one pixel (3x3)."""
    padded = np.pad(mask, 1)
    out = np.zeros_like(mask)
    h, w = mask.shape
    for dy in range(3):
        for dx in range(3):
            out |= padded[dy : dy + h, dx : dx + w]
    return out


def compute_qa_pixel(scl: np.ndarray) -> np.ndarray:
    """Landsat ``QA_PIXEL`` flags for the same classes (uint16). As Landsat sets them: ``clear`` wherever
    neither ``cloud`` nor ``dilated_cloud`` is (shadow and cirrus pixels included); confidences low by
    default, high where their class is; fill (1) alone where ``SCL`` has no data."""
    cloud = (scl == 8) | (scl == 9)
    dilated = _dilate(cloud) & ~cloud
    qa = np.full(scl.shape, (1 << 8) | (1 << 10) | (1 << 12) | (1 << 14), np.uint16)  # every confidence low
    qa |= np.where(dilated, 1 << 1, 0).astype(np.uint16)
    qa |= np.where(scl == 10, (1 << 2) | (3 << 14), 0).astype(np.uint16)
    qa[cloud] |= 1 << 3
    qa[cloud] &= ~np.uint16(3 << 8)  # the cloud confidence, from low to medium (binary 10) or high (11)
    qa[scl == 8] |= 2 << 8
    qa[scl == 9] |= 3 << 8
    qa |= np.where(scl == 3, (1 << 4) | (3 << 10), 0).astype(np.uint16)
    qa |= np.where(scl == 11, (1 << 5) | (3 << 12), 0).astype(np.uint16)
    qa |= np.where(~cloud & ~dilated, 1 << 6, 0).astype(np.uint16)
    qa |= np.where(scl == 6, 1 << 7, 0).astype(np.uint16)
    qa[scl == 0] = QA_FILL
    return qa


@functools.lru_cache(maxsize=3)
def _sky_at(
    spec: TileSpec, res: int, date_idx: int, preset: Preset, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """(x, y, x_km, y_km, sky) of the tile's pixels at ``res`` on a date, read-only: shared by every band
    of that tile, resolution and date (computing it again per band was a third of a band's writing)."""
    xx, yy, lon, lat = compute_pixel_lonlat(spec, res, preset)
    x_km, y_km = (lon - 6.0) * KM_PER_DEG_LON, (lat - 45.0) * KM_PER_DEG_LAT
    sky = compute_sky(x_km, y_km, date_idx, seed)
    for a in (x_km, y_km, *sky):
        a.setflags(write=False)
    return xx, yy, x_km, y_km, sky


def compute_cloudy_values(spec: TileSpec, band: str, date_idx: int, preset: Preset, seed: int) -> np.ndarray:
    """One file's pixels: a data band's values under this date's sky (uint16), or the tile's ``SCL``
    (uint8) or ``QA`` (uint16) classes; no data where the swath ends, in every band alike."""
    res = band_resolution(band)
    xx, yy, x_km, y_km, sky = _sky_at(spec, res, date_idx, preset, seed)
    edge = compute_orbit_edge(spec, xx, yy, preset) if date_idx in spec.orbit_edge_dates else None
    if band in CLASS_BANDS:
        scl = compute_scene_classes(sky, compute_ground(x_km, y_km, seed))
        if edge is not None:
            scl[edge] = NODATA
        return compute_qa_pixel(scl) if band == "QA" else scl
    values = compute_tile_values(spec, band, date_idx, preset, seed).astype(np.float64)
    cloud, shadow, cirrus = sky
    k = list(S2_BANDS).index(band)
    bright = 6000.0 + 2500.0 * np.clip(cloud / 1.5, 0.0, 1.0) + 40.0 * k + 0.05 * values
    lit = np.where(cirrus > 0, values + 1200.0 + 300.0 * np.clip(cirrus, 0.0, 1.0), values)
    out = np.where(cloud > 0, bright, np.where(shadow > 0, 0.35 * values, lit))
    out = np.clip(np.rint(out), 1, 9000).astype(np.uint16)
    if edge is not None:
        out[edge] = NODATA
    return out


def write_cloudy_items(root: str | os.PathLike[str], paths: list[str]) -> list[str]:
    """STAC items for the tiles under ``root`` (hrefs relative to it): ``root/items.json`` (an
    ItemCollection) and, where rustac is installed, ``root/items.parquet`` (stac-geoparquet). ``SCL``
    carries ``classification:classes``, ``QA`` ``classification:bitfields``. Returns the files written."""
    from pipeline.tools.stac_items import items_from_files, write_geoparquet, write_item_collection

    root = Path(root)
    extra = {"SCL": {"classification:classes": SCL_CLASSES}, "QA": {"classification:bitfields": QA_BITFIELDS}}
    items = items_from_files(paths, href_base=str(root), asset_fields=extra)
    written = [write_item_collection(items, str(root / "items.json"))]
    try:
        import rustac  # noqa: F401
    except ImportError:
        return written
    written.append(write_geoparquet(items, str(root / "items.parquet")))
    return written
