"""The output store: template first, then chunk-aligned writes, completion last.

1. :func:`create_store` writes the whole layout up front (arrays, coordinates, CRS, attributes with
   ``pipeline_complete: false``) and no band data, after :func:`check_output_path` has made sure that
   nothing but a store of this pipeline is replaced.
2. Tasks write whole chunks only (:class:`StoreWriter`); each chunk, or each shard where
   ``output.shards`` is set, is its own object, and no two tasks ever write one object, so writers
   share nothing and need no lock.
3. :func:`finalize_store` marks the store complete and consolidates metadata. A store whose attributes
   do not say complete was interrupted.

Every byte goes through one small interface (:mod:`pipeline.storage`: ``read_bytes``, ``write_bytes``,
``delete_keys``, ``list_keys``) over an obstore store: ``LocalStore`` for a path, ``S3Store`` for
``s3://``. Each put is atomic (a staging file renamed into place locally; an S3 PUT), so a reader never
sees half a chunk or half a ``zarr.json``. Locally this costs no more than ``open()`` + ``os.replace``
(README, Cloud storage), so there is no second, local-only path.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline import __version__
from pipeline.errors import ConfigError, StoreError
from pipeline.planning.plan import Plan
from pipeline.storage import (
    cached_store,
    default_storage,
    delete_keys,
    list_keys,
    read_bytes,
    redact,
    scheme,
    split_url,
    write_bytes,
)

if TYPE_CHECKING:  # the model imports pydantic; workers need only its attributes
    from pipeline.config.model import StorageConfig

logger = logging.getLogger(__name__)
JOURNAL_DIR = ".pipeline-journal"
"""Inside the store while it is incomplete: one empty object per finished partition."""
_arrays: dict[tuple[Any, ...], tuple[Any, BandArray]] = {}
_arrays_lock = threading.Lock()
_NO_CHUNK = 2**64 - 1
"""A shard index entry (offset and length) for an inner chunk that is not stored."""


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


def _sharding_json(inner: list[dict[str, Any]], chunks: tuple[int, ...]) -> list[dict[str, Any]]:
    """The codec chain of a sharded array as zarr-python writes it: inner chunks of ``chunks`` with the
    ``inner`` chain, the index (offset, length per chunk) at the end, little-endian with a CRC32C."""
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(chunks), "codecs": inner,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}]  # fmt: skip


def _store(path: str, storage: StorageConfig | None) -> Any:
    return cached_store(path, storage or default_storage())


def _put_json(store: Any, key: str, doc: dict[str, Any]) -> None:
    write_bytes(store, key, json.dumps(doc, indent=2, allow_nan=False).encode())


def _get_json(store: Any, key: str) -> dict[str, Any] | None:
    raw = read_bytes(store, key)
    if raw is None:
        return None
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError(f"{key} is not a JSON object")
    return doc


def _local_missing(path: str) -> bool:
    """A local path that does not exist yet (opening an obstore store there would create the folder)."""
    return scheme(path) == "file" and not os.path.isdir(path)


def _root_json(path: str, storage: StorageConfig | None) -> dict[str, Any] | None:
    if _local_missing(path):
        return None
    return _get_json(_store(path, storage), "zarr.json")


def store_is_complete(path: str, storage: StorageConfig | None = None) -> bool:
    try:
        root = _root_json(path, storage)
    except (OSError, ValueError):  # unreadable: not complete
        return False
    return bool(root and root.get("attributes", {}).get("pipeline_complete", False))


def store_exists(path: str, storage: StorageConfig | None = None) -> bool:
    """Whether ``path`` holds a group ``zarr.json`` (a store to resume, or to refuse)."""
    try:
        return _root_json(path, storage) is not None
    except ValueError:
        return True
    except OSError as e:
        raise StoreError(f"cannot read the output store {redact(path)}: {redact(str(e))}") from e


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


def _ours(root: dict[str, Any] | None) -> bool:
    attrs = (root or {}).get("attributes") or {}
    return isinstance(attrs, dict) and "pipeline_config_hash" in attrs and "pipeline_version" in attrs


def _names(entries: list[str]) -> str:
    shown = sorted(entries)[:5]
    return ", ".join(shown) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")


def inspect_output(path: str, storage: StorageConfig | None = None) -> str | None:
    """What is at ``path``: None for nothing (no such path, an empty folder, an empty prefix); ``""`` for
    a store of this pipeline and nothing else; otherwise a phrase saying what is there."""
    import obstore

    if scheme(path) == "file":
        if not os.path.lexists(path):
            return None
        if os.path.islink(path) or not os.path.isdir(path):
            return "is a file, not a Zarr store"
        entries = os.listdir(path)
        if not entries:
            return None
        top = set(entries)
        dirs = {e for e in entries if os.path.isfile(os.path.join(path, e, "zarr.json"))}
    else:
        store = _store(path, storage)
        bucket, prefix = split_url(path)
        if prefix.strip("/"):
            parent, _, name = prefix.strip("/").rpartition("/")
            try:
                obstore.head(cached_store(f"s3://{bucket}/{parent}", storage or default_storage()), name)
                return "is an object (a file), not a Zarr store"
            except FileNotFoundError:
                pass
        listing = obstore.list_with_delimiter(store)
        top = {m["path"].rsplit("/", 1)[-1] for m in listing["objects"]}
        prefixes = [p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]]
        if not top and not prefixes:
            return None
        dirs = set()
        for name in prefixes:
            try:
                obstore.head(store, f"{name}/zarr.json")
                dirs.add(name)
            except FileNotFoundError:
                pass
        entries = sorted(top | set(prefixes))
        top |= set(prefixes)
    try:
        root = _root_json(path, storage)
    except ValueError:
        root = None
    if root is None:
        return f"holds no Zarr store of this pipeline ({_names(entries)})"
    if not _ours(root):
        return "is a Zarr store this pipeline did not write (its attributes have no pipeline_config_hash)"
    # obstore's local puts stage beside the target as "name#N": an interrupted put leaves one behind.
    foreign = [e for e in top if not (e == "zarr.json" or e.startswith("zarr.json#") or e == JOURNAL_DIR or e in dirs)]
    if foreign:
        return f"holds a store of this pipeline and also objects it did not write ({_names(foreign)})"
    return ""


def check_output_path(path: str, storage: StorageConfig | None, *, overwrite: bool) -> None:
    """Make ``path`` ready for a new store: nothing there, or (with ``overwrite``) a store this pipeline
    wrote, which is removed; anything else is a ConfigError naming ``output.path`` and stays untouched."""
    try:
        found = inspect_output(path, storage)
    except Exception as e:  # unknown bucket, wrong endpoint, refused credentials: say where, never what secret
        if isinstance(e, ConfigError):
            raise
        raise ConfigError("output.path", f"cannot reach {path}: {redact(str(e)).splitlines()[0]}") from None
    if found is None:
        return
    if found:
        raise ConfigError("output.path", f"{path} {found}; --overwrite replaces only a store this pipeline wrote: "
                          "choose another output.path, or move it away yourself")  # fmt: skip
    if not overwrite:
        raise ConfigError("output.path", f"{path} already exists; pass --overwrite to replace it "
                          "(or --resume to finish it)")  # fmt: skip
    logger.info("removing existing store %s (--overwrite)", path)
    if scheme(path) == "file":
        shutil.rmtree(path)
    else:
        store = _store(path, storage)
        delete_keys(store, [k for k, _ in list_keys(store)])


def create_store(plan: Plan, path: str, *, codec: str, level: int, config_hash: str, settings: dict[str, Any],
                 overwrite: bool, storage: StorageConfig | None = None,
                 shards_yx: tuple[int, int] | None = None) -> None:  # fmt: skip
    """Write the store template, after :func:`check_output_path`.

    Written as JSON (no xarray/dask/zarr-python: importing them cost the driver over a second), in the
    layout ``xarray.open_zarr`` and rioxarray read: ``dimension_names``, CF ``time`` units, a
    ``spatial_ref`` grid mapping linked from every band. The group's ``zarr.json`` goes first, so an
    interrupted creation still leaves a store that ``--overwrite`` recognises as this pipeline's.
    """
    check_output_path(path, storage, overwrite=overwrite)
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
        store = _store(path, storage)
        _put_json(store, "zarr.json", {"attributes": attrs, "zarr_format": 3, "consolidated_metadata": None,
                                       "node_type": "group"})  # fmt: skip
        coords: dict[str, tuple[np.ndarray, dict[str, Any]]] = {
            "time": (seconds, {"units": "seconds since 1970-01-01", "calendar": "proleptic_gregorian"}),
            "y": (grid.y_coords(), {}),
            "x": (grid.x_coords(), {}),
        }
        for name, (values, extra) in coords.items():  # one uncompressed chunk each
            values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
            _put_json(store, f"{name}/zarr.json", _array_json(values.shape, values.dtype, values.shape, 0,
                      _codecs_json("none", 0, values.dtype), [name], extra))  # fmt: skip
            write_bytes(store, f"{name}/c/0", values.tobytes())
        i8 = np.dtype("int64")
        crs_attrs = grid_mapping_attrs(grid.crs, grid.transform)
        crs_json = _array_json((), i8, (), 0, _codecs_json("zstd", 0, i8), None, crs_attrs)
        _put_json(store, "spatial_ref/zarr.json", crs_json)
        band_attrs = {"grid_mapping": "spatial_ref", "coordinates": "spatial_ref"}
        for b in plan.bands:
            dtype = np.dtype(b.dtype)
            codecs = _codecs_json(codec, level, dtype)
            grid_shape: tuple[int, ...] = (1, ch, cw)
            if shards_yx is not None:
                codecs, grid_shape = _sharding_json(codecs, (1, ch, cw)), (1, *shards_yx)
            _put_json(store, f"{b.name}/zarr.json", _array_json(
                shape, dtype, grid_shape, np.nan if math.isnan(b.nodata) else b.nodata, codecs, ["time", "y", "x"],
                {"_FillValue": _fill_attr(b.nodata, dtype), **band_attrs, **dict(b.attrs)},
            ))  # fmt: skip
    except Exception as e:  # OSError locally, obstore's errors remotely
        raise StoreError(f"cannot create the output store {path}: {redact(str(e))}") from None


@dataclass
class BandArray:
    """One band array as the workers write it: its layout from ``zarr.json`` and how to encode a chunk."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    """The (inner) chunk shape: the unit of every write."""
    dtype: np.dtype[Any]
    fill: Any
    encode: Callable[[np.ndarray], bytes] | None
    """The (inner) codec chain as one function (:func:`chunk_encoder`); None: written through zarr-python."""
    shards: tuple[int, ...] | None = None
    """The shard shape where the array is sharded: one object holds each shard's chunks."""
    zarr_array: Any = None
    """zarr-python's array, opened on the first write where ``encode`` is None."""


