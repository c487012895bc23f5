"""Finding input objects: an ``s3://`` glob as one prefix listing matched client side
(:func:`list_objects`), one HEAD for an ``https://`` URL (:func:`head_url`), and one ranged GET per
bucket where a trusted index planned the run (:func:`check_access`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pipeline.storage.clients import object_store
from pipeline.storage.errors import store_error
from pipeline.storage.settings import Storage
from pipeline.storage.urls import split_url


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


LISTING_RETRY = {
    "max_retries": 4,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2},
    "retry_timeout": timedelta(seconds=60),
}
"""How the listing (the run's first request to a bucket) retries: 4 times, as a read's GDAL_HTTP_MAX_RETRY
does, backing off from 0.1 s. With obstore's default (10 retries, backoff to 15 s) an endpoint that
refuses connections was reported after 3-12 s (up to a minute by its backoff); now within ~2 s."""


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

    store = object_store(f"s3://{bucket}", storage, retry_config=LISTING_RETRY)
    found = []
    try:
        if not is_glob(key_pattern):  # one named object: one HEAD (a listing's prefix is a folder)
            try:
                return [(pattern, *head_key(store, key_pattern))]
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return []
        for batch in obstore.list(store, prefix=prefix or None, chunk_size=1000):
            if on_page is not None:
                on_page(len(batch))
            for meta in batch:
                if rx.match(meta["path"]):
                    found.append((f"s3://{bucket}/{meta['path']}", *_stat_of(meta)))
    except Exception as e:  # noqa: BLE001 - obstore's errors, turned into what the user can act on
        raise store_error(e, f"s3://{bucket}/{prefix}", storage) from None
    return found


def _stat_of(meta: Any) -> tuple[int, int, str]:
    """``(size, last_modified_ns, etag)`` of an object's obstore metadata (a listing's or a HEAD's)."""
    modified = meta["last_modified"]
    return int(meta["size"]), int(modified.timestamp() * 1e9) if modified else 0, str(meta.get("e_tag") or "")


def head_key(store: Any, key: str) -> tuple[int, int, str]:
    """``(size, last_modified_ns, etag)`` of ``key`` in an obstore ``store``: one HEAD request (obstore's
    not-found error where there is none)."""
    import obstore

    return _stat_of(obstore.head(store, key))


def head_url(url: str) -> tuple[int, int, str]:
    """``(size, last_modified_ns, etag)`` of an ``http(s)://`` object: one HEAD request."""
    import obstore.store as obs

    base, _, name = url.rpartition("/")
    options: Any = {"allow_http": True} if url.startswith("http://") else None
    return head_key(obs.HTTPStore.from_url(base, client_options=options), name)


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
