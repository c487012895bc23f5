"""An update of a finished cube, written where readers do not look and then published in one put.

Readers (``xarray.open_zarr``) take every array's shape, chunk key encoding and the rest from the group's
consolidated metadata: one object, ``zarr.json``. An update therefore:

1. writes a marker in the journal (:data:`MARKER`: its work, where its chunks go) before any chunk, so a
   later update knows what an interrupted one may have left;
2. writes the new dates' chunks at time positions beyond the published shape (no reader asks for them);
   where a date is inserted before later ones, every date moves, so the whole time axis is staged in the
   other key namespace (chunk keys ``c.t.y.x`` where the cube's are ``c/t/y/x``, or back): the kept
   dates' objects are hard-linked there (a local store: same inode, bytes and mtime) or copied by the
   bucket (S3 CopyObject), the new and changed dates computed there;
3. publishes: the new time coordinate in the time array's other namespace, the new record, each array's
   ``zarr.json`` (for readers without consolidated metadata), then the group's ``zarr.json`` with the new
   shapes, encodings and record in one put. A crash before that put leaves the cube as it was.

A date recomputed in place (its sources changed, no date inserted) is rewritten chunk by chunk at its
own position: a reader may see it half old, half new until the update ends (the contract allows it for
``output.engine: zarr``). An interrupted update leaves the marker, and the next update either resumes it
(the same work: the journal skips its finished partitions) or cleans up after it (other work: what it
wrote beyond the shape is deleted, and what it rewrote in place is recomputed).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import ConfigError, StoreError
from pipeline.storage import delete_keys, list_keys, redact, scheme, write_bytes
from pipeline.store.existing import JOURNAL_DIR, drop_staged_leftovers, get_json, output_store, put_json
from pipeline.store.layout import StoreUsage
from pipeline.store.record import RECORD_DIR, CubeState, Record, UpdateDiff, write_record
from pipeline.store.resume import setting_changes
from pipeline.store.write import chunk_key

if TYPE_CHECKING:
    from pipeline.planning.plan import Plan
    from pipeline.storage import Storage

logger = logging.getLogger(__name__)

LOCK = f"{JOURNAL_DIR}/lock"
"""Held by the update in progress (its host and process): created only where absent (a conditional put:
``O_EXCL`` on disk, ``If-None-Match: *`` in a bucket), deleted with the journal when it publishes."""
MARKER = f"{JOURNAL_DIR}/update.json"
"""An update in progress: its work digest, the key separator it writes with, and the dates it rewrites in place."""

WHERE_INPUTS_COME_FROM = (
    "inputs.paths",
    "inputs.stac",
    "inputs.stac_search",
    "inputs.trust_index",
    "inputs.gdal_env",
    "grid.bounds",
    "resampling_engine",
)
"""Settings an update may change: where the inputs are found (a STAC search's dates move on), and the grid's
bounds (compared as the grid they give)."""


def other(separator: str) -> str:
    return "." if separator == "/" else "/"


def check_cube(
    path: str,
    state: CubeState,
    plan: Plan,
    settings: dict[str, Any],
) -> None:
    """ConfigError (exit 2) naming each difference where the inputs and config would make another cube
    than the one at ``path``: its grid (CRS, transform, shape), bands, dtypes, fill values, chunks or
    shards, or a setting that changes pixels (resampling, fuse, mask, compression...)."""
    diffs: list[tuple[str, str]] = []
    g = plan.grid
    bands = {b.name: b for b in plan.output_bands}
    if sorted(bands) != state.bands:
        diffs.append(("inputs.bands", f"the cube has bands {state.bands}, the inputs give {sorted(bands)}"))
    ref = state.arrays.get("spatial_ref", {}).get("attributes", {})
    a, b, c, d, e, f = g.transform
    want = [c, a, b, f, d, e]
    have = [float(v) for v in str(ref.get("GeoTransform", "")).split()]
    if len(have) != 6 or not np.allclose(have, want, rtol=0, atol=1e-9 * max(1.0, *map(abs, want))):
        diffs.append(("grid", f"the cube's GeoTransform is {have}, the inputs and config give {want}"))
    from pyproj import CRS

    if "crs_wkt" in ref and not CRS.from_wkt(ref["crs_wkt"]).equals(CRS.from_user_input(g.crs)):
        diffs.append(("grid.crs", f"the cube's CRS is not {g.crs}"))
    per_band: dict[tuple[str, str], list[str]] = {}  # (key, what differs) -> the bands it differs in
    for name in sorted(set(bands) & set(state.bands)):
        meta, spec = state.arrays[name], bands[name]
        if list(meta["shape"][1:]) != list(g.shape_yx):
            said = f"{meta['shape'][1:]} pixels (y, x) in the cube, {list(g.shape_yx)} on the grid now"
            per_band.setdefault(("grid", said), []).append(name)
        if meta["data_type"] != np.dtype(spec.dtype).name:
            said = f"{meta['data_type']} in the cube, {spec.dtype} in the inputs"
            per_band.setdefault(("inputs", said), []).append(name)
        codecs = meta.get("codecs") or []
        sharded = bool(codecs) and codecs[0].get("name") == "sharding_indexed"
        inner = (
            codecs[0]["configuration"]["chunk_shape"] if sharded else meta["chunk_grid"]["configuration"]["chunk_shape"]
        )
        if list(inner[1:]) != list(g.chunks_yx):
            said = f"chunks {inner[1:]} (y, x) in the cube, {list(g.chunks_yx)} in the config"
            per_band.setdefault(("output.chunks", said), []).append(name)
        fill, nodata = meta.get("fill_value"), spec.nodata
        same_fill = (fill == "NaN" and np.isnan(nodata)) or (not isinstance(fill, str) and fill == nodata)
        if not same_fill:
            said = f"fill value {fill} in the cube, {nodata} from the inputs"
            per_band.setdefault(("inputs.nodata", said), []).append(name)
    diffs += [(key, f"{', '.join(names)}: {said}") for (key, said), names in per_band.items()]
    recorded = {
        k: v for k, v in (state.attrs.get("pipeline_settings") or {}).items() if k not in WHERE_INPUTS_COME_FROM
    }
    mine = {k: v for k, v in settings.items() if k not in WHERE_INPUTS_COME_FROM}
    settings_first = [
        (key, f"the cube was made with {old}, the config has {new}")
        for key, old, new in setting_changes(recorded, mine)
    ]
    diffs = settings_first + diffs  # the config keys first: the error names the one to set back
    if diffs:
        said = "; ".join(f"{k}: {v}" for k, v in diffs)
        raise ConfigError(
            diffs[0][0],
            f"{path} does not match the config and inputs ({said}); an update only adds and recomputes dates "
            "of the same cube: set the config back, or rebuild it with `pipeline run CONFIG --overwrite`",
        )


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def take_lock(path: str, storage: Storage | None) -> None:
    """Hold the cube for this update, or StoreError where another update holds it. A lock left by an update
    of this machine whose process is gone (killed), or by this process (an update that failed), is taken over."""
    import socket
    import time

    import obstore
    from obstore.exceptions import AlreadyExistsError

    store = output_store(path, storage)
    me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for _ in range(3):
        try:
            obstore.put(store, LOCK, json.dumps(me).encode(), mode="create")
            return
        except AlreadyExistsError:
            try:
                held = get_json(store, LOCK) or {}
            except ValueError:
                held = {}
            mine = held.get("host") == me["host"] and (held.get("pid") == me["pid"] or not _alive(held.get("pid")))
            if not mine:
                raise StoreError(
                    f"{path}: another update holds it (host {held.get('host')}, process {held.get('pid')}, since "
                    f"{held.get('since')}); wait for it to end, or, if it is gone, delete {path}/{LOCK}"
                ) from None
            delete_keys(store, [LOCK])
    raise StoreError(f"{path}: could not take {LOCK}")


def read_marker(path: str, storage: Storage | None) -> dict[str, Any] | None:
    """The marker an unfinished update left, or None."""
    try:
        return get_json(output_store(path, storage), MARKER)
    except ValueError:
        return {}


def interrupted_dates(marker: dict[str, Any] | None, digest: str | None = None) -> dict[str, str]:
    """Dates an interrupted update (its marker) had begun to rewrite in place: they are recomputed."""
    if not marker or marker.get("digest") == digest:
        return {}
    return {d: "an interrupted update had begun to rewrite it" for d in marker.get("in_place", [])}


def _band_keys(store: Any, band: str, separator: str) -> list[tuple[str, int]]:
    """(key, time position) of every chunk object of ``band`` in the namespace of ``separator``."""
    start = f"{band}/c{separator}"
    out = []
    for key, _ in list_keys(store, band):
        if key.startswith(start):
            head = key[len(start) :].split(separator, 1)[0]
            if head.isdigit():
                out.append((key, int(head)))
    return out


def _position_keys(
    store: Any, bands: list[str], separator: str, positions: set[int]
) -> list[tuple[str, tuple[str, int, int, int], int]]:
    """(key, (band, t, row, col), size) of the chunk objects at time ``positions``: with ``/`` keys one listing
    per band and position (``B02/c/7/``); with ``.`` keys, which share one folder, the band's whole listing."""
    out = []
    for band in bands:
        start = f"{band}/c{separator}"
        if separator == "/":
            listed = [kv for t in sorted(positions) for kv in list_keys(store, f"{start}{t}")]
        else:
            listed = [kv for kv in list_keys(store, band) if kv[0].startswith(start)]
        for key, size in listed:
            parts = key[len(start) :].split(separator)
            if len(parts) == 3 and all(p.isdigit() for p in parts) and int(parts[0]) in positions:
                out.append((key, (band, int(parts[0]), int(parts[1]), int(parts[2])), size))
    return out


def _clean(store: Any, bands: list[str], separator: str, from_t: int) -> int:
    """Delete every chunk of ``bands`` in ``separator``'s namespace at time positions ``from_t`` and on."""
    keys = [k for b in bands for k, t in _band_keys(store, b, separator) if t >= from_t]
    delete_keys(store, keys)
    return len(keys)


def _link(path: str, store: Any, src: str, dst: str) -> None:
    """Make ``dst`` the object ``src`` is: a hard link locally (same bytes, inode and mtime), else the
    bucket's own copy."""
    if scheme(path) == "file":
        target = os.path.join(path, dst)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(os.path.join(path, src), target)
            return
        except FileExistsError:
            os.unlink(target)
            os.link(os.path.join(path, src), target)
            return
        except OSError:  # no hard links on this file system: a copy
            pass
    import obstore

    obstore.copy(store, src, dst, overwrite=True)


@dataclass(frozen=True)
class Staging:
    """Where an update's chunks go."""

    separator: str
    """The chunk key separator the update writes with."""
    resumed: bool
    """The same work was interrupted before: its finished partitions are in the journal."""


def stage_update(path: str, storage: Storage | None, state: CubeState, diff: UpdateDiff, digest: str) -> Staging:
    """Make the store ready for an update's chunks (see the module's steps 1-2): after the marker, an
    earlier unfinished update's leftovers are deleted, and where dates shift the kept ones are linked
    into the other namespace. The same work interrupted before is resumed as it was staged."""
    store = output_store(path, storage)
    drop_staged_leftovers(path)
    bands = state.bands
    old_sep = state.separator(bands[0])
    marker = read_marker(path, storage)
    if marker and marker.get("digest") == digest and marker.get("staged"):
        logger.info("resuming the interrupted update of %s", path)
        return Staging(separator=str(marker["separator"]), resumed=True)
    try:
        if marker is not None:  # another update's leftovers: beyond the shape, and its journal
            n = _clean(store, bands, old_sep, len(state.times))
            delete_keys(store, [k for k, _ in list_keys(store, JOURNAL_DIR) if k not in (MARKER, LOCK)])
            logger.info("%s: cleaned up after an interrupted update (%d chunk objects beyond the cube)", path, n)
        sep = other(old_sep) if diff.shifts else old_sep
        in_place = [] if diff.shifts else sorted(diff.recomputed)
        doc = {"digest": digest, "separator": sep, "in_place": in_place, "staged": False}
        put_json(store, MARKER, doc)
        if diff.shifts:
            _clean(store, bands, sep, 0)  # a namespace two updates old: no reader looks there
            work = set(diff.work)
            moves = {diff.old_times.index(d): diff.position(d) for d in diff.old_times if d not in work}
            for band in bands:
                for key, t in _band_keys(store, band, old_sep):
                    if t in moves:
                        rest = key[len(f"{band}/c{old_sep}") :].split(old_sep)[1:]
                        index = (moves[t], *(int(i) for i in rest))
                        _link(path, store, key, chunk_key(band, index, sep))
        put_json(store, MARKER, {**doc, "staged": True})
    except OSError as e:
        raise StoreError(f"cannot stage the update of {path}: {redact(str(e))}") from None
    return Staging(separator=sep, resumed=False)


def _written(plan: Plan, state: CubeState) -> set[tuple[str, int, int, int]]:
    """(band, t, row, col) of every chunk (or shard) object the plan's jobs write."""
    t = plan.tables
    names = [b.name for b in plan.bands]
    meta = state.arrays[state.bands[0]]
    outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
    sy, sx = outer[1] // plan.grid.chunks_yx[0], outer[2] // plan.grid.chunks_yx[1]
    out = set()
    for b, tt, cy, cx in zip(t.job_band.tolist(), t.job_t.tolist(), t.job_cy.tolist(), t.job_cx.tolist(), strict=True):
        out.add((names[b], tt, cy // sy, cx // sx))
    return out


def publish_update(
    path: str,
    storage: Storage | None,
    state: CubeState,
    diff: UpdateDiff,
    plan: Plan,
    separator: str,
    record: Record,
) -> StoreUsage:
    """Publish an update whose chunks are all written (the module's step 3); what the store then holds."""
    store = output_store(path, storage)
    bands = state.bands
    n = len(diff.times)
    try:
        work = _position_keys(store, bands, separator, {diff.position(d) for d in diff.work})
        if not diff.shifts and diff.recomputed:  # a date rewritten in place: its chunks no job wrote hold nothing
            written = _written(plan, state)
            places = {diff.position(d) for d in diff.recomputed}
            stale = [key for key, (band, t, y, x), _ in work if t in places and (band, t, y, x) not in written]
            delete_keys(store, stale)
            work = [w for w in work if w[0] not in set(stale)]
        generation = state.generation + 1
        record_name = write_record(store, generation, record)
        arrays = {name: dict(meta) for name, meta in state.arrays.items()}
        for band in bands:
            meta = arrays[band]
            meta["shape"] = [n, *meta["shape"][1:]]
            meta["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": separator}}
        if diff.times != diff.old_times:
            time_sep = other(state.separator("time"))
            seconds = np.array(diff.times, dtype="datetime64[s]").astype("<i8")
            write_bytes(store, chunk_key("time", (0,), time_sep), seconds.tobytes())
            tmeta = arrays["time"]
            tmeta["shape"], tmeta["chunk_grid"] = [n], {"name": "regular", "configuration": {"chunk_shape": [n]}}
            tmeta["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": time_sep}}
        for name in [*bands, "time"]:
            put_json(store, f"{name}/zarr.json", arrays[name])
        root = dict(state.root)
        root["attributes"] = {**state.attrs, "pipeline_record": record_name, "pipeline_generation": generation}
        root["consolidated_metadata"] = {**root["consolidated_metadata"], "metadata": dict(sorted(arrays.items()))}
        put_json(store, "zarr.json", root)  # the one put readers see the update by
        keys = list_keys(store, JOURNAL_DIR) + list_keys(store, RECORD_DIR)
        done = [k for k, _ in keys if k.startswith(f"{JOURNAL_DIR}/") and k not in (MARKER, LOCK)]
        done += [k for k, _ in keys if k.startswith(f"{RECORD_DIR}/") and k != record_name]
        delete_keys(store, done)
        delete_keys(store, [MARKER, LOCK])  # the marker, then the lock: the update is over
        if scheme(path) == "file":
            import shutil

            shutil.rmtree(os.path.join(path, JOURNAL_DIR), ignore_errors=True)
    except OSError as e:
        raise StoreError(f"cannot publish the update of {path}: {redact(str(e))}") from None
    data = [size for _, _, size in work]  # the dates it wrote: listing the whole cube would cost as it grows
    return StoreUsage(bytes=sum(data), data_objects=len(data), data_bytes=sum(data))
