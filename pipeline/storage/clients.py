"""The clients over a URL: an obstore store (:func:`object_store`, once per process:
:func:`cached_store`), and how readers open the cube (:func:`zarr_store`, :func:`storage_options`).

S3 credentials come from each process's own AWS chain, never from the settings."""

from __future__ import annotations

import os
from typing import Any

from pipeline.errors import ConfigError
from pipeline.storage.settings import Storage, default_storage
from pipeline.storage.urls import scheme, split_url


def object_store(url: str, storage: Storage, *, retry_config: Any = None, **client_options: Any) -> Any:
    """An obstore store rooted at ``url`` (``s3://bucket/prefix``, ``https://host/prefix``, or a local
    folder). S3 credentials come from this process's AWS chain (environment, then ``storage.profile``
    through boto3 where given). ``retry_config``: obstore's, for an S3 store (None: obstore's default,
    10 retries within 3 minutes)."""
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
        retry_config=retry_config,
    )


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
