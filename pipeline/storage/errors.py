"""A failed object-store request as a :class:`~pipeline.errors.ConfigError` the user can act on: it
names the setting to check (bucket, endpoint, credentials) and holds no secret."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pipeline.errors import ConfigError
from pipeline.storage.credentials import redact
from pipeline.storage.settings import Storage


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
