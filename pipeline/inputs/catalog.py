"""Find inputs and describe them in one tile table; persist it as a Parquet index.

The tile table is a :class:`TileTable` (NumPy columns; ``to_pandas()`` for a DataFrame) with one row
per usable file:

=============  ==============================================================
path           absolute path, or the object's URL (``s3://bucket/key``, ``https://...``)
band, tile     from the config ``pattern`` (``tile`` may be empty)
date           datetime64 from the ``date`` group (or the file's DATE tag)
crs            the file's CRS as a compact string (``EPSG:32632`` or WKT)
a,b,c,d,e,f    the affine geotransform (rasterio order)
width, height  pixels
xmin..ymax     bounds in the file's own CRS
dtype, nodata  band 1's dtype and nodata (the config's ``inputs.nodata`` if none)
block_x/_y     internal block shape
overviews      overview decimation factors, e.g. [2, 4, 8] (a list or an int array)
size, mtime    bytes and ``st_mtime_ns`` (an object's last-modified, in ns), which decide re-reading
etag           an object's ETag (empty for a local file); with size and mtime, from the listing
=============  ==============================================================

``inputs.paths`` mixes local globs, ``s3://bucket/prefix/**/*.tif`` globs (one prefix listing each,
matched client side: :func:`pipeline.storage.list_objects`) and ``https://`` URLs (taken as given).

Files that cannot be used are returned separately as ``skipped`` rows
``{path, error}``; ``on_error: fail`` raises instead.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import numpy as np

from pipeline.config import Config, is_url
from pipeline.errors import ConfigError, TileReadError
from pipeline.inputs.index import _load_index, write_index
from pipeline.inputs.read import input_errors
from pipeline.inputs.tiles import (
    INDEX_COLUMNS,
    TABLE_COLUMNS,
    Catalog,
    TileTable,
    _column,
    factorize,
)
from pipeline.report.progress import NoProgress

logger = logging.getLogger(__name__)


def find_inputs(config: Config) -> list[str]:
    """Glob ``inputs.paths`` and keep the files whose path matches ``inputs.pattern``."""
    return _list_inputs(config)[0]


def _list_inputs(
    config: Config, progress: NoProgress | None = None
) -> tuple[list[str], dict[str, tuple[int, int, str]], list[str]]:
    """(matching paths in sorted order, {url: (size, mtime_ns, etag)} of listed objects, s3 keys named
    without wildcards that do not exist). ``progress`` counts the files and objects listed."""
    from pipeline.storage import list_objects, scheme

    progress = progress or NoProgress()
    progress.phase("listing", unit="files listed")

    found: set[str] = set()
    objects: dict[str, tuple[int, int, str]] = {}
    missing: list[str] = []
    for pattern in config.inputs.paths:
        kind = scheme(pattern)
        if kind == "s3":
            listed = list_objects(pattern, config.storage, on_page=progress.add)
            if not listed and not any(ch in pattern for ch in "*?["):
                missing.append(pattern)
            for url, size, mtime, etag in listed:
                objects[url] = (size, mtime, etag)
                found.add(url)
        elif kind in ("http", "https"):
            found.add(pattern)
            progress.add()
        else:
            for p in glob.iglob(pattern, recursive=True):
                if not os.path.isdir(p):
                    found.add(os.path.abspath(p))
                    progress.add()
    files = sorted(found)
    if not files and missing:
        raise ConfigError("inputs.paths", f"no such object: {', '.join(missing[:5])}; check the keys and bucket")
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
    return matched, objects, missing


def read_header(path: str, config: Config | None = None) -> dict[str, Any]:
    """Open one file and return its header fields (see the module docstring). A URL is opened through
    GDAL's ``/vsis3/`` or ``/vsicurl/`` with ``config``'s storage settings and ``inputs.gdal_env``."""
    if is_url(path):
        from pipeline.inputs.read import cloud_env
        from pipeline.storage import default_storage, redact, vsi_path

        storage = config.storage if config is not None else default_storage()
        gdal_env = config.inputs.gdal_env if config is not None else {}
        try:
            with cloud_env(storage, gdal_env):
                return _read_header(vsi_path(path), path)
        except TileReadError as e:
            raise TileReadError(path, redact(e.problem)) from None
    return _read_header(path, path)


def _read_header(source: str, path: str) -> dict[str, Any]:
    import rasterio
    from rasterio.errors import NotGeoreferencedWarning, RasterioIOError

    try:
        with warnings.catch_warnings():
            # A file without georeferencing is reported below as a skipped input, not as a warning.
            warnings.simplefilter("ignore", NotGeoreferencedWarning)
            ds = rasterio.open(source)
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
                "a": t.a,
                "b": t.b,
                "c": t.c,
                "d": t.d,
                "e": t.e,
                "f": t.f,
                "width": ds.width,
                "height": ds.height,
                "xmin": ds.bounds.left,
                "ymin": ds.bounds.bottom,
                "xmax": ds.bounds.right,
                "ymax": ds.bounds.top,
                "dtype": ds.dtypes[0],
                "file_nodata": np.nan if ds.nodata is None else float(ds.nodata),
                "block_x": ds.block_shapes[0][1],
                "block_y": ds.block_shapes[0][0],
                "overviews": list(ds.overviews(1)),
                "tag_date": ds.tags().get("DATE") or ds.tags().get("TIFFTAG_DATETIME"),
            }
    except RasterioIOError as e:
        raise TileReadError(path, f"cannot be opened as a raster: {e}") from e
    return row


def _stat(path: str) -> tuple[int, int, str]:
    """(size, mtime_ns, etag) of a local file (no ETag) or an ``https://`` object (one HEAD request)."""
    if is_url(path):
        from pipeline.storage import head_url

        try:
            return head_url(path)
        except FileNotFoundError as e:
            raise OSError(f"no such object ({path})") from e
        except Exception as e:  # noqa: BLE001 - obstore's errors, as this object's problem
            from pipeline.storage import redact

            raise OSError(redact(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)) from None
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, ""


