"""The one byte interface the Zarr writer puts every object through (``read_bytes``, ``write_bytes``,
``delete_keys``, ``list_keys``: atomic puts, locally and in a bucket), and whole single objects by URL
(:func:`read_object`, :func:`write_object`: the tile index, STAC documents)."""

from __future__ import annotations

import contextlib
from typing import Any

from pipeline.storage.clients import cached_store
from pipeline.storage.errors import store_error
from pipeline.storage.settings import Storage, default_storage


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
