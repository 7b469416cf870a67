"""A real `grandbo serve` app on loopback for API and MCP tests: uvicorn on a free port, in a thread."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import uvicorn

from grandbo.api.app import create_app
from grandbo.service import Grandbo


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    url: str
    grandbo: Grandbo

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


class OneConnection:
    """Requests over one keep-alive HTTP/1.1 connection, never another: httpx opens a new connection when it
    notices the server closed the old one (often, not always), which hides a server that drops its connections."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        self._sock: socket.socket | None = None

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        """The response, as an httpx.Response; raises what the connection does (a reset, a server that hung up)."""
        self._conn.request(method, path, body=body, headers=headers or {})
        self._sock = self._sock or self._conn.sock
        assert self._conn.sock is self._sock, "the client opened a second connection"
        answer = self._conn.getresponse()
        return httpx.Response(answer.status, headers=answer.getheaders(), content=answer.read())

    def close(self) -> None:
        self._conn.close()


@contextmanager
def serving(grandbo: Grandbo) -> Iterator[Served]:
    """Serve `grandbo` on 127.0.0.1 until the block ends."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(grandbo), host="127.0.0.1", port=port, log_level="error", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", grandbo)
    finally:
        server.should_exit = True
        thread.join(30)
