"""Windowed reads: only the window and overview level a chunk needs.

Tasks carry paths and windows (never open handles); a worker process opens
a file lazily once and keeps it in a small LRU cache that its threads share,
each dataset used by one thread at a time, so a file touched by many chunks
of a partition (or of later partitions on the same worker) is opened once.

Paths that are URLs (``s3://``, ``https://``) are read through GDAL's ``/vsis3/`` and ``/vsicurl/``
inside one ``rasterio.Env`` per worker thread, entered on the thread's first remote read and kept: the cloud
defaults, the endpoint and ``inputs.gdal_env`` (:func:`pipeline.storage.gdal_options`), and an AWS
session whose credentials this process resolves from its own AWS chain (never from the task graph).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.config import is_url
from pipeline.errors import TileReadError
from pipeline.inputs import netstats
from pipeline.planning.grid import offset_transform, x_turn
from pipeline.planning.plan import SourceWindow

if TYPE_CHECKING:  # the model imports pydantic; workers need only its attributes
    from pipeline.storage import Storage

MAX_OPEN_FILES = 64
READ_OPTIONS = {"GTIFF_SRS_SOURCE": "GEOKEYS"}
"""GDAL options set around each open of a read (where ``inputs.gdal_env`` or the caller's environment
sets none of them): a GeoTIFF's CRS built from its own GeoKeys, not looked up by
EPSG code in PROJ's database, which took ~0.2 ms of a ~0.6 ms open (a cloudy composite opens ~800 files).
The CRS GDAL reports is all that changes, and a read never uses it: the plan carries each tile's CRS from
its index or catalogue, and a read checks the file's geotransform. Opens that read headers for the index
(:mod:`pipeline.inputs.headers`) keep GDAL's default."""
_local = threading.local()
_opens = [0]  # datasets opened by this process (a list so threads share one counter)


_settings: list[Any] = [None, (), ""]  # storage (None: the defaults), gdal_env pairs, the run's token


def configure_reads(storage: Storage | None, gdal_env: tuple[tuple[str, str], ...] = (), run: str = "") -> None:
    """The storage settings remote reads of this process use (a task sets them from its context), and the
    run they are for: a thread's open datasets are kept for one run, since a long-lived worker's files may
    be made again between runs (an open handle would serve its old blocks)."""
    _settings[:] = [storage, tuple(gdal_env), run]


_sessions: dict[tuple[Any, ...], Any] = {}
_sessions_lock = threading.Lock()


def cloud_env(storage: Storage, gdal_env: dict[str, Any] | None = None) -> Any:
    """A ``rasterio.Env`` for remote reads: the cloud GDAL options and this process's AWS session for
    ``storage``, made once per process (a session costs ~40 ms: it resolves the AWS chain)."""
    import rasterio

    from pipeline.storage import gdal_options, rasterio_session

    key = (storage.endpoint_url, storage.region, storage.anonymous, storage.profile)
    with _sessions_lock:
        session = _sessions.get(key)
        if session is None:
            session = _sessions[key] = rasterio_session(storage)
    netstats.enable()
    return rasterio.Env(session=session, **gdal_options(storage, gdal_env))


def _enter_cloud_env() -> None:
    """Enter this thread's cloud ``rasterio.Env`` once (again only if the settings changed) and keep it."""
    key = tuple(_settings[:2])
    held = getattr(_local, "cloud_env", None)
    if held is not None and held[0] == key:
        return
    storage, gdal_env = key
    if storage is None:
        from pipeline.storage import default_storage

        storage = default_storage()
    env = cloud_env(storage, dict(gdal_env))
    env.__enter__()  # kept: an Env per open costs more than a small read (see _open_dataset)
    _local.cloud_env = (key, env)


