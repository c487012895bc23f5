"""The STAC rules, pure: which assets are rasters, which band of an asset a config names, where each
field is found in STAC 1.0 and 1.1 items, time steps and hrefs. Both readers (item dicts in
:mod:`pipeline.inputs.stac`, stac-geoparquet in :mod:`pipeline.inputs.stac_parquet`) apply them, so an
item gives the same row whichever way it was read.

Where a field is looked for, first found wins (odc-stac's order):

=========  ==========================================  =========================  ========================
field      STAC 1.1 ``bands[k]``, then the asset        STAC 1.0 ``raster:bands``  item properties
=========  ==========================================  =========================  ========================
nodata     ``nodata``                                   ``nodata``                 the same names
data_type  ``data_type``                                ``data_type``
scale      ``raster:scale``                             ``scale``
offset     ``raster:offset``                            ``offset``
unit       ``unit``                                     ``unit``
=========  ==========================================  =========================  ========================

The CRS is ``proj:code`` (``EPSG:32632``), else ``proj:epsg``, else ``proj:wkt2``; any of them may be
null. ``proj:transform`` has 6 or 9 values (the first 6 are the affine); ``proj:shape`` is [rows, cols];
each on the asset or the item.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

import numpy as np

from pipeline.config import is_url

GROUPBY = ("solar_day", "time", "none")
RASTER_TYPES = ("image/tiff", "image/vnd.stac.geotiff", "image/jp2", "application/x-hdf")
NOT_DATA_ROLES = {"thumbnail", "overview", "metadata", "visual"}
AFFINE = ("a", "b", "c", "d", "e", "f")
BAND_FIELDS = {  # column: (STAC 1.1 name in bands[k] or on the asset, STAC 1.0 name in raster:bands[k])
    "nodata": ("nodata", "nodata"),
    "dtype": ("data_type", "data_type"),
    "scale": ("raster:scale", "scale"),
    "offset": ("raster:offset", "offset"),
    "unit": ("unit", "unit"),
}
CLASSIFICATION = ("classification:classes", "classification:bitfields")
ASSET_COLUMNS = [
    "classification",
    "href",
    "band",
    "bidx",
    "item",
    "collection",
    "time",
    "lon",
    "crs",
    *AFFINE,
    "width",
    "height",
    "dtype",
    "nodata",
    "scale",
    "offset",
    "unit",
    "size",
    "version",
    "categorical",
]
"""The asset table both readers produce: one row per (item, band); unknown numbers NaN (``width``/
``height``: -1; ``size``: 0), unknown strings None. ``bidx``: the band of the asset (1-based); ``version``:
:func:`asset_version` (empty: none);
``categorical``: the band has STAC ``classification:classes`` or ``bitfields``."""


def band_entries(asset: dict[str, Any]) -> list[dict[str, Any]]:
    """The asset's per-band entries: STAC 1.1 ``bands``, else 1.0 ``raster:bands``, else ``eo:bands``."""
    for key in ("bands", "raster:bands", "eo:bands"):
        value = asset.get(key)
        if isinstance(value, list) and value:
            return [v if isinstance(v, dict) else {} for v in value]
    return []


def is_raster_asset(asset: dict[str, Any]) -> bool:
    """A data raster: a raster media type or raster/proj fields, and no thumbnail, overview, metadata or
    visual (a rendered RGB picture) role."""
    if NOT_DATA_ROLES & set(asset.get("roles") or ()):
        return False
    kind = str(asset.get("type") or "")
    return kind.startswith(RASTER_TYPES) or any(k in asset for k in ("raster:bands", "bands", "proj:shape"))


def band_count(asset: dict[str, Any]) -> int:
    """How many bands the asset declares (1 where it declares none)."""
    return max(len(asset.get("bands") or ()), len(asset.get("raster:bands") or ()), len(asset.get("eo:bands") or ()), 1)


