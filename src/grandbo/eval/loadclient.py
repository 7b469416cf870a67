"""The benchmarks' load clients: one keep-alive HTTP/1.1 connection to a server on loopback, from the standard
library's `http.client`.

The clients share the machine's cores with the server they measure, so what a request costs the client is taken
from the server. httpx took 1.2-1.6 ms of CPU a recall on these 2 cores (its request and response models, header
merging, the JSON codec it picks); this client takes about a fifth of that, so `grandbo bench serve` and
`grandbo bench tenants` measure the server, not their own clients. Each benchmark still reports its clients' CPU
per request.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

# What a request that never reached an answer raises: the connection refused, reset or closed midway, a timeout,
# an answer that is not HTTP. The connection is made again for the next request.
FAILED = (OSError, http.client.HTTPException)

# What a kept connection the server closed while it was idle (uvicorn's `timeout_keep_alive`, 5 s) gives the next
# request sent on it: a broken pipe or a reset as it is sent, or, once sent, a close before the first byte of an
# answer (the server closed it unread). Sent again once on a new connection, as HTTP clients do (urllib3, httpx),
# and counted. A loaded machine leaves a client's connection to one of several servers idle that long. A reset
# after the request was sent is a failure: the server may have read it (a write would count twice).
STALE_SENDING = (BrokenPipeError, ConnectionResetError)
STALE_ANSWER = (http.client.RemoteDisconnected,)

# A kept connection idle this long is closed before the next request rather than sent on: uvicorn closes it at 5 s
# (`timeout_keep_alive`), and a request sent as it does is reset once sent, which no client may take for a stale
# connection (above). 7 of 649 recalls of a 1,000-org `bench tenants` on a loaded machine failed so (its clients
# keep one connection to each of two servers, and one can idle 5 s while the other answers). Connecting anew on
# loopback costs far less than the request.
IDLE_REUSE_S = 2.5


class Connection:
    """One keep-alive connection to `url` (http, loopback); `post` sends a JSON body and returns the status."""

    def __init__(self, url: str, *, timeout: float = 30, key: str | None = None, idle_s: float = IDLE_REUSE_S) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"The load client speaks plain HTTP to a server on this machine, not {url!r}.")
        self._host, self._port, self._timeout = parts.hostname, parts.port or 80, timeout
        self._headers = {"Content-Type": "application/json"}
        if key is not None:
            self._headers["Authorization"] = f"Bearer {key}"
        self._conn: http.client.HTTPConnection | None = None
        self._idle_s, self._answered_at = idle_s, 0.0
        self.reconnects = 0  # requests sent again on a new connection after their kept one was found closed (STALE)

    def post(self, path: str, payload: Any, *, key: str | None = None) -> int:
        """POST `payload` as JSON; the answer's status, its body read (so the connection is kept). `key`: this
        request's bearer key instead of the connection's. Raises one of `FAILED` where no answer came, after
        closing the connection (the next request opens another)."""
        headers = self._headers if key is None else {**self._headers, "Authorization": f"Bearer {key}"}
        if self._conn is not None and time.monotonic() - self._answered_at > self._idle_s:
            self.close()  # idle long enough that the server may be closing it as the request arrives
        reused = self._conn is not None
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        sent = False
        try:
            self._conn.request("POST", path, body=json.dumps(payload).encode(), headers=headers)
            sent = True
            answer = self._conn.getresponse()
            answer.read()
            self._answered_at = time.monotonic()
        except FAILED as error:
            self.close()
            if reused and isinstance(error, STALE_ANSWER if sent else STALE_SENDING):  # closed idle: once, anew
                self.reconnects += 1
                return self.post(path, payload, key=key)
            raise
        if answer.will_close:
            self.close()
        return answer.status

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
