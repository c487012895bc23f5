"""STAC items in, the catalog's tile table out: one row per (item, band asset).

Sources (``inputs``): ``stac`` names an ItemCollection (``.json``), a static catalog
(``catalog.json``, followed to its items by pystac) or a stac-geoparquet file (``.parquet``, read
column-wise with pyarrow, never turned into Python dicts); ``stac_search`` queries a STAC API with
pystac-client. ``assets`` maps band names to asset keys (None: every raster asset, named by its key);
``groupby`` turns item times into time steps.

Rules, as odc-stac applies them:

* The projection extension (``proj:code`` or ``proj:epsg``, ``proj:transform``, ``proj:shape``; on the
  asset or the item) and ``raster:bands`` ``data_type`` plan an asset without opening it. An asset
  lacking either is opened (its header read as :func:`pipeline.inputs.catalog.read_header` does), and
  ``Catalog.headers_read`` counts them.
* ``raster:bands[0]`` gives ``nodata``, ``data_type``, ``scale`` and ``offset``; scale and offset become
  the output band's CF attributes ``scale_factor``/``add_offset`` (values are not altered).
* Assets planned from metadata have no known overviews (read at full resolution: slower at coarse
  grids, never wrong) and no known block shape (``block_x/_y`` = 0); opened ones get the real values.
* Time is ``datetime`` (else ``start_datetime``). ``groupby``: ``solar_day`` (odc-stac's: UTC time plus
  longitude/15 hours, date part; longitude = centre of the item's bbox; the step is that date at 00:00),
  ``time`` (the exact timestamp), ``none`` (one step, at the earliest time).
* Overlapping assets of one step fuse in href order, as globbed files fuse in path order, so a cube does
  not depend on how its tiles were found.
* An item without a wanted asset is skipped and listed (``{path: item id, error}``); a broken href is
  listed when its header is read or, for assets planned from metadata, when a task reads it.
* Relative hrefs resolve against the item's ``self`` link, else the ItemCollection/catalog/parquet file;
  ``s3://`` and ``https://`` hrefs stay URLs.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

import numpy as np

from pipeline.config import Config, is_url
from pipeline.errors import ConfigError, TileReadError
from pipeline.inputs.catalog import TABLE_COLUMNS, Catalog, TileTable, _finish_table, read_header
from pipeline.inputs.read import input_errors

logger = logging.getLogger(__name__)

GROUPBY = ("solar_day", "time", "none")
_RASTER_TYPES = ("image/tiff", "image/vnd.stac.geotiff", "image/jp2", "application/x-hdf")
_NOT_DATA_ROLES = {"thumbnail", "overview", "metadata"}
_AFFINE = ("a", "b", "c", "d", "e", "f")
ASSET_COLUMNS = ["href", "band", "item", "time", "lon", "crs", *_AFFINE, "width", "height",
                 "dtype", "nodata", "scale", "offset", "size"]  # fmt: skip
"""The asset table both readers (dicts and Arrow) produce: one row per (item, band); unknown numbers
NaN (``width``/``height``: -1), unknown strings None."""


# --- pure rules ----------------------------------------------------------------------------------------


def compute_solar_day(times: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """odc-stac's solar day: the date part of UTC ``times`` + ``lon``/15 hours (datetime64[D])."""
    shift = np.round(np.asarray(lon, dtype="f8") * 240e9).astype(np.int64).astype("timedelta64[ns]")
    return (np.asarray(times, dtype="datetime64[ns]") + shift).astype("datetime64[D]")


def compute_time_steps(times: np.ndarray, lon: np.ndarray, groupby: str) -> np.ndarray:
    """Each asset's time step (datetime64[ns]): its solar day at 00:00, its exact time, or one step."""
    times = np.asarray(times, dtype="datetime64[ns]")
    if groupby == "solar_day":
        return compute_solar_day(times, lon).astype("datetime64[ns]")
    if groupby == "time":
        return times
    if groupby == "none":
        return np.full(len(times), times.min() if len(times) else np.datetime64(0, "ns"), dtype="datetime64[ns]")
    raise ValueError(f"groupby must be one of {GROUPBY}, not {groupby!r}")