def _stamp(path: str, band: str, storage: StorageConfig | None) -> Any:
    """What changes when the band's ``zarr.json`` is written again: its inode and mtime locally, its
    ETag in a bucket (one HEAD: workers are given it in the task context instead)."""
    if scheme(path) == "file":
        try:
            st = os.stat(os.path.join(path, band, "zarr.json"))
            return (st.st_ino, st.st_mtime_ns)
        except OSError:
            return None
    import obstore

    try:
        return obstore.head(_store(path, storage), f"{band}/zarr.json")["e_tag"]
    except FileNotFoundError:
        return None


def store_stamp(path: str, bands: list[str], storage: StorageConfig | None = None) -> str:
    """One string that changes whenever any band's ``zarr.json`` is written again (see :func:`open_array`)."""
    return "|".join(str(_stamp(path, b, storage)) for b in bands)


def open_array(path: str, band: str, storage: StorageConfig | None = None, stamp: str | None = None) -> BandArray:
    """The band's layout and chunk encoder, read from its ``zarr.json`` (no zarr-python: its import was
    ~0.2 s of every worker's start), cached per process while that file is the same: a store made again
    at the same path (``--overwrite``, another run on a long-lived worker, or a worker forked from a
    driver that wrote) is read afresh. ``stamp``: :func:`store_stamp` of the store, which spares a
    remote store a HEAD per call; locally the file's own stat is used."""
    key = (path, band, os.getpid())
    current = _stamp(path, band, storage) if stamp is None or scheme(path) == "file" else stamp
    with _arrays_lock:
        hit = _arrays.get(key)
        if hit is None or hit[0] != current or current is None:
            try:
                meta = _get_json(_store(path, storage), f"{band}/zarr.json")
                if meta is None:
                    raise FileNotFoundError(f"{band}/zarr.json")
                hit = _arrays[key] = (current, _band_array(meta))
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise StoreError(f"{path}/{band} is not an array of this store ({e}); rerun with --overwrite") from e
    return hit[1]


