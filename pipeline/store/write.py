"""Chunk-aligned writes into a store whose template :mod:`pipeline.store.layout` wrote; the order:

1. :func:`~pipeline.store.layout.create_store` writes the whole layout up front (arrays, coordinates,
   CRS, attributes with ``pipeline_complete: false``) and no band data, after
   :func:`~pipeline.store.existing.check_output_path` has made sure that nothing but a store of this
   pipeline is replaced.
2. Tasks write whole chunks only (:class:`StoreWriter`); each chunk, or each shard where
   ``output.shards`` is set, is its own object, and no two tasks ever write one object, so writers
   share nothing and need no lock.
3. :func:`~pipeline.store.layout.finalize_store` marks the store complete and consolidates metadata.
   A store whose attributes do not say complete was interrupted.

Every byte goes through one small interface (:mod:`pipeline.storage`: ``read_bytes``, ``write_bytes``,
``delete_keys``, ``list_keys``) over an obstore store: ``LocalStore`` for a path, ``S3Store`` for
``s3://``. Each put is atomic (a staging file renamed into place locally; an S3 PUT), so a reader never
sees half a chunk or half a ``zarr.json``. Locally this costs no more than ``open()`` + ``os.replace``
(``make bench-s3``), so there is no second, local-only path.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import StoreError
from pipeline.storage import (
    delete_keys,
    scheme,
    write_bytes,
)
from pipeline.store import zarr2
from pipeline.store.existing import ARRAY_DOCS, JOURNAL_DIR, get_json, output_store
from pipeline.store.space import write_error
from pipeline.store.zarr3 import sharding_json

if TYPE_CHECKING:  # the model imports pydantic; workers need only its attributes
    from pipeline.storage import Storage

logger = logging.getLogger(__name__)
_arrays: dict[tuple[Any, ...], tuple[Any, BandArray]] = {}
_arrays_lock = threading.Lock()
_NO_CHUNK = 2**64 - 1
"""A shard index entry (offset and length) for an inner chunk that is not stored."""


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
    zarr_format: int = 3
    separator: str = "/"
    """The chunk key separator of Zarr v3's default encoding: ``/`` (``c/0/1/2``) or ``.`` (``c.0.1.2``)."""

    def key(self, band: str, index: tuple[int, ...], separator: str | None = None) -> str:
        """The object key of the chunk (or shard) at grid ``index``: ``B02/c/0/1/2`` (Zarr v3), ``B02/0.1.2`` (v2).
        ``separator``: the other key namespace's (an update that shifts dates writes there before it
        publishes, :mod:`pipeline.store.publish`); None: the array's own."""
        if self.zarr_format == 2:
            return zarr2.chunk_key(band, index)
        return chunk_key(band, index, separator or self.separator)


def chunk_key(name: str, index: tuple[int, ...], separator: str = "/") -> str:
    """The key of array ``name``'s chunk at ``index`` in Zarr v3's default encoding with ``separator``."""
    return f"{name}/c{separator}" + separator.join(str(i) for i in index)


def _stamp(path: str, band: str, storage: Storage | None) -> Any:
    """What changes when the band's ``zarr.json`` (Zarr v2: ``.zarray``) is written again: its inode and
    mtime locally, its ETag in a bucket (a HEAD: workers are given it in the task context instead)."""
    if scheme(path) == "file":
        for doc in ARRAY_DOCS:
            try:
                st = os.stat(os.path.join(path, band, doc))
                return (doc, st.st_ino, st.st_mtime_ns)
            except OSError:
                pass
        return None
    import obstore

    for doc in ARRAY_DOCS:
        try:
            return (doc, obstore.head(output_store(path, storage), f"{band}/{doc}")["e_tag"])
        except FileNotFoundError:
            pass
    return None


def store_stamp(path: str, bands: list[str], storage: Storage | None = None) -> str:
    """One string that changes whenever any band's ``zarr.json`` is written again (see :func:`open_array`)."""
    return "|".join(str(_stamp(path, b, storage)) for b in bands)


def open_array(path: str, band: str, storage: Storage | None = None, stamp: str | None = None) -> BandArray:
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
                store = output_store(path, storage)
                meta = get_json(store, f"{band}/zarr.json")
                if meta is None:
                    meta = get_json(store, f"{band}/{zarr2.ARRAY}")
                if meta is None:
                    raise FileNotFoundError(f"{band}/zarr.json")
                hit = _arrays[key] = (current, _band_array(meta))
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise StoreError(
                    f"{path}/{band} is not an array of this store ({e}); rerun with --overwrite (overwrite=True)"
                ) from e
    return hit[1]


def _band_array(meta: dict[str, Any]) -> BandArray:
    if meta.get("zarr_format") == 2:
        dtype = np.dtype(meta["dtype"])
        return BandArray(
            shape=tuple(meta["shape"]),
            chunks=tuple(meta["chunks"]),
            dtype=dtype,
            fill=_fill_value(meta["fill_value"], dtype),
            encode=chunk_encoder(meta),
            zarr_format=2,
        )
    dtype = np.dtype(meta["data_type"])
    grid_shape = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    codecs = meta.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        conf = codecs[0]["configuration"]
        inner = {**meta, "codecs": conf["codecs"]}
        standard = (
            conf.get("index_location", "end") == "end"
            and conf.get("index_codecs") == sharding_json([], ())[0]["configuration"]["index_codecs"]
            and len(codecs) == 1
        )
        return BandArray(
            shape=tuple(meta["shape"]),
            chunks=tuple(conf["chunk_shape"]),
            dtype=dtype,
            fill=_fill_value(meta["fill_value"], dtype),
            encode=chunk_encoder(inner) if standard else None,
            shards=grid_shape,
            separator=_separator(meta),
        )
    return BandArray(
        shape=tuple(meta["shape"]),
        chunks=grid_shape,
        dtype=dtype,
        fill=_fill_value(meta["fill_value"], dtype),
        encode=chunk_encoder(meta),
        separator=_separator(meta),
    )


