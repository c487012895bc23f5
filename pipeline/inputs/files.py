"""The files source: ``inputs.paths`` globs, bucket listings and URLs -> header rows, kept in the Parquet
index between runs, then :mod:`pipeline.inputs.catalog` builds the tile table from them.

One row per usable file:

=============  ==============================================================
path           absolute path, or the object's URL (``s3://bucket/key``, ``https://...``)
band, tile     from the config ``pattern`` (``tile`` may be empty)
date           datetime64 from the ``date`` group (or the file's DATE tag)
crs            the file's CRS as a compact string (``EPSG:32632`` or WKT)
a,b,c,d,e,f    the affine geotransform (rasterio order)
width, height  pixels
xmin..ymax     bounds in the file's own CRS
dtype          band 1's dtype
file_nodata    band 1's nodata (NaN where the file declares none)
block_x/_y     internal block shape
overview_sizes each overview level's width and height as the file declares them, flat: [w0, h0, w1, h1]
size, mtime    bytes and ``st_mtime_ns`` (an object's last-modified, in ns), which decide re-reading
etag           an object's ETag (empty for a local file); with size and mtime, from the listing
               (the tile table's ``version``: ``etag:ETAG``, what :func:`pipeline.update` compares)
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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.config import is_url
from pipeline.errors import ConfigError, TileReadError
from pipeline.inputs.headers import fetch_headers, read_header
from pipeline.inputs.index import _load_index, write_index
from pipeline.inputs.read import input_errors
from pipeline.inputs.tiles import INDEX_COLUMNS, Catalog, TileTable, _column, factorize
from pipeline.report.progress import NoProgress

if TYPE_CHECKING:
    from pipeline.config import InputsConfig, StorageConfig

logger = logging.getLogger(__name__)


def find_inputs(inputs: InputsConfig, storage: StorageConfig) -> list[str]:
    """Glob ``inputs.paths`` (buckets listed with ``storage``) and keep the files whose path matches
    ``inputs.pattern``."""
    return _list_inputs(inputs, storage)[0]


def _list_inputs(
    inputs: InputsConfig, storage: StorageConfig, progress: NoProgress | None = None
) -> tuple[list[str], dict[str, tuple[int, int, str]]]:
    """(matching paths in sorted order, {url: (size, mtime_ns, etag)} of listed objects). Every entry of
    ``inputs.paths`` must match something: one that matches nothing is a config error naming it."""
    from pipeline.storage import list_objects, scheme

    progress = progress or NoProgress()
    progress.phase("listing", unit="files listed")
    found: set[str] = set()
    objects: dict[str, tuple[int, int, str]] = {}
    empty: list[str] = []
    for pattern in inputs.paths:
        kind = scheme(pattern)
        if kind == "s3":
            listed = list_objects(pattern, storage, on_page=progress.add)
            for url, size, mtime, etag in listed:
                objects[url] = (size, mtime, etag)
            hits = {url for url, *_ in listed}
        elif kind in ("http", "https"):
            hits = {pattern}
            progress.add()
        else:
            hits = set()
            for p in glob.iglob(pattern, recursive=True):
                if not os.path.isdir(p):
                    hits.add(os.path.abspath(p))
                    progress.add()
        if not hits:
            empty.append(pattern)
        found |= hits
    if empty:
        what = "no object" if all(scheme(p) == "s3" for p in empty) else "nothing"
        raise ConfigError(
            "inputs.paths",
            f"{what} matched {', '.join(map(repr, empty))}"
            + (f" (the other {len(inputs.paths) - len(empty)} matched {len(found)} files)" if found else "")
            + "; check the glob, or remove it (relative paths are relative to the config file's folder)",
        )
    files = sorted(found)
    rx = re.compile(inputs.pattern)
    matched = [p for p in files if rx.search(p.replace(os.sep, "/"))]
    if not matched:
        raise ConfigError(
            "inputs.pattern",
            f"{len(files)} files found but none matched the pattern (first: {files[0]})",
        )
    return matched, objects


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


def files_catalog(
    inputs: InputsConfig,
    storage: StorageConfig,
    *,
    io_concurrency: int | None = None,
    max_threads: int = 8,
    progress: NoProgress | None = None,
) -> Catalog:
    """Find the files, read headers (only new/changed ones when an index exists): the source's rows,
    for :func:`pipeline.inputs.catalog.build_catalog` to finish. Buckets are read with ``storage``;
    ``io_concurrency`` (``execution.io_concurrency``) sets the remote headers read at once
    (:func:`header_threads`), ``max_threads`` the local ones.

    With ``inputs.trust_index`` the index is the input list: no glob, no stat, no file opened.
    """
    index = _load_index(inputs.index, storage) if inputs.index else None
    if inputs.trust_index:
        if index is None:
            raise ConfigError("inputs.index", f"{inputs.index} is missing or unreadable; run `pipeline index`")
        return _catalog_from(index, inputs, [], headers_read=0)
    progress = progress or NoProgress()
    matched, stats = _list_inputs(inputs, storage, progress)
    skipped: list[dict[str, str]] = []
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
            return path, read_header(path, storage, inputs.gdal_env), None
        except TileReadError as e:
            return path, None, e.problem
        except input_errors() as e:  # a bad input; any other exception is a bug and fails the run
            return path, None, f"{type(e).__name__}: {e}"

    fresh = []
    if any(is_url(p) for p in to_read):
        from pipeline.inputs.read import cloud_env

        cloud_env(storage)  # the AWS session and GDAL's network counters: once, before the threads
    if to_read:
        import rasterio  # noqa: F401 - on this thread, before the pool's (`pipeline run` imports it lazily, without boto3)

        progress.phase("headers", len(to_read), "headers read")
        found: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        # A remote header is one small range GET that waits a round trip: many at once, parsed here
        # (headers.fetch_headers); what that cannot read, and local files (their first bytes parsed, or
        # GDAL's open: headers.read_header), are read on threads.
        objects = [p for p in to_read if p.lower().startswith("s3://")]
        on_threads = [p for p in to_read if not p.lower().startswith("s3://")]
        for path, header in fetch_headers(objects, storage, header_threads(io_concurrency)) if objects else ():
            if header is None:
                on_threads.append(path)
            else:
                found[path] = header
                progress.add()
        if on_threads:
            threads = header_threads(io_concurrency) if any(is_url(p) for p in on_threads) else max_threads
            with ThreadPoolExecutor(min(threads, len(on_threads))) as pool:
                for path, header, error in pool.map(read_one, on_threads):
                    progress.add()
                    if header is None:
                        errors[path] = str(error)
                    else:
                        found[path] = header
        for path in to_read:  # in listing order, whichever way each was read
            if path in errors:
                skipped.append({"path": path, "error": errors[path]})
            else:
                size, mtime, etag = stats[path]
                fresh.append({"path": path, **found[path], "size": size, "mtime": mtime, "etag": etag})
    parts = [TileTable.from_records(fresh, INDEX_COLUMNS)]
    if index is not None and keep_cached:
        cached = set(keep_cached)
        parts.append(index.rows(np.fromiter((p in cached for p in index["path"]), bool, len(index))))
    headers = TileTable.concat(parts)
    if inputs.index and (to_read or index is None or len(index) != len(headers)):
        write_index(inputs.index, headers, storage)
    catalog = _catalog_from(headers, inputs, skipped, headers_read=len(to_read))
    from pipeline.inputs import netstats

    catalog.network = netstats.take()
    return catalog


def header_threads(io_concurrency: int | None) -> int:
    """Remote headers read at once: ``io_concurrency`` (``execution.io_concurrency``) where set, else
    :data:`pipeline.inputs.iosizing.HEADERS_IN_FLIGHT`."""
    from pipeline.inputs.iosizing import HEADERS_IN_FLIGHT

    return io_concurrency or HEADERS_IN_FLIGHT


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


def _catalog_from(
    headers: TileTable, inputs: InputsConfig, skipped: list[dict[str, str]], headers_read: int
) -> Catalog:
    """Tile table from header rows: ``inputs.pattern`` groups extracted, dates parsed (once per distinct text)."""
    rx = re.compile(inputs.pattern)
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
            parsed.append(datetime.strptime(text, inputs.date_format))
        except ValueError as e:
            example = headers["path"][int(np.flatnonzero(inverse == k)[0])]
            raise ConfigError(
                "inputs.date_format", f"{example}: date {text!r} does not match {inputs.date_format!r} ({e})"
            ) from e
    tiles = headers.assign(
        band=_column("band", band),
        tile=_column("tile", tile),
        date=np.array(parsed, dtype="datetime64[ns]")[inverse],
    )
    nodata = headers["file_nodata"]
    return Catalog(
        tiles=tiles.assign(
            bidx=np.ones(len(tiles), dtype=np.int64),
            version=_column("version", [f"etag:{e}" if e else "" for e in headers["etag"].tolist()]),
            nodata=nodata.copy(),
            nodata_from=_column("nodata_from", np.where(np.isnan(nodata), "", "file")),
        ),
        skipped=skipped,
        headers_read=headers_read,
    )
