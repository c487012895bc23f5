"""The output store: template first, then chunk-aligned writes, completion last.

1. :func:`create_store` writes the whole layout up front (arrays, coordinates,
   CRS, attributes with ``pipeline_complete: false``) and no band data.
2. Tasks call :func:`write_chunk` for whole chunks only; each chunk is its own
   object in the store, so writers never share anything and need no lock.
3. :func:`finalize_store` marks the store complete and consolidates metadata.
   A store whose attributes do not say complete was interrupted.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline import __version__
from pipeline.errors import ConfigError, StoreError
from pipeline.plan import Plan

logger = logging.getLogger(__name__)
JOURNAL_DIR = ".pipeline-journal"
"""Inside the store while it is incomplete: one empty file per finished partition."""
_arrays: dict[tuple[str, str], tuple[tuple[int, int] | None, BandArray]] = {}
_arrays_lock = threading.Lock()


def _codecs_json(codec: str, level: int, dtype: np.dtype[Any]) -> list[dict[str, Any]]:
    """The codec chain as Zarr v3 metadata, as zarr-python writes it (tested against it)."""
    chain: list[dict[str, Any]] = [
        {"name": "bytes"} if dtype.itemsize == 1 else {"name": "bytes", "configuration": {"endian": "little"}}
    ]
    if codec == "zstd":
        chain.append({"name": "zstd", "configuration": {"level": level, "checksum": False}})
    elif codec == "gzip":
        chain.append({"name": "gzip", "configuration": {"level": level}})
    elif codec == "blosc":
        chain.append({"name": "blosc", "configuration": {"typesize": dtype.itemsize, "cname": "zstd", "clevel": level,
                                                        "shuffle": "bitshuffle", "blocksize": 0}})  # fmt: skip
    return chain


def _fill_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "f":
        v = float(value)
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity") if math.isinf(v) else v
    return int(value)


def _array_json(
    shape: tuple[int, ...], dtype: np.dtype[Any], chunks: tuple[int, ...], fill: Any,
    codecs: list[dict[str, Any]], dims: list[str] | None, attrs: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {
        "shape": list(shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": _fill_json(fill, dtype),
        "codecs": codecs,
        "attributes": attrs,
    }
    if dims is not None:
        meta["dimension_names"] = dims
    meta.update(zarr_format=3, node_type="array", storage_transformers=[])
    return meta


def _write_json(path: str, doc: dict[str, Any]) -> None:
    """Write a metadata document whole or not at all (a reader never sees half a file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, allow_nan=False)
    os.replace(tmp, path)


def _node_json(folder: str) -> dict[str, Any]:
    """The ``zarr.json`` of a store node (the root group, or an array's folder)."""
    with open(os.path.join(folder, "zarr.json")) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def store_is_complete(path: str) -> bool:
    try:
        return bool(_node_json(path).get("attributes", {}).get("pipeline_complete", False))
    except (OSError, ValueError):  # absent or unreadable: not complete
        return False


def _fill_attr(value: float, dtype: np.dtype[Any]) -> Any:
    """``_FillValue`` as xarray encodes it in Zarr v3 attributes: floats as base64 of a little-endian double."""
    if dtype.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode()
    return int(value)


def grid_mapping_attrs(crs: str, transform: tuple[float, ...]) -> dict[str, Any]:
    """CF grid-mapping attributes for the ``spatial_ref`` variable, as rioxarray writes them."""
    from pyproj import CRS

    wkt = CRS.from_user_input(crs).to_wkt("WKT1_GDAL")
    a, b, c, d, e, f = transform
    attrs: dict[str, Any] = CRS.from_wkt(wkt).to_cf()
    attrs.update(crs_wkt=wkt, spatial_ref=wkt, GeoTransform=" ".join(str(float(v)) for v in (c, a, b, f, d, e)))
    return attrs


