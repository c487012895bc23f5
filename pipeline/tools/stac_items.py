"""STAC items for single-band GeoTIFFs, as ItemCollection JSON and stac-geoparquet: for the fixtures,
the examples, the benches and the tests. The pipeline reads items in :mod:`pipeline.inputs.stac`."""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import numpy as np

from pipeline.inputs.headers import read_header
from pipeline.inputs.stac_fields import AFFINE

CLASSIFICATION_EXT = "https://stac-extensions.github.io/classification/v2.0.0/schema.json"


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
    asset_fields: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """STAC items (dicts) for single-band GeoTIFFs: one item per (date, tile) of ``pattern``, one asset
    per band keyed by its name, projection and raster extension fields from each file's header.

    ``href_base``: hrefs relative to this folder (else absolute paths). ``scale_offset``: {band:
    (scale, offset)} written into ``raster:bands``. ``asset_fields``: {band: fields} added to that band's
    asset (e.g. ``classification:classes``; an item with ``classification:`` fields lists the
    classification extension). The item time is the date at ``time_of_day`` UTC.
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
                        "proj:transform": [hd[c] for c in AFFINE],
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
            if asset_fields and band in asset_fields:
                asset.update(copy.deepcopy(asset_fields[band]))
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
        if any(k.startswith("classification:") for a in assets.values() for k in a):
            exts.append(CLASSIFICATION_EXT)
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


def write_geoparquet(items: list[dict[str, Any]], path: str) -> str:
    """A stac-geoparquet file, written by rustac (the ``dev`` extra)."""
    import rustac

    rustac.write_sync(path, items)
    return path
