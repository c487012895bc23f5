"""What the reads cost on the network: GDAL's own request counters, retries, read latencies.

GDAL counts the requests and bytes of its network file systems (``/vsis3/``, ``/vsicurl/``) when
``CPL_VSIL_NETWORK_STATS_ENABLED`` is on; rasterio does not expose those counters, so they are read
from rasterio's own libgdal through ctypes. Retries are GDAL's "Retrying again in" warnings, which
rasterio logs on the ``rasterio._env`` logger (counted by a filter there). Latencies are timed here,
per remote windowed read (an open where the file was not yet open, plus the read): one read can be
several HTTP requests, or none when GDAL's cache holds its blocks.

The counters are per process; :func:`take` hands out what happened since the last ``take`` in this
process and resets GDAL's (whose statistics also list every file read, so left to grow they would cost
each task more), so per-task parts add up to the process's total. With several threads per worker, a
request finishing between one take's read and reset is not counted (microseconds apart).
"""

from __future__ import annotations

import ctypes
import glob
import json
import logging
import os
import threading
import time
from typing import Any

import numpy as np

_lock = threading.Lock()
_state: dict[str, Any] = {"lib": None, "enabled": False, "retries_taken": 0, "retries": 0, "other": [0, 0]}
_reads: list[tuple[float, int]] = []  # (seconds, bytes needed) per remote read since the last take
_flight: dict[str, float] = {"now": 0, "max": 0, "since": 0.0, "busy_s": 0.0, "area_s": 0.0}
"""Remote reads in flight in this process now, the most at once and the seconds with at least one in
flight since the last take (and since when the current such stretch runs)."""


def _gdal() -> Any:
    """rasterio's libgdal (the one its reads go through), or None where it cannot be found."""
    if _state["lib"] is None:
        import rasterio

        libs = os.path.join(os.path.dirname(os.path.dirname(rasterio.__file__)), "rasterio.libs")
        found = sorted(glob.glob(os.path.join(libs, "libgdal*.so*")))
        lib: Any
        try:
            lib = ctypes.CDLL(found[0]) if found else ctypes.CDLL("libgdal.so")
            lib.VSINetworkStatsGetAsSerializedJSON.restype = ctypes.c_void_p
            lib.VSINetworkStatsGetAsSerializedJSON.argtypes = [ctypes.c_char_p]
            lib.VSIFree.argtypes = [ctypes.c_void_p]
            lib.CPLSetConfigOption.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        except (OSError, AttributeError):
            lib = False
        _state["lib"] = lib
    return _state["lib"] or None


def gdal_library() -> Any:
    """rasterio's libgdal with the signatures of the few dataset calls this package makes (opening a
    dataset and reading its overview sizes), or None where it cannot be loaded."""
    lib = _gdal()
    if lib is None:
        return None
    if not getattr(lib, "_pipeline_signatures", False):
        vp = ctypes.c_void_p
        lib.GDALOpenEx.restype = vp
        lib.GDALOpenEx.argtypes = [ctypes.c_char_p, ctypes.c_uint, vp, vp, vp]
        lib.GDALGetRasterBand.restype = vp
        lib.GDALGetRasterBand.argtypes = [vp, ctypes.c_int]
        lib.GDALGetOverviewCount.argtypes = [vp]
        lib.GDALGetOverview.restype = vp
        lib.GDALGetOverview.argtypes = [vp, ctypes.c_int]
        lib.GDALGetRasterBandXSize.argtypes = [vp]
        lib.GDALGetRasterBandYSize.argtypes = [vp]
        lib.GDALClose.argtypes = [vp]
        lib._pipeline_signatures = True
    return lib


class _RetryCounter(logging.Filter):
    """Counts GDAL's retry warnings as rasterio logs them. The logger it sits on is opened to WARNING
    so they are counted under ``-q`` too; records go on only at the level the ``rasterio`` logger
    would have let through, so what is printed does not change."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and "Retrying again in" in record.getMessage():
            with _lock:
                _state["retries"] += 1
        return record.levelno >= logging.getLogger("rasterio").getEffectiveLevel()


def enable() -> None:
    """Turn on GDAL's network counters and the retry count in this process (once; idempotent)."""
    with _lock:  # held while the option is set: no thread of ours opens a remote file meanwhile
        if _state["enabled"]:
            return
        lib = _gdal()
        if lib is not None:
            lib.CPLSetConfigOption(b"CPL_VSIL_NETWORK_STATS_ENABLED", b"YES")
            lib.VSINetworkStatsReset()  # GDAL reads the option again after a reset
        gdal_log = logging.getLogger("rasterio._env")
        gdal_log.addFilter(_RetryCounter())
        if gdal_log.getEffectiveLevel() > logging.WARNING:
            gdal_log.setLevel(logging.WARNING)
        _state["enabled"] = True


def clear_cache() -> None:
    """Forget what GDAL's ``/vsicurl/`` and ``/vsis3/`` hold in this process (object sizes, blocks,
    listings), so a run sees the store as it is now, not as an earlier run or header read found it."""
    lib = _gdal()
    if lib is not None:
        lib.VSICurlClearCache()


