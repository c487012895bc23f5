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
from pipeline.inputs.catalog import finish_table, read_header
from pipeline.inputs.read import input_errors
from pipeline.inputs.tiles import TABLE_COLUMNS, Catalog, TileTable
from pipeline.report.progress import NoProgress

logger = logging.getLogger(__name__)

GROUPBY = ("solar_day", "time", "none")
_RASTER_TYPES = ("image/tiff", "image/vnd.stac.geotiff", "image/jp2", "application/x-hdf")
_NOT_DATA_ROLES = {"thumbnail", "overview", "metadata"}
_AFFINE = ("a", "b", "c", "d", "e", "f")
ASSET_COLUMNS = [
    "href",
    "band",
    "item",
    "time",
    "lon",
    "crs",
    *_AFFINE,
    "width",
    "height",
    "dtype",
    "nodata",
    "scale",
    "offset",
    "size",
]
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
            skipped.append(
                {
                    "path": item_id,
                    "error": f"STAC item has no asset {', '.join(map(repr, missing))} ({why}); it has {sorted(found)}",
                }
            )
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
        from pipeline.inputs.stac_parquet import asset_rows_from_arrow, read_geoparquet_table

        table = read_geoparquet_table(i.stac, config.storage, i.assets)
        rows = asset_rows_from_arrow(table, i.assets, i.stac, skipped)
    elif i.stac:
        items, base = read_item_dicts(i.stac)
        rows = asset_rows_from_items(items, i.assets, base, skipped)
    else:
        raise ConfigError("inputs.stac", "no STAC source given")
    return _as_arrays(rows), skipped


def _read_headers(
    hrefs: list[str], max_threads: int, progress: NoProgress
) -> list[tuple[dict[str, Any] | None, str | None]]:
    def one(href: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return read_header(href), None
        except TileReadError as e:
            return None, e.problem
        except input_errors() as e:  # a bad input; any other exception is a bug and fails the run
            return None, f"{type(e).__name__}: {e}"

    if not hrefs:
        return []
    progress.phase("headers", len(hrefs), "headers read")
    out = []
    with ThreadPoolExecutor(min(max_threads, len(hrefs))) as pool:
        for result in pool.map(one, hrefs):
            out.append(result)
            progress.add()
    return out


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
                    logger.warning("band %s: raster:bands %s differs between assets; recording %s", band, col, known[0])
        if attrs:
            out[band] = attrs
    return out


def build_stac_catalog(config: Config, max_threads: int = 8, progress: NoProgress | None = None) -> Catalog:
    """The tile table of the configured STAC items (see the module docstring); ``progress`` is told the
    assets parsed from the items and the headers read."""
    progress = progress or NoProgress()
    progress.phase("STAC items", unit="assets parsed")
    rows, skipped = load_asset_rows(config)
    n = len(rows["href"])
    progress.add(n)
    if not n:
        raise ConfigError(
            "inputs.stac_search" if config.inputs.stac_search else "inputs.stac",
            f"no usable STAC item found ({len(skipped)} skipped)",
        )
    affine = np.column_stack([rows[c] for c in _AFFINE])
    planned = (
        (rows["crs"] != None)  # noqa: E711 - element-wise
        & (rows["dtype"] != None)  # noqa: E711 - element-wise
        & (rows["width"] > 0)
        & (rows["height"] > 0)
        & np.isfinite(affine).all(axis=1)
    )
    overviews = np.empty(n, dtype=object)
    overviews.fill([])  # one shared empty list: unknown (read at full resolution); never mutated
    block = np.zeros(n, dtype=np.int64)
    keep = np.ones(n, dtype=bool)
    to_open = np.flatnonzero(~planned)
    headers = _read_headers([rows["href"][k] for k in to_open], max_threads, progress)
    for k, (header, error) in zip(to_open, headers, strict=True):
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
    tiles = TileTable(
        {
            "path": rows["href"],
            "band": rows["band"],
            "tile": rows["item"],
            "date": compute_time_steps(rows["time"], rows["lon"], config.inputs.groupby),
            "crs": rows["crs"],
            **{k: affine[:, j].copy() for j, k in enumerate(_AFFINE)},
            "width": rows["width"],
            "height": rows["height"],
            "xmin": xs.min(axis=0),
            "ymin": ys.min(axis=0),
            "xmax": xs.max(axis=0),
            "ymax": ys.max(axis=0),
            "dtype": rows["dtype"],
            "file_nodata": rows["nodata"],
            "block_x": block,
            "block_y": block.copy(),
            "overviews": overviews,
            "size": rows["size"],
            "mtime": np.zeros(n, dtype=np.int64),
            "nodata": rows["nodata"],
        }
    )
    if not keep.all():
        tiles = tiles.rows(keep)
        rows = {k: v[keep] for k, v in rows.items()}
    band_attrs = compute_band_attrs(rows)
    tiles = finish_table(tiles.select(TABLE_COLUMNS), config, skipped)
    if config.execution.on_error == "fail" and skipped:
        raise TileReadError(skipped[0]["path"], skipped[0]["error"])
    for s in skipped:
        logger.warning("skipping %s: %s", s["path"], s["error"])
    logger.info(
        "STAC: %d assets, %d planned from metadata, %d opened, %d skipped",
        n,
        int(planned.sum()),
        len(to_open),
        len(skipped),
    )
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
                asset.update(
                    {
                        "proj:code": hd["crs"],
                        "proj:shape": [hd["height"], hd["width"]],
                        "proj:transform": [hd[c] for c in _AFFINE],
                        "proj:bbox": [hd["xmin"], hd["ymin"], hd["xmax"], hd["ymax"]],
                    }
                )
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
        items.append(
            {
                "type": "Feature",
                "stac_version": "1.1.0",
                "stac_extensions": exts,
                "id": f"{tile or 'tile'}_{when:%Y%m%d}",
                "collection": collection,
                "geometry": {"type": "Polygon", "coordinates": [[[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]]},
                "bbox": bbox,
                "properties": {"datetime": stamp},
                "links": [],
                "assets": assets,
            }
        )
    return items


def write_item_collection(items: list[dict[str, Any]], path: str) -> str:
    """An ItemCollection (GeoJSON FeatureCollection) file."""

    with open(path, "w") as f:
        json.dump({"type": "FeatureCollection", "features": items}, f)
    return path
