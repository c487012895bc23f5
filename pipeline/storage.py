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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from pipeline.config import is_url
from pipeline.errors import ConfigError


class Storage(Protocol):
    """The storage settings reads and writes use: the config's :class:`~pipeline.config.StorageConfig`, or
    the :class:`StorageSettings` a task carries."""

    @property
    def endpoint_url(self) -> str | None: ...
    @property
    def region(self) -> str | None: ...
    @property
    def anonymous(self) -> bool: ...
    @property
    def profile(self) -> str | None: ...


@dataclass(frozen=True)
class StorageSettings:
    """The storage section's settings as tasks carry them (:func:`task_storage`): plain values, so a
    worker unpickles them without pydantic, whose import costs ~70 ms of the fork server's start that a
    short run waits for."""

    endpoint_url: str | None = None
    region: str | None = None
    anonymous: bool = False
    profile: str | None = None


def task_storage(storage: Storage) -> StorageSettings:
    """``storage``'s settings as a :class:`StorageSettings`."""
    return StorageSettings(storage.endpoint_url, storage.region, bool(storage.anonymous), storage.profile)


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


def object_store(url: str, storage: Storage, **client_options: Any) -> Any:
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


def cached_store(url: str, storage: Storage | None = None) -> Any:
    """:func:`object_store` for ``url``, made once per process (a worker writes every chunk through one
    client and its connection pool). Keyed by process id: a forked child makes its own."""
    storage = storage or default_storage()
    key = (os.getpid(), url, storage.endpoint_url, storage.region, storage.anonymous, storage.profile)
    store = _cached.get(key)
    if store is None:
        store = _cached[key] = object_store(url, storage)
    return store


def read_bytes(store: Any, key: str) -> bytes | None:
    """The object at ``key``, or None where there is none."""
    import obstore
    import obstore.exceptions

    try:
        return bytes(obstore.get(store, key).bytes())
    except (FileNotFoundError, obstore.exceptions.NotFoundError):
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


def storage_options(storage: Storage) -> dict[str, Any]:
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


def zarr_store(url: str, storage: Storage | None = None, *, read_only: bool = True) -> Any:
    """zarr-python's store for ``url``: ``LocalStore`` for a path, ``ObjectStore`` over obstore for a URL
    (``xr.open_zarr(zarr_store(url, storage))`` opens the cube without s3fs)."""
    import zarr.storage

    storage = storage or default_storage()
    if scheme(url) == "file":
        return zarr.storage.LocalStore(url, read_only=read_only)
    return zarr.storage.ObjectStore(object_store(url, storage), read_only=read_only)


def default_storage() -> StorageSettings:
    """The storage section's defaults (AWS, signed requests), where none is given."""
    return StorageSettings()


# --- listing objects for inputs ---------------------------------------------------------------------


def glob_prefix(key_pattern: str) -> str:
    """The longest literal prefix of a key glob, up to its last ``/``: what one listing request covers."""
    cut = min((i for i, ch in enumerate(key_pattern) if ch in "*?["), default=len(key_pattern))
    if cut == len(key_pattern):
        return key_pattern
    return key_pattern[: key_pattern.rfind("/", 0, cut) + 1]


def glob_regex(key_pattern: str) -> re.Pattern[str]:
    """A key glob as a regex: ``**/`` any number of folders, ``**`` anything, ``*`` and ``?`` within one
    folder (never across ``/``), ``[...]`` a character class."""
    out, i = [], 0
    while i < len(key_pattern):
        ch = key_pattern[i]
        if key_pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if key_pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[" and "]" in key_pattern[i + 1 :]:
            end = key_pattern.index("]", i + 1)
            body = key_pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + r"\Z")


def is_glob(path: str) -> bool:
    """Whether ``path`` holds a glob wildcard (``*``, ``?``, ``[``)."""
    return any(ch in path for ch in "*?[")


def list_objects(
    pattern: str, storage: Storage, on_page: Callable[[int], Any] | None = None
) -> list[tuple[str, int, int, str]]:
    """The objects an ``s3://bucket/prefix/**/*.tif`` glob names: ``(url, size, last_modified_ns, etag)``
    from ONE prefix listing (paged by the store), matched client side; never a request per object. A
    key without wildcards is one HEAD request; [] when it does not exist.

    Raises ConfigError naming the bucket or endpoint (and no secret) when the listing itself fails.
    ``on_page``: called with each page's number of objects as it arrives (progress)."""
    bucket, key_pattern = split_url(pattern)
    prefix = glob_prefix(key_pattern)
    rx = glob_regex(key_pattern)
    import obstore
    import obstore.exceptions

    store = object_store(f"s3://{bucket}", storage)
    found = []
    try:
        if not is_glob(key_pattern):  # one named object: one HEAD (a listing's prefix is a folder)
            try:
                meta = obstore.head(store, key_pattern)
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return []
            modified = meta["last_modified"]
            return [
                (
                    pattern,
                    int(meta["size"]),
                    int(modified.timestamp() * 1e9) if modified else 0,
                    str(meta.get("e_tag") or ""),
                )
            ]
        for batch in obstore.list(store, prefix=prefix or None, chunk_size=1000):
            if on_page is not None:
                on_page(len(batch))
            for meta in batch:
                key = meta["path"]
                if rx.match(key):
                    modified = meta["last_modified"]
                    found.append(
                        (
                            f"s3://{bucket}/{key}",
                            int(meta["size"]),
                            int(modified.timestamp() * 1e9) if modified else 0,
                            str(meta.get("e_tag") or ""),
                        )
                    )
    except Exception as e:  # noqa: BLE001 - obstore's errors, turned into what the user can act on
        raise store_error(e, f"s3://{bucket}/{prefix}", storage) from None
    return found