def resolve_href(href: str, base: str | None) -> str:
    """An asset href as the readers take it: URLs kept, ``file://`` stripped, relative ones joined to
    ``base`` (a file path or URL of the document they came from), local paths made absolute."""
    if href.startswith("file://"):
        href = href[len("file://") :]
    if is_url(href):
        return href
    if not os.path.isabs(href) and base:
        if is_url(base) and not base.startswith("file://"):
            return urljoin(base, href)
        base = base[len("file://") :] if base.startswith("file://") else base
        href = os.path.join(os.path.dirname(base), href)
    return os.path.normpath(os.path.abspath(href))


def is_raster_asset(asset: dict[str, Any]) -> bool:
    """A data raster of one band: a raster media type or raster/proj fields, no thumbnail/metadata role,
    at most one entry in ``raster:bands``."""
    if _NOT_DATA_ROLES & set(asset.get("roles") or ()):
        return False
    if len(asset.get("raster:bands") or ()) > 1:
        return False
    kind = str(asset.get("type") or "")
    return kind.startswith(_RASTER_TYPES) or "raster:bands" in asset or "proj:shape" in asset


def _nodata(value: Any) -> float:
    return float("nan") if value is None else float(value)  # "nan", "inf" and numbers alike


def _parse_time(props: dict[str, Any]) -> np.datetime64:
    text = props.get("datetime") or props.get("start_datetime")
    if not text:
        raise ValueError("has no datetime or start_datetime")
    t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return np.datetime64(t, "ns")


def _epsg_code(fields: dict[str, Any]) -> str | None:
    if fields.get("proj:code"):
        return str(fields["proj:code"])
    if fields.get("proj:epsg") is not None:
        return f"EPSG:{int(fields['proj:epsg'])}"
    return None


def asset_rows_from_items(
    items: Iterable[dict[str, Any]], assets: dict[str, str] | None, base: str | None, skipped: list[dict[str, str]]
) -> dict[str, list[Any]]:
    """The asset table (lists) from item dicts; items lacking a wanted asset go to ``skipped``."""
    rows: dict[str, list[Any]] = {c: [] for c in ASSET_COLUMNS}
    items = list(items)
    why = "wanted by inputs.assets"
    if assets is None:  # every raster asset any item has, by its key
        keys = {k for it in items for k, a in (it.get("assets") or {}).items() if is_raster_asset(a)}
        assets = {k: k for k in sorted(keys)}
        why = "inputs.assets is null: every raster asset is wanted; set it to choose"
    for item in items:
        item_id = str(item.get("id"))
        props = item.get("properties") or {}
        found = item.get("assets") or {}
        try:
            time = _parse_time(props)
        except ValueError as e:
            skipped.append({"path": item_id, "error": f"STAC item {e}"})
            continue
        missing = sorted(k for k in assets.values() if not (found.get(k) or {}).get("href"))
        if missing:
            skipped.append({"path": item_id, "error": f"STAC item has no asset {', '.join(map(repr, missing))} "
                            f"({why}); it has {sorted(found)}"})  # fmt: skip
            continue
        bbox = item.get("bbox") or [np.nan] * 4
        lon = (bbox[0] + bbox[2]) / 2
        self_href = next((ln.get("href") for ln in item.get("links") or () if ln.get("rel") == "self"), None)
        for band, key in assets.items():
            a = {**props, **found[key]}  # asset fields override the item's
            shape = a.get("proj:shape")
            transform = a.get("proj:transform")
            rb = (a.get("raster:bands") or [{}])[0]
            rows["href"].append(resolve_href(str(a["href"]), self_href or base))
            rows["band"].append(band)
            rows["item"].append(item_id)
            rows["time"].append(time)
            rows["lon"].append(lon)
            rows["crs"].append(_epsg_code(a))
            for k, name in enumerate(_AFFINE):
                rows[name].append(float(transform[k]) if transform and len(transform) >= 6 else np.nan)
            rows["height"].append(int(shape[0]) if shape else -1)
            rows["width"].append(int(shape[1]) if shape else -1)
            rows["dtype"].append(rb.get("data_type"))
            rows["nodata"].append(_nodata(rb.get("nodata")))
            rows["scale"].append(_nodata(rb.get("scale")))
            rows["offset"].append(_nodata(rb.get("offset")))
            rows["size"].append(int(a.get("file:size") or 0))
    return rows


# --- readers -------------------------------------------------------------------------------------------


