"""What a path names: a local file, an ``s3://`` object or an ``http(s)://`` URL; its bucket and key; the
path GDAL opens it by."""

from __future__ import annotations

from urllib.parse import urlsplit

from pipeline.config import is_url
from pipeline.errors import ConfigError


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