def split_asset_key(wanted: str, keys: Any) -> tuple[str, str | None]:
    """An ``inputs.assets`` value as (asset key, band selector): ``visual`` is that asset's only band;
    ``visual.2`` its second band and ``visual.red`` the band named (or common-named) ``red``, unless the
    whole value is itself an asset key."""
    if wanted in keys or "." not in wanted:
        return wanted, None
    key, _, selector = wanted.rpartition(".")
    return key, selector


def band_index(asset: dict[str, Any], selector: str | None) -> int | None:
    """The 1-based band of ``asset`` that ``selector`` names (None: the first), or None where it has no
    such band."""
    if selector is None:
        return 1
    n = band_count(asset)
    if selector.isdigit():
        k = int(selector)
        return k if 1 <= k <= n else None
    for key in ("bands", "eo:bands", "raster:bands"):
        for k, entry in enumerate(asset.get(key) or (), start=1):
            if isinstance(entry, dict) and selector in (
                entry.get("name"),
                entry.get("eo:common_name"),
                entry.get("common_name"),
            ):
                return k
    return None


def band_field(asset: dict[str, Any], props: dict[str, Any], k: int, column: str) -> Any:
    """Field ``column`` (a key of :data:`BAND_FIELDS`) of band ``k`` (1-based) of ``asset``, looked for
    in the documented order; None where no level has it."""
    new, old = BAND_FIELDS[column]
    for holder, name in (
        (_nth(asset.get("bands"), k), new),
        (asset, new),
        (_nth(asset.get("raster:bands"), k), old),
        (_nth(props.get("bands"), k), new),
        (props, new),
        (_nth(props.get("raster:bands"), k), old),
    ):
        if holder is not None and holder.get(name) is not None:
            return holder[name]
    return None


def is_categorical(asset: dict[str, Any], k: int) -> bool:
    """Band ``k`` carries STAC classification classes or bitfields (a class or QA band)."""
    holders = (asset, _nth(asset.get("bands"), k) or {}, _nth(asset.get("raster:bands"), k) or {})
    return any(name in holder for holder in holders for name in CLASSIFICATION)


def classification_of(asset: dict[str, Any], k: int) -> dict[str, dict[str, Any]] | None:
    """Band ``k``'s STAC classification as names: ``{"classes": {name: value}, "bitfields": {name: (offset,
    length)}}`` (what ``mask.exclude`` / ``exclude_bits`` names resolve against); None where it has none."""
    holders = (asset, _nth(asset.get("bands"), k) or {}, _nth(asset.get("raster:bands"), k) or {})
    out: dict[str, dict[str, Any]] = {"classes": {}, "bitfields": {}}
    for holder in holders:
        for c in holder.get("classification:classes") or ():
            if isinstance(c, dict) and c.get("name") is not None and c.get("value") is not None:
                out["classes"].setdefault(str(c["name"]), int(c["value"]))
        for f in holder.get("classification:bitfields") or ():
            if isinstance(f, dict) and f.get("name") is not None and f.get("offset") is not None:
                out["bitfields"].setdefault(str(f["name"]), (int(f["offset"]), int(f.get("length") or 1)))
    return out if out["classes"] or out["bitfields"] else None


def _nth(entries: Any, k: int) -> dict[str, Any] | None:
    if isinstance(entries, list) and len(entries) >= k and isinstance(entries[k - 1], dict):
        return entries[k - 1]
    return None


def crs_of(asset: dict[str, Any], props: dict[str, Any]) -> str | None:
    """The CRS the projection extension gives, or None: ``proj:code`` (the asset's, then the item's),
    else ``proj:epsg``, else ``proj:wkt2``; a null value counts as absent."""
    for name in ("proj:code", "proj:epsg", "proj:wkt2"):
        for holder in (asset, props):
            value = holder.get(name)
            if value is None or value == "":
                continue
            return f"EPSG:{int(value)}" if name == "proj:epsg" else str(value)
    return None


def proj_field(asset: dict[str, Any], props: dict[str, Any], name: str) -> Any:
    """A projection field (``proj:transform``, ``proj:shape``) of the asset, else of the item; None."""
    value = asset.get(name)
    return props.get(name) if value is None else value


