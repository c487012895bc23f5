"""stac-geoparquet, read column-wise with pyarrow and never turned into Python dicts (and written, for
tests and benches). Its asset rows are :mod:`pipeline.inputs.stac`'s, by the same rules. Imported
only when a ``.parquet`` STAC source is given."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from pipeline.errors import ConfigError
from pipeline.inputs.stac_fields import (
    AFFINE,
    ASSET_COLUMNS,
    BAND_FIELDS,
    CLASSIFICATION,
    VERSION_FIELDS,
    arrow_versions,
    band_count,
    band_index,
    bbox_longitude,
    classification_of,
    is_categorical,
    is_raster_asset,
    item_base,
    resolve_href,
    split_asset_key,
)

_PROJ_FIELDS = ("proj:code", "proj:epsg", "proj:wkt2", "proj:transform", "proj:shape", "raster:bands", "bands")
_ITEM_FIELDS = (*_PROJ_FIELDS, *(new for new, _ in BAND_FIELDS.values()), *VERSION_FIELDS)


_ASSET_FIELDS = ("href", "type", "roles", *_ITEM_FIELDS, "file:size", "alternate", "eo:bands", *CLASSIFICATION)


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
        columns = [
            c
            for c in ("id", "collection", "datetime", "start_datetime", "bbox", "links", *_ITEM_FIELDS)
            if c in schema.names
        ]
        struct = schema.field("assets").type
        keys = {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}
        wanted = (
            sorted(keys)
            if assets is None
            else sorted({split_asset_key(v, keys)[0] for v in assets.values()} & set(keys))
        )
        if any("." in k for k in wanted):  # a dotted key cannot be named as a nested column
            return pf.read(columns=[*columns, "assets"])
        fields = {key: {keys[key].field(i).name for i in range(keys[key].num_fields)} for key in wanted}
        names: tuple[str, ...] = _ASSET_FIELDS
        raster = None
        if assets is None and wanted:  # which assets are rasters, from the rows asset_rows_from_arrow looks at
            head = [f"assets.{key}.{name}" for key in wanted for name in _ASSET_FIELDS if name in fields[key]]
            import pyarrow.compute as pc

            batches, unseen = [], set(wanted)
            for batch in pf.iter_batches(batch_size=_RASTER_SAMPLE, columns=head):
                column = batch.column("assets")
                batches.append(column)
                unseen -= {k for k in unseen if pc.any(pc.is_valid(pc.struct_field(column, [k]))).as_py()}
                if not unseen:  # every key's first asset is in: they decide
                    break
            wanted = raster = _raster_keys(pa.chunked_array(batches)) if batches else []
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


def _nth_struct(arr: Any, k: int) -> tuple[np.ndarray, Any, np.ndarray]:
    """Rows whose list has a ``k``-th element (1-based; ``raster:bands[k-1]``), and those elements: a
    struct array and where in it each of those rows' element is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    starts = _list_starts(arr, k)
    if starts is not None:  # the values array itself, indexed: no slicing or taking of structs
        return starts[0], arr.values, starts[1] + (k - 1)
    ok = np.nan_to_num(_f8(pc.list_value_length(arr)), nan=0) >= k
    return ok, pc.list_flatten(pc.list_slice(pc.filter(arr, _mask(ok)), k - 1, k)), np.arange(int(ok.sum()))


_RASTER_SAMPLE = 1000
"""Rows read at a time while looking for each asset key's first asset (``inputs.assets`` null)."""


_RASTER_KEY = b"pipeline:raster_assets"


def _raster_keys(structs: Any) -> list[str]:
    """The keys of an ``assets`` struct column whose first asset is a single-band raster
    (:func:`is_raster_asset`), sorted."""
    out = []
    for key in sorted(structs.type.field(i).name for i in range(structs.type.num_fields)):
        import pyarrow.compute as pc

        asset = _first_asset(pc.struct_field(structs, [key]))
        if asset is not None and is_raster_asset(asset) and band_count(asset) == 1:
            out.append(key)
    return out


