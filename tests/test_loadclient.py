"""The benchmarks' load client (`grandbo.eval.loadclient`) against a real HTTP server on loopback: a kept
connection, the key sent, a server's close or going away answered by a new connection or a clear failure."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from grandbo.eval.loadclient import FAILED, Connection


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[int, str, str | None, object]]] = []
    close_after: ClassVar[set[int]] = set()
    drop_after: ClassVar[set[int]] = set()  # answered as kept, then closed: a connection the server closed idle

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        number = len(self.seen)
        self.seen.append((self.client_address[1], self.path, self.headers.get("Authorization"), body))
        raw = b'{"ok": true}'
        self.send_response(201 if body.get("write") else 200)
        self.send_header("Content-Length", str(len(raw)))
        if number in self.close_after:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(raw)
        if number in self.drop_after:
            self.close_connection = True

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server():
    _Recorder.seen, _Recorder.close_after, _Recorder.drop_after = [], {1}, set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_requests_share_a_connection_until_the_server_closes_it(server):
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with Connection(url, key="k-read") as http:
        statuses = [http.post("/v1/recall", {"topic": f"t{n}"}) for n in range(3)]
        statuses.append(http.post("/v1/memories", {"write": True}, key="k-write"))
    assert statuses == [200, 200, 200, 201]
    ports = [port for port, *_ in _Recorder.seen]
    assert ports[0] == ports[1] != ports[2] == ports[3]  # the second answer said close: a new connection after it
    assert [auth for _, _, auth, _ in _Recorder.seen] == ["Bearer k-read"] * 3 + ["Bearer k-write"]
    assert [body for *_, body in _Recorder.seen] == [{"topic": "t0"}, {"topic": "t1"}, {"topic": "t2"}, {"write": True}]


def test_a_kept_connection_the_server_closed_idle_is_made_again_and_counted(server):
    """uvicorn closes a connection idle past its keep-alive: the next request sent on it got no answer (a broken
    pipe or a disconnect), counted as an error of the server under `bench tenants`'s load. It is sent again once."""
    _Recorder.drop_after = {0}
    with Connection(f"http://127.0.0.1:{server.server_address[1]}") as http:
        assert http.post("/v1/recall", {"topic": "t0"}) == 200
        assert http.post("/v1/recall", {"topic": "t1"}) == 200
        assert http.reconnects == 1
    assert [body for *_, body in _Recorder.seen] == [{"topic": "t0"}, {"topic": "t1"}]


def test_a_connection_idle_past_its_bound_is_not_sent_on_again(server):
    """A request sent as the server closes the idle connection is reset after it was sent, a failure the client cannot
    send again (the server may have read it): so a connection idle past `idle_s` is left before it can be."""
    _Recorder.close_after = set()
    with Connection(f"http://127.0.0.1:{server.server_address[1]}", idle_s=0.2) as http:
        assert http.post("/v1/recall", {"topic": "t0"}) == 200
        assert http.post("/v1/recall", {"topic": "t1"}) == 200  # at once: the same connection
        time.sleep(0.3)
        assert http.post("/v1/recall", {"topic": "t2"}) == 200
        assert http.reconnects == 0  # left idle, not found closed
    ports = [port for port, *_ in _Recorder.seen]
    assert ports[0] == ports[1] != ports[2]


def test_a_server_gone_is_a_failure_and_the_next_request_connects_again(server):
    _Recorder.close_after = {0}  # the answer closes the connection: the next request must connect again
    http = Connection(f"http://127.0.0.1:{server.server_address[1]}")
    assert http.post("/v1/recall", {"topic": "t"}) == 200
    server.shutdown()
    server.server_close()
    for _ in range(2):  # refused, and refused again (no connection left half open in between)
        with pytest.raises(FAILED):
            http.post("/v1/recall", {"topic": "t"})


def test_only_plain_http_is_spoken():
    with pytest.raises(ValueError, match="plain HTTP"):
        Connection("https://example.com")