def build_catalog(config: Config, max_threads: int = 8, progress: NoProgress | None = None) -> Catalog:
    """Find inputs, read headers (only new/changed ones when an index exists), build the table.

    With ``inputs.trust_index`` the index is the input list: no glob, no stat, no file opened.
    ``progress`` is told the files listed and the headers read (:mod:`pipeline.report.progress`).
    """
    progress = progress or NoProgress()
    if config.inputs.stac or config.inputs.stac_search:
        from pipeline.inputs.stac import build_stac_catalog

        return build_stac_catalog(config, max_threads, progress)
    index = _load_index(config.inputs.index, config.storage) if config.inputs.index else None
    if config.inputs.trust_index:
        if index is None:
            raise ConfigError("inputs.index", f"{config.inputs.index} is missing or unreadable; run `pipeline index`")
        return _catalog_from(index, config, [], headers_read=0)
    matched, stats, missing = _list_inputs(config, progress)
    skipped: list[dict[str, str]] = [{"path": p, "error": "no such object"} for p in missing]
    known = (
        {}
        if index is None
        else dict(zip(index["path"], zip(index["size"], index["mtime"], index["etag"], strict=True), strict=True))
    )

    keep_cached: list[str] = []
    to_read: list[str] = []
    # Local files are stat'ed here, https:// URLs get one HEAD each (in threads); s3 objects were listed.
    unlisted = [p for p in matched if p not in stats]
    urls = [p for p in unlisted if is_url(p)]
    stat_results = dict(zip(urls, _map_threads(_try_stat, urls, max_threads), strict=True))
    for path in unlisted:
        result = stat_results[path] if path in stat_results else _try_stat(path)
        if isinstance(result, str):
            skipped.append({"path": path, "error": f"cannot stat: {result}"})
        else:
            stats[path] = result
    for path in matched:
        if path not in stats:
            continue
        if known.get(path) == stats[path]:
            keep_cached.append(path)
        else:
            to_read.append(path)

    def read_one(path: str) -> tuple[str, dict[str, Any] | None, str | None]:
        try:
            return path, read_header(path, config), None
        except TileReadError as e:
            return path, None, e.problem
        except input_errors() as e:  # a bad input; any other exception is a bug and fails the run
            return path, None, f"{type(e).__name__}: {e}"

    fresh = []
    if any(is_url(p) for p in to_read):
        from pipeline.inputs.read import cloud_env

        cloud_env(config.storage)  # the AWS session and GDAL's network counters: once, before the threads
    if to_read:
        progress.phase("headers", len(to_read), "headers read")
        with ThreadPoolExecutor(min(max_threads, len(to_read))) as pool:
            for path, header, error in pool.map(read_one, to_read):
                progress.add()
                if header is None:
                    skipped.append({"path": path, "error": str(error)})
                else:
                    size, mtime, etag = stats[path]
                    fresh.append({"path": path, **header, "size": size, "mtime": mtime, "etag": etag})
    parts = [TileTable.from_records(fresh, INDEX_COLUMNS)]
    if index is not None and keep_cached:
        cached = set(keep_cached)
        parts.append(index.rows(np.fromiter((p in cached for p in index["path"]), bool, len(index))))
    headers = TileTable.concat(parts)
    if config.inputs.index and (to_read or index is None or len(index) != len(headers)):
        write_index(config.inputs.index, headers, config.storage)
    catalog = _catalog_from(headers, config, skipped, headers_read=len(to_read))
    from pipeline.inputs import netstats

    catalog.network = netstats.take()
    return catalog


