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
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from pipeline.config import Config, is_url
from pipeline.errors import ConfigError, TileReadError
from pipeline.inputs.read import input_errors

logger = logging.getLogger(__name__)

HEADER_COLUMNS = [
    "crs", "a", "b", "c", "d", "e", "f", "width", "height",
    "xmin", "ymin", "xmax", "ymax", "dtype", "file_nodata", "block_x", "block_y", "overviews",
]  # fmt: skip
INDEX_COLUMNS = ["path", *HEADER_COLUMNS, "tag_date", "size", "mtime", "etag"]
TABLE_COLUMNS = ["path", "band", "tile", "date", *HEADER_COLUMNS, "size", "mtime", "nodata"]
_FLOAT_COLUMNS = {"a", "b", "c", "d", "e", "f", "xmin", "ymin", "xmax", "ymax", "file_nodata", "nodata"}
_INT_COLUMNS = {"width", "height", "block_x", "block_y", "size", "mtime"}


def _column(name: str, values: Iterable[Any]) -> np.ndarray:
    """One column as its NumPy type: float64, int64, datetime64[ns] (``date``), else objects (strings,
    None, and the ``overviews`` lists, one per cell)."""
    values = list(values)
    if name in _FLOAT_COLUMNS:
        return np.array([np.nan if v is None else v for v in values], dtype="f8")
    if name in _INT_COLUMNS:
        return np.array(values, dtype=np.int64)
    if name == "date":
        return np.array(values, dtype="datetime64[ns]")
    out = np.empty(len(values), dtype=object)  # filled, not np.array(...): equal-length lists stay cells
    out[:] = [[int(f) for f in v] for v in values] if name == "overviews" else values
    return out


def factorize(values: Sequence[Any] | np.ndarray) -> tuple[list[Any], np.ndarray]:
    """The distinct values in sorted order, and each value's position among them. By hashing: sorting
    192,000 path-like strings took NumPy ~0.3 s a column."""
    items = values.tolist() if isinstance(values, np.ndarray) and values.dtype == object else list(values)
    first: dict[Any, int] = dict.fromkeys(items, 0)  # distinct values in order of appearance, at C speed
    for k, v in enumerate(first):
        first[v] = k
    seen = np.fromiter(map(first.__getitem__, items), np.int64, len(items))
    distinct = list(first)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return [distinct[k] for k in order], rank[seen]


