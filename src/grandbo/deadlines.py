"""The transport of the providers' and LLMs' HTTP clients (`grandbo.http.client`): every socket read and write of a
call ends by the call's deadline, the answer's head included.

httpx's timeout bounds each read, never a call, and `http.send_bounded` can only look at the clock between the
pieces of an answer's body: a provider that sent its status line and headers a byte at a time, each byte within
the timeout, held the call for as long as it trickled. Here httpcore (the library under httpx) opens the sockets
through a network backend whose streams give each read and write at most the time left before the deadline
`within` sets for the calling thread, so a head trickled past it ends in httpx.ReadTimeout like a body does. A
host's name is looked up within that time too (`_addresses`): the standard library's look-up takes no timeout.
A name's callers share its one look-up in flight, and a few names at most are looked up at once (`_LookUps`): the
look-up of one more waits for a slot, within the call's time.

Proxies from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY, as the standard library reads them)
go through the same backend: httpx would otherwise send those calls through a transport of its own, unbounded.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

_calls = threading.local()  # the deadline (time.monotonic's) of the call this thread is making, if any


@contextlib.contextmanager
def within(deadline: float) -> Iterator[None]:
    """Every read and write this thread's clients make inside ends by `deadline` (time.monotonic's)."""
    before = getattr(_calls, "deadline", None)
    _calls.deadline = deadline
    try:
        yield
    finally:
        _calls.deadline = before


def _left(timeout: float | None, late: type[Exception]) -> float | None:
    """`timeout`, cut to what is left of this thread's call; `late` raised when nothing is."""
    deadline: float | None = getattr(_calls, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the call's time ran out")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


def _addresses(host: str, port: int, timeout: float | None) -> list[str]:
    """`host`'s addresses, looked up within `timeout` (an address is its own). getaddrinfo takes no timeout: a
    resolver that did not answer held a call past its deadline for as long as the resolver's own retries lasted
    (resolv.conf's timeout times its attempts, for each nameserver: 10 s and more by default). The look-up runs in a
    thread of its own, left to the resolver when it is late (a daemon: it holds no exit up), and shared (`_LookUps`)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    found = _found(host, port) if timeout is None else _look_ups.wait(host, port, timeout)
    if isinstance(found, str):  # as httpcore maps the standard library's own look-up's failure
        raise httpcore.ConnectError(found)
    return found


def _found(host: str, port: int) -> list[str] | str:
    """`host`'s addresses, in the resolver's order, or why it has none."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        return str(error)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


MIN_CONNECT_S = 1.0  # the least time an address of several is given for its connect (a far host's handshake)


class _LookUp:
    """One look-up of a name in flight: `found` once `done` is set."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.found: list[str] | str = ""


class _LookUps:
    """The look-ups in flight, one per name, each in a thread of its own. A look-up the resolver leaves unanswered
    holds its thread for the resolver's own retries, after its callers have gone: with one thread per call, a
    resolver that answered nothing piled up a thread for every call of those seconds (review 26 L1). A name's
    callers wait on its one look-up in flight, and at most `MOST` names are looked up at once: the look-up of one
    more waits for one of them to end, within its call's time (refused at once, a burst of calls to a few more
    names than that failed while the resolver was merely slow: review 27 M2)."""

    MOST = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # notified as a look-up ends, its slot free
        self._pending: dict[str, _LookUp] = {}

    def wait(self, host: str, port: int, timeout: float) -> list[str] | str:
        deadline = time.monotonic() + timeout
        with self._lock:
            while (pending := self._pending.get(host)) is None and len(self._pending) >= self.MOST:
                if (left := deadline - time.monotonic()) <= 0:
                    raise httpcore.ConnectTimeout(
                        f"looking up {host} was not begun within {timeout:.3g} s: {self.MOST} look-ups of other "
                        "names were waiting for the resolver all that time; check the nameservers in "
                        "/etc/resolv.conf")  # fmt: skip
                self._ended.wait(left)
            if pending is None:
                pending = self._pending[host] = _LookUp()
                name = f"grandbo-resolve-{host}"[:60]
                threading.Thread(target=self._look_up, args=(host, port, pending), name=name, daemon=True).start()
        if not pending.done.wait(deadline - time.monotonic()):
            raise httpcore.ConnectTimeout(f"looking up {host} took over {timeout:.3g} s")
        return pending.found

    def _look_up(self, host: str, port: int, pending: _LookUp) -> None:
        pending.found = _found(host, port)
        with self._lock:
            del self._pending[host]
            self._ended.notify_all()
        pending.done.set()

    def after_fork(self) -> None:
        self.__init__()  # type: ignore[misc]  # a child has none of its parent's threads


_look_ups = _LookUps()
os.register_at_fork(after_in_child=_look_ups.after_fork)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        failed: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        addresses = _addresses(host, port, _left(timeout, httpcore.ConnectTimeout))
        for place, address in enumerate(addresses):  # each, as the standard library tries them
            # An address whose connect times out (a route that drops) is passed over for the next: each has its
            # share of the time left (MIN_CONNECT_S at least: a name of 64 addresses left each a sliver), the last all
            # of it. With all of it each, the first took the call's time.
            left = _left(timeout, httpcore.ConnectTimeout)
            share = None if left is None else max(left / (len(addresses) - place), min(left, MIN_CONNECT_S))
            try:
                return _Stream(self._backend.connect_tcp(address, port, share, local_address, socket_options))
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failed = error
        raise failed or httpcore.ConnectError(f"{host} has no address")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


# httpcore's errors as httpx's (what every caller catches), the most particular first
_ERRORS: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.ProtocolError: httpx.ProtocolError,
}


@contextlib.contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except tuple(_ERRORS) as error:
        kind = next(_ERRORS[cls] for cls in type(error).__mro__ if cls in _ERRORS)
        raise kind(str(error) or type(error).__name__, request=request) from error


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes], request: httpx.Request) -> None:
        self._stream, self._request = stream, request

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx(self._request):
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if callable(close):
            with _as_httpx(self._request):
                close()


class Transport(httpx.BaseTransport):
    """httpx's transport over httpcore's pool, through the deadline backend; a pool per proxy in use."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._proxies = urllib.request.getproxies_environment()
        self._pools: dict[str | None, httpcore.ConnectionPool] = {}
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions,
        )  # fmt: skip
        with _as_httpx(request):
            answer = self._pool(url).handle_request(core)
        assert isinstance(answer.stream, Iterable)
        return httpx.Response(status_code=answer.status, headers=answer.headers, extensions=answer.extensions,
                              stream=_Body(answer.stream, request))  # fmt: skip

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def _pool(self, url: httpx.URL) -> httpcore.ConnectionPool:
        proxy = self._proxy(url)
        with self._lock:
            pool = self._pools.get(proxy)
            if pool is None:
                pool = self._pools[proxy] = httpcore.ConnectionPool(
                    ssl_context=self._context, max_connections=100, max_keepalive_connections=20,
                    keepalive_expiry=5.0, network_backend=_Backend(),
                    proxy=_named(proxy, self._context) if proxy else None,
                )  # fmt: skip
            return pool

    def _proxy(self, url: httpx.URL) -> str | None:
        """The environment's proxy for `url`, as the standard library reads HTTP(S)_PROXY, ALL_PROXY and NO_PROXY."""
        proxy = self._proxies.get(url.scheme) or self._proxies.get("all")
        if not proxy or urllib.request.proxy_bypass(url.host):  # NO_PROXY
            return None
        return proxy if "://" in proxy else f"http://{proxy}"


def _named(proxy: str, context: ssl.SSLContext) -> httpcore.Proxy:
    """The proxy `proxy` names, its credentials (`user:password@`) sent to it as Proxy-Authorization as httpx sends
    them: httpcore reads none from the URL, and an authenticating proxy answered every call 407 (review 25)."""
    named = httpx.Proxy(proxy)  # the credentials taken out of the URL, percent-decoded
    return httpcore.Proxy(str(named.url), auth=named.auth, ssl_context=context)