def read_item_dicts(source: str) -> tuple[list[dict[str, Any]], str]:
    """Items of an ItemCollection or a static catalog (pystac), their hrefs made absolute; the base."""
    import json

    import pystac

    try:
        with open(source) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError("inputs.stac", f"cannot read {source}: {e}") from e
    if doc.get("type") == "FeatureCollection":
        return list(doc.get("features") or []), source
    if doc.get("type") == "Feature":
        return [doc], source
    if doc.get("type") in ("Catalog", "Collection"):
        root = pystac.read_file(source)
        items = []
        for item in root.get_items(recursive=True):  # type: ignore[attr-defined]
            item.make_asset_hrefs_absolute()
            items.append(item.to_dict(include_self_link=False, transform_hrefs=False))
        return items, source
    raise ConfigError("inputs.stac", f"{source} is neither an ItemCollection, an Item nor a catalog")


def search_item_dicts(search: dict[str, Any]) -> list[dict[str, Any]]:
    """Items a STAC API search returns (pystac-client), as dicts."""
    import pystac_client

    params = {k: v for k, v in search.items() if k != "url" and v is not None}
    try:
        client = pystac_client.Client.open(search["url"])
        return list(client.search(**params).items_as_dicts())
    except Exception as e:  # noqa: BLE001 - network, HTTP and API errors alike
        raise ConfigError("inputs.stac_search", f"the search at {search['url']} failed: {type(e).__name__}: {e}") from e


_ITEM_FIELDS = ("proj:code", "proj:epsg", "proj:transform", "proj:shape", "raster:bands")
_ASSET_FIELDS = ("href", "type", "roles", *_ITEM_FIELDS, "file:size")


def read_geoparquet_table(source: str, storage: Any = None, assets: dict[str, str] | None = None) -> Any:
    """The columns of a stac-geoparquet file that planning uses (of the wanted assets only), as an Arrow
    table; local, or ``s3://`` through pyarrow's S3 client."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def read(f: Any) -> Any:
        pf = pq.ParquetFile(f)
        schema = pf.schema_arrow
        if "assets" not in schema.names:
            raise ConfigError("inputs.stac", f"{source} has no 'assets' column: not stac-geoparquet")
        columns = [c for c in ("id", "datetime", "start_datetime", "bbox", *_ITEM_FIELDS) if c in schema.names]
        struct = schema.field("assets").type
        keys = {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}
        wanted = sorted(keys) if assets is None else sorted(set(assets.values()) & set(keys))
        if any("." in k for k in wanted):  # a dotted key cannot be named as a nested column
            return pf.read(columns=[*columns, "assets"])
        fields = {key: {keys[key].field(i).name for i in range(keys[key].num_fields)} for key in wanted}
        names: tuple[str, ...] = _ASSET_FIELDS
        raster = None
        if assets is None and wanted:  # which assets are rasters, from the rows asset_rows_from_arrow looks at
            head = [f"assets.{key}.{name}" for key in wanted for name in _ASSET_FIELDS if name in fields[key]]
            batches, rows = [], 0
            for batch in pf.iter_batches(batch_size=_RASTER_SAMPLE, columns=head):
                batches.append(batch.column("assets"))
                rows += len(batch)
                if rows >= _RASTER_SAMPLE:
                    break
            wanted = raster = _raster_keys(pa.chunked_array(batches), _RASTER_SAMPLE) if batches else []
            names = tuple(n for n in _ASSET_FIELDS if n not in ("type", "roles"))  # only that choice reads them
        for key in wanted:
            columns += [f"assets.{key}.{name}" for name in names if name in fields[key]]
        table = pf.read(columns=columns)
        if raster is not None:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), _RASTER_KEY: json.dumps(raster)})
        return table

    try:
        if source.startswith("s3://"):
            from pyarrow import fs

            s3 = fs.S3FileSystem(
                endpoint_override=getattr(storage, "endpoint_url", None),
                region=getattr(storage, "region", None) or "us-east-1",
                anonymous=bool(getattr(storage, "anonymous", False)),
            )
            with s3.open_input_file(source[len("s3://") :]) as f:
                return read(f)
        return read(source)
    except ConfigError:
        raise
    except (OSError, ValueError) as e:
        raise ConfigError("inputs.stac", f"cannot read stac-geoparquet {source}: {e}") from e


def _f8(arr: Any) -> np.ndarray:
    """An Arrow array as float64 NumPy, NaN where null; from the buffers, not through ``fill_null`` or
    ``to_numpy``, which import pandas (~1 s)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = pc.cast(arr, pa.float64())
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    return _values(arr, "f8", np.nan)