def asset_rows_from_arrow(
    table: Any, assets: dict[str, str] | None, base: str, skipped: list[dict[str, str]], alternate: str | None = None
) -> dict[str, np.ndarray]:
    """The asset table from a stac-geoparquet table, column by column: no per-item Python objects but
    the ids and hrefs. Fields are looked for where :mod:`pipeline.inputs.stac_fields` says, first found
    wins; item-level columns fill what an asset lacks."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    cols = set(table.column_names)
    if "assets" not in cols:
        raise ConfigError("inputs.stac", f"{base} has no 'assets' column: not stac-geoparquet")
    ids = _strings(table.column("id").combine_chunks())
    collection = (
        _strings(table.column("collection").combine_chunks()) if "collection" in cols else np.full(n, None, object)
    )
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
            lon = bbox_longitude(_f8(pc.struct_field(bbox, ["xmin"])), _f8(pc.struct_field(bbox, ["xmax"])))
        else:
            box = _list_matrix(bbox, 4)
            lon = bbox_longitude(box[:, 0], box[:, 2])
    structs = table.column("assets")  # not combined: each field used is, when it is used
    keys = [structs.type.field(i).name for i in range(structs.type.num_fields)]
    if assets is None:
        chosen = (table.schema.metadata or {}).get(_RASTER_KEY)  # read_geoparquet_table chose them
        wanted = {k: k for k in (json.loads(chosen) if chosen else _raster_keys(structs))}
    else:
        wanted = dict(assets)
    bad = np.isnat(times)
    why = np.full(n, "", dtype=object)
    why[bad] = "STAC item has no datetime or start_datetime"
    subs = {}
    for band, value in wanted.items():
        key, selector = split_asset_key(value, keys)
        sub = pc.struct_field(structs, [key]) if key in keys else pa.nulls(n, pa.struct([("href", pa.string())]))
        missing = _f8(pc.is_null(pc.struct_field(sub, ["href"]) if "href" in [f.name for f in sub.type] else sub))
        missing = missing.astype(bool) & ~bad
        sample = _first_asset(sub)
        kvals = _band_indices(sub, selector, ~missing & ~bad)
        why[missing] = [f"{w}; " if w else "" for w in why[missing]]
        why[missing] += f"STAC item has no asset {key!r} " + (
            "(wanted by inputs.assets)"
            if assets
            else "(inputs.assets is null: every single-band raster asset is wanted)"
        )
        no_band = ~missing & ~bad & (kvals < 1)
        why[no_band] = [f"{w}; " if w else "" for w in why[no_band]]
        why[no_band] += f"STAC item's asset {key!r} has no band {selector!r} (wanted by inputs.assets)"
        bad |= missing | no_band
        subs[band] = (sub, kvals, sample)
    for j in np.flatnonzero(bad):
        skipped.append({"path": str(ids[j]), "error": str(why[j])})
    good = np.flatnonzero(~bad)
    parts = []
    for band, (sub, kvals, sample) in subs.items():
        for k in np.unique(kvals[good]).tolist():
            sel = good[kvals[good] == k]
            categorical = bool(sample is not None and is_categorical(sample, k))
            part = _band_part(table, sub, band, k, sel, categorical, ids, collection, times, lon, base, alternate)
            part["version"] = arrow_versions(table, sub, sel)
            part["classification"] = np.empty(len(sel), dtype=object)
            part["classification"][:] = [None if sample is None else classification_of(sample, k)] * len(sel)
            parts.append(part)
    if not parts:
        return {c: np.empty(0) for c in ASSET_COLUMNS}
    return {c: np.concatenate([p[c] for p in parts]) for c in ASSET_COLUMNS}


def _band_indices(sub: Any, selector: str | None, present: np.ndarray) -> np.ndarray:
    """Per row, the 1-based band of the asset that ``selector`` names (:func:`band_index`), 0 where the
    row's asset has no such band. A name is looked up row by row (catalogues need not list bands in one
    order); no selector or a number needs no Python per row."""
    import pyarrow.compute as pc

    n = len(sub)
    if selector is None:
        return np.ones(n, dtype=np.int64)
    fields = {sub.type.field(i).name for i in range(sub.type.num_fields)} if hasattr(sub.type, "num_fields") else set()
    if selector.isdigit():
        k = int(selector)
        count = np.ones(n)
        for name in ("bands", "raster:bands", "eo:bands"):
            if name in fields:
                count = np.maximum(count, np.nan_to_num(_f8(pc.list_value_length(pc.struct_field(sub, [name]))), nan=0))
        return np.where(count >= k, k, 0).astype(np.int64)
    out = np.zeros(n, dtype=np.int64)
    lists = {
        name: pc.struct_field(sub, [name]).to_pylist()
        for name in ("bands", "eo:bands", "raster:bands")
        if name in fields
    }
    for j in np.flatnonzero(present):
        asset = {name: values[j] for name, values in lists.items() if values[j]}
        out[j] = band_index(asset, selector) or 0
    return out


def _band_part(
    table: Any,
    sub: Any,
    band: str,
    k: int,
    good: np.ndarray,
    categorical: bool,
    ids: np.ndarray,
    collection: np.ndarray,
    times: np.ndarray,
    lon: np.ndarray,
    base: str,
    alternate: str | None,
) -> dict[str, np.ndarray]:
    """The asset table's rows of one band, band ``k`` of its asset, for the item rows ``good``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    cols = set(table.column_names)

    def item_level(name: str) -> Any:
        return table.column(name).combine_chunks() if name in cols else None

    fields = {sub.type.field(i).name for i in range(sub.type.num_fields)}

    def get(name: str, fields: set[str] = fields, sub: Any = sub) -> Any:
        return pc.struct_field(sub, [name]) if name in fields else None

    crs = np.full(n, None, dtype=object)
    for src in (item_level("proj:wkt2"), get("proj:wkt2"), item_level("proj:epsg"), get("proj:epsg")):
        _fill_text(crs, src, epsg=True)  # later sources win: proj:code, then the asset's, last
    for src in (item_level("proj:code"), get("proj:code")):
        _fill_text(crs, src, epsg=False)
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
    values: dict[str, np.ndarray] = {
        "dtype": np.full(n, None, dtype=object),
        "unit": np.full(n, None, dtype=object),
        "nodata": np.full(n, np.nan),
        "scale": np.full(n, np.nan),
        "offset": np.full(n, np.nan),
    }
    # In priority order, each filling only what is still unknown: the asset's bands[k] and the asset
    # (STAC 1.1), its raster:bands[k] (1.0), then the same at the item level.
    for level in (get, item_level):
        for holder, new in ((level("bands"), True), (None, True), (level("raster:bands"), False)):
            for column, (name11, name10) in BAND_FIELDS.items():
                name = name11 if new else name10
                if holder is None:  # the asset (or item) itself
                    src = level(name) if new else None
                    if src is not None:
                        _fill(values[column], np.ones(n, bool), src, np.arange(n), column)
                    continue
                ok, structs_k, at = _nth_struct(holder, k)
                sub_names = {structs_k.type.field(i).name for i in range(structs_k.type.num_fields)}
                if name in sub_names:
                    _fill(values[column], ok, pc.struct_field(structs_k, [name]), at, column)
    size = np.nan_to_num(_f8(get("file:size")), nan=0) if get("file:size") is not None else np.zeros(n)
    href_col = pc.struct_field(sub, ["href"]) if "href" in fields else pa.nulls(n, pa.string())
    if alternate and "alternate" in fields:
        alt = get("alternate")
        alt_names = {alt.type.field(i).name for i in range(alt.type.num_fields)}
        if alternate in alt_names:
            alt_href = pc.struct_field(pc.struct_field(alt, [alternate]), ["href"])
            href_col = pc.coalesce(alt_href, href_col)
    rows = np.zeros(n, dtype=bool)
    rows[good] = True
    urls = pc.and_(pc.match_substring(href_col, "://"), pc.invert(pc.starts_with(href_col, "file://")))
    all_urls = pc.all(pc.filter(urls, _mask(rows))).as_py() is not False
    hrefs = np.empty(len(good), dtype=object)
    hrefs[:] = pc.filter(href_col, _mask(rows)).to_pylist()
    if not all_urls:  # relative or local paths: resolved one by one, against the item's self link
        selfs = _self_links(table, good)
        hrefs[:] = [resolve_href(str(h), item_base(s, base), base) for h, s in zip(hrefs, selfs, strict=True)]
    part = {
        "href": hrefs,
        "band": np.full(len(good), band, dtype=object),
        "bidx": np.full(len(good), k, dtype=np.int64),
        "item": ids[good],
        "collection": np.array([c or "" for c in collection[good]], dtype=object),
        "time": times[good],
        "lon": lon[good],
        "crs": crs[good],
        **{c: affine[good, j] for j, c in enumerate(AFFINE)},
        "height": np.nan_to_num(shape[good, 0], nan=-1).astype(np.int64),
        "width": np.nan_to_num(shape[good, 1], nan=-1).astype(np.int64),
        **{c: v[good] for c, v in values.items()},
        "size": size[good].astype(np.int64),
        "categorical": np.full(len(good), categorical),
    }
    return part


