"""The Zarr v3 spelling of the store's metadata (Zarr v2's: :mod:`.zarr2`), as zarr-python and xarray
write it (tested against them): each array's ``zarr.json``, its codec chain (sharded or not) and fill
value, and xarray's ``_FillValue`` attribute."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import numpy as np


def codecs_json(codec: str, level: int, dtype: np.dtype[Any]) -> list[dict[str, Any]]:
    """The codec chain as Zarr v3 metadata, as zarr-python writes it (tested against it)."""
    chain: list[dict[str, Any]] = [
        {"name": "bytes"} if dtype.itemsize == 1 else {"name": "bytes", "configuration": {"endian": "little"}}
    ]
    if codec == "zstd":
        chain.append({"name": "zstd", "configuration": {"level": level, "checksum": False}})
    elif codec == "gzip":
        chain.append({"name": "gzip", "configuration": {"level": level}})
    elif codec == "blosc":
        chain.append(
            {
                "name": "blosc",
                "configuration": {
                    "typesize": dtype.itemsize,
                    "cname": "zstd",
                    "clevel": level,
                    "shuffle": "bitshuffle",
                    "blocksize": 0,
                },
            }
        )
    return chain


def fill_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "f":
        v = float(value)
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity") if math.isinf(v) else v
    return int(value)


def array_json(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    chunks: tuple[int, ...],
    fill: Any,
    codecs: list[dict[str, Any]],
    dims: list[str] | None,
    attrs: dict[str, Any],
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "shape": list(shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_json(fill, dtype),
        "codecs": codecs,
        "attributes": attrs,
    }
    if dims is not None:
        meta["dimension_names"] = dims
    meta.update(zarr_format=3, node_type="array", storage_transformers=[])
    return meta


def sharding_json(inner: list[dict[str, Any]], chunks: tuple[int, ...]) -> list[dict[str, Any]]:
    """The codec chain of a sharded array as zarr-python writes it: inner chunks of ``chunks`` with the
    ``inner`` chain, the index (offset, length per chunk) at the end, little-endian with a CRC32C."""
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(chunks),
                "codecs": inner,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ]


def fill_attr(value: float, dtype: np.dtype[Any]) -> Any:
    """``_FillValue`` as xarray encodes it in Zarr v3 attributes: floats as base64 of a little-endian double."""
    if dtype.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode()
    return int(value)