def number(value: Any) -> float:
    """A STAC number (or ``"nan"``/``"inf"`` strings, as nodata is often written) as float; NaN for None."""
    try:
        return float("nan") if value is None else float(value)
    except (TypeError, ValueError):
        return float("nan")


VERSION_FIELDS = ("updated", "file:checksum")
"""The fields :func:`asset_version` reads (an item's ``updated``, an asset's both)."""


def arrow_versions(table: Any, sub: Any, rows: np.ndarray) -> np.ndarray:
    """:func:`asset_version` of ``rows`` of a stac-geoparquet table (Arrow): ``sub`` the assets' struct
    column, the item's ``updated`` a column of the table."""
    import pyarrow.compute as pc

    names = {sub.type.field(i).name for i in range(sub.type.num_fields)}

    def values(column: Any) -> list[Any]:
        return [_text(v) for v in column.take(rows).to_pylist()] if column is not None else [None] * len(rows)

    asset_updated = values(pc.struct_field(sub, ["updated"]) if "updated" in names else None)
    checksum = values(pc.struct_field(sub, ["file:checksum"]) if "file:checksum" in names else None)
    item_updated = values(table.column("updated") if "updated" in table.column_names else None)
    out = np.empty(len(rows), dtype=object)
    out[:] = [asset_version(*v) for v in zip(asset_updated, item_updated, checksum, strict=True)]
    return out


