"""A fault-injecting HTTP reverse proxy for the tests: 127.0.0.1 in front of an S3 server.

Each request is answered in one of four ways: ``503 SlowDown`` with S3's XML error body, a reset
connection (RST, no response), a delayed forward, or a plain forward. The choice is a hash of the seed
and the request itself (method, target, ``Range``, and how many times that same request came before),
so it does not depend on thread timing or request order, and a request is faulted at most
``max_faults`` times in a row: a client that retries recovers. :attr:`FaultProxy.counts` says what
the proxy did.

One request per connection: the proxy answers with ``Connection: close``.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
import time
from collections import Counter
from typing import Any, Self
from urllib.parse import urlsplit

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>faultproxy</RequestId></Error>"
)


def _read_request(conn: socket.socket) -> bytes | None:
    """One HTTP request (head and a ``Content-Length`` body), or None when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return None
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            return None
        body += part
    return head + b"\r\n\r\n" + body


def _with_close(head: bytes) -> bytes:
    """``head`` (request or response line and headers) with ``Connection: close`` and no upgrade offer."""
    lines = [
        ln
        for ln in head.split(b"\r\n")
        if ln.split(b":", 1)[0].strip().lower() not in (b"connection", b"upgrade", b"http2-settings", b"keep-alive")
    ]
    return b"\r\n".join([*lines, b"Connection: close"])


def forward(conn: socket.socket, request: bytes, upstream: tuple[str, int]) -> None:
    """Send one whole request upstream on a connection of its own and its whole response back to ``conn``,
    both marked ``Connection: close``."""
    head, _, body = request.partition(b"\r\n\r\n")
    with socket.create_connection(upstream, timeout=60) as up:
        up.sendall(_with_close(head) + b"\r\n\r\n" + body)
        response = b""
        while part := up.recv(1 << 20):
            response += part
    rhead, _, rbody = response.partition(b"\r\n\r\n")
    conn.sendall(_with_close(rhead) + b"\r\n\r\n" + rbody)


class LoopbackProxy:
    """A reverse proxy on 127.0.0.1 (:attr:`url`) in front of ``upstream``: a thread accepts connections
    while the ``with`` block runs and hands each to :meth:`_handle` on a thread of its own."""

    def __init__(self, upstream: str, backlog: int = 128) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(backlog)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._closed = False

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed = True
        self._sock.close()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError


class FaultProxy(LoopbackProxy):
    """Reverse proxy from ``url`` to ``upstream`` that injects faults (see the module docstring)."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        error_rate: float = 0.1,
        reset_rate: float = 0.05,
        delay_rate: float = 0.1,
        delay_s: float = 0.05,
        max_faults: int = 2,
    ) -> None:
        super().__init__(upstream)
        self.seed = seed
        self.rates = (error_rate, reset_rate, delay_rate)
        self.delay_s = delay_s
        self.max_faults = max_faults
        self.counts: Counter[str] = Counter()
        self.faulted: list[str] = []
        """Request lines answered 503 or reset, in the order they came."""
        self._seen: Counter[bytes] = Counter()

    def _decide(self, request: bytes) -> str:
        head = request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
        ranges = [ln for ln in head[1:] if ln.lower().startswith(b"range:")]
        identity = b"|".join([head[0], *ranges])
        with self._lock:
            seen = self._seen[identity]
            self._seen[identity] += 1
            self.counts["requests"] += 1
        if seen >= self.max_faults:
            return "forward"
        digest = hashlib.sha256(b"%d|%d|" % (self.seed, seen) + identity).digest()
        u = struct.unpack("<Q", digest[:8])[0] / 2**64
        error_rate, reset_rate, delay_rate = self.rates
        if u < error_rate:
            return "slow_down"
        if u < error_rate + reset_rate:
            return "reset"
        if u < error_rate + reset_rate + delay_rate:
            return "delay"
        return "forward"

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_request(conn)
                if request is None:
                    return
                action = self._decide(request)
                with self._lock:
                    self.counts[action] += 1
                    if action in ("slow_down", "reset"):
                        self.faulted.append(request.split(b"\r\n", 1)[0].decode("latin-1"))
                if action == "slow_down":
                    conn.sendall(
                        b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(SLOW_DOWN) + SLOW_DOWN
                    )
                    return
                if action == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if action == "delay":
                    time.sleep(self.delay_s)
                forward(conn, request, self.upstream)
            except OSError:
                with self._lock:
                    self.counts["proxy_errors"] += 1
