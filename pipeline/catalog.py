"""Find inputs and describe them in one tile table; persist it as a Parquet index.

The tile table is a :class:`pandas.DataFrame` with one row per usable file:

=============  ==============================================================
path           absolute path
band, tile     from the config ``pattern`` (``tile`` may be empty)
date           datetime64 from the ``date`` group (or the file's DATE tag)
crs            the file's CRS as a compact string (``EPSG:32632`` or WKT)
a,b,c,d,e,f    the affine geotransform (rasterio order)
width, height  pixels
xmin..ymax     bounds in the file's own CRS
dtype, nodata  band 1's dtype and nodata (the config's ``inputs.nodata`` if none)
block_x/_y     internal block shape
overviews      overview decimation factors, e.g. [2, 4, 8]
size, mtime    bytes and ``st_mtime_ns``, which decide re-reading an indexed file
=============  ==============================================================

Files that cannot be used are returned separately as ``skipped`` rows
``{path, error}``; ``on_error: fail`` raises instead.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from pipeline.config import Config
from pipeline.errors import ConfigError, TileReadError

logger = logging.getLogger(__name__)

HEADER_COLUMNS = [
    "crs", "a", "b", "c", "d", "e", "f", "width", "height",
    "xmin", "ymin", "xmax", "ymax", "dtype", "file_nodata", "block_x", "block_y", "overviews",
]  # fmt: skip
INDEX_VERSION = 1


@dataclass
class Catalog:
    tiles: pd.DataFrame
    """The tile table, sorted by path (the order ``fuse: first/last`` follows)."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Files matched but unusable: ``{path, error}``."""
    headers_read: int = 0
    """How many file headers were opened this time (the rest came from the index)."""


def find_inputs(config: Config) -> list[tuple[str, dict[str, str]]]:
    """Glob ``inputs.paths`` and keep files matching ``inputs.pattern``; return (path, groups)."""
    found: set[str] = set()
    for pattern in config.inputs.paths:
        found.update(os.path.abspath(p) for p in glob.glob(pattern, recursive=True))
    files = sorted(p for p in found if not os.path.isdir(p))
    if not files:
        raise ConfigError(
            "inputs.paths",
            f"no file matched {list(config.inputs.paths)}; check the glob (relative paths are "
            "relative to the config file's folder)",
        )
    rx = re.compile(config.inputs.pattern)
    matched = []
    for path in files:
        m = rx.search(path.replace(os.sep, "/"))
        if m:
            matched.append((path, {k: v for k, v in m.groupdict().items() if v is not None}))
    if not matched:
        raise ConfigError(
            "inputs.pattern",
            f"{len(files)} files found but none matched the pattern (first: {files[0]})",
        )
    return matched


def read_header(path: str) -> dict[str, Any]:
    """Open one file and return its header fields (see the module docstring)."""
    import rasterio
    from rasterio.errors import NotGeoreferencedWarning, RasterioIOError

    try:
        with warnings.catch_warnings():
            # A file without georeferencing is reported below as a skipped input, not as a warning.
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            ds = rasterio.open(path)
        with ds:
            if ds.crs is None:
                raise TileReadError(path, "has no CRS; assign one (gdal_edit.py -a_srs) or exclude it")
            if ds.transform.is_identity or ds.transform.is_rectilinear is False:
                raise TileReadError(
                    path, "has no usable geotransform (identity or rotated); georeference it or exclude it"
                )
            t = ds.transform
            epsg = ds.crs.to_epsg()
            row = {
                "crs": f"EPSG:{epsg}" if epsg else ds.crs.to_wkt(),
                "a": t.a, "b": t.b, "c": t.c, "d": t.d, "e": t.e, "f": t.f,
                "width": ds.width, "height": ds.height,
                "xmin": ds.bounds.left, "ymin": ds.bounds.bottom,
                "xmax": ds.bounds.right, "ymax": ds.bounds.top,
                "dtype": ds.dtypes[0],
                "file_nodata": np.nan if ds.nodata is None else float(ds.nodata),
                "block_x": ds.block_shapes[0][1], "block_y": ds.block_shapes[0][0],
                "overviews": list(ds.overviews(1)),
                "tag_date": ds.tags().get("DATE") or ds.tags().get("TIFFTAG_DATETIME"),
            }  # fmt: skip
    except RasterioIOError as e:
        raise TileReadError(path, f"cannot be opened as a raster: {e}") from e
    return row


