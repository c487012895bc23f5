"""Where bytes live: local paths, ``s3://`` buckets and ``https://`` URLs, for inputs and output alike.

One place turns the config's ``storage:`` section into the clients the stages use:

- :func:`object_store` -- an obstore store rooted at a URL (listing, heads, puts), for the catalog and
  the Zarr writer;
- :func:`gdal_options` -- the GDAL config options a worker reads tiles with (``/vsis3/``,
  ``/vsicurl/``): the cloud defaults, the endpoint, then ``inputs.gdal_env`` on top;
- :func:`vsi_path` -- the GDAL path of a URL;
- :func:`cached_store` and ``read_bytes``/``write_bytes``/``delete_keys``/``list_keys`` -- the one byte
  interface the Zarr writer puts every object through (atomic puts, locally and in a bucket);
- :func:`zarr_store` and :func:`storage_options` -- how readers open the cube (zarr-python's
  ``ObjectStore``, or fsspec/s3fs options for ``xr.open_zarr(url, storage_options=...)``).

Credentials are never part of a :class:`~pipeline.config.StorageConfig`: every process resolves them
itself from the usual AWS chain (environment, ``profile``, instance role), so they never travel in a
task graph, a report or an index. :func:`redact` scrubs them from any text that leaves the process.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any
from urllib.parse import urlsplit

from pipeline.config import StorageConfig, is_url
from pipeline.errors import ConfigError

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
    "GDAL_CACHEMAX": 256,  # MB of block cache per process (rasterio wants an int here)
    "GDAL_INGESTED_BYTES_AT_OPEN": "32768",  # one request holds the COG header
    "CPL_VSIL_CURL_CHUNK_SIZE": str(256 * 1024),
}

_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
_SECRET_PATTERNS = (
    re.compile(
        r"(?i)(aws_secret_access_key|aws_session_token|x-amz-security-token|signature)(['\"]?\s*[=:]\s*['\"]?)[^\s'\"&,}]+"
    ),
    re.compile(r"(?i)(X-Amz-Credential=|X-Amz-Signature=)[^\s&'\"]+"),
)


def scheme(path: str) -> str:
    """``s3``, ``http``/``https``, or ``file`` for a local path."""
    return urlsplit(path).scheme.lower() if is_url(path) else "file"


def split_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; raises ConfigError for a URL without a bucket."""
    parts = urlsplit(url)
    if not parts.netloc:
        raise ConfigError(url, "an object URL needs a bucket, e.g. s3://bucket/prefix/**/*.tif")
    return parts.netloc, parts.path.lstrip("/")


def vsi_path(path: str) -> str:
    """The path GDAL opens: ``/vsis3/bucket/key`` for ``s3://``, ``/vsicurl/URL`` for ``http(s)://``."""
    kind = scheme(path)
    if kind == "s3":
        bucket, key = split_url(path)
        return f"/vsis3/{bucket}/{key}"
    if kind in ("http", "https"):
        return f"/vsicurl/{path}"
    return path


def gdal_options(storage: StorageConfig, gdal_env: dict[str, Any] | None = None) -> dict[str, Any]:
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


def rasterio_session(storage: StorageConfig) -> Any:
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


def object_store(url: str, storage: StorageConfig, **client_options: Any) -> Any:
    """An obstore store rooted at ``url`` (``s3://bucket/prefix``, ``https://host/prefix``, or a local
    folder). S3 credentials come from this process's AWS chain (environment, then ``storage.profile``
    through boto3 where given)."""
    import obstore.store as obs

    kind = scheme(url)
    if kind == "file":
        os.makedirs(url, exist_ok=True)
        return obs.LocalStore(url)
    if kind in ("http", "https"):
        return obs.HTTPStore.from_url(url)
    if kind != "s3":
        raise ConfigError(url, f"unsupported URL scheme {kind!r}: use a local path, s3:// or https://")
    bucket, prefix = split_url(url)
    config: dict[str, Any] = {}
    if storage.endpoint_url:
        config["endpoint"] = storage.endpoint_url
        config["virtual_hosted_style_request"] = False
        if storage.endpoint_url.startswith("http://"):
            client_options.setdefault("allow_http", True)
    region = storage.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    config["region"] = region or "us-east-1"
    provider = None
    if storage.anonymous:
        config["skip_signature"] = True
    elif storage.profile:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider

        provider = Boto3CredentialProvider(boto3.Session(profile_name=storage.profile))
    return obs.S3Store(
        bucket,
        prefix=prefix or None,
        config=config,  # type: ignore[arg-type]
        client_options=client_options or None,  # type: ignore[arg-type]
        credential_provider=provider,
    )


