"""A real `grandbo serve` app on loopback for API and MCP tests: uvicorn on a free port, in a thread."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn

from grandbo.api.app import create_app
from grandbo.api.connections import server_config
from grandbo.service import Grandbo


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    url: str
    grandbo: Grandbo
    app: Any = None  # the server's FastAPI app, for what it counts (`app.state`)

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
    app = create_app(grandbo)
    config = server_config(app, grandbo.settings, "127.0.0.1", port, log_level="error")
    server = uvicorn.Server(config)  # as `grandbo serve` runs it (`api.connections`)
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", grandbo, app)
    finally:
        server.should_exit = True
        thread.join(30)


T = TypeVar("T")
BOUND = 60.0  # seconds any one wait may take on a loaded machine before the test fails; never asserted


def until(check: Callable[[], bool], what: str, every_s: float = 0.05) -> None:
    """Wait for `check`, failing the test with `what` past BOUND."""
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {BOUND:g} s: {what}")
        time.sleep(every_s)


def serve_process(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """`grandbo serve` as a process of its own (one a test may kill -9) on a free loopback port, once it answers
    /healthz, and a client of it."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def up() -> bool:
        assert process.poll() is None, "`grandbo serve` exited"
        try:
            return client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    until(up, "the server answered /healthz")
    return process, client


def acked_until_killed(
    process: subprocess.Popen[bytes], client: httpx.Client, send: Callable[[int], T | None], count: int, *,
    clients: int, kill_after: int,
) -> list[T]:  # fmt: skip
    """Send requests 0..count-1 from `clients` threads (`send(n)` answers what the server acknowledged, None for
    a refusal or a connection the kill cut) and kill -9 the server once `kill_after` are acknowledged; the
    acknowledged ones, in the order they were answered. The server and the client are closed either way."""
    acked: list[T] = []
    try:
        with ThreadPoolExecutor(clients) as pool:
            for future in as_completed([pool.submit(send, n) for n in range(count)]):
                if (answer := future.result()) is not None:
                    acked.append(answer)
                if len(acked) == kill_after and process.poll() is None:
                    os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()  # (already dead, unless the test failed before)
        process.wait(30)
        client.close()
    return acked


def interleaved(threads: list[threading.Thread]) -> None:
    """Start `threads` and wait for them, the interpreter switching between them as often as it can, so that their
    reads and writes interleave (a check-then-write race shows itself)."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
