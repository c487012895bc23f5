"""The store's layout: the template written before any chunk (every array's metadata, in Zarr v3 by
:mod:`.zarr3` or v2 by :mod:`.zarr2`; the coordinates; the CF grid mapping) and the completion written
last, which consolidates the metadata. What is already at an output path (a store of this pipeline or
not, finished or not, its journal) and so what ``--overwrite`` may remove is :mod:`.existing`'s; its
names stay importable from here."""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline import __version__
from pipeline.errors import PYTHON_SWITCHES, ConfigError, StoreError, StoreFullError, Switches
from pipeline.planning.plan import Plan
from pipeline.storage import delete_keys, list_keys, read_bytes, redact, scheme, write_bytes
from pipeline.store import zarr2
from pipeline.store.existing import (  # noqa: F401 - also importable from here
    ARRAY_DOCS,
    JOURNAL_DIR,
    ROOT_DOCS,
    check_output_path,
    get_json,
    inspect_output,
    journal_done,
    output_store,
    put_json,
    store_config,
    store_exists,
    store_is_complete,
    store_size,
)
from pipeline.store.space import first_part, write_error
from pipeline.store.zarr3 import array_json, codecs_json, fill_attr, sharding_json  # noqa: F401

if TYPE_CHECKING:  # the model imports pydantic; workers need only its attributes
    from pipeline.storage import Storage


def grid_mapping_attrs(crs: str, transform: tuple[float, ...]) -> dict[str, Any]:
    """CF grid-mapping attributes for the ``spatial_ref`` variable, as rioxarray writes them."""
    from pyproj import CRS

    wkt = CRS.from_user_input(crs).to_wkt("WKT1_GDAL")
    a, b, c, d, e, f = transform
    attrs: dict[str, Any] = CRS.from_wkt(wkt).to_cf()
    attrs.update(crs_wkt=wkt, spatial_ref=wkt, GeoTransform=" ".join(str(float(v)) for v in (c, a, b, f, d, e)))
    return attrs


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
            attrs_b = {"_FillValue": fill_attr(b.nodata, dtype), **attrs_b}
        else:  # GDAL before 3.9 reads no grid mapping
            attrs_b["_CRS"] = zarr2.gdal_crs(crs_attrs["crs_wkt"])
        arrays.append(_Array(b.name, shape, dtype, (1, ch, cw), fill, codec, level, list(BAND_DIMS), attrs_b))
    try:
        store = output_store(path, storage)
        if zarr_format == 2:
            put_json(store, zarr2.ATTRS, attrs)
            put_json(store, zarr2.GROUP, {"zarr_format": 2})
        else:
            put_json(
                store,
                "zarr.json",
                {"attributes": attrs, "zarr_format": 3, "consolidated_metadata": None, "node_type": "group"},
            )
        for a in arrays:
            band = a.dims == list(BAND_DIMS)
            if zarr_format == 2:  # coordinates get no fill value: xarray would make it their _FillValue
                compressor = zarr2.compressor_json(a.codec, a.level)
                zarray = zarr2.zarray_json(a.shape, a.dtype, a.chunks, a.fill if band else None, compressor)
                put_json(store, f"{a.name}/{zarr2.ATTRS}", zarr2.zattrs_json(a.attrs, a.dims))
                put_json(store, f"{a.name}/{zarr2.ARRAY}", zarray)
                key = zarr2.chunk_key(a.name, (0,) * len(a.shape))
            else:
                codecs, grid_shape = codecs_json(a.codec, a.level, a.dtype), a.chunks
                if shards_yx is not None and band:
                    codecs, grid_shape = sharding_json(codecs, a.chunks), (1, *shards_yx)
                doc = array_json(a.shape, a.dtype, grid_shape, a.fill, codecs, a.dims, a.attrs)
                put_json(store, f"{a.name}/zarr.json", doc)
                key = f"{a.name}/c/0"
            if a.values is not None:
                write_bytes(store, key, a.values.tobytes())
    except Exception as e:  # OSError locally, obstore's errors remotely
        error = write_error("the store's template", path, e)
        if not isinstance(error, StoreFullError):
            error = StoreError(f"cannot create the output store {path}: {redact(first_part(str(e)))}")
        raise error from None


@dataclass(frozen=True)
class StoreUsage:
    """What a finished store holds: all its bytes, and its chunk objects and their bytes."""

    bytes: int
    """Every object of the store."""
    data_objects: int
    """Chunk (or shard) objects of the band arrays."""
    data_bytes: int


def finalize_store(path: str, storage: Storage | None = None, attrs: dict[str, Any] | None = None) -> StoreUsage:
    """Drop the journal, mark complete, consolidate metadata; return what the store holds. ``attrs``: more
    group attributes, put with the completion (the record of what each date was built from).

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
            root.setdefault("attributes", {}).update(attrs or {}, pipeline_complete=True)
            children = {}
            for name in sorted(names):
                child = get_json(store, f"{name}/zarr.json")
                if child is not None:
                    children[name] = child
            root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": children}
            put_json(store, "zarr.json", root)
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
    put_json(store, zarr2.ATTRS, attrs)
    put_json(store, zarr2.CONSOLIDATED, zarr2.consolidated_json(attrs, children))
    bands = [n for n, c in children.items() if c[zarr2.ATTRS].get("_ARRAY_DIMENSIONS") == list(BAND_DIMS)]
    return bands, ""
