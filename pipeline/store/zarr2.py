"""The Zarr v2 spelling of the store (``output.zarr_format: 2``), for readers without Zarr v3: GDAL
before 3.12 (the GDAL in rasterio's 1.4 wheels is 3.10), zarr-python 2, older xarray.

The same arrays, attributes and chunk bytes as the v3 layout (:mod:`pipeline.store.zarr3`), written as
zarr-python and xarray write Zarr v2 (tested against them): ``.zgroup``, ``.zattrs`` and ``.zarray``
documents, dimensions in each array's ``_ARRAY_DIMENSIONS`` attribute, the fill value (xarray's
``_FillValue``) in ``.zarray`` only, the compressor in numcodecs' spelling, chunk keys ``t.y.x``, and the
consolidated ``.zmetadata`` that finalisation writes last. Zarr v2 has no sharding."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

GROUP = ".zgroup"
ATTRS = ".zattrs"
ARRAY = ".zarray"
CONSOLIDATED = ".zmetadata"
SEPARATOR = "."
"""``dimension_separator``: the v2 default, which every v2 reader knows."""


def compressor_json(codec: str, level: int) -> dict[str, Any] | None:
    """``compression`` as a numcodecs config (what ``numcodecs.get_codec`` takes); None: uncompressed.
    Blosc is blosc-zstd with bit shuffle, as in the v3 chain."""
    if codec == "zstd":
        return {"id": "zstd", "level": level}
    if codec == "gzip":
        return {"id": "gzip", "level": level}
    if codec == "blosc":
        return {"id": "blosc", "cname": "zstd", "clevel": level, "shuffle": 2, "blocksize": 0}
    return None


def _fill_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if value is None:
        return None
    if dtype.kind == "f":
        v = float(value)
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity") if math.isinf(v) else v
    return int(value)


def zarray_json(
    shape: tuple[int, ...], dtype: np.dtype[Any], chunks: tuple[int, ...], fill: Any, compressor: dict[str, Any] | None
) -> dict[str, Any]:
    """An array's ``.zarray``: C order, little-endian, no filters. ``fill`` None: no fill value (xarray
    takes v2's fill value as ``_FillValue``, so coordinates and ``spatial_ref`` have none)."""
    return {
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": dtype.newbyteorder("<").str,
        "fill_value": _fill_json(fill, dtype),
        "order": "C",
        "filters": None,
        "dimension_separator": SEPARATOR,
        "compressor": compressor,
        "zarr_format": 2,
    }


def zattrs_json(attrs: dict[str, Any], dims: list[str] | None) -> dict[str, Any]:
    """An array's ``.zattrs``: its attributes, and its dimensions as xarray and GDAL read them."""
    return {**attrs, "_ARRAY_DIMENSIONS": list(dims or [])}


def gdal_crs(crs_wkt: str) -> dict[str, Any]:
    """GDAL's own CRS attribute (``_CRS``), for a band: GDAL before 3.9 reads no CF grid mapping, and
    found no CRS without it (Debian 12's GDAL 3.6, checked); later GDALs read either."""
    return {"wkt": crs_wkt}


def chunk_key(array: str, index: tuple[int, ...]) -> str:
    """The key of one chunk (``B02/0.3.1``; a 0-d array's only chunk is ``0``)."""
    return f"{array}/{SEPARATOR.join(str(i) for i in index) or '0'}"


def consolidated_json(root_attrs: dict[str, Any], children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``.zmetadata`` as ``zarr.consolidate_metadata`` writes it: every document of the group, keyed by
    its path. ``children``: {array name: {``.zarray``: ..., ``.zattrs``: ...}}."""
    meta: dict[str, Any] = {GROUP: {"zarr_format": 2}, ATTRS: root_attrs}
    for name in sorted(children):
        for doc, value in sorted(children[name].items()):
            meta[f"{name}/{doc}"] = value
    return {"metadata": meta, "zarr_consolidated_format": 1}


GDAL_READS_FROM = {"v2": (3, 4), "v3": (3, 12), "v3-sharded": (3, 13)}
"""The oldest GDAL whose Zarr driver reads each layout of the store (docs/output.md, "Who reads the store").
v2: every GDAL with the driver (3.6.2, 3.10.3, 3.12.2 checked); v3: 3.10.3 fails ("Unsupported codec:
bytes"), 3.12.2 reads; v3 with shards: 3.12.2 fails ("Unsupported codec: sharding_indexed"), GDAL's
documentation gives 3.13. ``tests/test_readers.py`` holds the installed GDAL to it."""


def gdal_reads(gdal_version: str) -> list[str]:
    """The layouts (keys of :data:`GDAL_READS_FROM`) that GDAL ``gdal_version`` ("3.10.3") reads."""
    have = tuple(int(p) for p in gdal_version.split(".")[:2])
    return [layout for layout, oldest in GDAL_READS_FROM.items() if have >= oldest]
