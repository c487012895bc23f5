"""A real S3 HTTP server for the tests: moto in server mode on 127.0.0.1, in its own process.

The fixtures in ``conftest.py`` start one per test session (:func:`start_moto`) and give each test a
fresh bucket; :func:`upload_tree` copies a fixture folder into it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# moto accepts any credentials; these stand in for a user's real ones (and must never be printed).
TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIATESTPIPELINE0001",
    "AWS_SECRET_ACCESS_KEY": "pipeline-test-secret-do-not-print-0001",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str
    """``http://127.0.0.1:PORT``"""
    process: subprocess.Popen[bytes]

    def client(self) -> object:
        """A boto3 S3 client for this server (test set-up and inspection only)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")

    def reset(self) -> None:
        """Drop every bucket (moto's reset endpoint)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST"))


@contextmanager
def start_moto(timeout_s: float = 30.0, lean: bool = True) -> Iterator[MotoServer]:
    """Run moto's S3 server on a free loopback port until the block ends (``tests/motoserve.py``: moto's
    own server, less its per-request folder listing and request log; ~25% less CPU per request). The
    benches pass ``lean=False``: their figures in docs/performance.md are against ``python -m moto.server``."""
    port = free_port()
    env = {**os.environ, **TEST_CREDENTIALS}
    proc = subprocess.Popen(
        [
            sys.executable,
            *([str(Path(__file__).with_name("motoserve.py"))] if lean else ["-m", "moto.server"]),
            *("-H", "127.0.0.1", "-p", str(port)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {url} (exit {proc.poll()})") from None
                time.sleep(0.1)
        yield MotoServer(endpoint_url=url, process=proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def upload_tree(client: object, folder: Path, bucket: str, prefix: str) -> list[str]:
    """Upload every file under ``folder`` to ``s3://bucket/prefix/<relative path>``; return the URLs."""
    urls = []
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            key = f"{prefix.strip('/')}/{path.relative_to(folder).as_posix()}".lstrip("/")
            client.upload_file(str(path), bucket, key)  # type: ignore[attr-defined]
            urls.append(f"s3://{bucket}/{key}")
    return urls