def _values(arr: Any, dtype: str, null: Any) -> np.ndarray:
    """A primitive Arrow array's values as NumPy ``dtype`` (a copy), ``null`` where null."""
    out = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))[arr.offset :].copy()
    if arr.null_count:
        bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
        out[~bits[arr.offset : arr.offset + len(arr)].astype(bool)] = null
    return out


def _mask(values: np.ndarray) -> Any:
    """A boolean NumPy array as an Arrow one, from its packed bits: ``pa.array`` of a NumPy array imports
    pandas where it is installed (~0.4 s)."""
    import pyarrow as pa

    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def _strings(arr: Any) -> np.ndarray:
    """An Arrow string array as NumPy objects (None where null), through its dictionary of distinct values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    values = np.empty(len(enc.dictionary) + 1, dtype=object)
    values[:-1] = enc.dictionary.to_pylist()
    return values[np.nan_to_num(_f8(enc.indices), nan=-1).astype(np.int64)]


def _list_starts(arr: Any, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """For a list array: rows with at least ``width`` elements, and where each of those rows starts in
    ``arr.values``; None for other list layouts (fixed-size lists)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return None
    ok = np.nan_to_num(_f8(pc.list_value_length(arr)), nan=0) >= width
    offsets = arr.offsets  # this array's len + 1 offsets into the unsliced ``values``
    return ok, _values(offsets, f"i{offsets.type.bit_width // 8}", 0)[:-1][ok]


def _list_matrix(arr: Any, width: int) -> np.ndarray:
    """The first ``width`` values of each list as an (n, width) float matrix; NaN rows where shorter or null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    out = np.full((len(arr), width), np.nan)
    starts = _list_starts(arr, width)
    if starts is not None:  # straight from the offsets and the values: no per-list slicing
        ok, first = starts
        if ok.any():
            out[ok] = _f8(arr.values)[first[:, None] + np.arange(width)]
        return out
    ok = np.nan_to_num(_f8(pc.list_value_length(arr)), nan=0) >= width
    if ok.any():
        flat = pc.list_flatten(pc.list_slice(pc.filter(arr, _mask(ok)), 0, width))
        out[ok] = _f8(flat).reshape(-1, width)
    return out


def _first_struct(arr: Any) -> tuple[np.ndarray, Any, np.ndarray]:
    """Rows whose list has an element, and those first elements (``raster:bands[0]``): a struct array
    and where in it each of those rows' first element is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    starts = _list_starts(arr, 1)
    if starts is not None:  # the values array itself, indexed: no slicing or taking of structs
        return starts[0], arr.values, starts[1]
    ok = np.nan_to_num(_f8(pc.list_value_length(arr)), nan=0) >= 1
    return ok, pc.list_flatten(pc.list_slice(pc.filter(arr, _mask(ok)), 0, 1)), np.arange(int(ok.sum()))


_RASTER_SAMPLE = 1000
"""With ``inputs.assets`` null, an asset key is a raster's if its first asset in this many items is one."""
_RASTER_KEY = b"pipeline:raster_assets"


def _raster_keys(structs: Any, rows: int) -> list[str]:
    """The keys of an ``assets`` struct column whose first asset in its first ``rows`` rows is a raster
    (:func:`is_raster_asset`), sorted."""
    import pyarrow.compute as pc

    out = []
    for key in sorted(structs.type.field(i).name for i in range(structs.type.num_fields)):
        sub = pc.struct_field(structs, [key])
        first = next((v for v in sub.slice(0, rows).to_pylist() if v is not None), None)
        if first is not None and is_raster_asset({k: v for k, v in first.items() if v is not None}):
            out.append(key)
    return out


