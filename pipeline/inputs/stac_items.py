"""STAC items in, the asset table out: reading item documents (an ItemCollection, an Item, a static
catalog, locally or from an object store; a STAC API search), and turning item dicts into the asset
table's columns (:data:`~pipeline.inputs.stac_fields.ASSET_COLUMNS`), one row per item and wanted band.
The rules it applies are :mod:`pipeline.inputs.stac`'s docstring's; where each field is found,
:mod:`pipeline.inputs.stac_fields`'s. stac-geoparquet is read column-wise by
:mod:`pipeline.inputs.stac_parquet` instead."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from pipeline.config import is_url
from pipeline.errors import ConfigError
from pipeline.inputs.stac_fields import (
    AFFINE,
    ASSET_COLUMNS,
    asset_href,
    asset_version,
    band_count,
    band_field,
    band_index,
    bbox_longitude,
    classification_of,
    crs_of,
    is_categorical,
    is_raster_asset,
    item_base,
    number,
    parse_time,
    proj_field,
    resolve_href,
    split_asset_key,
)


def asset_rows_from_items(
    items: Iterable[dict[str, Any]],
    assets: dict[str, str] | None,
    base: str | None,
    skipped: list[dict[str, str]],
    alternate: str | None = None,
) -> dict[str, list[Any]]:
    """The asset table (lists, :data:`~pipeline.inputs.stac_fields.ASSET_COLUMNS`) from item dicts; items
    lacking a wanted asset or band go to ``skipped``."""
    rows: dict[str, list[Any]] = {c: [] for c in ASSET_COLUMNS}
    items = list(items)
    why = "wanted by inputs.assets"
    if assets is None:  # every key whose first asset is a single-band raster (as the Arrow reader decides)
        first: dict[str, dict[str, Any]] = {}
        for it in items:
            for k, a in (it.get("assets") or {}).items():
                first.setdefault(k, a)
        assets = {k: k for k in sorted(first) if is_raster_asset(first[k]) and band_count(first[k]) == 1}
        why = "inputs.assets is null: every single-band raster asset is wanted; set it to choose"
    for item in items:
        item_id = str(item.get("id"))
        props = item.get("properties") or {}
        found = item.get("assets") or {}
        try:
            time = parse_time(props)
        except ValueError as e:
            skipped.append({"path": item_id, "error": f"STAC item {e}"})
            continue
        chosen: dict[str, tuple[str, int]] = {}
        problems = []
        for band, wanted in assets.items():
            key, selector = split_asset_key(wanted, found)
            asset = found.get(key) or {}
            k = band_index(asset, selector) if asset.get("href") else None
            if not asset.get("href"):
                problems.append(f"no asset {key!r}")
            elif k is None:
                problems.append(f"asset {key!r} has no band {selector!r} (it has {band_count(asset)})")
            else:
                chosen[band] = (key, k)
        if problems:
            skipped.append(
                {"path": item_id, "error": f"STAC item has {'; '.join(problems)} ({why}); it has {sorted(found)}"}
            )
            continue
        bbox = item.get("bbox") or [np.nan] * 4
        lon = float(bbox_longitude(bbox[0], bbox[len(bbox) // 2]))  # [w, s, e, n] or with z: [.., zmin, e, ..]
        self_href = next((ln.get("href") for ln in item.get("links") or () if ln.get("rel") == "self"), None)
        for band, (key, k) in chosen.items():
            asset = found[key]
            shape = proj_field(asset, props, "proj:shape")
            transform = proj_field(asset, props, "proj:transform")
            rows["href"].append(resolve_href(str(asset_href(asset, alternate)), item_base(self_href, base), base))
            rows["band"].append(band)
            rows["bidx"].append(k)
            rows["item"].append(item_id)
            rows["collection"].append(str(item.get("collection") or ""))
            rows["time"].append(time)
            rows["lon"].append(lon)
            rows["crs"].append(crs_of(asset, props))
            for j, name in enumerate(AFFINE):
                rows[name].append(float(transform[j]) if transform and len(transform) >= 6 else np.nan)
            rows["height"].append(int(shape[0]) if shape else -1)
            rows["width"].append(int(shape[1]) if shape else -1)
            dtype = band_field(asset, props, k, "dtype")
            rows["dtype"].append(None if dtype is None else str(dtype))
            for column in ("nodata", "scale", "offset"):
                rows[column].append(number(band_field(asset, props, k, column)))
            unit = band_field(asset, props, k, "unit")
            rows["unit"].append(None if unit is None else str(unit))
            rows["size"].append(int(asset.get("file:size") or 0))
            rows["version"].append(
                asset_version(asset.get("updated"), props.get("updated"), asset.get("file:checksum"))
            )
            rows["categorical"].append(is_categorical(asset, k))
            rows["classification"].append(classification_of(asset, k))
    return rows


def read_item_dicts(source: str, storage: Any = None) -> tuple[list[dict[str, Any]], str]:
    """Items of an ItemCollection or a static catalog (pystac), their hrefs made absolute; the base. A
    local file, or an object (``s3://``, ``https://``; a catalog's children are then read by pystac)."""

    import pystac

    try:
        if is_url(source):
            from pipeline.storage import read_object

            data = read_object(source, storage, key="inputs.stac")
            if data is None:
                raise ConfigError("inputs.stac", f"no such object: {source}; check the key and bucket")
            doc = json.loads(data)
        else:
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


def split_bbox(bbox: Any) -> list[list[float]]:
    """A search bbox as boxes within [-180, 180]: one across the antimeridian (west > east, as the STAC
    spec writes it, or an east past 180 / a west before -180) is its two sides, which every STAC API
    answers (some refuse west > east); any other bbox is itself."""
    box = [float(v) for v in bbox]
    k = len(box) // 2
    west, east = box[0], box[k] + (360.0 if box[0] > box[k] else 0.0)
    if west < -180.0:
        west, east = west + 360.0, east + 360.0
    low, high = box[1:k], box[k + 1 :]
    if east - west >= 360.0:
        return [[-180.0, *low, 180.0, *high]]
    if east <= 180.0:
        return [[west, *low, east, *high]]
    return [[west, *low, 180.0, *high], [-180.0, *low, east - 360.0, *high]]


def search_item_dicts(search: dict[str, Any]) -> list[dict[str, Any]]:
    """Items a STAC API search returns (pystac-client), as dicts. A bbox across the antimeridian is
    searched as its two sides (:func:`split_bbox`), items found by both once, in the order found."""
    import pystac_client

    params = {k: v for k, v in search.items() if k != "url" and v is not None}
    boxes = split_bbox(params["bbox"]) if "bbox" in params else [None]
    try:
        client = pystac_client.Client.open(search["url"])
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for box in boxes:
            part = params if box is None else {**params, "bbox": box}
            for item in client.search(**part).items_as_dicts():
                found.setdefault((str(item.get("collection")), str(item.get("id"))), item)
    except Exception as e:  # noqa: BLE001 - network, HTTP and API errors alike
        raise ConfigError("inputs.stac_search", f"the search at {search['url']} failed: {type(e).__name__}: {e}") from e
    items = list(found.values())
    limit = params.get("max_items")
    return items[: int(limit)] if limit is not None and len(boxes) > 1 else items