def _map_threads(fn: Any, items: list[str], max_threads: int) -> list[Any]:
    if not items:
        return []
    with ThreadPoolExecutor(min(max_threads, len(items))) as pool:
        return list(pool.map(fn, items))


def _try_stat(path: str) -> tuple[int, int, str] | str:
    try:
        return _stat(path)
    except OSError as e:
        return str(e.strerror or e)


def _catalog_from(headers: TileTable, config: Config, skipped: list[dict[str, str]], headers_read: int) -> Catalog:
    """Tile table from header rows: ``pattern`` groups extracted, dates parsed (once per distinct text)."""
    rx = re.compile(config.inputs.pattern)
    band: list[str | None] = []
    tile: list[str] = []
    date_text: list[str | None] = []
    for path in headers["path"]:
        m = rx.search(path.replace(os.sep, "/") if os.sep != "/" else path)
        groups = m.groupdict() if m is not None else {}
        band.append(groups.get("band"))
        tile.append(groups.get("tile") or "")
        date_text.append(groups.get("date"))
    matched = np.array([b is not None for b in band], dtype=bool)
    if not matched.any():
        raise ConfigError("inputs.pattern", f"none of the {len(headers)} input paths matches the pattern")
    keep = np.flatnonzero(matched)
    if len(keep) < len(headers):
        headers = headers.rows(keep)
        band, tile, date_text = [band[i] for i in keep], [tile[i] for i in keep], [date_text[i] for i in keep]
    if "tag_date" in headers:  # the file's DATE tag where the path has no date
        date_text = [
            d if d is not None else t if isinstance(t, str) else None
            for d, t in zip(date_text, headers["tag_date"], strict=True)
        ]
    texts, inverse = factorize([d or "" for d in date_text])
    parsed = []
    for k, text in enumerate(texts):
        if not text:
            parsed.append(datetime(1970, 1, 1))  # a single-date run without dates
            continue
        try:
            parsed.append(datetime.strptime(text, config.inputs.date_format))
        except ValueError as e:
            example = headers["path"][int(np.flatnonzero(inverse == k)[0])]
            raise ConfigError(
                "inputs.date_format", f"{example}: date {text!r} does not match {config.inputs.date_format!r} ({e})"
            ) from e
    tiles = headers.assign(
        band=_column("band", band),
        tile=_column("tile", tile),
        date=np.array(parsed, dtype="datetime64[ns]")[inverse],
    )
    tiles = finish_table(tiles, config, skipped)
    if config.execution.on_error == "fail" and skipped:
        first = skipped[0]
        raise TileReadError(first["path"], first["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    return Catalog(tiles=tiles, skipped=skipped, headers_read=headers_read)


def finish_table(tiles: TileTable, config: Config, skipped: list[dict[str, str]]) -> TileTable:
    """The table a run plans from: only the configured bands (an error naming the missing ones), one dtype per
    band (the majority; files of another are skipped and listed), nodata filled from the config where a file
    declares none."""
    if config.inputs.bands is not None:
        found = set(tiles["band"])
        missing = [b for b in config.inputs.bands if b not in found]
        if missing:
            raise ConfigError("inputs.bands", f"no input file carries band(s) {missing}; bands found: {sorted(found)}")
        wanted = set(config.inputs.bands)
        tiles = tiles.rows(np.fromiter((b in wanted for b in tiles["band"]), bool, len(tiles)))
    # A band's files must share one dtype: the majority wins, the others are skipped.
    keep = np.ones(len(tiles), dtype=bool)
    dtypes = tiles["dtype"]
    for rows in tiles.groups("band").values():
        counts = Counter(dtypes[rows])
        if len(counts) > 1:
            major = counts.most_common(1)[0][0]
            for i in rows[dtypes[rows] != major]:
                keep[i] = False
                skipped.append(
                    {
                        "path": tiles["path"][i],
                        "error": f"dtype {dtypes[i]} differs from band's other files ({major})",
                    }
                )
    if not keep.all():
        tiles = tiles.rows(keep)
    if not len(tiles):
        raise ConfigError("inputs.paths", "no usable input file remains (see the skipped list)")
    file_nodata = tiles["file_nodata"]
    fallback = np.nan if config.inputs.nodata is None else config.inputs.nodata
    tiles = tiles.assign(nodata=np.where(np.isnan(file_nodata), fallback, file_nodata)).select(TABLE_COLUMNS)
    paths = tiles["path"]
    if not (paths[1:] >= paths[:-1]).all():  # an index is stored sorted: no sort needed
        # Python's sort of a list: the order of NumPy's stable argsort of the objects, in ~0.4x its time.
        order = sorted(range(len(paths)), key=paths.tolist().__getitem__)
        tiles = tiles.rows(np.array(order, dtype=np.int64))
    return tiles