def _text(value: Any) -> Any:
    """A time as the JSON items spell it (stac-geoparquet stores timestamps): ``2024-06-01T00:00:00Z``."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value.tzinfo else value.isoformat()
    return value


def asset_version(updated: Any, item_updated: Any, checksum: Any) -> str:
    """What tells one version of an asset from another, for the record :func:`pipeline.update` compares:
    ``updated:TIME`` (the asset's ``updated``, else its item's ``properties.updated``: STAC common
    metadata, an asset's own fields overriding its item's), else ``checksum:VALUE`` (the file extension's
    ``file:checksum``), else empty (the asset's ``file:size`` is then all there is). ``updated`` first: a
    provider's reprocessing of the item's metadata changes the output without changing the file."""
    for kind, value in (("updated", updated), ("updated", item_updated), ("checksum", checksum)):
        if value is not None and str(value) != "":
            return f"{kind}:{value}"
    return ""


def parse_time(props: dict[str, Any]) -> np.datetime64:
    """The item's ``datetime`` (else ``start_datetime``) as UTC datetime64[ns]."""
    text = props.get("datetime") or props.get("start_datetime")
    if not text:
        raise ValueError("has no datetime or start_datetime")
    t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return np.datetime64(t, "ns")


def bbox_longitude(west: np.ndarray, east: np.ndarray) -> np.ndarray:
    """The longitude in the middle of bboxes' ``west`` .. ``east``, in [-180, 180): across the antimeridian
    where west > east, as the STAC spec writes a bbox that crosses it."""
    west, east = np.asarray(west, dtype="f8"), np.asarray(east, dtype="f8")
    with np.errstate(invalid="ignore"):
        mid = (west + np.where(west > east, east + 360.0, east)) / 2
        return (mid + 180.0) % 360.0 - 180.0


def longitude_middle(lon: np.ndarray) -> float:
    """The middle of the shortest arc of longitudes that holds every finite one of ``lon`` (0 where none): of
    items either side of 180, a longitude near 180 (past it where the arc runs past it), not 0."""
    known = np.sort((np.asarray(lon, dtype="f8")[np.isfinite(lon)] + 180.0) % 360.0 - 180.0)
    if not len(known):
        return 0.0
    gaps = np.append(np.diff(known), known[0] + 360.0 - known[-1])
    k = len(gaps) - 1 - int(np.argmax(gaps[::-1]))  # the largest gap; on a tie, the one across 180
    if k == len(gaps) - 1:
        return float((known[0] + known[-1]) / 2)
    return float((known[k + 1] + known[k] + 360.0) / 2)


def compute_solar_day(times: np.ndarray, lon: float) -> np.ndarray:
    """odc-stac's solar day: the date part of UTC ``times`` shifted by ``lon``/15 whole hours (truncated,
    as ``int()`` does), ``lon`` being the longitude of the output grid's centre (datetime64[D])."""
    hours = int(lon / 15) if np.isfinite(lon) else 0
    return (np.asarray(times, dtype="datetime64[ns]") + np.timedelta64(hours, "h")).astype("datetime64[D]")


def compute_time_steps(times: np.ndarray, lon: float, groupby: str) -> np.ndarray:
    """Each asset's time step (datetime64[ns]), as odc-stac groups and labels them: ``solar_day`` groups by
    :func:`compute_solar_day` at the grid centre's longitude ``lon`` and labels each group by its earliest
    item time (by the day at 00:00 in the rare case where two days' earliest items share one time);
    ``time`` keeps the exact times; ``none`` makes one step at the earliest time."""
    times = np.asarray(times, dtype="datetime64[ns]")
    if groupby == "solar_day":
        days = compute_solar_day(times, lon)
        distinct, group = np.unique(days, return_inverse=True)
        first = np.full(len(distinct), np.datetime64("NaT"), dtype="datetime64[ns]")
        order = np.argsort(times, kind="stable")[::-1]  # latest first, so the earliest is written last
        first[group.reshape(-1)[order]] = times[order]
        labels, counts = np.unique(first, return_counts=True)
        shared = np.isin(first, labels[counts > 1])  # two days whose earliest items share a time
        first[shared] = distinct[shared].astype("datetime64[ns]")
        return first[group.reshape(-1)]
    if groupby == "time":
        return times
    if groupby == "none":
        return np.full(len(times), times.min() if len(times) else np.datetime64(0, "ns"), dtype="datetime64[ns]")
    raise ValueError(f"groupby must be one of {GROUPBY}, not {groupby!r}")


def resolve_href(href: str, base: str | None, fallback: str | None = None) -> str:
    """An asset href as the readers take it: URLs kept, ``file://`` stripped, relative ones joined to
    ``base`` (the item's ``self`` link, else the document it came from), local paths made absolute.

    ``fallback``: the local document the item was read from. An item copied from a catalogue keeps its
    ``self`` link to the catalogue: where ``base`` does not lead to a local file that exists and the
    href joined to ``fallback`` does, that file is the asset."""
    if href.startswith("file://"):
        href = href[len("file://") :]
    if is_url(href):
        return href
    if os.path.isabs(href):
        return os.path.normpath(href)
    joined = _join(href, base) if base else None
    if fallback and base != fallback and not (is_url(fallback) and not fallback.startswith("file://")):
        beside = _join(href, fallback)
        if (joined is None or is_url(joined) or not os.path.exists(joined)) and os.path.exists(beside):
            return beside
    return joined if joined is not None else os.path.normpath(os.path.abspath(href))


def _join(href: str, base: str) -> str:
    if is_url(base) and not base.startswith("file://"):
        return urljoin(base, href)
    base = base[len("file://") :] if base.startswith("file://") else base
    return os.path.normpath(os.path.abspath(os.path.join(os.path.dirname(base), href)))


def item_base(self_href: str | None, document: str | None) -> str | None:
    """What an item's relative asset hrefs resolve against: its ``self`` link (itself joined to the
    document it was read from when relative, as ``./item.json`` in some catalogues), else the document."""
    if not self_href:
        return document
    if is_url(self_href) or os.path.isabs(self_href.removeprefix("file://")) or not document:
        return self_href
    return _join(self_href, document)


def asset_href(asset: dict[str, Any], alternate: str | None) -> str | None:
    """The asset's href, or its ``alternate`` one of that name (e.g. ``s3`` against an ``https`` href)
    where the asset has it."""
    if alternate:
        alt = (asset.get("alternate") or {}).get(alternate) or {}
        if alt.get("href"):
            return str(alt["href"])
    href = asset.get("href")
    return None if href is None else str(href)