def _separator(meta: dict[str, Any]) -> str:
    return str((meta.get("chunk_key_encoding") or {}).get("configuration", {}).get("separator", "/"))


def _fill_value(value: Any, dtype: np.dtype[Any]) -> Any:
    """The inverse of :func:`_fill_json` (Zarr v3 spells non-finite floats as strings)."""
    if dtype.kind == "f" and isinstance(value, str):
        return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[value]
    return dtype.type(value)


def chunk_encoder(meta: dict[str, Any]) -> Callable[[np.ndarray], bytes] | None:
    """The codec chain of an array's ``zarr.json`` as one function, where this module can run it
    directly: Zarr v3, a regular chunk grid, bytes (little-endian) then at most one zstd or gzip
    compressor, default chunk keys (``/`` or ``.``), no sharding or storage transformers; or a Zarr v2
    ``.zarray`` as :mod:`.zarr2` writes it (C order, little-endian, no filters, keys with ``.``, zstd, gzip,
    blosc or no compressor). Else None, and chunks go through zarr-python's own write path.

    zarr-python's write path costs ~7 ms per 512 KB chunk against ~3 ms to compress it (an async
    round trip per chunk); a whole-chunk write needs none of it (README, Performance).
    """
    if meta.get("zarr_format") == 2:
        compressor = meta.get("compressor")
        plain = meta.get("order") == "C" and not meta.get("filters") and meta.get("dimension_separator") == "."
        if not plain or np.dtype(meta["dtype"]).byteorder == ">":
            return None
        if compressor is None:
            return lambda a: a.tobytes()
        if compressor.get("id") not in ("zstd", "gzip", "blosc"):
            return None
        import numcodecs

        v2codec = numcodecs.get_codec(dict(compressor))
        return lambda a: bytes(v2codec.encode(a))
    if meta.get("zarr_format") != 3 or meta.get("storage_transformers"):
        return None
    if meta.get("chunk_grid", {}).get("name") != "regular":
        return None
    encodings = [{"name": "default", "configuration": {"separator": s}} for s in ("/", ".")]
    if meta.get("chunk_key_encoding") not in encodings:
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
        return zstd_encoder(int(conf.get("level", 0)), bool(conf.get("checksum", False)))
    if name == "gzip" and set(conf) <= {"level"}:
        import numcodecs

        codec = numcodecs.GZip(level=int(conf.get("level", 5)))
        return lambda a: bytes(codec.encode(a))
    return None


_compressors = threading.local()


def zstd_encoder(level: int, checksum: bool) -> Callable[[np.ndarray], bytes]:
    """A chunk's bytes as one ZSTD frame at ``level`` (with its content checksum where asked), what zarr's
    ``zstd`` codec decodes, by python-zstandard: ~1 ms to import against numcodecs' ~60 ms (its codec
    registry), on the fork server's path to a run's first task, and each call reuses its thread's
    compressor and tables (a compressor is not to be shared by threads at once)."""
    import zstandard

    key = (level, checksum)

    def encode(a: np.ndarray) -> bytes:
        made = getattr(_compressors, "by_setting", None)
        if made is None:
            made = _compressors.by_setting = {}
        compressor = made.get(key)
        if compressor is None:
            compressor = made[key] = zstandard.ZstdCompressor(level=level, write_checksum=checksum)
        return compressor.compress(np.ascontiguousarray(a).data)  # (its buffer: no copy where C-contiguous)

    return encode


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
    storage: Storage | None = None
    stamp: str | None = None
    """:func:`store_stamp`, from the task context."""
    separator: str | None = None
    """The chunk key separator to write with where it is not the arrays' own (an update's staging)."""
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
                self._send(arr.key(band, (t, cy, cx), self.separator), None if empty else arr.encode(block))
        except Exception as e:  # read-only or full destination, an unreachable bucket
            raise write_error(f"chunk ({band}, t={t}, rows {r0}, cols {c0})", self.path, e) from None
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
                self._send(arr.key(band, (t, sy, sx), self.separator), encode_shard(held, (1, ny, nx)))
            except Exception as e:
                raise write_error(f"shard ({band}, t={t}, shard {sy}/{sx})", self.path, e) from None
        sent, self._sent = self._sent, []
        for key, future in sent:
            try:
                future.result()
            except Exception as e:
                raise write_error(key, self.path, e) from None

    def _send(self, key: str, payload: bytes | None) -> None:
        """Put (or, None, delete) one object: at once locally; in a bucket, on the process's upload
        threads, so that the next chunk is computed while this one travels (:meth:`flush` waits)."""
        store = output_store(self.path, self.storage)
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


def write_chunk(
    path: str,
    band: str,
    t: int,
    window: tuple[int, int, int, int],
    data: np.ndarray,
    storage: Storage | None = None,
) -> int:
    """Write one whole chunk (a sharded array: its whole shard, the other chunks empty). Returns bytes."""
    writer = StoreWriter(path, storage)
    n = writer.write_chunk(band, t, window, data)
    writer.flush()
    return n


def journal_record(path: str, key: str, storage: Storage | None = None) -> None:
    """Record partition ``key`` as finished (after all its chunks are written)."""
    try:
        write_bytes(output_store(path, storage), f"{JOURNAL_DIR}/{key}", b"")
    except Exception as e:
        raise write_error(f"the journal entry of finished partition {key}", path, e) from None
