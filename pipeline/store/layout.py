"""The store's layout: the Zarr v3 metadata of every array (Zarr v2's: :mod:`.zarr2`), the template
written before any chunk, what counts as a store of this pipeline (and so what ``--overwrite`` may
remove), the resume journal's listing, and the completion written last."""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import shutil
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline import __version__
from pipeline.errors import PYTHON_SWITCHES, ConfigError, StoreError, StoreFullError, Switches
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
    store_error,
    write_bytes,
)
from pipeline.store import zarr2
from pipeline.store.space import first_part, write_error

if TYPE_CHECKING:  # the model imports pydantic; workers need only its attributes
    from pipeline.storage import Storage

logger = logging.getLogger(__name__)


JOURNAL_DIR = ".pipeline-journal"
"""Inside the store while it is incomplete: one empty object per finished partition."""

ROOT_DOCS = ("zarr.json", zarr2.GROUP, zarr2.ATTRS, zarr2.CONSOLIDATED)
"""The group's own metadata objects, Zarr v3 and v2."""
ARRAY_DOCS = ("zarr.json", zarr2.ARRAY)
"""The object that makes a folder an array, Zarr v3 and v2."""


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


def _fill_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "f":
        v = float(value)
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity") if math.isinf(v) else v
    return int(value)