def asset_rows_from_arrow(
    table: Any, assets: dict[str, str] | None, base: str, skipped: list[dict[str, str]]
) -> dict[str, np.ndarray]:
    """The asset table from a stac-geoparquet table, column by column: no per-item Python objects but
    the ids and hrefs. Item-level ``proj:*``/``raster:bands`` columns fill what an asset lacks."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    cols = set(table.column_names)
    if "assets" not in cols:
        raise ConfigError("inputs.stac", f"{base} has no 'assets' column: not stac-geoparquet")
    ids = _strings(table.column("id").combine_chunks())
    time_col = table.column("datetime") if "datetime" in cols else None
    if time_col is None or (time_col.null_count and "start_datetime" in cols):
        start = table.column("start_datetime")
        time_col = start if time_col is None else pc.coalesce(time_col, pc.cast(start, time_col.type))
    if time_col is None:
        raise ConfigError("inputs.stac", f"{base} has neither a datetime nor a start_datetime column")
    ns = pc.cast(pc.cast(time_col, pa.timestamp("ns", tz=getattr(time_col.type, "tz", None))), pa.int64())
    ns = ns.combine_chunks() if isinstance(ns, pa.ChunkedArray) else ns
    times = _values(ns, "i8", np.iinfo(np.int64).min).view("datetime64[ns]")
    lon = np.full(n, np.nan)
    if "bbox" in cols:
        bbox = table.column("bbox").combine_chunks()
        if pa.types.is_struct(bbox.type):
            lon = (_f8(pc.struct_field(bbox, ["xmin"])) + _f8(pc.struct_field(bbox, ["xmax"]))) / 2
        else:
            box = _list_matrix(bbox, 4)
            lon = (box[:, 0] + box[:, 2]) / 2
    structs = table.column("assets")  # not combined: each field used is, when it is used
    keys = [structs.type.field(i).name for i in range(structs.type.num_fields)]
    if assets is None:
        chosen = (table.schema.metadata or {}).get(_RASTER_KEY)  # read_geoparquet_table chose them
        wanted = {k: k for k in (json.loads(chosen) if chosen else _raster_keys(structs, _RASTER_SAMPLE))}
    else:
        wanted = dict(assets)
    bad = np.isnat(times)
    why = np.full(n, "", dtype=object)
    why[bad] = "STAC item has no datetime or start_datetime"
    subs = {}
    for band, key in wanted.items():
        sub = pc.struct_field(structs, [key]) if key in keys else pa.nulls(n, pa.struct([("href", pa.string())]))
        subs[band] = sub
        missing = _f8(pc.is_null(pc.struct_field(sub, ["href"]) if "href" in [f.name for f in sub.type] else sub))
        missing = missing.astype(bool) & ~bad
        why[missing] = [f"{w}; " if w else "" for w in why[missing]]
        why[missing] += f"STAC item has no asset {key!r} " + (
            "(wanted by inputs.assets)" if assets else "(inputs.assets is null: every raster asset is wanted)"
        )
        bad |= missing
    for k in np.flatnonzero(bad):
        skipped.append({"path": str(ids[k]), "error": str(why[k])})
    good = np.flatnonzero(~bad)

    def item_level(name: str) -> Any:
        return table.column(name).combine_chunks() if name in cols else None

    parts = []
    for band, sub in subs.items():
        fields = {sub.type.field(i).name for i in range(sub.type.num_fields)}

        def get(name: str, fields: set[str] = fields, sub: Any = sub) -> Any:
            return pc.struct_field(sub, [name]) if name in fields else None

        crs = np.full(n, None, dtype=object)
        for src in (item_level("proj:epsg"), get("proj:epsg"), item_level("proj:code"), get("proj:code")):
            if src is None:
                continue
            if pa.types.is_integer(src.type):
                codes = _f8(src)
                has = ~np.isnan(codes)
                crs[has] = [f"EPSG:{int(c)}" for c in codes[has]]
            else:
                vals = _strings(src)
                has = vals != None  # noqa: E711 - element-wise
                crs[has] = vals[has]
        affine = np.full((n, 6), np.nan)
        shape = np.full((n, 2), np.nan)
        for src in (item_level("proj:transform"), get("proj:transform")):
            if src is not None:
                m = _list_matrix(src, 6)
                has = np.isfinite(m).all(axis=1)
                affine[has] = m[has]
        for src in (item_level("proj:shape"), get("proj:shape")):
            if src is not None:
                m = _list_matrix(src, 2)
                has = np.isfinite(m).all(axis=1)
                shape[has] = m[has]
        rb = {"data_type": np.full(n, None, dtype=object), "nodata": np.full(n, np.nan),
              "scale": np.full(n, np.nan), "offset": np.full(n, np.nan)}  # fmt: skip
        for src in (item_level("raster:bands"), get("raster:bands")):
            if src is None:
                continue
            ok, first, at = _first_struct(src)
            names = {first.type.field(i).name for i in range(first.type.num_fields)}
            for name in names & set(rb):
                v = pc.struct_field(first, [name])
                vals = (_strings(v) if name == "data_type" else _f8(v))[at]
                has = vals != None if name == "data_type" else ~np.isnan(vals)  # noqa: E711
                idx = np.flatnonzero(ok)[has]
                rb[name][idx] = vals[has]
        size = np.nan_to_num(_f8(get("file:size")), nan=0) if get("file:size") is not None else np.zeros(n)
        href_col = pc.struct_field(sub, ["href"]) if "href" in fields else pa.nulls(n, pa.string())
        urls = pc.and_(pc.match_substring(href_col, "://"), pc.invert(pc.starts_with(href_col, "file://")))
        all_urls = pc.all(pc.filter(urls, _mask(~bad))).as_py() is not False
        hrefs = np.empty(len(good), dtype=object)
        hrefs[:] = pc.filter(href_col, _mask(~bad)).to_pylist()
        if not all_urls:  # relative or local paths: resolved one by one
            hrefs[:] = [resolve_href(str(h), base) for h in hrefs]
        part = {
            "href": hrefs, "band": np.full(len(good), band, dtype=object), "item": ids[good],
            "time": times[good], "lon": lon[good], "crs": crs[good],
            **{c: affine[good, j] for j, c in enumerate(_AFFINE)},
            "height": np.nan_to_num(shape[good, 0], nan=-1).astype(np.int64),
            "width": np.nan_to_num(shape[good, 1], nan=-1).astype(np.int64),
            "dtype": rb["data_type"][good], "nodata": rb["nodata"][good], "scale": rb["scale"][good],
            "offset": rb["offset"][good], "size": size[good].astype(np.int64),
        }  # fmt: skip
        parts.append(part)
    if not parts:
        return {c: np.empty(0) for c in ASSET_COLUMNS}
    return {c: np.concatenate([p[c] for p in parts]) for c in ASSET_COLUMNS}


# --- the catalog ---------------------------------------------------------------------------------------


def _as_arrays(rows: dict[str, Sequence[Any]]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for c in ASSET_COLUMNS:
        v = rows[c]
        if isinstance(v, np.ndarray):
            out[c] = v
        elif c == "time":
            out[c] = np.array(v, dtype="datetime64[ns]")
        elif c in ("width", "height", "size"):
            out[c] = np.array(v, dtype=np.int64)
        elif c in ("href", "band", "item", "crs", "dtype"):
            out[c] = np.empty(len(v), dtype=object)
            out[c][:] = list(v)
        else:
            out[c] = np.array(v, dtype="f8")
    return out


def load_asset_rows(config: Config) -> tuple[dict[str, np.ndarray], list[dict[str, str]]]:
    """The configured STAC source's asset table and the items skipped on the way."""
    i = config.inputs
    skipped: list[dict[str, str]] = []
    if i.stac_search:
        rows: dict[str, Any] = asset_rows_from_items(search_item_dicts(dict(i.stac_search)), i.assets, None, skipped)
    elif i.stac and re.search(r"\.(geo)?parquet$", i.stac, re.I):
        table = read_geoparquet_table(i.stac, config.storage, i.assets)
        rows = asset_rows_from_arrow(table, i.assets, i.stac, skipped)
    elif i.stac:
        items, base = read_item_dicts(i.stac)
        rows = asset_rows_from_items(items, i.assets, base, skipped)
    else:
        raise ConfigError("inputs.stac", "no STAC source given")
    return _as_arrays(rows), skipped


