"""How many windows a worker reads at once (``execution.io_concurrency``), from what the store answers.

A request to an object store waits a round trip (``L``, tens of ms) before its first byte, then
streams at the link's bandwidth ``B``. One request of ``s`` bytes takes ``L + s/B``, of which the link
is busy ``s/B``; to keep it busy a worker needs ``1 + L·B/s`` requests in flight: the bandwidth-delay
product ``L·B`` over the request size. ``auto`` measures ``L`` and ``B`` on one input object before
the tasks start (a few small range GETs, then one larger one: ~5 round trips), takes ``s`` from the
plan (the compressed bytes of an average window), and bounds the result by :data:`MAX_IN_FLIGHT`.
Local files have no round trip to hide: each is read when the task comes to it (:data:`LOCAL_READ_AHEAD`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.config import is_url

MAX_IN_FLIGHT = 16
"""The most windows a worker reads at once under ``auto``. A window's read decodes on the thread that
fetched it, so threads past those waiting on the network compete for the worker's one core: the case
study from a 25 ms store on 2 workers took 5.20 s and 6.23 CPU-s at 16, 6.20 s and 7.56 at 32, 6.63 s and
8.17 at 64 (``python bench/s3_cpu.py 5 io64=.,execution.io_concurrency=64 io32=... io16=...``, medians),
and 4 and 8 were slower than 16. Where a window is a fresh request each (large files), 16 covers a
bandwidth-delay product of ~15 windows: an S3 GET's ~30 ms at ~90 MB/s a stream, ~200 KB a window."""
HEADERS_IN_FLIGHT = 64
"""Remote headers read at once where ``execution.io_concurrency`` is ``auto``: each is one small GET, parsed
afterwards (``bench/headers_s3.py``: 249 headers/s at 64 in flight, 172 at 8)."""
MIN_IN_FLIGHT = 2
LOCAL_READ_AHEAD = 1
"""Windows read at once from local files: each when the task comes to it. Reading ahead on 2 threads gave
the same wall on the case study (2.39 s against 2.39 s, 5 interleaved runs on 2 cores: the workers
already keep both cores busy decoding and resampling) and moved decoding off the task's stages, where
the breakdown and the projection count it; ``execution.io_concurrency`` sets it for slow local storage
(a network file system)."""
SMALL_GET = 16 << 10
LARGE_GET = 4 << 20


@dataclass(frozen=True)
class IoChoice:
    """``execution.io_concurrency`` as a run uses it, and why (the report's ``io``)."""

    concurrency: int
    chosen_by: str
    """``config`` (set), ``auto`` (measured) or ``local`` (local files)."""
    why: str
    latency_ms: float | None = None
    """The store's first-byte time, measured (median of the small GETs after the first)."""
    mb_per_s: float | None = None
    """One request's bandwidth past its first byte, measured."""
    request_kb: float | None = None
    """The average window's compressed size, from the plan."""
    auto: int | None = None
    """What ``auto`` gives for the measured store (measured where the config sets a number too: the
    ``latency_bound`` check advises it)."""

    def as_report(self) -> dict[str, Any]:
        return asdict(self)


def _key_and_store(url: str, storage: Any) -> tuple[Any, str]:
    from urllib.parse import urlsplit

    from pipeline.storage import object_store, split_url

    if url.lower().startswith("s3://"):
        bucket, key = split_url(url)
        return object_store(f"s3://{bucket}", storage), key
    parts = urlsplit(url)
    return object_store(f"{parts.scheme}://{parts.netloc}", storage), parts.path.lstrip("/")


MIN_TRANSFER_S = 0.005
"""The large GET's transfer is taken to last at least this long: a small object crosses a fast link in
less than the timer's noise, where the bandwidth it gives would be anything."""


def probe(url: str, storage: Any, small: int = 5) -> tuple[float, float]:
    """(first-byte seconds, bytes per second past it) of the store holding ``url``: ``small`` range GETs of
    16 KB (the first opens the connection and is not counted; the median of the others), then one of up to
    4 MB, its transfer at least :data:`MIN_TRANSFER_S`."""
    import obstore

    store, key = _key_and_store(url, storage)
    times = []
    size = None
    for _ in range(small):
        t = time.perf_counter()
        got = obstore.get(store, key, options={"range": (0, SMALL_GET)})
        size = got.meta["size"]
        got.bytes()
        times.append(time.perf_counter() - t)
    latency = statistics.median(times[1:]) if len(times) > 1 else times[0]
    n = min(int(size or 0), LARGE_GET)
    t = time.perf_counter()
    data = obstore.get_range(store, key, start=0, end=max(n, 1))
    streamed = time.perf_counter() - t - latency
    return latency, len(data) / max(streamed, MIN_TRANSFER_S)


def bandwidth_delay(latency_s: float, bytes_per_s: float, window_bytes: float) -> int:
    """Windows in flight that keep one worker's link busy: ``1 + L·B/s``, within
    [:data:`MIN_IN_FLIGHT`, :data:`MAX_IN_FLIGHT`]."""
    n = 1 + math.ceil(latency_s * bytes_per_s / max(window_bytes, 1.0))
    return max(MIN_IN_FLIGHT, min(MAX_IN_FLIGHT, n))


def choose_io(setting: int | None, paths: Sequence[str], storage: Any, window_bytes: float) -> IoChoice:
    """``execution.io_concurrency`` for a run reading ``paths``: ``setting`` where the config sets it; else
    :data:`LOCAL_READ_AHEAD` for local files, and for remote ones the bandwidth-delay product measured on
    the first of them (:func:`probe`; measured where ``setting`` is given too, for the report). The caller
    puts the largest object first: a 60 m band's 34 KB crosses the link too fast to time its bandwidth."""
    remote = next((p for p in paths if is_url(p)), None)
    if remote is None:
        if setting is not None:
            return IoChoice(setting, "config", f"execution.io_concurrency: {setting}")
        return IoChoice(
            LOCAL_READ_AHEAD, "local", f"local files: {LOCAL_READ_AHEAD} (no round trip to hide; each read in turn)"
        )
    try:
        latency, rate = probe(remote, storage)
    except Exception as e:  # noqa: BLE001 - a store that cannot be measured is read all the same
        from pipeline.storage import redact

        n = setting or MAX_IN_FLIGHT
        why = f"the store could not be measured ({redact(str(e))[:200]}): {n}"
        return IoChoice(n, "config" if setting else "auto", why)
    n = bandwidth_delay(latency, rate, window_bytes)
    why = (
        f"{n} = 1 + latency {latency * 1e3:.1f} ms x {rate / 1e6:.0f} MB/s / {window_bytes / 1e3:.0f} KB a window"
        + (f", capped at {MAX_IN_FLIGHT}" if n == MAX_IN_FLIGHT else "")
        + (f", at least {MIN_IN_FLIGHT}" if n == MIN_IN_FLIGHT else "")
    )
    measured = (round(latency * 1e3, 2), round(rate / 1e6, 1), round(window_bytes / 1e3, 1), n)
    if setting is not None:
        return IoChoice(setting, "config", f"execution.io_concurrency: {setting} (auto would be {why})", *measured)
    return IoChoice(n, "auto", why, *measured)


def request_bytes(sizes: Any, pixels_bytes: Any, bytes_read: int, windows: int) -> float:
    """The average window's compressed bytes: the plan's pixel bytes to read, at the files' compression
    (``sizes`` over ``pixels_bytes``, per file), over its windows."""
    raw = float(sum(pixels_bytes))
    ratio = float(sum(sizes)) / raw if raw > 0 else 1.0
    return bytes_read * ratio / max(windows, 1)