def _self_links(table: Any, rows: np.ndarray) -> list[str | None]:
    """Each of ``rows``' ``self`` link (None where it has none, or the table has no links)."""
    if "links" not in table.column_names:
        return [None] * len(rows)
    links = table.column("links").take(rows).to_pylist()
    return [next((ln.get("href") for ln in (item or ()) if ln and ln.get("rel") == "self"), None) for item in links]


def _first_asset(sub: Any) -> dict[str, Any] | None:
    """The first non-null asset of a column, as a dict (to resolve a band selector and classification)."""
    import pyarrow.compute as pc

    present = pc.filter(sub, pc.is_valid(sub))
    if not len(present):
        return None
    first = present.slice(0, 1).to_pylist()[0]
    return {k: v for k, v in first.items() if v is not None}


def _fill_text(out: np.ndarray, src: Any, epsg: bool) -> None:
    """CRS strings from a column into ``out`` where the column has them (integers as ``EPSG:n``)."""
    import pyarrow as pa

    if src is None:
        return
    if pa.types.is_integer(src.type) or (epsg and pa.types.is_floating(src.type)):
        codes = _f8(src)
        has = ~np.isnan(codes)
        out[has] = [f"EPSG:{int(c)}" for c in codes[has]]
    elif pa.types.is_string(src.type) or pa.types.is_large_string(src.type):
        vals = _strings(src)
        has = (vals != None) & (vals != "")  # noqa: E711 - element-wise; an empty code counts as null
        out[has] = vals[has]


def _fill(out: np.ndarray, ok: np.ndarray, src: Any, at: np.ndarray, column: str) -> None:
    """Where ``out`` is still unknown, the values of ``src`` (at ``at``) for the rows ``ok`` selects."""
    import pyarrow as pa

    if pa.types.is_null(src.type):
        return
    text = column in ("dtype", "unit")
    if text and not (pa.types.is_string(src.type) or pa.types.is_large_string(src.type)):
        return
    if not text and not (pa.types.is_integer(src.type) or pa.types.is_floating(src.type)):
        if pa.types.is_string(src.type):  # nodata written as "nan"
            import pyarrow.compute as pc

            src = pc.cast(pc.replace_substring(src, "nan", "NaN"), pa.float64())
        else:
            return
    vals = (_strings(src) if text else _f8(src))[at]
    has = vals != None if text else ~np.isnan(vals)  # noqa: E711
    idx = np.flatnonzero(ok)[has]
    unknown = (out[idx] == None) if text else np.isnan(out[idx])  # noqa: E711
    out[idx[unknown]] = vals[has][unknown]
