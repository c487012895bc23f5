"""Checks on remote storage: the size of the objects a run wrote to a bucket (``object_size``) and how much
remote reads fetched against what their windows need (``read_amplification``)."""

from __future__ import annotations

import math
from typing import Any


def _check(check: str, warn: bool, detail: str, advice: str) -> dict[str, str]:
    return {"check": check, "status": "warn" if warn else "ok", "detail": detail, "advice": advice if warn else ""}


SMALL_OBJECT_BYTES = 1_000_000
"""Warn when the store's chunk (or shard) objects average below this: each is one request to write and
one to read, and object stores charge per request and take ~10-100 ms per request to first byte."""

MIN_OBJECTS = 500
"""``object_size`` judges stores of at least this many objects: the requests are the cost, and a few
hundred small objects (the small fixture's 1 MB cube is 76) cost less than a second of requests."""


def _object_advice(output: dict[str, Any], plan: dict[str, Any], mean: float) -> tuple[str, int]:
    """(``output.shards`` to set so that objects reach :data:`SMALL_OBJECT_BYTES`, objects per band and
    date plane now). A shard never needs to be larger than the plane (rounded up to whole chunks)."""
    shape = output.get("shape") or {}
    y, x = int(shape.get("y", 0)), int(shape.get("x", 0))
    cy, cx = (int(v) for v in (plan.get("chunks_yx") or (1, 1)))
    uy, ux = (int(v) for v in (plan.get("shards_yx") or (cy, cx)))
    per_plane = math.ceil(y / uy) * math.ceil(x / ux) if y and x else 0
    grow = math.ceil(math.sqrt(math.ceil(1.25 * SMALL_OBJECT_BYTES / max(mean, 1.0))))
    sy, sx = min(uy * grow, math.ceil(y / cy) * cy), min(ux * grow, math.ceil(x / cx) * cx)
    return f"set output.shards={{y: {sy}, x: {sx}}}", per_plane


def check_object_sizes(output: dict[str, Any], plan: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """Diagnostic for a store in a bucket: the mean size of the objects the run wrote (advice: shard, or
    larger chunks). It judges stores of :data:`MIN_OBJECTS` or more whose planes (a band at a date) are
    in more than one object each; one object per plane cannot be made larger. Nothing for a local
    store, where a small file costs no request."""
    if "://" not in str(output.get("path", "")):
        return []
    objects, size = int(output.get("objects") or 0), int(output.get("objects_bytes") or 0)
    mean = size / objects if objects else 0.0
    to_set, per_plane = _object_advice(output, plan or {}, mean)
    judged = objects >= MIN_OBJECTS and per_plane > 1
    why = (
        ""
        if judged
        else (
            f": too few to judge (needs {MIN_OBJECTS})" if objects < MIN_OBJECTS else ": one object per band and date"
        )
    )
    return [
        _check(
            "object_size",
            judged and mean < SMALL_OBJECT_BYTES,
            f"{objects} chunk objects, {mean / 1e6:.2f} MB on average{why}",
            f"small objects cost a request each (and, in a bucket, money and latency): {to_set} (one object "
            "per shard of many chunks), or larger output.chunks",
        )
    ]


READ_AMPLIFICATION_WARN = 2.0
"""Warn when remote reads fetched over this many times the compressed bytes their windows cover."""


def network_checks(net: dict[str, Any]) -> list[dict[str, str]]:
    """Remote reads: read amplification (bytes fetched over bytes the windows need) and retries."""
    if not net.get("requests"):
        return []
    needed, fetched = net.get("bytes_needed", 0), net.get("bytes_fetched", 0)
    ratio = fetched / needed if needed else float("inf")
    return [
        _check(
            "read_amplification",
            ratio > READ_AMPLIFICATION_WARN,
            f"fetched {fetched / 1e6:.1f} MB for {needed / 1e6:.1f} MB of tile blocks the windows cover "
            f"({ratio:.1f}x) in {net['requests']} requests, {net.get('retries', 0)} retried",
            "reads fetch far more than they use: chunks (output.chunks) that align with the tiles' blocks, "
            "smaller CPL_VSIL_CURL_CHUNK_SIZE or GDAL_INGESTED_BYTES_AT_OPEN in inputs.gdal_env, or "
            "cloud-optimised tiles (internal tiling, overviews) cut it",
        )
    ]