def _read_headers(hrefs: list[str], max_threads: int) -> list[tuple[dict[str, Any] | None, str | None]]:
    def one(href: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return read_header(href), None
        except TileReadError as e:
            return None, e.problem
        except input_errors() as e:  # a bad input; any other exception is a bug and fails the run
            return None, f"{type(e).__name__}: {e}"

    if not hrefs:
        return []
    with ThreadPoolExecutor(min(max_threads, len(hrefs))) as pool:
        return list(pool.map(one, hrefs))


def compute_band_attrs(rows: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """``scale_factor``/``add_offset`` per band from ``raster:bands`` (the first asset in href order;
    a band whose assets disagree is logged)."""
    out: dict[str, dict[str, float]] = {}
    for band in sorted(set(rows["band"])):
        sel = np.flatnonzero(rows["band"] == band)
        attrs = {}
        for col, name in (("scale", "scale_factor"), ("offset", "add_offset")):
            values = rows[col][sel]
            if np.isnan(values).all():
                continue
            if len(np.unique(values)) > 1:  # the first in href order
                values = values[np.argsort(rows["href"][sel], kind="stable")]
            known = values[~np.isnan(values)]
            if len(known):
                attrs[name] = float(known[0])
                if len(np.unique(known)) > 1 or len(known) < len(values):
                    logger.warning("band %s: raster:bands %s differs between assets; recording %s", band, col,
                                   known[0])  # fmt: skip
        if attrs:
            out[band] = attrs
    return out


def build_stac_catalog(config: Config, max_threads: int = 8) -> Catalog:
    """The tile table of the configured STAC items (see the module docstring)."""
    rows, skipped = load_asset_rows(config)
    n = len(rows["href"])
    if not n:
        raise ConfigError("inputs.stac_search" if config.inputs.stac_search else "inputs.stac",
                          f"no usable STAC item found ({len(skipped)} skipped)")  # fmt: skip
    affine = np.column_stack([rows[c] for c in _AFFINE])
    planned = (
        (rows["crs"] != None) & (rows["dtype"] != None)  # noqa: E711 - element-wise
        & (rows["width"] > 0) & (rows["height"] > 0) & np.isfinite(affine).all(axis=1)
    )  # fmt: skip
    overviews = np.empty(n, dtype=object)
    overviews.fill([])  # one shared empty list: unknown (read at full resolution); never mutated
    block = np.zeros(n, dtype=np.int64)
    keep = np.ones(n, dtype=bool)
    to_open = np.flatnonzero(~planned)
    for k, (header, error) in zip(to_open, _read_headers([rows["href"][k] for k in to_open], max_threads), strict=True):
        if header is None:
            keep[k] = False
            skipped.append({"path": rows["href"][k], "error": str(error)})
            continue
        rows["crs"][k], rows["dtype"][k] = header["crs"], header["dtype"]
        affine[k] = [header[c] for c in _AFFINE]
        rows["width"][k], rows["height"][k] = header["width"], header["height"]
        if np.isnan(rows["nodata"][k]):
            rows["nodata"][k] = header["file_nodata"]
        overviews[k] = header["overviews"]
        block[k] = header["block_x"]
    a, b, c, d, e, f = affine.T
    w, h = rows["width"].astype("f8"), rows["height"].astype("f8")
    xs = np.stack([c, w * a + c, h * b + c, w * a + h * b + c])  # corners as rasterio computes bounds
    ys = np.stack([f, w * d + f, h * e + f, w * d + h * e + f])
    tiles = TileTable({
        "path": rows["href"], "band": rows["band"], "tile": rows["item"],
        "date": compute_time_steps(rows["time"], rows["lon"], config.inputs.groupby),
        "crs": rows["crs"], **{k: affine[:, j].copy() for j, k in enumerate(_AFFINE)},
        "width": rows["width"], "height": rows["height"],
        "xmin": xs.min(axis=0), "ymin": ys.min(axis=0), "xmax": xs.max(axis=0), "ymax": ys.max(axis=0),
        "dtype": rows["dtype"], "file_nodata": rows["nodata"], "block_x": block, "block_y": block.copy(),
        "overviews": overviews, "size": rows["size"], "mtime": np.zeros(n, dtype=np.int64),
        "nodata": rows["nodata"],
    })  # fmt: skip
    if not keep.all():
        tiles = tiles.rows(keep)
        rows = {k: v[keep] for k, v in rows.items()}
    band_attrs = compute_band_attrs(rows)
    tiles = _finish_table(tiles.select(TABLE_COLUMNS), config, skipped)
    if config.execution.on_error == "fail" and skipped:
        raise TileReadError(skipped[0]["path"], skipped[0]["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    logger.info("STAC: %d assets, %d planned from metadata, %d opened, %d skipped", n, int(planned.sum()),
                len(to_open), len(skipped))  # fmt: skip
    return Catalog(tiles=tiles, skipped=skipped, headers_read=len(to_open), band_attrs=band_attrs)


# --- writing items -------------------------------------------------------------------------------------


def items_from_files(
    paths: Iterable[str],
    *,
    pattern: str = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$",
    date_format: str = "%Y-%m-%d",
    time_of_day: str = "10:30:00",
    collection: str = "pipeline-fixtures",
    href_base: str | None = None,
    projection: bool = True,
    raster: bool = True,
    scale_offset: dict[str, tuple[float, float]] | None = None,
) -> list[dict[str, Any]]:
    """STAC items (dicts) for single-band GeoTIFFs: one item per (date, tile) of ``pattern``, one asset
    per band keyed by its name, projection and raster extension fields from each file's header.

    ``href_base``: hrefs relative to this folder (else absolute paths). ``scale_offset``: {band:
    (scale, offset)} written into ``raster:bands``. The item time is the date at ``time_of_day`` UTC.
    """
    from pyproj import Transformer

    rx = re.compile(pattern)
    groups: dict[tuple[str, str], dict[str, str]] = {}
    for path in sorted(os.path.abspath(p) for p in paths):
        m = rx.search(path.replace(os.sep, "/"))
        if m is None:
            continue
        g = m.groupdict()
        groups.setdefault((g.get("date") or "", g.get("tile") or ""), {})[g["band"]] = path
    items = []
    for (date, tile), bands in sorted(groups.items()):
        when = datetime.strptime(date, date_format) if date else datetime(1970, 1, 1)
        stamp = f"{when:%Y-%m-%d}T{time_of_day}Z"
        assets: dict[str, Any] = {}
        boxes = []
        for band, path in sorted(bands.items()):
            hd = read_header(path)
            asset: dict[str, Any] = {
                "href": os.path.relpath(path, href_base) if href_base else path,
                "type": "image/tiff; application=geotiff; profile=cloud-optimized",
                "roles": ["data"],
            }
            if projection:
                asset.update({
                    "proj:code": hd["crs"], "proj:shape": [hd["height"], hd["width"]],
                    "proj:transform": [hd[c] for c in _AFFINE],
                    "proj:bbox": [hd["xmin"], hd["ymin"], hd["xmax"], hd["ymax"]],
                })  # fmt: skip
            if raster:
                rb: dict[str, Any] = {"data_type": hd["dtype"]}
                if not np.isnan(hd["file_nodata"]):
                    rb["nodata"] = hd["file_nodata"]
                if scale_offset and band in scale_offset:
                    rb["scale"], rb["offset"] = scale_offset[band]
                asset["raster:bands"] = [rb]
            assets[band] = asset
            tr = Transformer.from_crs(hd["crs"], "EPSG:4326", always_xy=True)
            boxes.append(tr.transform_bounds(hd["xmin"], hd["ymin"], hd["xmax"], hd["ymax"]))
        bbox = [min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes)]
        x0, y0, x1, y1 = bbox
        exts = []
        if projection:
            exts.append("https://stac-extensions.github.io/projection/v2.0.0/schema.json")
        if raster:
            exts.append("https://stac-extensions.github.io/raster/v1.1.0/schema.json")
        items.append({
            "type": "Feature", "stac_version": "1.1.0", "stac_extensions": exts,
            "id": f"{tile or 'tile'}_{when:%Y%m%d}", "collection": collection,
            "geometry": {"type": "Polygon", "coordinates": [[[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]]},
            "bbox": bbox, "properties": {"datetime": stamp}, "links": [], "assets": assets,
        })  # fmt: skip
    return items


def write_item_collection(items: list[dict[str, Any]], path: str) -> str:
    """An ItemCollection (GeoJSON FeatureCollection) file."""
    import json

    with open(path, "w") as f:
        json.dump({"type": "FeatureCollection", "features": items}, f)
    return path


def write_geoparquet(items: list[dict[str, Any]], path: str) -> str:
    """A stac-geoparquet file, written by rustac (the ``dev`` extra)."""
    import rustac

    rustac.write_sync(path, items)
    return path
