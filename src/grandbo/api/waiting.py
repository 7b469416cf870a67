"""What `grandbo serve` answers while it waits for its store at start (`cli.waiting`): alive, not ready.

An orchestrator probes a starting server: its liveness probe (`/healthz`) must answer, or the process is restarted
(a server that only listened answers nothing; one that exits is a crash loop), and its readiness probe (`/readyz`)
must say why no traffic should come yet. So until the store answers, the listening socket is
served by this small server: `/healthz` 200, `/readyz` 503 with the store's error, and every other request 503
`store_unavailable` with Retry-After (nothing was read or written). Once the store answers it stops and the real
app takes the same socket (connections made meanwhile wait in its backlog)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grandbo.errors import StoreUnavailableError

MAX_DRAINED = 1 << 20  # a request body up to this is read before the answer (a larger one: the connection closes)


class Waiting:
    """Serve `listening` with the waiting answers (see the module) from `start` until `stop`; `tell` gives the
    store's latest error and when it is tried again."""

    def __init__(self, listening: socket.socket) -> None:
        self._listening = listening
        self._error: StoreUnavailableError | None = None
        self._retry_in = 1.0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def tell(self, error: StoreUnavailableError, retry_in_s: float) -> None:
        """The store's latest refusal, and the seconds until the next try; serving starts at the first."""
        self._error, self._retry_in = error, retry_in_s
        if self._server is None:
            self.start()

    def start(self) -> None:
        server = ThreadingHTTPServer(self._listening.getsockname()[:2], _handler(self), bind_and_activate=False)
        server.socket.close()  # the socket it made: the server's own listening one is served instead
        server.socket = self._listening
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.2,), name="store-wait", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop answering (the listening socket stays open, for the app)."""
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._server = self._thread = None

    def answer(self, path: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        """The status, JSON body and headers of a request for `path`."""
        error = self._error or StoreUnavailableError("The store has not answered yet.", detail={})
        if path == "/healthz":
            return 200, {"status": "ok"}, {}
        retry = {"Retry-After": str(max(1, round(self._retry_in)))}
        message = f"{error.message} The server started and waits for the store; it serves once the store answers."
        if path == "/readyz":
            store = {"ok": False, "error": error.code, "message": message, "remedy": error.remedy}
            return 503, {"status": "not_ready", "store": store}, retry
        body = error.to_dict()  # the one error shape, told that nothing of the request was read
        body["error"] |= {"message": message + " Nothing was read or written.", "detail": {"waiting_for_store": True}}
        return 503, body, retry


def _handler(waiting: Waiting) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = self.headers.get("Content-Length", "0")
            drained = length.isdigit() and int(length) <= MAX_DRAINED
            if drained and int(length):
                self.rfile.read(int(length))
            status, body, headers = waiting.answer(self.path.split("?", 1)[0])
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                                "Connection": "close", **headers}.items():  # fmt: skip
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the wait is logged once a try (`store.unavailable`), not once a probe

    return Handler