class TileTable:
    """Named NumPy columns of equal length, with the few table operations the catalog and the planner
    use. Not pandas: importing it was ~0.3 s of the driver's ~2 s start; :meth:`to_pandas` gives one."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        if len({len(v) for v in columns.values()}) > 1:
            raise ValueError(f"columns of different lengths: { {k: len(v) for k, v in columns.items()} }")
        self._columns = dict(columns)
        self._codes: dict[str, tuple[list[Any], np.ndarray]] = {}

    @classmethod
    def from_records(cls, rows: list[dict[str, Any]], columns: list[str]) -> TileTable:
        """A table of ``columns`` from row dicts (a missing key is None)."""
        return cls({c: _column(c, (r.get(c) for r in rows)) for c in columns})

    @classmethod
    def concat(cls, tables: list[TileTable]) -> TileTable:
        """Rows of ``tables`` one after the other (the columns of the first)."""
        names = tables[0].columns
        return cls({c: np.concatenate([t[c] for t in tables]) for c in names})

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def __len__(self) -> int:
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def rows(self, which: np.ndarray) -> TileTable:
        """The rows a boolean mask or an index array selects, in that order."""
        return TileTable({c: v[which] for c, v in self._columns.items()})

    def select(self, names: list[str]) -> TileTable:
        return TileTable({c: self._columns[c] for c in names})

    def assign(self, **columns: np.ndarray) -> TileTable:
        return TileTable({**self._columns, **columns})

    def row(self, i: int) -> dict[str, Any]:
        return {c: v[i] for c, v in self._columns.items()}

    def codes(self, name: str) -> tuple[list[Any], np.ndarray]:
        """Column ``name`` factorised (:func:`factorize`); once per table and column (columns are not
        modified in place)."""
        if name not in self._codes:
            self._codes[name] = factorize(self._columns[name])
        return self._codes[name]

    def groups(self, name: str) -> dict[Any, np.ndarray]:
        """Row indices of each distinct value of column ``name``, values in sorted order."""
        values, codes = self.codes(name)
        order = np.argsort(codes.astype(np.uint16) if len(values) <= 1 << 16 else codes, kind="stable")  # radix
        bounds = np.searchsorted(codes[order], np.arange(len(values) + 1))
        return {v: order[bounds[k] : bounds[k + 1]] for k, v in enumerate(values)}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self._columns)


@dataclass
class Catalog:
    tiles: TileTable
    """The tile table, sorted by path (the order ``fuse: first/last`` follows)."""
    skipped: list[dict[str, str]] = field(default_factory=list)
    """Files matched but unusable: ``{path, error}``."""
    headers_read: int = 0
    """How many file headers were opened this time (the rest came from the index)."""
    band_attrs: dict[str, dict[str, float]] = field(default_factory=dict)
    """Extra attributes per output band (STAC ``raster:bands`` scale/offset as CF ``scale_factor``/``add_offset``)."""
    network: dict[str, Any] | None = None
    """What the header reads cost on the network (:func:`pipeline.inputs.netstats.take`); None: all local."""


def find_inputs(config: Config) -> list[str]:
    """Glob ``inputs.paths`` and keep the files whose path matches ``inputs.pattern``."""
    return _list_inputs(config)[0]


def _list_inputs(config: Config) -> tuple[list[str], dict[str, tuple[int, int, str]], list[str]]:
    """(matching paths in sorted order, {url: (size, mtime_ns, etag)} of listed objects, s3 keys named
    without wildcards that do not exist)."""
    from pipeline.storage import list_objects, scheme

    found: set[str] = set()
    objects: dict[str, tuple[int, int, str]] = {}
    missing: list[str] = []
    for pattern in config.inputs.paths:
        kind = scheme(pattern)
        if kind == "s3":
            listed = list_objects(pattern, config.storage)
            if not listed and not any(ch in pattern for ch in "*?["):
                missing.append(pattern)
            for url, size, mtime, etag in listed:
                objects[url] = (size, mtime, etag)
                found.add(url)
        elif kind in ("http", "https"):
            found.add(pattern)
        else:
            found.update(os.path.abspath(p) for p in glob.glob(pattern, recursive=True) if not os.path.isdir(p))
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


def build_catalog(config: Config, max_threads: int = 8) -> Catalog:
    """Find inputs, read headers (only new/changed ones when an index exists), build the table.

    With ``inputs.trust_index`` the index is the input list: no glob, no stat, no file opened.
    """
    if config.inputs.stac or config.inputs.stac_search:
        from pipeline.inputs.stac import build_stac_catalog

        return build_stac_catalog(config, max_threads)
    index = _load_index(config.inputs.index, config.storage) if config.inputs.index else None
    if config.inputs.trust_index:
        if index is None:
            raise ConfigError("inputs.index", f"{config.inputs.index} is missing or unreadable; run `pipeline index`")
        return _catalog_from(index, config, [], headers_read=0)
    matched, stats, missing = _list_inputs(config)
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
        with ThreadPoolExecutor(min(max_threads, len(to_read))) as pool:
            for path, header, error in pool.map(read_one, to_read):
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
        date_text = [d if d is not None else t if isinstance(t, str) else None
                     for d, t in zip(date_text, headers["tag_date"], strict=True)]  # fmt: skip
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
    tiles = _finish_table(tiles, config, skipped)
    if config.execution.on_error == "fail" and skipped:
        first = skipped[0]
        raise TileReadError(first["path"], first["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    return Catalog(tiles=tiles, skipped=skipped, headers_read=headers_read)


def _finish_table(tiles: TileTable, config: Config, skipped: list[dict[str, str]]) -> TileTable:
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
                skipped.append({
                    "path": tiles["path"][i],
                    "error": f"dtype {dtypes[i]} differs from band's other files ({major})",
                })  # fmt: skip
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


def _load_index(path: str, storage: Any = None) -> TileTable | None:
    import pyarrow.parquet as pq

    source: Any = path
    if is_url(path):  # an index in a bucket: one GET
        import pyarrow as pa

        from pipeline.storage import read_object

        data = read_object(path, storage)
        if data is None:
            return None
        source = pa.BufferReader(data)
    elif not os.path.exists(path):
        return None
    try:
        table = pq.ParquetFile(source).read()  # not read_table: it imports pyarrow.dataset, which imports pandas
    except Exception as e:  # noqa: BLE001
        logger.warning("tile index %s is unreadable (%s); rebuilding it", path, e)
        return None
    if set(INDEX_COLUMNS) - set(table.column_names):
        logger.warning("tile index %s has another layout; rebuilding it", path)
        return None
    columns = {name: _numpy_column(table.column(name)) for name in INDEX_COLUMNS}
    for name in _FLOAT_COLUMNS & set(INDEX_COLUMNS):
        columns[name] = columns[name].astype("f8")
    for name in _INT_COLUMNS & set(INDEX_COLUMNS):
        columns[name] = columns[name].astype(np.int64)
    return TileTable(columns)


def _numpy_column(column: Any) -> np.ndarray:
    """An Arrow column as NumPy, not through Arrow's ``to_numpy``, which imports pandas where it is
    installed (~0.3 s of the driver's start): numbers from their buffers, anything else as objects."""
    import pyarrow as pa

    arr = column.combine_chunks()
    kind = "f" if pa.types.is_floating(arr.type) else "i" if pa.types.is_signed_integer(arr.type) else None
    if kind is None:  # strings (None where null), overviews lists
        out = np.empty(len(arr), dtype=object)
        out[:] = arr.to_pylist()
        return out
    dtype = np.dtype(f"<{kind}{arr.type.bit_width // 8}")
    values = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))[arr.offset :]
    if arr.null_count:
        bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
        valid = bits[arr.offset : arr.offset + len(arr)].astype(bool)
        values = np.where(valid, values.astype("f8"), np.nan)
    return values


def write_index(path: str, table: TileTable, storage: Any = None) -> None:
    """The tile index as Parquet, sorted by path, replaced whole (a reader never sees half a file): a
    local file, or an object (``s3://``; one PUT, which S3 makes visible whole)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = table.rows(np.argsort(table["path"], kind="stable"))
    types = {"overviews": pa.list_(pa.int64()), "tag_date": pa.string(), "etag": pa.string()}
    arrow = pa.table({c: pa.array(list(table[c]) if table[c].dtype == object else table[c], type=types.get(c))
                      for c in INDEX_COLUMNS})  # fmt: skip
    if is_url(path):
        import io

        from pipeline.storage import write_object

        buffer = io.BytesIO()
        pq.write_table(arrow, buffer)
        write_object(path, buffer.getvalue(), storage)
        logger.info("tile index %s: %d files", path, len(table))
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(arrow, tmp)
    os.replace(tmp, path)
    logger.info("tile index %s: %d files", path, len(table))