def redact(text: str) -> str:
    """``text`` with every credential this process knows of, and anything shaped like one, removed."""
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    for rx in _SECRET_PATTERNS:
        text = rx.sub(lambda m: m.group(1) + (m.group(2) if m.lastindex and m.lastindex >= 2 else "") + "***", text)
    return text


_cached: dict[tuple[Any, ...], Any] = {}


def cached_store(url: str, storage: StorageConfig | None = None) -> Any:
    """:func:`object_store` for ``url``, made once per process (a worker writes every chunk through one
    client and its connection pool). Keyed by process id: a forked child makes its own."""
    storage = storage or StorageConfig()
    key = (os.getpid(), url, storage.endpoint_url, storage.region, storage.anonymous, storage.profile)
    store = _cached.get(key)
    if store is None:
        store = _cached[key] = object_store(url, storage)
    return store


def read_bytes(store: Any, key: str) -> bytes | None:
    """The object at ``key``, or None where there is none."""
    import obstore

    try:
        return bytes(obstore.get(store, key).bytes())
    except FileNotFoundError:
        return None


def write_bytes(store: Any, key: str, payload: bytes) -> None:
    """Put ``payload`` at ``key`` whole or not at all: an S3 PUT is atomic, and obstore's local store
    writes a staging file beside the target and renames it into place."""
    import obstore

    obstore.put(store, key, payload)


def delete_keys(store: Any, keys: list[str]) -> None:
    """Delete ``keys`` (missing ones are no error); S3 deletes up to 1,000 per request."""
    import obstore

    for i in range(0, len(keys), 1000):
        batch = keys[i : i + 1000]
        try:
            obstore.delete(store, batch)
        except FileNotFoundError:  # the local store refuses a missing key: delete the rest one by one
            for k in batch:
                with contextlib.suppress(FileNotFoundError):
                    obstore.delete(store, k)


def list_keys(store: Any, prefix: str | None = None) -> list[tuple[str, int]]:
    """(key, size) of every object under ``prefix`` (one paginated listing)."""
    import obstore

    try:
        return [(m["path"], int(m["size"])) for batch in obstore.list(store, prefix) for m in batch]
    except FileNotFoundError:
        return []


def storage_options(storage: StorageConfig) -> dict[str, Any]:
    """fsspec/s3fs options for ``storage`` (``xr.open_zarr("s3://...", storage_options=...)``); no credential."""
    options: dict[str, Any] = {}
    if storage.anonymous:
        options["anon"] = True
    if storage.profile:
        options["profile"] = storage.profile
    client: dict[str, Any] = {}
    if storage.endpoint_url:
        client["endpoint_url"] = storage.endpoint_url
    if storage.region:
        client["region_name"] = storage.region
    if client:
        options["client_kwargs"] = client
    return options


def zarr_store(url: str, storage: StorageConfig | None = None, *, read_only: bool = True) -> Any:
    """zarr-python's store for ``url``: ``LocalStore`` for a path, ``ObjectStore`` over obstore for a URL
    (``xr.open_zarr(zarr_store(url, storage))`` opens the cube without s3fs)."""
    import zarr.storage

    storage = storage or StorageConfig()
    if scheme(url) == "file":
        return zarr.storage.LocalStore(url, read_only=read_only)
    return zarr.storage.ObjectStore(object_store(url, storage), read_only=read_only)


_AWS_CHAIN_ENV = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_ENDPOINT_URL",
)  # fmt: skip


def worker_environment() -> dict[str, str]:
    """The AWS-chain variables of this process as they are now, for the local cluster's workers: they are
    this process's children, forked from a server that may have started before a credential was set or
    refreshed. Set in each worker's environment when it starts, never in the task graph."""
    return {k: os.environ[k] for k in _AWS_CHAIN_ENV if k in os.environ}
