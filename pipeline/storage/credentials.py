"""Credentials stay in the process that resolved them: :func:`redact` scrubs them from any text that
leaves it, and :func:`worker_environment` is how the AWS chain reaches the local cluster's workers
(process start-up, never the task graph)."""

from __future__ import annotations

import os
import re

_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
_SECRET_PATTERNS = (
    re.compile(
        r"(?i)(aws_secret_access_key|aws_session_token|x-amz-security-token|signature)(['\"]?\s*[=:]\s*['\"]?)[^\s'\"&,}]+"
    ),
    re.compile(r"(?i)(X-Amz-Credential=|X-Amz-Signature=)[^\s&'\"]+"),
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


_FORWARDED_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def worker_environment() -> dict[str, str]:
    """The AWS chain's environment variables (``AWS_*``) and HTTP proxy settings of this process now:
    what the local cluster's workers are started with. A worker spawned now would inherit them; one
    forked from the fork server (:mod:`pipeline.execute.workers`) has that server's environment from when it
    started, which may predate them. They reach the workers through process start-up (the nanny's
    ``env``), never through the task graph."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k in _FORWARDED_ENV}
