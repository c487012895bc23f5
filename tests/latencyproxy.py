"""A loopback HTTP reverse proxy that holds every request a fixed time before it forwards it: an object
store's first-byte latency (an S3 GET waits ~20-30 ms before its first byte) in front of a local S3
server (moto, ``tests/s3server.py``).

Keep-alive like a real endpoint: a client connection carries request after request, each held
``latency_s`` then forwarded on a fresh upstream connection, so many requests wait at once on many
connections, and a client that keeps one request in flight per connection pays the latency every time.
:attr:`LatencyProxy.log` keeps each request's method, target and ``Range`` (what the bench's floor
replays); :attr:`LatencyProxy.in_flight_max` the most requests held or forwarded at once.
"""

from __future__ import annotations

import socket
import time

from tests.faultproxy import LoopbackProxy, _read_request


def _headers(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """The first line of an HTTP head and its headers (names lower-cased)."""
    lines = head.split(b"\r\n")
    fields = {}
    for ln in lines[1:]:
        name, _, value = ln.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return lines[0], fields


def _without(head: bytes, names: tuple[bytes, ...]) -> list[bytes]:
    return [ln for ln in head.split(b"\r\n") if ln.split(b":", 1)[0].strip().lower() not in names]


_HOP = (b"connection", b"keep-alive", b"upgrade", b"http2-settings", b"proxy-connection")


class LatencyProxy(LoopbackProxy):
    """Reverse proxy from :attr:`url` to ``upstream`` holding each request ``latency_s`` seconds."""

    def __init__(self, upstream: str, latency_s: float = 0.025) -> None:
        super().__init__(upstream, backlog=512)
        self.latency_s = latency_s
        self.log: list[tuple[str, str, str]] = []
        """(method, target, Range header or "") of each request, in arrival order."""
        self.in_flight_max = 0
        self._in_flight = 0

    def clear(self) -> None:
        """Forget the log and the in-flight peak (between two runs)."""
        with self._lock:
            self.log.clear()
            self.in_flight_max = 0

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    request = _read_request(conn)
                    if request is None:
                        return
                    if not self._forward(conn, request):
                        return
            except OSError:
                return

    def _forward(self, conn: socket.socket, request: bytes) -> bool:
        """Hold, forward and answer one request; whether the client connection stays open."""
        head, _, body = request.partition(b"\r\n\r\n")
        line, fields = _headers(head)
        method, target = line.split(b" ")[:2]
        with self._lock:
            self.log.append((method.decode(), target.decode("latin-1"), fields.get(b"range", b"").decode()))
            self._in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self._in_flight)
        try:
            time.sleep(self.latency_s)
            with socket.create_connection(self.upstream, timeout=60) as up:
                up.sendall(b"\r\n".join([*_without(head, _HOP), b"Connection: close"]) + b"\r\n\r\n" + body)
                chunks = []
                while part := up.recv(1 << 20):
                    chunks.append(part)
        finally:
            with self._lock:
                self._in_flight -= 1
        rhead, _, rbody = b"".join(chunks).partition(b"\r\n\r\n")
        _, rfields = _headers(rhead)
        # Keep the client's connection where the body's end is known (moto sends Content-Length); a body
        # cut off by the upstream close is passed on with a close of our own.
        keep = (
            method == b"HEAD"
            or b"content-length" in rfields
            and b"chunked" not in rfields.get(b"transfer-encoding", b"")
        )
        if keep and fields.get(b"connection", b"").lower() == b"close":
            keep = False
        lines = [*_without(rhead, _HOP), b"Connection: keep-alive" if keep else b"Connection: close"]
        conn.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + rbody)
        return keep