def _stat(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def build_catalog(config: Config, max_threads: int = 8) -> Catalog:
    """Find inputs, read headers (only new/changed ones when an index exists), build the table."""
    matched = find_inputs(config)
    skipped: list[dict[str, str]] = []
    index = _load_index(config.inputs.index) if config.inputs.index else None

    rows: dict[str, dict[str, Any]] = {}
    to_read: list[str] = []
    stats: dict[str, tuple[int, int]] = {}
    for path, _ in matched:
        try:
            stats[path] = _stat(path)
        except OSError as e:
            skipped.append({"path": path, "error": f"cannot stat: {e.strerror or e}"})
            continue
        if index is not None and path in index:
            cached = index[path]
            if (cached["size"], cached["mtime"]) == stats[path]:
                rows[path] = cached
                continue
        to_read.append(path)

    def read_one(path: str) -> tuple[str, dict[str, Any] | None, str | None]:
        try:
            return path, read_header(path), None
        except TileReadError as e:
            return path, None, e.problem
        except Exception as e:  # noqa: BLE001 - any other failure is still this file's problem
            return path, None, f"{type(e).__name__}: {e}"

    if to_read:
        with ThreadPoolExecutor(min(max_threads, len(to_read))) as pool:
            for path, header, error in pool.map(read_one, to_read):
                if header is None:
                    skipped.append({"path": path, "error": str(error)})
                else:
                    size, mtime = stats[path]
                    rows[path] = header | {"size": size, "mtime": mtime}

    if config.inputs.index and (to_read or index is None or set(index) != set(rows)):
        _write_index(config.inputs.index, rows)

    records = []
    date_format = config.inputs.date_format
    for path, groups in matched:
        if path not in rows:
            continue
        row = dict(rows[path])
        date_text = groups.get("date") or row.get("tag_date")
        if date_text:
            try:
                date = datetime.strptime(date_text, date_format)
            except ValueError as e:
                raise ConfigError(
                    "inputs.date_format",
                    f"{path}: date {date_text!r} does not match {date_format!r} ({e})",
                ) from e
        else:
            date = datetime(1970, 1, 1)  # a single-date run without dates
        row.update(path=path, band=groups["band"], tile=groups.get("tile", ""), date=date)
        records.append(row)

    tiles = _finish_table(records, config, skipped)
    if config.execution.on_error == "fail" and skipped:
        first = skipped[0]
        raise TileReadError(first["path"], first["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    return Catalog(tiles=tiles, skipped=skipped, headers_read=len(to_read))


def _finish_table(records: list[dict[str, Any]], config: Config, skipped: list[dict[str, str]]) -> pd.DataFrame:
    columns = ["path", "band", "tile", "date", *HEADER_COLUMNS, "size", "mtime"]
    tiles = pd.DataFrame.from_records(records, columns=columns)
    if config.inputs.bands is not None:
        missing = [b for b in config.inputs.bands if b not in set(tiles["band"])]
        if missing:
            raise ConfigError(
                "inputs.bands",
                f"no input file carries band(s) {missing}; bands found: {sorted(set(tiles['band']))}",
            )
        tiles = tiles[tiles["band"].isin(config.inputs.bands)]
    # A band's files must share one dtype: the majority wins, the others are skipped.
    keep = np.ones(len(tiles), dtype=bool)
    for _band, group in tiles.groupby("band"):
        dtypes = group["dtype"].value_counts()
        if len(dtypes) > 1:
            major = dtypes.index[0]
            for idx in group.index[group["dtype"] != major]:
                keep[tiles.index.get_loc(idx)] = False
                skipped.append({
                    "path": tiles.at[idx, "path"],
                    "error": f"dtype {tiles.at[idx, 'dtype']} differs from band's other files ({major})",
                })  # fmt: skip
    tiles = tiles[keep]
    fallback = np.nan if config.inputs.nodata is None else config.inputs.nodata
    tiles = tiles.assign(
        nodata=tiles["file_nodata"].fillna(fallback),
        date=pd.to_datetime(tiles["date"]),
    )
    if tiles.empty:
        raise ConfigError("inputs.paths", "no usable input file remains (see the skipped list)")
    return tiles.sort_values("path", kind="stable").reset_index(drop=True)


def _load_index(path: str) -> dict[str, dict[str, Any]] | None:
    if not os.path.exists(path):
        return None
    try:
        table = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001
        logger.warning("tile index %s is unreadable (%s); rebuilding it", path, e)
        return None
    if table.attrs.get("index_version", INDEX_VERSION) != INDEX_VERSION or "path" not in table:
        return None
    out = {}
    for rec in table.to_dict("records"):
        rec["overviews"] = [int(v) for v in rec["overviews"]]
        out[rec["path"]] = rec
    return out


def _write_index(path: str, rows: dict[str, dict[str, Any]]) -> None:
    table = pd.DataFrame.from_records(
        [{"path": p, **r} for p, r in sorted(rows.items())],
        columns=["path", *HEADER_COLUMNS, "tag_date", "size", "mtime"],
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    logger.info("tile index %s: %d files", path, len(table))
