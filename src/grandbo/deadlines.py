"""The transport of the providers' and LLMs' HTTP clients (`grandbo.http.client`): every socket read and write of a
call ends by the call's deadline, the answer's head included.

httpx's timeout bounds each read, never a call, and `http.send_bounded` can only look at the clock between the
pieces of an answer's body: a provider that sent its status line and headers a byte at a time, each byte within
the timeout, held the call for as long as it trickled. Here httpcore (the library under httpx) opens the sockets
through a network backend whose streams give each read and write at most the time left before the deadline
`within` sets for the calling thread, so a head trickled past it ends in httpx.ReadTimeout like a body does. A
host's name is looked up within that time too (`_addresses`): the standard library's look-up takes no timeout.

Proxies from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY, as the standard library reads them)
go through the same backend: httpx would otherwise send those calls through a transport of its own, unbounded.
"""

from __future__ import annotations

import contextlib
import ipaddress
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
    thread of its own, left to the resolver when it is late (a daemon: it holds no exit up)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    answer: list[list[str] | httpcore.ConnectError] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.append(list(dict.fromkeys(str(info[4][0]) for info in found)))
        except OSError as error:  # as httpcore maps the standard library's own look-up's
            answer.append(httpcore.ConnectError(str(error)))
        done.set()

    if timeout is None:
        look_up()
    else:
        threading.Thread(target=look_up, name=f"grandbo-resolve-{host}"[:60], daemon=True).start()
        if not done.wait(timeout):
            raise httpcore.ConnectTimeout(f"looking up {host} took over {timeout:.3g} s")
    if isinstance(answer[0], httpcore.ConnectError):
        raise answer[0]
    return answer[0]


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        failed: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in _addresses(host, port, _left(timeout, httpcore.ConnectTimeout)):  # each, as the stdlib tries
            try:  # one that timed out too (a route that drops: the next address is tried, in the time left)
                left = _left(timeout, httpcore.ConnectTimeout)
                return _Stream(self._backend.connect_tcp(address, port, left, local_address, socket_options))
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
