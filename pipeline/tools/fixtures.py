"""Deterministic synthetic Sentinel-2-like tiles, written as files.

Each tile is a single-band COG (256-px internal tiles, ZSTD, internal average overviews, nodata=0); the
presets, where each tile lies and its pixel values (smooth in longitude/latitude, with orbit-edge nodata
wedges) are computed in :mod:`pipeline.tools.fixture_tiles`. The ``cloudy`` preset adds moving clouds,
seen in the data bands and classified in ``SCL`` and ``QA`` bands, and STAC items
(:mod:`pipeline.tools.clouds`). Same preset and seed: byte-identical files. :func:`write_virtual_index`
writes a preset's layout as a tile index, with no rasters.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pipeline.tools.fixture_tiles import (
    CLASS_BANDS,
    NODATA,
    PRESETS,
    S2_BANDS,
    Preset,
    TileSpec,
    band_resolution,
    compute_tile_specs,
    compute_tile_values,
)

logger = logging.getLogger(__name__)


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
            # a tile's bands of one date together: they share its projected grid (compute_pixel_lonlat)
            paths = list(pool.map(_write_one, jobs, chunksize=len(p.bands)))
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
