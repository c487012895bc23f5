"""How GDAL reads tiles over HTTP (``/vsis3/``, ``/vsicurl/``): the cloud defaults, the endpoint and
addressing, ``inputs.gdal_env`` on top, and rasterio's AWS session."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pipeline.storage.settings import Storage

# GDAL options for reading cloud-optimised GeoTIFFs over HTTP, set once per worker (see read.py).
CLOUD_DEFAULTS: dict[str, Any] = {
    "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",  # no directory listing on open
    "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ".tif,.tiff,.TIF,.TIFF",
    "GDAL_HTTP_MERGE_CONSECUTIVE_RANGES": "YES",
    "GDAL_HTTP_MULTIPLEX": "YES",
    "GDAL_HTTP_VERSION": "2",
    "GDAL_HTTP_MAX_RETRY": "5",  # on 429 and 5xx, with back-off
    "GDAL_HTTP_RETRY_DELAY": "0.5",
    "GDAL_HTTP_TIMEOUT": "60",
    "GDAL_HTTP_CONNECTTIMEOUT": "10",
    "VSI_CACHE": "TRUE",
    "VSI_CACHE_SIZE": str(64 * 1024 * 1024),
    # Few, large requests: a request to a bucket waits ~25 ms before its first byte, in which ~2 MB more
    # would have streamed. An open fetches the first 2 MB (a COG's header, then its overviews' tiles: all
    # of a small file), reads go through GDAL's cache of 2 MB chunks (128 MB a process) one range at a time
    # instead of one request per block range, and a file's later windows, in the same process, find their
    # blocks there. The case study from a 25 ms store: 2,292 -> 598 GETs, 10.8 -> 5.7 s (3 interleaved
    # runs against 32 KB at open, 256 KB chunks and parallel ranges: `BENCH_ONLY="pipeline s3,pipeline s3
    # small ranges" BENCH_LATENCIES_MS=25 .venv/bin/python -W ignore bench/s3_latency.py`).
    "GDAL_INGESTED_BYTES_AT_OPEN": str(2 << 20),
    "CPL_VSIL_CURL_CHUNK_SIZE": str(2 << 20),
    "CPL_VSIL_CURL_CACHE_SIZE": str(128 << 20),
    "GDAL_HTTP_MULTIRANGE": "SERIAL",
}
SMALL_RANGES = {
    "GDAL_INGESTED_BYTES_AT_OPEN": "32768",
    "CPL_VSIL_CURL_CHUNK_SIZE": str(256 << 10),
    "CPL_VSIL_CURL_CACHE_SIZE": str(16 << 20),
    "GDAL_HTTP_MULTIRANGE": "PARALLEL",
}
"""What :data:`CLOUD_DEFAULTS` read in small ranges before (GDAL's multi-range reads, a request per block
range of a window, in parallel): ``inputs.gdal_env`` takes them back, for sparse windows of very large files."""


def gdal_options(storage: Storage, gdal_env: dict[str, Any] | None = None) -> dict[str, Any]:
    """GDAL config options for reads: cloud defaults, the endpoint and addressing, then ``gdal_env``.

    Holds no credential: those come from :func:`rasterio_session` (the AWS chain) at open time."""
    options = dict(CLOUD_DEFAULTS)
    if storage.endpoint_url:
        parts = urlsplit(storage.endpoint_url)
        options["AWS_S3_ENDPOINT"] = parts.netloc + parts.path.rstrip("/")
        options["AWS_HTTPS"] = "YES" if parts.scheme == "https" else "NO"
        options["AWS_VIRTUAL_HOSTING"] = "FALSE"  # path-style: S3-compatible servers on one host name
    if storage.region:
        options["AWS_REGION"] = storage.region
    if storage.anonymous:
        options["AWS_NO_SIGN_REQUEST"] = "YES"
    options.update({str(k): str(v) for k, v in (gdal_env or {}).items()})
    return options


def rasterio_session(storage: Storage) -> Any:
    """rasterio's AWS session for ``storage`` (credentials from the AWS chain of this process)."""
    from rasterio.session import AWSSession

    endpoint = None
    if storage.endpoint_url:
        parts = urlsplit(storage.endpoint_url)
        endpoint = parts.netloc + parts.path.rstrip("/")
    return AWSSession(
        aws_unsigned=storage.anonymous or None,
        region_name=storage.region,
        profile_name=storage.profile,
        endpoint_url=endpoint,
    )
