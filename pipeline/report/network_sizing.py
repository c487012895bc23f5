"""What the bucket costs a projection: its requests, their latency and bandwidth, the reads in flight.

Pure functions over a run report. A run that read from an object store (``network.requests > 0``)
measured its requests and bytes fetched per decoded byte read, the store's first-byte time and one
request's bandwidth (``io.latency_ms``, ``io.mb_per_s``: the probe before its tasks; else the median
remote read, ``network.latency_ms.p50``) and the reads each worker kept in flight
(``network.in_flight.mean``; else ``io.concurrency``). A projection to ``R`` requests fetching ``F``
bytes, each request waiting ``L`` before its first byte and streaming at ``b`` past it, on workers
keeping ``n`` in flight each, needs

* per worker, of ``W``: ``(R/W)·L/n + (F/W)/(n·b)`` seconds of reading; within the tasks' seconds
  (the target less the serial driver work) that is ``W = ceil((R·L/n + F/(n·b)) / budget)`` workers,
  the network-bound count (the bandwidth term is left out, a lower bound, where ``b`` was not probed);
* ``R·L / budget`` requests in flight across the cluster (Little's law), and ``F / budget`` bytes per
  second in all.

A run from local files measured none of it: the projection says so and prices the bucket at stated
assumptions: :data:`DEFAULT_LATENCY_MS` a request, one GET per source window planned plus one per
file's header (the reads' 2 MB ranges serve several windows of a file, and a window of a very large
file may take more than one: the case study made 406 GETs for 840 windows and 192 headers), every
input byte fetched once.
It gives no network-bound worker count then: ``b`` and ``n`` are measured only from the bucket.
"""

from __future__ import annotations

import math
from typing import Any

DEFAULT_LATENCY_MS = 25.0
"""The latency a projection from local files prices a request at: an S3 GET's typical first-byte time."""


def measure_network(report: dict[str, Any]) -> dict[str, Any]:
    """What a run measured of its store, per decoded byte read (``remote`` False: nothing, local files),
    and the plan's source windows per byte it planned to read (what a local run's requests are assumed
    from; None where the report does not count them)."""
    net = report.get("network") or {}
    io = report.get("io") or {}
    plan = report.get("plan") or {}
    read_b = max(float(report["inputs"].get("bytes_read") or 0), 1.0)
    files = max(int(report["inputs"].get("files") or 0), 1)
    requests = int(net.get("requests") or 0)
    windows, planned = plan.get("windows"), plan.get("bytes_to_read")
    out: dict[str, Any] = {
        "remote": requests > 0,
        "windows_per_byte": float(windows) / planned if windows and planned else None,
    }
    if not requests:
        return out
    latency, latency_from = io.get("latency_ms"), "io.latency_ms: the store's first-byte time, probed"
    if latency is None:
        latency = (net.get("latency_ms") or {}).get("p50")
        latency_from = "network.latency_ms.p50: a remote read's median, queueing included; no probe"
    flight, flight_from = (net.get("in_flight") or {}).get("mean"), "network.in_flight.mean, measured"
    if not flight:
        flight, flight_from = io.get("concurrency"), "io.concurrency, as set"
    return {
        **out,
        "requests": requests,
        "bytes_read": read_b,
        "requests_per_byte": requests / read_b,
        "requests_per_file": requests / files,
        "fetched_per_byte": float(net.get("bytes_fetched") or 0) / read_b,
        "latency_ms": None if latency is None else float(latency),
        "latency_from": latency_from,
        "request_mb_per_s": None if io.get("mb_per_s") is None else float(io["mb_per_s"]),
        "in_flight": None if not flight else float(flight),
        "in_flight_from": flight_from,
    }


def price_network(
    measured: dict[str, Any],
    *,
    bytes_read: float,
    input_bytes: float,
    files: int,
    budget_s: float,
    windows: float | None = None,
    latency_ms: float | None = None,
    in_flight: float | None = None,
) -> dict[str, Any]:
    """The bucket's side of a projection (module docstring): ``bytes_read`` decoded bytes of
    ``input_bytes`` in ``files`` files, read within ``budget_s`` seconds; ``windows``: the plan's source
    windows (else this run's windows per byte times ``bytes_read``); ``latency_ms`` and ``in_flight``
    (per worker) replace what the run measured."""
    remote = bool(measured["remote"])
    notes: list[str] = []
    if latency_ms is not None:
        lat, lat_from = float(latency_ms), "given"
    elif remote and measured.get("latency_ms") is not None:
        lat, lat_from = measured["latency_ms"], measured["latency_from"]
    else:
        lat, lat_from = DEFAULT_LATENCY_MS, "assumed: an S3 GET's typical first-byte time"
    requests: float | None
    if remote:
        requests = measured["requests_per_byte"] * bytes_read
        fetched = measured["fetched_per_byte"] * bytes_read
        per_request, flight = measured["request_mb_per_s"], in_flight or measured["in_flight"]
        flight_from = "given" if in_flight else measured["in_flight_from"]
    else:
        if windows is None and measured.get("windows_per_byte"):
            windows = measured["windows_per_byte"] * bytes_read
        requests = None if windows is None else float(windows) + files
        fetched, per_request, flight = float(input_bytes), None, in_flight
        flight_from = "given" if in_flight else None
    ok = budget_s > 0
    cluster = requests * lat / 1e3 / budget_s if ok and requests is not None else None
    workers = None
    if ok and requests is not None and flight:
        worker_s = requests * lat / 1e3 / flight + (fetched / (flight * per_request * 1e6) if per_request else 0.0)
        workers = max(math.ceil(worker_s / budget_s), 1)
        if not per_request:
            notes.append("bandwidth per request not probed: latency only, a lower bound")
    return {
        "remote": remote,
        "requests": requests,
        "requests_from": "measured" if remote else None if requests is None else "assumed",
        "windows": None if remote else windows,
        "files": files,
        "requests_measured": measured.get("requests"),
        "requests_measured_per_file": measured.get("requests_per_file"),
        "bytes_read_measured": measured.get("bytes_read"),
        "bytes_fetched": fetched,
        "bytes_fetched_from": "measured, per byte read" if remote else "assumed: every input byte once",
        "input_bytes": float(input_bytes),
        "latency_ms": lat,
        "latency_from": lat_from,
        "request_mb_per_s": per_request,
        "in_flight_per_worker": flight,
        "in_flight_from": flight_from,
        "budget_s": budget_s,
        "workers": workers,
        "in_flight_cluster": cluster,
        "aggregate_gb_per_s": fetched / budget_s / 1e9 if ok else None,
        "once_gb_per_s": input_bytes / budget_s / 1e9 if ok else None,
        "notes": notes,
    }


