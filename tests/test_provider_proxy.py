"""A hosted provider reached through the proxy the environment names (HTTP_PROXY, NO_PROXY), as httpx reached it.

The providers' HTTP clients send through `grandbo.deadlines.Transport` (every read and write within the call's
deadline), which picks the environment's proxy itself: httpx's own proxy transport would not be bounded. A small
forwarding proxy on loopback relays the calls and counts them.
"""

from __future__ import annotations

import base64
import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from tests.fakes import FakeEmbeddings


class _Proxy:
    """A forward HTTP proxy: relays each request for an absolute `http://` URL and counts them in `relayed`."""

    def __init__(self) -> None:
        self.relayed: list[str] = []
        self.credentials: list[str | None] = []  # each request's Proxy-Authorization, if it had one
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                target = urllib.parse.urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                proxy.relayed.append(self.path)
                proxy.credentials.append(self.headers.get("Proxy-Authorization"))
                upstream = http.client.HTTPConnection(target.hostname or "", target.port, timeout=10)
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in ("proxy-connection", "proxy-authorization")
                }
                upstream.request("POST", target.path, body=body, headers=headers)
                answer = upstream.getresponse()
                content = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
                upstream.close()

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> _Proxy:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(monkeypatch) -> Iterator[_Proxy]:  # type: ignore[no-untyped-def]
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with _Proxy() as server:
        monkeypatch.setenv("HTTP_PROXY", server.url)
        yield server


def _settings(tmp_path, url: str) -> Settings:  # type: ignore[no-untyped-def]
    return Settings(home=tmp_path / "home", openai_base_url=url, openai_model="fake-embed", openai_dimension=8,
                    openai_api_key="test-key", http_timeout_seconds=5.0, embed_retry_seconds=0)  # fmt: skip


def _embed_one(tmp_path, fake: FakeEmbeddings) -> None:  # type: ignore[no-untyped-def]
    """One text embedded by a provider made now (it reads the environment's proxies when it is made)."""
    provider = get_provider("openai", _settings(tmp_path, fake.url))
    try:
        assert len(provider.embed(["checkout-api pool exhausted"])[0]) == 8
    finally:
        provider.close()


def test_a_provider_is_called_through_the_environments_proxy(tmp_path, proxy):
    with FakeEmbeddings(dimension=8) as fake:
        _embed_one(tmp_path, fake)
    assert proxy.relayed == [f"{fake.url}/embeddings"]
    assert len(fake.behaviour.requests) == 1


def test_no_proxy_sends_a_provider_call_straight_to_it(tmp_path, proxy, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with FakeEmbeddings(dimension=8) as fake:
        _embed_one(tmp_path, fake)
    assert proxy.relayed == []
    assert len(fake.behaviour.requests) == 1


def test_a_proxy_named_with_credentials_is_sent_them(tmp_path, proxy, monkeypatch):
    """Review 25: HTTP_PROXY=http://user:password@host:port (an authenticating corporate proxy) had its credentials
    sent as Proxy-Authorization by httpx; the deadline transport sent none (the proxy answers 407, every provider
    call fails). They are sent to the proxy again, decoded as httpx decodes them."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://al%40ice:s3cr%3At@"))
    with FakeEmbeddings(dimension=8) as fake:
        _embed_one(tmp_path, fake)
    assert proxy.relayed == [f"{fake.url}/embeddings"]
    assert proxy.credentials == ["Basic " + base64.b64encode(b"al@ice:s3cr:t").decode()]


@pytest.mark.parametrize("bypassed", [False, True], ids=["proxied", "NO_PROXY"])
def test_bedrock_is_called_through_the_environments_proxy(tmp_path, proxy, monkeypatch, bypassed):
    """boto3 signs Bedrock's requests and `grandbo.bedrock.Runtime`'s httpx client sends them, through the same
    transport as the other providers: the environment's proxy, NO_PROXY too (botocore's `Config(proxies=...)`
    would be unused: botocore sends nothing itself)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")  # boto3 signs the requests with them
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    if bypassed:
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with FakeEmbeddings(dimension=256) as fake:
        settings = Settings(home=tmp_path / "home", bedrock_region="us-east-1", bedrock_endpoint_url=fake.url,
                            bedrock_dimension=256)  # fmt: skip
        provider = get_provider("bedrock", settings)
        try:
            assert len(provider.embed(["checkout-api pool exhausted"])[0]) == 256
        finally:
            provider.close()
    invoked = f"{fake.url}/model/amazon.titan-embed-text-v2%3A0/invoke"
    assert proxy.relayed == ([] if bypassed else [invoked]) and len(fake.behaviour.requests) == 1
