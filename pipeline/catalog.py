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
INDEX_COLUMNS = ["path", *HEADER_COLUMNS, "tag_date", "size", "mtime"]


@dataclass
class Catalog:
    tiles: pd.DataFrame
    """The tile table, sorted by path (the order ``fuse: first/last`` follows)."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Files matched but unusable: ``{path, error}``."""
    headers_read: int = 0
    """How many file headers were opened this time (the rest came from the index)."""


def find_inputs(config: Config) -> list[str]:
    """Glob ``inputs.paths`` and keep the files whose path matches ``inputs.pattern``."""
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
    matched = [p for p in files if rx.search(p.replace(os.sep, "/"))]
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
    """Find inputs, read headers (only new/changed ones when an index exists), build the table.

    With ``inputs.trust_index`` the index is the input list: no glob, no stat, no file opened.
    """
    index = _load_index(config.inputs.index) if config.inputs.index else None
    if config.inputs.trust_index:
        if index is None:
            raise ConfigError("inputs.index", f"{config.inputs.index} is missing or unreadable; run `pipeline index`")
        return _catalog_from(index, config, [], headers_read=0)
    matched = find_inputs(config)
    skipped: list[dict[str, str]] = []
    known = (
        {} if index is None else dict(zip(index["path"], zip(index["size"], index["mtime"], strict=True), strict=True))
    )

    keep_cached: list[str] = []
    to_read: list[str] = []
    stats: dict[str, tuple[int, int]] = {}
    for path in matched:
        try:
            stats[path] = _stat(path)
        except OSError as e:
            skipped.append({"path": path, "error": f"cannot stat: {e.strerror or e}"})
            continue
        if known.get(path) == stats[path]:
            keep_cached.append(path)
        else:
            to_read.append(path)

    def read_one(path: str) -> tuple[str, dict[str, Any] | None, str | None]:
        try:
            return path, read_header(path), None
        except TileReadError as e:
            return path, None, e.problem
        except Exception as e:  # noqa: BLE001 - any other failure is still this file's problem
            return path, None, f"{type(e).__name__}: {e}"

    fresh = []
    if to_read:
        with ThreadPoolExecutor(min(max_threads, len(to_read))) as pool:
            for path, header, error in pool.map(read_one, to_read):
                if header is None:
                    skipped.append({"path": path, "error": str(error)})
                else:
                    size, mtime = stats[path]
                    fresh.append({"path": path, **header, "size": size, "mtime": mtime})
    parts = [pd.DataFrame.from_records(fresh, columns=INDEX_COLUMNS)]
    if index is not None and keep_cached:
        parts.append(index[index["path"].isin(set(keep_cached))])
    headers = pd.concat([p for p in parts if len(p)] or parts, ignore_index=True)
    if config.inputs.index and (to_read or index is None or len(index) != len(headers)):
        _write_index(config.inputs.index, headers)
    return _catalog_from(headers, config, skipped, headers_read=len(to_read))


def _catalog_from(headers: pd.DataFrame, config: Config, skipped: list[dict[str, str]], headers_read: int) -> Catalog:
    """Tile table from header rows: ``pattern`` groups extracted, dates parsed (once per distinct text)."""
    paths = headers["path"].astype(str)
    groups = (paths.str.replace(os.sep, "/", regex=False) if os.sep != "/" else paths).str.extract(
        config.inputs.pattern
    )
    matched = groups["band"].notna().to_numpy()
    if not matched.any():
        raise ConfigError("inputs.pattern", f"none of the {len(headers)} input paths matches the pattern")
    headers, groups = headers[matched], groups[matched]
    date_text = groups["date"] if "date" in groups else pd.Series(np.nan, index=groups.index, dtype=object)
    if "tag_date" in headers:
        date_text = date_text.fillna(headers["tag_date"])
    dates: dict[Any, datetime] = {}
    for text, example in zip(*np.unique(date_text.fillna("").to_numpy(str), return_index=True), strict=True):
        if not text:
            dates[""] = datetime(1970, 1, 1)  # a single-date run without dates
            continue
        try:
            dates[text] = datetime.strptime(text, config.inputs.date_format)
        except ValueError as e:
            raise ConfigError(
                "inputs.date_format",
                f"{paths.iloc[example]}: date {text!r} does not match {config.inputs.date_format!r} ({e})",
            ) from e
    tiles = headers.assign(
        band=groups["band"].astype(str),
        tile=groups["tile"].fillna("").astype(str) if "tile" in groups else "",
        date=date_text.fillna("").map(dates),
    )
    tiles = _finish_table(tiles, config, skipped)
    if config.execution.on_error == "fail" and skipped:
        first = skipped[0]
        raise TileReadError(first["path"], first["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    return Catalog(tiles=tiles, skipped=skipped, headers_read=headers_read)


def _finish_table(tiles: pd.DataFrame, config: Config, skipped: list[dict[str, str]]) -> pd.DataFrame:
    tiles = tiles[["path", "band", "tile", "date", *HEADER_COLUMNS, "size", "mtime"]]
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


def _load_index(path: str) -> pd.DataFrame | None:
    if not os.path.exists(path):
        return None
    try:
        table = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001
        logger.warning("tile index %s is unreadable (%s); rebuilding it", path, e)
        return None
    if "path" not in table or set(INDEX_COLUMNS) - set(table.columns):
        logger.warning("tile index %s has another layout; rebuilding it", path)
        return None
    return table


def _write_index(path: str, table: pd.DataFrame) -> None:
    table = table[INDEX_COLUMNS].sort_values("path", kind="stable")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    logger.info("tile index %s: %d files", path, len(table))