def combine(estimate: dict[str, Any], network: dict[str, Any]) -> dict[str, Any]:
    """``estimate`` (:func:`pipeline.report.sizing.estimate_workers`) with the bucket priced: the workers
    needed are the larger of the compute-bound and the network-bound counts."""
    compute = estimate["workers_needed"]
    net_workers = network["workers"]
    workers, limiting = compute, estimate["limiting_stage"]
    if compute is not None and net_workers is not None and net_workers > compute:
        workers, limiting = net_workers, "the network (requests in flight)"
    cluster = network["in_flight_cluster"]
    per_worker = cluster / workers if cluster is not None and workers else None
    return {
        **estimate,
        "workers_compute": compute,
        "workers_network": net_workers,
        "workers_needed": workers,
        "limiting_stage": limiting,
        "network": {**network, "in_flight_per_worker_needed": per_worker},
    }


def _size(b: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b / 1e3:,.1f} KB"


def format_network(n: dict[str, Any], workers: int | None) -> list[str]:
    """The bucket's lines of a projection (:func:`price_network`, after :func:`combine`), every figure
    with where it came from: measured, given or assumed."""
    lat = f"{n['latency_ms']:.1f} ms"
    if n["remote"]:
        lines = [
            "  the bucket, priced from this run's remote reads:",
            f"    requests {n['requests']:,.0f} ({n['requests_measured']:,} measured for "
            f"{_size(n['bytes_read_measured'])} decoded, scaled per byte read; "
            f"{n['requests'] / max(n['files'], 1):,.1f} per file), {_size(n['bytes_fetched'])} fetched",
            f"    latency {lat} a request ({n['latency_from']}); "
            + (
                f"{n['request_mb_per_s']:,.0f} MB/s a request past it (io.mb_per_s, probed)"
                if n["request_mb_per_s"]
                else "bandwidth a request not probed"
            ),
        ]
        if n["in_flight_per_worker"]:
            lines.append(f"    in flight {n['in_flight_per_worker']:.1f} reads per worker ({n['in_flight_from']})")
    else:
        lines = [
            "  the bucket, not measured (this run read local files); priced at these assumptions:",
            f"    latency {lat} a request ({n['latency_from']})",
        ]
        if n["requests"] is None:
            lines.append("    requests not measured: run from the bucket (no source windows here to assume them from)")
        else:
            lines.append(
                f"    requests not measured (run from the bucket to measure them): assumed 1 GET per source "
                f"window ({n['windows']:,.0f}) + 1 per file's header ({n['files']:,}) = {n['requests']:,.0f} "
                "(the case study from a 25 ms store made 406 for its 840 windows and 192 headers: make bench-s3)"
            )
        lines.append(f"    {_size(n['bytes_fetched'])} fetched ({n['bytes_fetched_from']})")
    budget = n["budget_s"]
    if budget <= 0:
        return [*lines, "    no time is left for reads: the serial driver work alone exceeds the target"]
    if n["workers"] is not None:
        flight = n["in_flight_per_worker"]
        band = (
            f" + {_size(n['bytes_fetched'] / n['workers'])} / {flight * n['request_mb_per_s']:,.0f} MB/s"
            if n["request_mb_per_s"]
            else ""
        )
        lines.append(
            f"    network-bound: ~{n['workers']:,} workers (each: {n['requests'] / n['workers']:,.0f} requests x "
            f"{lat} / {flight:.1f} in flight{band} <= {budget:.1f} s)" + "".join(f"; {note}" for note in n["notes"])
        )
    elif not n["remote"]:
        lines.append(
            "    network-bound worker count not priced: bandwidth and reads in flight per worker are measured "
            "only from a bucket"
        )
    if n["in_flight_cluster"] is not None:
        each = n["in_flight_per_worker_needed"]
        lines.append(
            f"    in flight across the cluster: {n['in_flight_cluster']:,.0f} requests (Little's law: "
            f"{n['requests']:,.0f} x {lat} / {budget:.1f} s of reads)"
            + (f", ~{each:,.1f} per worker at {workers:,} workers" if each is not None and workers else "")
        )
    lines.append(
        f"    aggregate bandwidth {n['aggregate_gb_per_s']:,.1f} GB/s ({_size(n['bytes_fetched'])} / {budget:.1f} s"
        + (f"; {_size(n['input_bytes'])} once: {n['once_gb_per_s']:,.1f} GB/s)" if n["remote"] else ")")
    )
    return lines
