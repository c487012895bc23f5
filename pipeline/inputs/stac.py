"""The STAC source: items in, the tile table's rows out (one per item and wanted band), for
:mod:`pipeline.inputs.catalog` to finish.

Sources (``inputs``): ``stac`` names an ItemCollection (``.json``), a static catalog
(``catalog.json``, followed to its items by pystac) or a stac-geoparquet file (``.parquet``, read
column-wise by :mod:`pipeline.inputs.stac_parquet`, never turned into Python dicts); ``stac_search``
queries a STAC API with pystac-client. ``assets`` maps band names to asset keys, a multi-band asset's
band as ``key.N`` or ``key.name`` (None: every single-band raster asset, named by its key);
``alternate`` reads assets from an alternate href; ``groupby`` turns item times into time steps. Where
each field is found (STAC 1.0 and 1.1) is :mod:`pipeline.inputs.stac_fields`'s. Item documents are
read and turned into asset rows by :mod:`pipeline.inputs.stac_items`; the headers a run opens are
chosen and read by :mod:`pipeline.inputs.stac_headers`.

Rules, as odc-stac applies them where it has one:

* The projection extension (a CRS, ``proj:transform``, ``proj:shape``; on the asset or the item) and a
  ``data_type`` plan an asset without opening it. The overviews are the files': one header is read per
  group of such assets sharing (collection, band, shape, pixel size), and the group takes its overview
  sizes, blocks and (where the item gives no nodata) the file's nodata; a group whose sample cannot be
  opened tries its next asset. An asset lacking the extension is opened itself. ``Catalog.headers_read``
  counts both; the read checks each file's level geometry against the plan.
* Nodata: the item's, else the file's (``nodata_from`` says which); scale, offset and unit become the
  output band's CF ``scale_factor``/``add_offset``/``units`` (values are not altered); a band with
  ``classification:classes`` or ``bitfields`` is categorical (mode where the rest blend).
* Time is ``datetime`` (else ``start_datetime``). ``groupby``: ``solar_day`` (odc-stac's: UTC time plus
  longitude/15 hours, date part; longitude = centre of the item's bbox; each step labelled by its
  earliest item's time, as odc-stac labels it), ``time`` (the exact timestamp), ``none`` (one step, at
  the earliest time).
* Overlapping assets of one step fuse in href order, as globbed files fuse in path order, so a cube does
  not depend on how its tiles were found.
* An item without a wanted asset or band is skipped and listed (``{path: item id, error}``); a broken
  href is listed when its header is read or, for assets planned from metadata, when a task reads it.
* Relative hrefs resolve against the item's ``self`` link, else the document; an item copied from a
  catalogue whose ``self`` link still points there resolves beside the local document where the file
  is. ``s3://`` and ``https://`` hrefs stay URLs. An empty search or collection is a config error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import ConfigError
from pipeline.inputs.stac_fields import (  # noqa: F401 - the rules, importable from here
    AFFINE,
    ASSET_COLUMNS,
    GROUPBY,
    asset_href,
    band_count,
    band_field,
    band_index,
    bbox_longitude,
    classification_of,
    compute_solar_day,
    compute_time_steps,
    crs_of,
    is_categorical,
    is_raster_asset,
    item_base,
    longitude_middle,
    number,
    parse_time,
    proj_field,
    resolve_href,
    split_asset_key,
)
from pipeline.inputs.stac_headers import open_headers
from pipeline.inputs.stac_items import asset_rows_from_items, read_item_dicts, search_item_dicts
from pipeline.inputs.tiles import TABLE_COLUMNS, Catalog, TileTable
from pipeline.report.progress import NoProgress

if TYPE_CHECKING:
    from pipeline.config import InputsConfig, StorageConfig

logger = logging.getLogger(__name__)


# --- the asset table, from whichever source ------------------------------------------------------------


_INT_ASSET_COLUMNS = ("width", "height", "size", "bidx")
_TEXT_ASSET_COLUMNS = ("href", "band", "item", "collection", "crs", "dtype", "unit", "version", "classification")


def _as_arrays(rows: dict[str, Sequence[Any]]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for c in ASSET_COLUMNS:
        v = rows[c]
        if isinstance(v, np.ndarray):
            out[c] = v
        elif c == "time":
            out[c] = np.array(v, dtype="datetime64[ns]")
        elif c in _INT_ASSET_COLUMNS:
            out[c] = np.array(v, dtype=np.int64)
        elif c == "categorical":
            out[c] = np.array(v, dtype=bool)
        elif c in _TEXT_ASSET_COLUMNS:
            out[c] = np.empty(len(v), dtype=object)
            out[c][:] = list(v)
        else:
            out[c] = np.array(v, dtype="f8")
    return out


def load_asset_rows(
    inputs: InputsConfig, storage: StorageConfig, *, mask_band: str | None = None
) -> tuple[dict[str, np.ndarray], list[dict[str, str]]]:
    """The STAC source's asset table (``inputs``; a bucket's files read with ``storage``) and the items
    skipped on the way. ``mask_band`` (``mask.band``): its asset is read where ``inputs.assets`` leaves it out."""
    skipped: list[dict[str, str]] = []
    assets = inputs.assets
    if mask_band is not None and assets is not None and mask_band not in assets:
        assets = {**assets, mask_band: mask_band}  # the mask band's asset, named by its key
    if inputs.stac_search:
        items = search_item_dicts(dict(inputs.stac_search))
        if not items:
            raise ConfigError(
                "inputs.stac_search",
                f"the search at {inputs.stac_search['url']} matched no item: {_search_terms(inputs.stac_search)}",
            )
        rows: dict[str, Any] = asset_rows_from_items(items, assets, None, skipped, inputs.alternate)
    elif inputs.stac and re.search(r"\.(geo)?parquet$", inputs.stac, re.I):
        from pipeline.inputs.stac_parquet import asset_rows_from_arrow, read_geoparquet_table

        table = read_geoparquet_table(inputs.stac, storage, assets)
        rows = asset_rows_from_arrow(table, assets, inputs.stac, skipped, inputs.alternate)
    elif inputs.stac:
        items, base = read_item_dicts(inputs.stac, storage)
        if not items:
            raise ConfigError("inputs.stac", f"{inputs.stac} holds no STAC item")
        rows = asset_rows_from_items(items, assets, base, skipped, inputs.alternate)
    else:
        raise ConfigError("inputs.stac", "no STAC source given")
    return _as_arrays(rows), skipped


def _search_terms(search: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in dict(search).items() if k != "url" and v is not None) or "no terms"


# --- the catalog ---------------------------------------------------------------------------------------


def compute_band_attrs(rows: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """CF attributes per band from the STAC metadata: ``scale_factor``/``add_offset`` from the scale and
    offset, ``units`` from the unit (the first asset in href order; a band whose assets disagree is
    logged)."""
    out: dict[str, dict[str, Any]] = {}
    for band in sorted(set(rows["band"])):
        sel = np.flatnonzero(rows["band"] == band)
        sel = sel[np.argsort(rows["href"][sel], kind="stable")]
        attrs: dict[str, Any] = {}
        for col, name in (("scale", "scale_factor"), ("offset", "add_offset")):
            values = rows[col][sel]
            known = values[~np.isnan(values)]
            if len(known):
                attrs[name] = float(known[0])
                if len(np.unique(known)) > 1 or len(known) < len(values):
                    logger.warning("band %s: STAC %s differs between assets; recording %s", band, col, known[0])
        units = [u for u in rows["unit"][sel] if u]
        if units:
            attrs["units"] = units[0]
        if attrs:
            out[band] = attrs
    return out


def _grid_longitude(
    grid_crs: str | None, grid_bounds: tuple[float, float, float, float] | None, item_lon: np.ndarray
) -> float:
    """The longitude odc-stac shifts solar days by: the output grid's centre, from ``grid_bounds`` in
    ``grid_crs`` (``grid.bounds``, ``grid.crs``) where both are given, else the middle of the items' extent
    (:func:`longitude_middle`: across 180 where the items lie either side of it; 0 where no item has a bbox)."""
    if grid_bounds is not None and grid_crs is not None:
        from pyproj import Transformer

        x, y = (grid_bounds[0] + grid_bounds[2]) / 2, (grid_bounds[1] + grid_bounds[3]) / 2
        lon, _ = Transformer.from_crs(grid_crs, "EPSG:4326", always_xy=True).transform(x, y)
        return float(lon)
    return longitude_middle(item_lon)


def stac_catalog(
    inputs: InputsConfig,
    storage: StorageConfig,
    *,
    mask_band: str | None = None,
    grid_crs: str | None = None,
    grid_bounds: tuple[float, float, float, float] | None = None,
    max_threads: int = 8,
    progress: NoProgress | None = None,
) -> Catalog:
    """The STAC items' rows (see the module docstring), for :func:`pipeline.inputs.catalog.build_catalog`
    to finish. ``mask_band``: as :func:`load_asset_rows`'s; ``grid_crs`` and ``grid_bounds``: the output
    grid, whose centre shifts solar days (:func:`_grid_longitude`); ``progress`` is told the assets parsed
    and the headers read."""
    progress = progress or NoProgress()
    progress.phase("STAC items", unit="assets parsed")
    rows, skipped = load_asset_rows(inputs, storage, mask_band=mask_band)
    n = len(rows["href"])
    progress.add(n)
    if not n:
        key = "inputs.stac_search" if inputs.stac_search else "inputs.stac"
        first = f"; the first: {skipped[0]['path']}: {skipped[0]['error']}" if skipped else ""
        raise ConfigError(key, f"no usable STAC item found ({len(skipped)} skipped{first})")
    affine = np.column_stack([rows[c] for c in AFFINE])
    planned = (
        (rows["crs"] != None)  # noqa: E711 - element-wise
        & (rows["width"] > 0)
        & (rows["height"] > 0)
        & np.isfinite(affine).all(axis=1)
    )
    opened, keep, source, headers_read = open_headers(
        rows, planned, storage, inputs.gdal_env, max_threads, skipped, progress
    )
    nodata_from = np.where(np.isnan(rows["nodata"]), "", "stac").astype(object)
    for k in np.flatnonzero(~planned):  # opened: the file is the metadata
        header = opened.get(int(k))
        if header is not None:
            rows["crs"][k] = header["crs"]
            affine[k] = [header[c] for c in AFFINE]
            rows["width"][k], rows["height"][k] = header["width"], header["height"]
    # Per distinct header, its fields; each asset takes those of its header's source (vectorised).
    order = sorted(opened)
    at = np.searchsorted(np.array(order, dtype=np.int64), source)
    has = np.isin(source, order) & keep
    at = np.where(has, at, 0)
    sizes = np.empty(n, dtype=object)
    sizes.fill([])
    block = np.zeros((n, 2), dtype=np.int64)
    if order:
        h_sizes = np.empty(len(order), dtype=object)
        h_sizes[:] = [opened[k]["overview_sizes"] for k in order]
        h_block = np.array([[opened[k]["block_x"], opened[k]["block_y"]] for k in order], dtype=np.int64)
        h_dtype = np.array([opened[k]["dtype"] for k in order], dtype=object)
        h_nodata = np.array([opened[k]["file_nodata"] for k in order], dtype="f8")
        sizes[has] = h_sizes[at[has]]
        block[has] = h_block[at[has]]
        no_dtype = has & (rows["dtype"] == None)  # noqa: E711 - element-wise; the file's where the item has none
        rows["dtype"][no_dtype] = h_dtype[at[no_dtype]]
        from_file = has & (nodata_from == "") & ~np.isnan(h_nodata[at])
        rows["nodata"][from_file] = h_nodata[at[from_file]]
        nodata_from[from_file] = "file"
    keep &= rows["dtype"] != None  # noqa: E711 - element-wise; an asset none of whose headers opened
    a, b, c, d, e, f = affine.T
    w, h = rows["width"].astype("f8"), rows["height"].astype("f8")
    xs = np.stack([c, w * a + c, h * b + c, w * a + h * b + c])  # corners as rasterio computes bounds
    ys = np.stack([f, w * d + f, h * e + f, w * d + h * e + f])
    tiles = TileTable(
        {
            "path": rows["href"],
            "bidx": rows["bidx"],
            "band": rows["band"],
            "tile": rows["item"],
            "date": compute_time_steps(
                rows["time"], _grid_longitude(grid_crs, grid_bounds, rows["lon"]), inputs.groupby
            ),
            "crs": rows["crs"],
            **{k: affine[:, j].copy() for j, k in enumerate(AFFINE)},
            "width": rows["width"],
            "height": rows["height"],
            "xmin": xs.min(axis=0),
            "ymin": ys.min(axis=0),
            "xmax": xs.max(axis=0),
            "ymax": ys.max(axis=0),
            "dtype": rows["dtype"],
            "file_nodata": rows["nodata"],
            "block_x": block[:, 0].copy(),
            "block_y": block[:, 1].copy(),
            "overview_sizes": sizes,
            "size": rows["size"],
            "mtime": _unversioned_local_mtimes(rows["href"], rows["version"]),
            "version": rows["version"],
            "nodata": rows["nodata"],
            "nodata_from": nodata_from,
        }
    )
    if not keep.all():
        tiles = tiles.rows(keep)
        rows = {k: v[keep] for k, v in rows.items()}
    logger.info(
        "STAC: %d assets, %d planned from metadata, %d headers read, %d skipped",
        n,
        int(planned.sum()),
        headers_read,
        len(skipped),
    )
    return Catalog(
        tiles=tiles.select(TABLE_COLUMNS),
        skipped=skipped,
        headers_read=headers_read,
        band_attrs=compute_band_attrs(rows),
        categorical=frozenset(str(b) for b in np.unique(rows["band"][rows["categorical"]])),
        classification=_classification(rows),
    )


def _classification(rows: dict[str, np.ndarray]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per band, the STAC classification of its first asset that has one (:func:`classification_of`)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for band, c in zip(rows["band"].tolist(), rows["classification"].tolist(), strict=True):
        if c is not None and band not in out:
            out[band] = c
    return out


def _unversioned_local_mtimes(hrefs: np.ndarray, versions: np.ndarray) -> np.ndarray:
    """The ``mtime`` column: an asset whose item says no version (neither ``updated`` nor ``file:checksum``)
    and whose href is a local file takes its file's mtime (one stat each, as a local glob's tiles), so that
    ``pipeline update`` sees a file rewritten in place; any other asset 0 (its size is ``file:size``, as the
    item says, and its version, where it has one, decides)."""
    import os

    from pipeline.config import is_url

    mtime = np.zeros(len(hrefs), dtype=np.int64)
    for i, (href, version) in enumerate(zip(hrefs.tolist(), versions.tolist(), strict=True)):
        if version or is_url(href):  # (hrefs are resolved: file:// stripped, stac_fields.resolve_href)
            continue
        try:
            mtime[i] = os.stat(href).st_mtime_ns
        except OSError:
            continue  # a missing file is skipped, and said, where it is read
    return mtime


def with_object_versions(tiles: TileTable, storage: Any, threads: int = 32) -> TileTable:
    """``tiles`` with each object (``s3://``, ``https://``) that its STAC item gives no version (neither
    ``updated`` nor ``file:checksum``) versioned by its ETag and ``Last-Modified``: one HEAD request per
    object, ``threads`` at a time. For ``pipeline update``, which compares fingerprints; a run does not pay
    it. An object whose HEAD fails keeps its size alone (the read reports it, if it is gone)."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.storage import cached_store, head_key, head_url, split_url

    versions, mtimes = tiles["version"], tiles["mtime"]
    objects = ("s3://", "http://", "https://")
    todo = sorted(
        {str(p) for p, v in zip(tiles["path"], versions, strict=True) if not v and str(p).startswith(objects)}
    )
    if not todo:
        return tiles

    def head(url: str) -> tuple[int, str] | None:
        try:
            if url.startswith("s3://"):  # one client per bucket, its connections kept
                bucket, key = split_url(url)
                _, modified, etag = head_key(cached_store(f"s3://{bucket}", storage), key)
            else:
                _, modified, etag = head_url(url)
            return modified, etag
        except Exception as e:  # noqa: BLE001 - the version is advice: without it, size decides
            logger.info("no version for %s: %s", url, type(e).__name__)
            return None

    with ThreadPoolExecutor(min(threads, len(todo))) as pool:
        found = dict(zip(todo, pool.map(head, todo), strict=True))
    version, mtime = versions.copy(), np.asarray(mtimes, dtype=np.int64).copy()
    for i, p in enumerate(tiles["path"].tolist()):
        got = found.get(str(p))
        if got is not None and got[1]:
            mtime[i], version[i] = got[0], f"etag:{got[1]}"
    logger.info("STAC: %d objects without a version given their ETag by HEAD", len(todo))
    return tiles.assign(version=version, mtime=mtime)