def _block_bytes(ds: Any, r0: int, c0: int, h: int, w: int) -> int:
    """Compressed bytes of the blocks a window covers (from the file's tile byte counts); the window's
    pixel bytes where the format does not say."""
    try:
        by, bx = ds.block_shapes[0]
        return int(
            sum(
                ds.block_size(1, i, j)
                for i in range(r0 // by, (r0 + h - 1) // by + 1)
                for j in range(c0 // bx, (c0 + w - 1) // bx + 1)
            )
        )
    except Exception:  # noqa: BLE001 - a format without block sizes (or an overview wrapper)
        return h * w * np.dtype(ds.dtypes[0]).itemsize


def input_errors() -> tuple[type[BaseException], ...]:
    """What a bad input raises while it is opened or read: rasterio's errors (``RasterioIOError`` is an
    ``OSError``; ``CRSError`` a ``ValueError`` of its own) and the OS's. Everything else is a bug in this
    code, and fails the run with its traceback instead of passing for a skipped input."""
    from rasterio.errors import CRSError, RasterioError

    return (RasterioError, CRSError, OSError)


def open_count() -> int:
    """How many datasets this process has opened (cache misses), for the report."""
    return _opens[0]


class _Handle:
    """One open dataset of this process, and the lock its user holds: GDAL lets a dataset be used by one
    thread at a time, from any thread."""

    __slots__ = ("ds", "dropped", "first", "lock", "opened")

    def __init__(self, first: _Handle | None = None) -> None:
        self.ds: Any = None
        self.lock = threading.Lock()
        self.dropped = False
        """Out of the cache (evicted, or its read failed): closed by the thread that holds it."""
        self.first = first
        """The file's dataset opened before this one, whose open this one's waits for (None: the first)."""
        self.opened = threading.Event()
        """Set once its open was tried (done or failed)."""


HANDLES_PER_FILE = 2
"""Datasets of one remote file a process keeps open at once: as many of its windows read at once, each
waiting on its own requests. A file's later datasets open once its first has (:data:`FIRST_OPEN_WAIT_S`),
from what that open fetched into GDAL's cache (the ``GDAL_INGESTED_BYTES_AT_OPEN`` head: all of a small
COG): opened at once, each fetched it again (the case study from a 25 ms store: 595 GETs, 405 with one
dataset a file). More datasets of a file fetch more of its blocks twice (each keeps its own block cache,
and adjacent windows share edge blocks): 1, 2 and 8 gave the same wall within the machine's noise, and
the fewer, the fewer GETs. A local file has one: its reads wait on no round trip, and take turns."""

FIRST_OPEN_WAIT_S = 60.0
"""How long a file's later dataset waits for its first one's open before it opens on its own."""
_handles: OrderedDict[tuple[str, int], list[_Handle]] = OrderedDict()
_handles_lock = threading.Lock()
_handles_run = [""]  # the run the open datasets are for


def _acquire(path: str, level: int, most: int) -> _Handle:
    """A handle of (``path``, ``level``) for this thread alone (its lock held; :func:`_release` it): a free
    one, else a new one up to ``most``, else the next to be freed. Files past
    :data:`MAX_OPEN_FILES` that no thread holds are closed, least recently used first, and all of them
    when a new run starts.

    One cache for the process, not one per thread: a worker's I/O threads (:mod:`pipeline.inputs.prefetch`)
    share each file's datasets, where a cache per thread opened every file once per thread."""
    stale: list[_Handle] = []
    with _handles_lock:
        if _handles_run[0] != _settings[2]:
            for group in _handles.values():
                stale += group
            _handles.clear()
            _handles_run[0] = _settings[2]
        key = (path, level)
        group = _handles.setdefault(key, [])
        _handles.move_to_end(key)
        handle = next((h for h in group if h.lock.acquire(blocking=False)), None)
        if handle is None and len(group) < most:
            handle = _Handle(group[0] if group else None)
            handle.lock.acquire()
            group.append(handle)
        waits = handle is None
        if handle is None:  # every one in use: wait for one
            handle = group[_opens[0] % len(group)]
        for old_key in list(islice(_handles, max(len(_handles) - MAX_OPEN_FILES, 0))):
            old = _handles[old_key]
            held = [h for h in old if h.lock.acquire(blocking=False)]
            if len(held) == len(old):  # none in use: closed below
                del _handles[old_key]
                stale += held
            for h in held:
                h.lock.release()
        for h in stale:
            h.dropped = True
    for h in stale:
        with h.lock:
            _close(h)
    if waits:
        handle.lock.acquire()
    return handle


def _close(handle: _Handle) -> None:
    if handle.ds is not None:
        handle.ds.close()
        handle.ds = None


def _release(handle: _Handle) -> None:
    """Give ``handle`` back; one dropped from the cache meanwhile is closed."""
    if handle.dropped:
        _close(handle)
    handle.lock.release()


def _forget(path: str, level: int, handle: _Handle) -> None:
    """Drop ``handle`` (held by the caller) after a failed read: the next read of the file opens afresh."""
    with _handles_lock:
        group = _handles.get((path, level))
        if group is not None and handle in group:
            group.remove(handle)
        handle.dropped = True


def _open_dataset(path: str, level: int) -> Any:
    """Open (``path``, ``level``); the caller holds its handle's lock."""
    import rasterio

    kwargs = {} if level < 0 else {"overview_level": level}
    if is_url(path):
        from pipeline.storage import vsi_path

        ds = _open_with_read_options(vsi_path(path), kwargs)
    else:
        if not rasterio.env.hasenv():
            # Without a GDAL environment on this thread, rasterio sets one up and tears it down around
            # every open (~0.4 ms of ~2 ms); this one stays (an Env entered later restores it when it leaves).
            rasterio.env.defenv()
        ds = _open_with_read_options(path, kwargs)
    with _handles_lock:
        _opens[0] += 1
    return ds


def _open_with_read_options(source: str, kwargs: dict[str, Any]) -> Any:
    """``rasterio.open`` with :data:`READ_OPTIONS` set for the open (each option only where none is set:
    thread-local on a thread of its own, process-wide on the main thread, where a worker process runs its
    tasks one at a time), then cleared again: ~1 µs, where an ``Env`` per open cost ~0.4 ms."""
    import rasterio
    from rasterio._env import del_gdal_config
    from rasterio.env import get_gdal_config, set_gdal_config

    unset = [k for k in READ_OPTIONS if get_gdal_config(k) is None]
    for k in unset:
        set_gdal_config(k, READ_OPTIONS[k])
    try:
        return rasterio.open(source, **kwargs)
    finally:
        for k in unset:
            del_gdal_config(k)  # (set_gdal_config(k, None) would leave the string "None")


def geometry_mismatch(ds: Any, src: SourceWindow) -> str | None:
    """Why the opened level's georeferencing is not the one ``src`` was planned with, or None. A level's
    pixel size is compared first (an overview of another size than planned), then the window's origin."""
    t = ds.transform
    level = "the file" if src.overview_level < 0 else f"overview {src.overview_level}"
    a, e = src.transform[0], src.transform[4]
    if abs(t.a - a) > abs(a) * 1e-6 or abs(t.e - e) > abs(e) * 1e-6:
        return (
            f"{level} is {ds.width}x{ds.height} px of {abs(t.a):.6g} x {abs(t.e):.6g}, but the plan expected "
            f"{abs(a):.6g} x {abs(e):.6g} px from the tile's metadata (the index, or the STAC item and the header "
            "read for its group): the file differs from that metadata; rerun `pipeline index` if it changed, "
            "or fix the catalogue"
        )
    r0, c0 = src.window[:2]
    _, _, x0, _, _, y0 = offset_transform(tuple(t)[:6], r0, c0)
    dx = x0 - src.transform[2]
    turn = x_turn(src.crs) if abs(dx) > abs(t.a) * 1e-3 else None
    if turn is not None:  # planned a turn over, on a grid past 180
        dx -= turn.period * round(dx / turn.period)
    if abs(dx) > abs(t.a) * 1e-3 or abs(y0 - src.transform[5]) > abs(t.e) * 1e-3:
        return (
            f"{level}'s origin ({t.c:.6f}, {t.f:.6f}) differs from the tile's metadata: the file moved or "
            "changed since it was indexed (rerun `pipeline index`), or the catalogue's proj:transform is wrong"
        )
    return None


def read_window(src: SourceWindow) -> np.ndarray:
    """Read ``src.window`` of band ``src.band_index`` at ``src.overview_level``; raise TileReadError naming
    file and window."""
    from rasterio.windows import Window

    r0, c0, h, w = src.window
    where = f"window rows {r0}:{r0 + h} cols {c0}:{c0 + w}" + (
        f" of overview {src.overview_level}" if src.overview_level >= 0 else ""
    )
    failure = None
    remote = is_url(src.path)
    t_start = time.perf_counter()
    if remote:
        _enter_cloud_env()  # each thread that reads or opens: GDAL takes the options of the calling thread
    handle = _acquire(src.path, src.overview_level, HANDLES_PER_FILE if remote else 1)
    try:
        if handle.ds is None:
            if handle.first is not None:  # what the file's first open fetched is in GDAL's cache once it is done
                handle.first.opened.wait(FIRST_OPEN_WAIT_S)
            try:
                handle.ds = _open_dataset(src.path, src.overview_level)
            finally:
                handle.opened.set()
        ds = handle.ds
        problem = geometry_mismatch(ds, src)
        if problem:
            raise TileReadError(src.path, f"{problem} ({where})")
        if remote:
            t_read = time.perf_counter()
            netstats.begin_read()
            try:
                data = ds.read(src.band_index, window=Window(c0, r0, w, h))
            finally:
                netstats.record_read(time.perf_counter() - t_read, _block_bytes(ds, r0, c0, h, w), t_read - t_start)
        else:
            data = ds.read(src.band_index, window=Window(c0, r0, w, h))
    except TileReadError:
        raise
    except input_errors() as e:  # truncated, corrupt or missing files; anything else is a bug: it propagates
        _forget(src.path, src.overview_level, handle)
        detail = f"{e} ({e.__cause__})" if e.__cause__ else str(e)
        advice = "the file may be truncated, corrupt or gone"
        if remote:
            from pipeline.storage import redact

            detail = redact(detail)
            advice = "the object may be corrupt or gone, or this worker's AWS credentials refused"
        failure = f"read failed ({where}): {detail}; {advice}"
    finally:
        _release(handle)
    if failure is not None:
        # Raised outside the except block and chained to a plain OSError: GDAL's exception types do not
        # survive pickling back from a Dask worker, and distributed would hand back a bare Exception.
        raise TileReadError(src.path, failure) from OSError(failure)
    if data.shape != (h, w):
        raise TileReadError(src.path, f"short read ({where}): got {data.shape}")
    return data