def store_error(error: BaseException, url: str, storage: Storage, key: str = "inputs.paths") -> ConfigError:
    """A ConfigError for a failed request to ``url`` that says which setting to check; no secret in it.
    ``key``: the config key that named ``url``."""
    text = redact(str(error))
    first = text.strip().splitlines()[0][:300] if text.strip() else type(error).__name__
    bucket = urlsplit(url).netloc
    where = storage.endpoint_url or "AWS S3"
    if "NoSuchBucket" in text or "bucket does not exist" in text:
        return ConfigError(
            key,
            f"bucket {bucket!r} does not exist at {where}: check the bucket name, and storage.endpoint_url / "
            "storage.region if the bucket lives elsewhere",
        )
    if any(
        s in text
        for s in (
            "tcp connect error",
            "ConnectionRefused",
            "dns error",
            "Connection refused",
            "error sending request",
            "timed out",
            "Timeout",
        )
    ):
        return ConfigError(
            "storage.endpoint_url",
            f"cannot reach {where} for {url} ({first}): check storage.endpoint_url and the network",
        )
    if any(
        s in text
        for s in (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "403 Forbidden",
            "ExpiredToken",
            "InvalidToken",
            "Unauthenticated",
            "credential",
        )
    ):
        return ConfigError(
            "storage",
            f"{where} refused the credentials for bucket {bucket!r} ({_error_code(text)}): check the AWS "
            "credentials in the environment or storage.profile, or set storage.anonymous: true for a public "
            "bucket",
        )
    return ConfigError(key, f"request for {url} at {where} failed: {first}")


def _error_code(text: str) -> str:
    m = re.search(r"<Code>([^<]+)</Code>", text)
    return m.group(1) if m else "access denied"


def head_url(url: str) -> tuple[int, int, str]:
    """``(size, last_modified_ns, etag)`` of an ``http(s)://`` object: one HEAD request."""
    import obstore
    import obstore.store as obs

    base, _, name = url.rpartition("/")
    options: Any = {"allow_http": True} if url.startswith("http://") else None
    meta = obstore.head(obs.HTTPStore.from_url(base, client_options=options), name)
    modified = meta["last_modified"]
    return int(meta["size"]), int(modified.timestamp() * 1e9) if modified else 0, str(meta.get("e_tag") or "")


def check_access(urls: list[str], storage: Storage) -> None:
    """One ranged GET of the first ``s3://`` object of each bucket in ``urls``: raises the ConfigError of
    :func:`store_error` for an unknown bucket, an endpoint that does not answer or refused credentials.
    A missing object passes (it is skipped and listed at read time). For runs planned from a trusted
    index, whose listing did not prove access; a bucket costs one request."""
    import obstore

    first: dict[str, str] = {}
    for url in urls:
        if url.startswith("s3://"):
            first.setdefault(url[5:].split("/", 1)[0], url)
    for bucket, url in first.items():
        try:
            obstore.get_range(object_store(f"s3://{bucket}", storage), split_url(url)[1], start=0, end=1)
        except Exception as e:  # noqa: BLE001 - obstore's errors, sorted below
            text = str(e)
            if ("NoSuchKey" in text or "InvalidRange" in text) and "NoSuchBucket" not in text:
                continue
            raise store_error(e, url, storage) from None


def read_object(url: str, storage: Storage | None, key: str = "inputs.index") -> bytes | None:
    """The bytes of one object, or None when it does not exist. A failed request is the ConfigError of
    :func:`store_error` on config ``key`` (the setting that named ``url``)."""
    parent, _, name = url.rpartition("/")
    storage = storage or default_storage()
    try:
        return read_bytes(cached_store(parent, storage), name)
    except Exception as e:  # noqa: BLE001 - obstore's errors, as what the user can act on
        raise store_error(e, url, storage, key=key) from None


def write_object(url: str, data: bytes, storage: Storage | None, key: str = "inputs.index") -> None:
    """Put one whole object (S3 makes it visible whole or not at all); errors as :func:`read_object`'s."""
    parent, _, name = url.rpartition("/")
    storage = storage or default_storage()
    try:
        write_bytes(cached_store(parent, storage), name, data)
    except Exception as e:  # noqa: BLE001
        raise store_error(e, url, storage, key=key) from None


_FORWARDED_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def worker_environment() -> dict[str, str]:
    """The AWS chain's environment variables (``AWS_*``) and HTTP proxy settings of this process now:
    what the local cluster's workers are started with. A worker spawned now would inherit them; one
    forked from the fork server (:mod:`pipeline.execute.workers`) has that server's environment from when it
    started, which may predate them. They reach the workers through process start-up (the nanny's
    ``env``), never through the task graph."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k in _FORWARDED_ENV}