def _array_json(
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
        "fill_value": _fill_json(fill, dtype),
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


def output_store(path: str, storage: Storage | None) -> Any:
    """The obstore store of the output at ``path`` (cached per path and storage settings)."""
    return cached_store(path, storage or default_storage())


def _put_json(store: Any, key: str, doc: dict[str, Any]) -> None:
    write_bytes(store, key, json.dumps(doc, indent=2, allow_nan=False).encode())


def get_json(store: Any, key: str) -> dict[str, Any] | None:
    """The JSON object at ``key``, or None where there is none (ValueError: not an object)."""
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


def _root_json(path: str, storage: Storage | None) -> dict[str, Any] | None:
    """The group's ``zarr.json``; for a Zarr v2 store, a document of the same shape whose attributes are
    the consolidated ``.zmetadata``'s (written last, so completion is judged there) or, before
    finalisation, ``.zattrs`` (never complete); None: no group."""
    if _local_missing(path):
        return None
    store = output_store(path, storage)
    root = get_json(store, "zarr.json")
    if root is not None:
        return root
    consolidated = get_json(store, zarr2.CONSOLIDATED)
    if consolidated is not None:
        attrs = (consolidated.get("metadata") or {}).get(zarr2.ATTRS)
        return {"zarr_format": 2, "attributes": attrs if isinstance(attrs, dict) else {}}
    attrs = get_json(store, zarr2.ATTRS)
    if attrs is not None:
        return {"zarr_format": 2, "attributes": {**attrs, "pipeline_complete": False}}
    return {"zarr_format": 2, "attributes": {}} if read_bytes(store, zarr2.GROUP) is not None else None


def store_is_complete(path: str, storage: Storage | None = None) -> bool:
    """Whether the store at ``path`` is one this pipeline finished (its attributes say ``pipeline_complete``)."""
    try:
        root = _root_json(path, storage)
    except (OSError, ValueError):  # unreadable: not complete
        return False
    return bool(root and root.get("attributes", {}).get("pipeline_complete", False))


def store_exists(path: str, storage: Storage | None = None) -> bool:
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


def inspect_output(path: str, storage: Storage | None = None) -> str | None:
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
        dirs = {e for e in entries if any(os.path.isfile(os.path.join(path, e, doc)) for doc in ARRAY_DOCS)}
    else:
        store = output_store(path, storage)
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
            for doc in ARRAY_DOCS:
                try:
                    obstore.head(store, f"{name}/{doc}")
                    dirs.add(name)
                    break
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
    foreign = [e for e in top if not (e.split("#")[0] in ROOT_DOCS or e == JOURNAL_DIR or e in dirs)]
    if foreign:
        return f"holds a store of this pipeline and also objects it did not write ({_names(foreign)})"
    return ""


def check_output_path(
    path: str, storage: Storage | None, *, overwrite: bool, switches: Switches = PYTHON_SWITCHES
) -> None:
    """Make ``path`` ready for a new store: nothing there, or (with ``overwrite``) a store this pipeline
    wrote, which is removed; anything else is a ConfigError naming ``output.path`` and stays untouched.
    ``switches``: how messages name overwrite and resume (the CLI's flags or the API's arguments)."""
    try:
        found = inspect_output(path, storage)
    except Exception as e:  # unknown bucket, wrong endpoint, refused credentials: say where, never what secret
        if isinstance(e, ConfigError):
            raise
        raise store_error(e, path, storage or default_storage(), key="output.path") from None
    if found is None:
        return
    if found:
        raise ConfigError(
            "output.path",
            f"{path} {found}; {switches.overwrite} replaces only a store this pipeline wrote: "
            "choose another output.path, or move it away yourself",
        )
    if not overwrite:
        raise ConfigError(
            "output.path",
            f"{path} already exists; pass {switches.overwrite} to replace it (or {switches.resume} to finish it)",
        )
    logger.info("removing existing store %s (--overwrite)", path)
    if scheme(path) == "file":
        shutil.rmtree(path)
    else:
        store = output_store(path, storage)
        delete_keys(store, [k for k, _ in list_keys(store)])


BAND_DIMS = ("time", "y", "x")


@dataclass(frozen=True)
class _Array:
    """One array of the template, in either format."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunks: tuple[int, ...]
    fill: Any
    codec: str
    level: int
    dims: list[str] | None
    attrs: dict[str, Any]
    values: np.ndarray | None = None
    """Its one chunk, written with the template (coordinates); None: written by the tasks, or never."""


def create_store(
    plan: Plan,
    path: str,
    *,
    codec: str,
    level: int,
    config_hash: str,
    settings: dict[str, Any],
    overwrite: bool,
    storage: Storage | None = None,
    shards_yx: tuple[int, int] | None = None,
    zarr_format: int = 3,
    switches: Switches = PYTHON_SWITCHES,
) -> None:
    """Write the store template, after :func:`check_output_path`.

    Written as JSON (no xarray/dask/zarr-python: importing them cost the driver over a second), in the
    layout ``xarray.open_zarr``, rioxarray and GDAL read: dimension names, CF ``time`` units, a
    ``spatial_ref`` grid mapping linked from every band. The group's attributes go first (``zarr.json``;
    in Zarr v2 ``.zattrs``, then ``.zgroup``), so an interrupted creation still leaves a store that
    ``--overwrite`` recognises as this pipeline's. ``zarr_format`` 2: :mod:`.zarr2`'s spelling, no shards.
    """
    if zarr_format == 2 and shards_yx is not None:
        raise ConfigError("output.shards", "Zarr v2 has no shards: set output.shards: null, or output.zarr_format: 3")
    check_output_path(path, storage, overwrite=overwrite, switches=switches)
    grid = plan.grid
    ch, cw = grid.chunks_yx
    shape = (len(plan.times), *grid.shape_yx)
    seconds = np.array(plan.times, dtype="datetime64[s]").astype(np.int64)
    attrs = {
        "pipeline_complete": False,
        "pipeline_config_hash": config_hash,
        "pipeline_settings": settings,
        "pipeline_version": __version__,
        "resampling": {b.name: b.resampling for b in plan.bands},
        "fuse": plan.fuse,
    }
    i8 = np.dtype("int64")
    arrays: list[_Array] = []
    coords: dict[str, tuple[np.ndarray, dict[str, Any]]] = {
        "time": (seconds, {"units": "seconds since 1970-01-01", "calendar": "proleptic_gregorian"}),
        "y": (grid.y_coords(), {}),
        "x": (grid.x_coords(), {}),
    }
    for name, (values, extra) in coords.items():  # one uncompressed chunk each
        values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
        arrays.append(_Array(name, values.shape, values.dtype, values.shape, 0, "none", 0, [name], extra, values))
    crs_attrs = grid_mapping_attrs(grid.crs, grid.transform)
    arrays.append(_Array("spatial_ref", (), i8, (), 0, "zstd", 0, None, crs_attrs))
    band_attrs = {"grid_mapping": "spatial_ref", "coordinates": "spatial_ref"}
    for b in plan.output_bands:
        dtype = np.dtype(b.dtype)
        fill = np.nan if math.isnan(b.nodata) else b.nodata
        attrs_b = {**band_attrs, **dict(b.attrs)}
        if zarr_format == 3:  # xarray keeps v3's _FillValue in the attributes; in v2, fill_value is it
            attrs_b = {"_FillValue": _fill_attr(b.nodata, dtype), **attrs_b}
        else:  # GDAL before 3.9 reads no grid mapping
            attrs_b["_CRS"] = zarr2.gdal_crs(crs_attrs["crs_wkt"])
        arrays.append(_Array(b.name, shape, dtype, (1, ch, cw), fill, codec, level, list(BAND_DIMS), attrs_b))
    try:
        store = output_store(path, storage)
        if zarr_format == 2:
            _put_json(store, zarr2.ATTRS, attrs)
            _put_json(store, zarr2.GROUP, {"zarr_format": 2})
        else:
            _put_json(
                store,
                "zarr.json",
                {"attributes": attrs, "zarr_format": 3, "consolidated_metadata": None, "node_type": "group"},
            )
        for a in arrays:
            band = a.dims == list(BAND_DIMS)
            if zarr_format == 2:  # coordinates get no fill value: xarray would make it their _FillValue
                compressor = zarr2.compressor_json(a.codec, a.level)
                zarray = zarr2.zarray_json(a.shape, a.dtype, a.chunks, a.fill if band else None, compressor)
                _put_json(store, f"{a.name}/{zarr2.ATTRS}", zarr2.zattrs_json(a.attrs, a.dims))
                _put_json(store, f"{a.name}/{zarr2.ARRAY}", zarray)
                key = zarr2.chunk_key(a.name, (0,) * len(a.shape))
            else:
                codecs, grid_shape = _codecs_json(a.codec, a.level, a.dtype), a.chunks
                if shards_yx is not None and band:
                    codecs, grid_shape = sharding_json(codecs, a.chunks), (1, *shards_yx)
                doc = _array_json(a.shape, a.dtype, grid_shape, a.fill, codecs, a.dims, a.attrs)
                _put_json(store, f"{a.name}/zarr.json", doc)
                key = f"{a.name}/c/0"
            if a.values is not None:
                write_bytes(store, key, a.values.tobytes())
    except Exception as e:  # OSError locally, obstore's errors remotely
        error = write_error("the store's template", path, e)
        if not isinstance(error, StoreFullError):
            error = StoreError(f"cannot create the output store {path}: {redact(first_part(str(e)))}")
        raise error from None


def journal_done(path: str, storage: Storage | None = None) -> set[str]:
    """Keys of the partitions a previous run finished."""
    if _local_missing(path):
        return set()
    return {k.rsplit("/", 1)[-1] for k, _ in list_keys(output_store(path, storage), JOURNAL_DIR)}


def store_config(path: str, storage: Storage | None = None, switches: Switches = PYTHON_SWITCHES) -> dict[str, Any]:
    """The attributes a previous run left: config hash and settings, completion."""
    try:
        root = _root_json(path, storage)
        if root is None:
            raise FileNotFoundError("no zarr.json")
        return dict(root["attributes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StoreError(f"{path} is not a store this tool can resume ({e}); use {switches.overwrite}") from e


@dataclass(frozen=True)
class StoreUsage:
    """What a finished store holds: all its bytes, and its chunk objects and their bytes."""

    bytes: int
    """Every object of the store."""
    data_objects: int
    """Chunk (or shard) objects of the band arrays."""
    data_bytes: int


def finalize_store(path: str, storage: Storage | None = None) -> StoreUsage:
    """Drop the journal, mark complete, consolidate metadata; return what the store holds.

    Consolidated metadata (zarr-python's extension to v3, which xarray reads in one request) is every
    child's ``zarr.json`` inlined in the root's, as ``zarr.consolidate_metadata`` writes it (tested); one
    put marks the store complete and consolidates it. In Zarr v2 the group's ``.zattrs`` is marked first,
    then ``.zmetadata`` (what xarray and GDAL read) is written last, and completion is judged there."""
    import obstore

    try:
        store = output_store(path, storage)
        delete_keys(store, [k for k, _ in list_keys(store, JOURNAL_DIR)])
        if scheme(path) == "file":
            shutil.rmtree(os.path.join(path, JOURNAL_DIR), ignore_errors=True)
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in obstore.list_with_delimiter(store)["common_prefixes"]]
        root = get_json(store, "zarr.json")
        if root is None and read_bytes(store, zarr2.GROUP) is not None:
            bands, prefix = _finalize_v2(store, sorted(names))
        else:
            if root is None:
                raise FileNotFoundError(f"{path}/zarr.json")
            root.setdefault("attributes", {})["pipeline_complete"] = True
            children = {}
            for name in sorted(names):
                child = get_json(store, f"{name}/zarr.json")
                if child is not None:
                    children[name] = child
            root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": children}
            _put_json(store, "zarr.json", root)
            bands = [n for n, c in children.items() if c.get("dimension_names") == list(BAND_DIMS)]
            prefix = "c/"
        keys = list_keys(store)
    except Exception as e:
        raise StoreError(f"cannot finalise the output store {path}: {redact(str(e))}") from None
    starts = tuple(f"{n}/{prefix}" for n in bands)
    data = [size for k, size in keys if k.startswith(starts) and not k.rsplit("/", 1)[-1].startswith(".")]
    return StoreUsage(bytes=sum(size for _, size in keys), data_objects=len(data), data_bytes=sum(data))


def _finalize_v2(store: Any, names: list[str]) -> tuple[list[str], str]:
    """Mark a Zarr v2 store complete: ``.zattrs``, then the consolidated ``.zmetadata``; its band arrays."""
    attrs = get_json(store, zarr2.ATTRS)
    if attrs is None:
        raise FileNotFoundError(zarr2.ATTRS)
    attrs["pipeline_complete"] = True
    children: dict[str, dict[str, Any]] = {}
    for name in names:
        docs = {doc: get_json(store, f"{name}/{doc}") for doc in (zarr2.ARRAY, zarr2.ATTRS)}
        if docs[zarr2.ARRAY] is not None:
            children[name] = {doc: value if value is not None else {} for doc, value in docs.items()}
    _put_json(store, zarr2.ATTRS, attrs)
    _put_json(store, zarr2.CONSOLIDATED, zarr2.consolidated_json(attrs, children))
    bands = [n for n, c in children.items() if c[zarr2.ATTRS].get("_ARRAY_DIMENSIONS") == list(BAND_DIMS)]
    return bands, ""


def store_size(path: str, storage: Storage | None = None) -> int:
    """Bytes of every object under ``path`` (0 where nothing is there)."""
    return 0 if _local_missing(path) else sum(size for _, size in list_keys(output_store(path, storage)))