def _band_array(meta: dict[str, Any]) -> BandArray:
    dtype = np.dtype(meta["data_type"])
    grid_shape = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    codecs = meta.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        conf = codecs[0]["configuration"]
        inner = {**meta, "codecs": conf["codecs"]}
        standard = conf.get("index_location", "end") == "end" and conf.get("index_codecs") == _sharding_json(
            [], ()
        )[0]["configuration"]["index_codecs"] and len(codecs) == 1  # fmt: skip
        return BandArray(shape=tuple(meta["shape"]), chunks=tuple(conf["chunk_shape"]), dtype=dtype,
                         fill=_fill_value(meta["fill_value"], dtype),
                         encode=chunk_encoder(inner) if standard else None, shards=grid_shape)  # fmt: skip
    return BandArray(shape=tuple(meta["shape"]), chunks=grid_shape, dtype=dtype,
                     fill=_fill_value(meta["fill_value"], dtype), encode=chunk_encoder(meta))  # fmt: skip


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


def morton_order(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every index of ``shape`` in Morton (Z) order, as zarr-python lays out the chunks of a shard."""
    bits = [(n - 1).bit_length() for n in shape]

    def code(index: tuple[int, ...]) -> int:
        z, out_bit = 0, 0
        for bit in range(max(bits, default=0)):
            for dim, nbits in enumerate(bits):
                if bit < nbits:
                    z |= ((index[dim] >> bit) & 1) << out_bit
                    out_bit += 1
        return z

    return sorted(np.ndindex(*shape), key=code)


def encode_shard(chunks: dict[tuple[int, ...], bytes], per_shard: tuple[int, ...]) -> bytes | None:
    """One shard as zarr-python's sharding codec stores it: the encoded chunks in Morton order, then the
    index (offset, length as little-endian uint64 per chunk, C order; absent chunks all ones) and its
    CRC32C. None where no chunk is stored."""
    import google_crc32c

    index = np.full((*per_shard, 2), _NO_CHUNK, dtype="<u8")
    parts, offset = [], 0
    for pos in morton_order(per_shard):
        payload = chunks.get(pos)
        if payload:
            index[pos] = (offset, len(payload))
            parts.append(payload)
            offset += len(payload)
    if not parts:
        return None
    raw = index.tobytes()
    return b"".join(parts) + raw + struct.pack("<I", google_crc32c.value(raw))


def _block(arr: BandArray, data: np.ndarray) -> tuple[np.ndarray, bool]:
    """A whole chunk as zarr stores it (edge chunks padded with the fill value), and whether it is all
    fill value (then not stored: zarr's ``write_empty_chunks=False``)."""
    _, ch, cw = arr.chunks
    dtype = arr.dtype.newbyteorder("<")
    if data.shape == (ch, cw):
        block = np.ascontiguousarray(data, dtype=dtype)
    else:
        block = np.full((ch, cw), arr.fill, dtype=dtype)
        block[: data.shape[0], : data.shape[1]] = data
    fill = arr.fill
    empty = bool(np.isnan(block).all()) if dtype.kind == "f" and np.isnan(fill) else bool((block == fill).all())
    return block, empty


_pool: dict[int, Any] = {}
UPLOAD_THREADS = 8
"""Puts in flight per process for a store in a bucket (each waits ~10-100 ms on the network, not the CPU)."""


def _uploads() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    pid = os.getpid()
    if pid not in _pool:
        _pool[pid] = ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="pipeline-upload")
    return _pool[pid]


@dataclass
class StoreWriter:
    """A task's writes to one store: each chunk's object is put as it comes (to a bucket, in the
    background); in a sharded array the chunks are held (encoded) until :meth:`flush` writes each shard
    as one object. :meth:`flush` returns once every object is stored. Partitions hold whole
    shards (:func:`pipeline.planning.plan.pack_partitions`), so every shard is written once, by one task."""

    path: str
    storage: StorageConfig | None = None
    stamp: str | None = None
    """:func:`store_stamp`, from the task context."""
    _pending: dict[tuple[str, int, int, int], dict[tuple[int, ...], Any]] = field(default_factory=dict)
    _sent: list[tuple[str, Any]] = field(default_factory=list)

    def write_chunk(self, band: str, t: int, window: tuple[int, int, int, int], data: np.ndarray) -> int:
        """Write (or, sharded, hold) one whole chunk; StoreError if it is not chunk-aligned. Returns bytes."""
        arr = open_array(self.path, band, self.storage, self.stamp)
        r0, c0, h, w = window
        _, ch, cw = arr.chunks
        _, height, width = arr.shape
        aligned = r0 % ch == 0 and c0 % cw == 0 and (h == ch or r0 + h == height) and (w == cw or c0 + w == width)
        if not aligned or data.shape != (h, w):
            rows, cols = f"rows {r0}:{r0 + h}", f"cols {c0}:{c0 + w}"
            raise StoreError(f"{self.path}/{band}: write of {rows} {cols} is not one whole chunk")
        cy, cx = r0 // ch, c0 // cw
        try:
            if arr.shards is not None:
                ny, nx = arr.shards[1] // ch, arr.shards[2] // cw
                held = self._pending.setdefault((band, t, cy // ny, cx // nx), {})
                block, empty = _block(arr, data)
                held[(0, cy % ny, cx % nx)] = None if empty else arr.encode(block) if arr.encode else block
            elif arr.encode is None:
                self._zarr(arr, band)[t, r0 : r0 + h, c0 : c0 + w] = data
            else:
                block, empty = _block(arr, data)
                key = f"{band}/c/{t}/{cy}/{cx}"
                self._send(key, None if empty else arr.encode(block))
        except Exception as e:  # read-only or full destination, an unreachable bucket
            raise StoreError(f"cannot write chunk ({band}, t={t}, rows {r0}, cols {c0}) to {self.path}: "
                             f"{redact(str(e))}") from None  # fmt: skip
        return int(data.nbytes)

    def flush(self) -> None:
        """Write every held shard, each as one object (or delete it where all its chunks are empty)."""
        pending, self._pending = self._pending, {}
        for (band, t, sy, sx), held in sorted(pending.items()):
            arr = open_array(self.path, band, self.storage, self.stamp)
            assert arr.shards is not None
            _, ch, cw = arr.chunks
            ny, nx = arr.shards[1] // ch, arr.shards[2] // cw
            try:
                if arr.encode is None:  # a codec chain only zarr-python runs: one whole-shard write through it
                    y0, x0 = sy * ny * ch, sx * nx * cw
                    y1, x1 = min(y0 + ny * ch, arr.shape[1]), min(x0 + nx * cw, arr.shape[2])
                    region = np.full((ny * ch, nx * cw), arr.fill, dtype=arr.dtype)
                    for (_, iy, ix), block in held.items():
                        if block is not None:
                            region[iy * ch : (iy + 1) * ch, ix * cw : (ix + 1) * cw] = block
                    self._zarr(arr, band)[t, y0:y1, x0:x1] = region[: y1 - y0, : x1 - x0]
                    continue
                self._send(f"{band}/c/{t}/{sy}/{sx}", encode_shard(held, (1, ny, nx)))
            except Exception as e:
                raise StoreError(f"cannot write shard ({band}, t={t}, shard {sy}/{sx}) to {self.path}: "
                                 f"{redact(str(e))}") from None  # fmt: skip
        sent, self._sent = self._sent, []
        for key, future in sent:
            try:
                future.result()
            except Exception as e:
                raise StoreError(f"cannot write {key} to {self.path}: {redact(str(e))}") from None

    def _send(self, key: str, payload: bytes | None) -> None:
        """Put (or, None, delete) one object: at once locally; in a bucket, on the process's upload
        threads, so that the next chunk is computed while this one travels (:meth:`flush` waits)."""
        store = _store(self.path, self.storage)
        if scheme(self.path) == "file":
            delete_keys(store, [key]) if payload is None else write_bytes(store, key, payload)
            return
        call = (delete_keys, store, [key]) if payload is None else (write_bytes, store, key, payload)
        self._sent.append((key, _uploads().submit(*call)))  # type: ignore[arg-type]

    def _zarr(self, arr: BandArray, band: str) -> Any:
        if arr.zarr_array is None:
            import zarr

            from pipeline.storage import zarr_store

            arr.zarr_array = zarr.open_array(zarr_store(self.path, self.storage, read_only=False), path=band, mode="r+")
        return arr.zarr_array


def write_chunk(path: str, band: str, t: int, window: tuple[int, int, int, int], data: np.ndarray,
                storage: StorageConfig | None = None) -> int:  # fmt: skip
    """Write one whole chunk (a sharded array: its whole shard, the other chunks empty). Returns bytes."""
    writer = StoreWriter(path, storage)
    n = writer.write_chunk(band, t, window, data)
    writer.flush()
    return n


def journal_done(path: str, storage: StorageConfig | None = None) -> set[str]:
    """Keys of the partitions a previous run finished."""
    if _local_missing(path):
        return set()
    return {k.rsplit("/", 1)[-1] for k, _ in list_keys(_store(path, storage), JOURNAL_DIR)}


def journal_record(path: str, key: str, storage: StorageConfig | None = None) -> None:
    """Record partition ``key`` as finished (after all its chunks are written)."""
    try:
        write_bytes(_store(path, storage), f"{JOURNAL_DIR}/{key}", b"")
    except Exception as e:
        raise StoreError(f"cannot record finished partition {key} in {path}/{JOURNAL_DIR}: {redact(str(e))}") from None


def store_config(path: str, storage: StorageConfig | None = None) -> dict[str, Any]:
    """The attributes a previous run left: config hash and settings, completion."""
    try:
        root = _root_json(path, storage)
        if root is None:
            raise FileNotFoundError("no zarr.json")
        return dict(root["attributes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StoreError(f"{path} is not a store this tool can resume ({e}); use --overwrite") from e


@dataclass(frozen=True)
class StoreUsage:
    bytes: int
    """Every object of the store."""
    data_objects: int
    """Chunk (or shard) objects of the band arrays."""
    data_bytes: int


def finalize_store(path: str, storage: StorageConfig | None = None) -> StoreUsage:
    """Drop the journal, mark complete, consolidate metadata; return what the store holds.

    Consolidated metadata (zarr-python's extension to v3, which xarray reads in one request) is every
    child's ``zarr.json`` inlined in the root's, as ``zarr.consolidate_metadata`` writes it (tested)."""
    import obstore

    try:
        store = _store(path, storage)
        delete_keys(store, [k for k, _ in list_keys(store, JOURNAL_DIR)])
        if scheme(path) == "file":
            shutil.rmtree(os.path.join(path, JOURNAL_DIR), ignore_errors=True)
        root = _get_json(store, "zarr.json")
        if root is None:
            raise FileNotFoundError(f"{path}/zarr.json")
        root.setdefault("attributes", {})["pipeline_complete"] = True
        children = {}
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in obstore.list_with_delimiter(store)["common_prefixes"]]
        for name in sorted(names):
            child = _get_json(store, f"{name}/zarr.json")
            if child is not None:
                children[name] = child
        root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": children}
        _put_json(store, "zarr.json", root)
        keys = list_keys(store)
    except Exception as e:
        raise StoreError(f"cannot finalise the output store {path}: {redact(str(e))}") from None
    bands = tuple(f"{n}/c/" for n, c in children.items() if c.get("dimension_names") == ["time", "y", "x"])
    data = [size for k, size in keys if k.startswith(bands)]
    return StoreUsage(bytes=sum(size for _, size in keys), data_objects=len(data), data_bytes=sum(data))


def store_size(path: str, storage: StorageConfig | None = None) -> int:
    return 0 if _local_missing(path) else sum(size for _, size in list_keys(_store(path, storage)))