def _take_counters() -> tuple[int, int]:
    """(requests, bytes fetched) by GDAL in this process since the last call, whose counters it resets."""
    lib = _gdal() if _state["enabled"] else None
    requests = fetched = 0
    if lib is not None:
        ptr = lib.VSINetworkStatsGetAsSerializedJSON(None)
        lib.VSINetworkStatsReset()
        if ptr:
            try:
                stats = json.loads(ctypes.string_at(ptr).decode())
            finally:
                lib.VSIFree(ptr)
            for method in (stats.get("methods") or {}).values():
                requests += int(method.get("count", 0))
                fetched += int(method.get("downloaded_bytes", 0))
    return requests, fetched


def record_requests(requests: int, fetched: int) -> None:
    """Requests made outside GDAL (obstore's header GETs, :func:`pipeline.inputs.headers.fetch_headers`),
    counted with GDAL's."""
    with _lock:
        _state["other"][0] += requests
        _state["other"][1] += fetched


def begin_read() -> None:
    """A remote windowed read starts (each one ends with :func:`record_read`)."""
    now = time.perf_counter()
    with _lock:
        if _flight["now"] == 0:
            _flight["since"] = now
        _flight["now"] += 1
        _flight["max"] = max(_flight["max"], _flight["now"])


def record_read(seconds: float, bytes_needed: int, opening_s: float = 0.0) -> None:
    """One remote windowed read ended: how long it took and the compressed bytes of the blocks it covers;
    ``opening_s``: the seconds before it spent opening the file (its header's request) or waiting for a
    dataset of it, counted in its latency but not in flight."""
    now = time.perf_counter()
    with _lock:
        _reads.append((seconds + opening_s, bytes_needed))
        _flight["area_s"] += seconds
        _flight["now"] = max(_flight["now"] - 1, 0)
        if _flight["now"] == 0:
            _flight["busy_s"] += now - _flight["since"]


def _take_flight() -> dict[str, float]:
    """Seconds with a read in flight and the most in flight since the last take (under ``_lock``)."""
    now = time.perf_counter()
    busy = _flight["busy_s"]
    if _flight["now"]:
        busy += now - _flight["since"]
        _flight["since"] = now
    out = {"busy_s": round(busy, 6), "area_s": round(_flight["area_s"], 6), "max": int(_flight["max"])}
    _flight["busy_s"], _flight["area_s"], _flight["max"] = 0.0, 0.0, _flight["now"]
    return out


def take() -> dict[str, Any] | None:
    """What this process fetched since the last call: {requests, bytes_fetched, bytes_needed, retries,
    read_ms: [...], in_flight: {busy_s, max}}, or None when it read nothing remote. ``in_flight``: the
    seconds this process had a read in flight and the most at once; with the reads' summed seconds, the
    mean number in flight while any was (:func:`summarise`)."""
    if not _state["enabled"]:
        return None
    with _lock:
        requests, fetched = _take_counters()
        requests, fetched = requests + _state["other"][0], fetched + _state["other"][1]
        _state["other"] = [0, 0]
        retries = _state["retries"] - _state["retries_taken"]
        _state["retries_taken"] = _state["retries"]
        reads = list(_reads)
        _reads.clear()
        flight = _take_flight()
    return {
        "in_flight": flight,
        "requests": requests,
        "bytes_fetched": fetched,
        "retries": retries,
        "bytes_needed": int(sum(b for _, b in reads)),
        "read_ms": [round(s * 1e3, 3) for s, _ in reads],
    }


def summarise(parts: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The report's ``network`` section from per-task (and the catalog's) parts."""
    got = [p for p in parts if p]
    ms = np.array([m for p in got for m in p.get("read_ms", [])], dtype="f8")
    busy = sum((p.get("in_flight") or {}).get("busy_s", 0.0) for p in got)
    area = sum((p.get("in_flight") or {}).get("area_s", 0.0) for p in got)
    fetched = int(sum(p["bytes_fetched"] for p in got))
    return {
        "requests": int(sum(p["requests"] for p in got)),
        "bytes_fetched": fetched,
        "bytes_needed": int(sum(p["bytes_needed"] for p in got)),
        "retries": int(sum(p["retries"] for p in got)),
        "latency_ms": {
            "p50": float(np.percentile(ms, 50)) if ms.size else None,
            "p99": float(np.percentile(ms, 99)) if ms.size else None,
        },
        "latency_of": "remote windowed reads (open if not yet open + read), not single HTTP requests",
        "in_flight": {
            "mean": round(area / busy, 2) if busy > 0 else None,
            "max": max((int((p.get("in_flight") or {}).get("max", 0)) for p in got), default=0),
        },
        "in_flight_of": "remote windowed reads in flight in one worker process, each one or more HTTP requests; "
        "mean: while any was",
        "read_busy_s": round(busy, 3),
        "mb_per_s": round(fetched / 1e6 / busy, 1) if busy > 0 else None,
    }