def create_store(plan: Plan, path: str, *, codec: str, level: int, config_hash: str,
                 settings: dict[str, Any], overwrite: bool) -> None:  # fmt: skip
    """Write the store template. Refuses an existing path unless ``overwrite``.

    Written with zarr directly (no xarray/dask: importing them cost the driver over a second), in the
    layout ``xarray.open_zarr`` and rioxarray read: ``dimension_names``, CF ``time`` units, a
    ``spatial_ref`` grid mapping linked from every band.
    """
    if os.path.exists(path):
        if not overwrite:
            raise ConfigError(
                "output.path",
                f"{path} already exists; pass --overwrite to replace it (or --resume to finish it)",
            )
        logger.info("removing existing store %s (--overwrite)", path)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    grid = plan.grid
    ch, cw = grid.chunks_yx
    shape = (len(plan.times), *grid.shape_yx)
    seconds = np.array(plan.times, dtype="datetime64[s]").astype(np.int64)
    attrs = {
        "pipeline_complete": False,
        "pipeline_config_hash": config_hash,
        "pipeline_settings": settings,
        "pipeline_version": __version__,
        "resampling": plan.resampling,
        "fuse": plan.fuse,
    }
    try:
        os.makedirs(path)
        _write_json(os.path.join(path, "zarr.json"), {"attributes": attrs, "zarr_format": 3,
                                                      "consolidated_metadata": None, "node_type": "group"})  # fmt: skip
        coords: dict[str, tuple[np.ndarray, dict[str, Any]]] = {
            "time": (seconds, {"units": "seconds since 1970-01-01", "calendar": "proleptic_gregorian"}),
            "y": (grid.y_coords(), {}),
            "x": (grid.x_coords(), {}),
        }
        for name, (values, extra) in coords.items():  # one uncompressed chunk each
            values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
            os.makedirs(os.path.join(path, name, "c"))
            _write_json(os.path.join(path, name, "zarr.json"),
                        _array_json(values.shape, values.dtype, values.shape, 0, _codecs_json("none", 0, values.dtype),
                                    [name], extra))  # fmt: skip
            with open(os.path.join(path, name, "c", "0"), "wb") as f:
                f.write(values.tobytes())
        os.makedirs(os.path.join(path, "spatial_ref"))
        i8 = np.dtype("int64")
        _write_json(os.path.join(path, "spatial_ref", "zarr.json"),
                    _array_json((), i8, (), 0, _codecs_json("zstd", 0, i8), None,
                                grid_mapping_attrs(grid.crs, grid.transform)))  # fmt: skip
        band_attrs = {"grid_mapping": "spatial_ref", "coordinates": "spatial_ref"}
        for b in plan.bands:
            dtype = np.dtype(b.dtype)
            os.makedirs(os.path.join(path, b.name))
            _write_json(os.path.join(path, b.name, "zarr.json"), _array_json(
                shape, dtype, (1, ch, cw), np.nan if math.isnan(b.nodata) else b.nodata,
                _codecs_json(codec, level, dtype), ["time", "y", "x"],
                {"_FillValue": _fill_attr(b.nodata, dtype), **band_attrs, **dict(b.attrs)},
            ))  # fmt: skip
    except OSError as e:
        raise StoreError(f"cannot create the output store {path}: {e}") from e


@dataclass
class BandArray:
    """One band array as the workers write it: its layout from ``zarr.json`` and how to encode a chunk."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    fill: Any
    encode: Callable[[np.ndarray], bytes] | None
    """The codec chain as one function (:func:`chunk_encoder`); None: written through zarr-python."""
    zarr_array: Any = None
    """zarr-python's array, opened on the first write where ``encode`` is None."""


def open_array(path: str, band: str) -> BandArray:
    """The band's layout and chunk encoder, read from its ``zarr.json`` (no zarr-python: its import was
    ~0.2 s of every worker's start), cached per process while that file is the same: a store made again
    at the same path (``--overwrite``, another run on a long-lived worker, or a worker forked from a
    driver that wrote) is read afresh."""
    key = (path, band)
    try:
        st = os.stat(os.path.join(path, band, "zarr.json"))
        stamp: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
    except OSError:
        stamp = None
    with _arrays_lock:
        hit = _arrays.get(key)
        if hit is None or hit[0] != stamp or stamp is None:
            try:
                meta = _node_json(os.path.join(path, band))
                arr = BandArray(
                    shape=tuple(meta["shape"]),
                    chunks=tuple(meta["chunk_grid"]["configuration"]["chunk_shape"]),
                    dtype=np.dtype(meta["data_type"]),
                    fill=_fill_value(meta["fill_value"], np.dtype(meta["data_type"])),
                    encode=chunk_encoder(meta),
                )  # fmt: skip
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise StoreError(f"{path}/{band} is not an array of this store ({e}); rerun with --overwrite") from e
            hit = _arrays[key] = (stamp, arr)
    return hit[1]


def _fill_value(value: Any, dtype: np.dtype[Any]) -> Any:
    """The inverse of :func:`_fill_json` (Zarr v3 spells non-finite floats as strings)."""
    if dtype.kind == "f" and isinstance(value, str):
        return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[value]
    return dtype.type(value)


def chunk_encoder(meta: dict[str, Any]) -> Callable[[np.ndarray], bytes] | None:
    """The codec chain of an array's ``zarr.json`` as one function, where this module can run it
    directly: Zarr v3, a regular chunk grid, bytes (little-endian) then at most one zstd or gzip
    compressor, default chunk keys with ``/``, no sharding or storage transformers. Else None, and
    chunks go through zarr-python's own write path.

    zarr-python's write path costs ~7 ms per 512 KB chunk against ~3 ms to compress it (an async
    round trip per chunk); a whole-chunk write needs none of it (README, Performance).
    """
    import numcodecs

    if meta.get("zarr_format") != 3 or meta.get("storage_transformers"):
        return None
    if meta.get("chunk_grid", {}).get("name") != "regular":
        return None
    if meta.get("chunk_key_encoding") != {"name": "default", "configuration": {"separator": "/"}}:
        return None
    codecs = meta.get("codecs") or []
    # Single-byte types have no endianness, and their bytes codec no configuration.
    if not codecs or codecs[0] not in ({"name": "bytes", "configuration": {"endian": "little"}}, {"name": "bytes"}):
        return None
    if len(codecs) > 2:
        return None
    if len(codecs) == 1:
        return lambda a: a.tobytes()
    name, conf = codecs[1]["name"], codecs[1].get("configuration", {})
    if name == "zstd" and set(conf) <= {"level", "checksum"}:
        codec: Any = numcodecs.Zstd(level=int(conf.get("level", 0)), checksum=bool(conf.get("checksum", False)))
    elif name == "gzip" and set(conf) <= {"level"}:
        codec = numcodecs.GZip(level=int(conf.get("level", 5)))
    else:
        return None
    return lambda a: bytes(codec.encode(a))


def _write_direct(arr: BandArray, encode: Callable[[np.ndarray], bytes], path: str, band: str,
                  t: int, r0: int, c0: int, data: np.ndarray) -> None:  # fmt: skip
    """One whole chunk as zarr writes it: edge chunks padded to full size with the fill value, and a
    chunk that is all fill value not stored (zarr's ``write_empty_chunks=False``; an old one is removed)."""
    _, ch, cw = arr.chunks
    dtype = arr.dtype.newbyteorder("<")
    fill = arr.fill
    if data.shape == (ch, cw):
        block = np.ascontiguousarray(data, dtype=dtype)
    else:
        block = np.full((ch, cw), fill, dtype=dtype)
        block[: data.shape[0], : data.shape[1]] = data
    empty = bool(np.isnan(block).all()) if dtype.kind == "f" and np.isnan(fill) else bool((block == fill).all())
    name = os.path.join(path, band, "c", str(t), str(r0 // ch), str(c0 // cw))
    if empty:
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
        return
    payload = encode(block)
    try:
        with open(name, "wb") as f:
            f.write(payload)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(name, "wb") as f:
            f.write(payload)


def write_chunk(path: str, band: str, t: int, window: tuple[int, int, int, int], data: np.ndarray) -> int:
    """Write one whole chunk; raise StoreError if the region is not chunk-aligned. Returns bytes."""
    arr = open_array(path, band)
    r0, c0, h, w = window
    _, ch, cw = arr.chunks
    _, height, width = arr.shape
    aligned = r0 % ch == 0 and c0 % cw == 0 and (h == ch or r0 + h == height) and (w == cw or c0 + w == width)
    if not aligned or data.shape != (h, w):
        raise StoreError(f"{path}/{band}: write of rows {r0}:{r0 + h} cols {c0}:{c0 + w} is not one whole chunk")
    try:
        if arr.encode is None:
            if arr.zarr_array is None:
                import zarr

                arr.zarr_array = zarr.open_array(path, path=band, mode="r+")
            arr.zarr_array[t, r0 : r0 + h, c0 : c0 + w] = data
        else:
            _write_direct(arr, arr.encode, path, band, t, r0, c0, data)
    except OSError as e:  # read-only or full destination
        raise StoreError(f"cannot write chunk ({band}, t={t}, rows {r0}, cols {c0}) to {path}: {e}") from e
    return int(data.nbytes)


def journal_done(path: str) -> set[str]:
    """Keys of the partitions a previous run finished."""
    try:
        return set(os.listdir(os.path.join(path, JOURNAL_DIR)))
    except FileNotFoundError:
        return set()


def journal_record(path: str, key: str) -> None:
    """Record partition ``key`` as finished (after all its chunks are written)."""
    folder = os.path.join(path, JOURNAL_DIR)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, key), "wb"):
            pass
    except OSError as e:
        raise StoreError(f"cannot record finished partition {key} in {folder}: {e}") from e


def store_config(path: str) -> dict[str, Any]:
    """The attributes a previous run left: config hash and settings, completion."""
    try:
        return dict(_node_json(path)["attributes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StoreError(f"{path} is not a store this tool can resume ({e}); use --overwrite") from e


def finalize_store(path: str) -> int:
    """Drop the journal, mark complete, consolidate metadata; return the store's size in bytes.

    Consolidated metadata (zarr-python's extension to v3, which xarray reads in one request) is every
    child's ``zarr.json`` inlined in the root's, as ``zarr.consolidate_metadata`` writes it (tested)."""
    try:
        shutil.rmtree(os.path.join(path, JOURNAL_DIR), ignore_errors=True)
        root = _node_json(path)
        root.setdefault("attributes", {})["pipeline_complete"] = True
        children = {}
        for name in sorted(os.listdir(path)):
            if os.path.isfile(os.path.join(path, name, "zarr.json")):
                children[name] = _node_json(os.path.join(path, name))
        root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": children}
        _write_json(os.path.join(path, "zarr.json"), root)
    except (OSError, ValueError) as e:
        raise StoreError(f"cannot finalise the output store {path}: {e}") from e
    return store_size(path)


def store_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total
