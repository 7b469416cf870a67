"""Fake hosted services at the HTTP layer (this machine cannot reach the real ones).

One threaded HTTP server answers the OpenAI, Voyage and Bedrock embedding request shapes with
deterministic vectors, and the chat APIs (OpenAI-compatible chat completions, Anthropic Messages, Bedrock
Converse) with queued answers; it can be told to misbehave: go down, stall, answer 500 or a body that is
not JSON, return the wrong count, dimension or indexes, or vectors of zeros, NaN or Infinity, or send an answer
of many megabytes (gzip-compressed too) or a byte at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grandbo.model import Calibration


def vector_for(text: str, dimension: int) -> list[float]:
    """A stable unit vector for a text (not semantic; enough to check plumbing)."""
    seed = hashlib.sha256(text.encode()).digest()
    values = [((seed[i % 32] + i * 37) % 251) / 125.0 - 1.0 for i in range(dimension)]
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


@dataclass
class Behaviour:
    dimension: int = 8
    status: int = 200
    delay_s: float = 0.0
    drop_one: bool = False  # answer with one vector fewer than asked
    wrong_dimension_for: set[str] = field(default_factory=set)  # texts containing these get dimension + 1
    reject_for: set[str] = field(default_factory=set)  # a request with a text containing one of these gets 400
    reject_status: int = 400  # (or this status: 401, the account refused)
    zero_for: set[str] = field(default_factory=set)  # texts containing these get an all-zero vector
    # texts containing a marker get that value (NaN, Infinity: sent as JSON's NaN/Infinity tokens) as their
    # vector's first component
    value_for: dict[str, float] = field(default_factory=dict)
    # the `index` the i-th vector of an embeddings answer (of n) is sent under; None: its own, i
    index_of: Callable[[int, int], Any] | None = None
    # Bedrock's answer for a text: this instead of its vector (null, a number: not a Titan embedding)
    bedrock_embedding_of: Callable[[str], Any] | None = None
    # rewrites the `data` of an embeddings answer, given how many requests the fake has had (chaos tests)
    mangle: Callable[[int, list[dict[str, Any]]], list[dict[str, Any]]] | None = None
    # called with an embeddings request's texts before it is answered: a test looks at the store while the
    # provider is asked for those texts
    on_embed: Callable[[list[str]], None] | None = None
    chat_answers: list[str] = field(default_factory=list)  # answers of the chat APIs, in order
    raw_chat: bytes | None = None  # a chat API answers with these bytes instead (a body that is not JSON)
    retry_after: str | None = None  # sent as every answer's Retry-After header
    # a Bedrock call answered with `status` comes with this error code (x-amzn-ErrorType) and message, as AWS sends them
    aws_error: str | None = None
    aws_message: str = "fake failure"
    max_inputs: int | None = None  # an embeddings request of more texts gets 400, as Voyage's past its documented limit
    answer_model: str | None = None  # the `model` an embeddings answer names; None: the one asked for
    raw_embeddings: bytes | None = None  # the embeddings APIs (OpenAI's, Bedrock's) answer with these bytes instead
    requests: list[dict[str, Any]] = field(default_factory=list)
    # chat requests (recorded first) wait for `hold` to be set, at most `hold_s`: an LLM still thinking, for as
    # long as a test wants, without a timing
    hold: threading.Event | None = None
    hold_s: float = 60.0
    # with markers, `hold` holds instead the requests (of any API) whose body contains one of them
    hold_for: set[str] = field(default_factory=set)
    # the first `gather` requests are held until that many are in flight at once (at most `gather_s`): a
    # test that several callers really work side by side does not depend on how fast each one starts
    gather: int = 0
    gather_s: float = 30.0
    # every answer starts with `pad` spaces (JSON still): a flood of `pad` bytes, or with `trickle_s`, an answer
    # sent one of them every `trickle_s` seconds (each read well within a client's timeout, the whole far past it)
    pad: int = 0
    trickle_s: float = 0.0
    # the answer's head sent with a header of `trickle_head` bytes, one every `trickle_s` seconds (its body at once)
    trickle_head: int = 0
    gzip: bool = False  # every answer (its padding too) sent gzip-compressed, as a server may when asked
    hang_up: int = 0  # the next `hang_up` requests are read, then their connection closed with no answer
    _gathered: threading.Condition = field(default_factory=threading.Condition)
    _arrived: int = 0

    def wait_for_company(self) -> None:
        with self._gathered:
            if self._arrived >= self.gather:
                return
            self._arrived += 1
            self._gathered.notify_all()
            self._gathered.wait_for(lambda: self._arrived >= self.gather, timeout=self.gather_s)


def fake_embed_calibration() -> Calibration:
    """An organization's own verdict calibration for the fake server's model as the tests name it (`openai`,
    `fake-embed`): the hosted providers ship none, so a test of the verdict with one fits its own."""
    return Calibration(provider="openai", model="fake-embed", features=["top_cosine", "top_coverage"],
                       coefficients=[8.0, 0.5], intercept=-3.0, fitted_on="test")  # fmt: skip


class FakeEmbeddings:
    """Start with `with FakeEmbeddings() as fake:`; `fake.url` is the base URL."""

    def __init__(self, dimension: int = 8, *, keep_alive: bool = False, host: str = "127.0.0.1") -> None:
        """`keep_alive`: HTTP/1.1 connections kept open between requests (a client that reuses its connections
        opens few), counted in `connections` (accepted) and `open_connections` (not closed yet). `host`: the
        loopback address it listens on."""
        self.behaviour = Behaviour(dimension=dimension)
        behaviour = self.behaviour
        self.connections = self.open_connections = 0
        counts = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                with counts:
                    fake.connections += 1
                    fake.open_connections += 1

            def finish(self) -> None:
                with counts:
                    fake.open_connections -= 1
                with contextlib.suppress(ConnectionError):  # the client closed its kept-alive connection first
                    super().finish()

            def handle(self) -> None:
                with contextlib.suppress(ConnectionError):  # the client closed its kept-alive connection first
                    super().handle()

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length) or b"{}"
                body = json.loads(raw)
                # "answered" once its answer is sent: a request held (`hold`) has none until it is let go
                self._record = {"path": self.path, "body": body, "headers": dict(self.headers), "at": time.monotonic(),
                                "answered": False}  # fmt: skip
                behaviour.requests.append(self._record)
                behaviour.wait_for_company()
                if behaviour.hang_up > 0:  # a connection lost before the answer (a proxy, a restart)
                    behaviour.hang_up -= 1
                    self.close_connection = True
                    return
                chat = self.path.endswith(("/chat/completions", "/messages", "/converse"))
                marked = any(marker.encode() in raw for marker in behaviour.hold_for)
                if behaviour.hold is not None and (marked if behaviour.hold_for else chat):
                    behaviour.hold.wait(behaviour.hold_s)
                if behaviour.delay_s:
                    time.sleep(behaviour.delay_s)
                if behaviour.status != 200 and behaviour.aws_error and self.path.startswith("/model/"):
                    self._send(behaviour.status, {"message": behaviour.aws_message},
                               {"x-amzn-ErrorType": f"{behaviour.aws_error}:http://internal.amazon.com/coral/"})  # fmt: skip
                    return
                if behaviour.status != 200:
                    self._send(behaviour.status, {"error": {"message": "fake failure"}})
                    return
                if self.path.endswith("/chat/completions"):  # OpenAI-compatible chat
                    answer = behaviour.chat_answers.pop(0) if behaviour.chat_answers else ""
                    if behaviour.raw_chat is not None:
                        self._send_raw(behaviour.raw_chat)
                        return
                    self._send(200, {"choices": [{"message": {"role": "assistant", "content": answer}}]})
                    return
                if self.path.endswith("/v1/messages"):  # Anthropic Messages
                    answer = behaviour.chat_answers.pop(0) if behaviour.chat_answers else ""
                    if behaviour.raw_chat is not None:
                        self._send_raw(behaviour.raw_chat)
                        return
                    self._send(200, {"id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"],
                                     "content": [{"type": "text", "text": answer}], "stop_reason": "end_turn",
                                     "usage": {"input_tokens": 10, "output_tokens": 10}})  # fmt: skip
                    return
                if self.path.startswith("/model/") and self.path.endswith("/converse"):  # Bedrock Converse
                    answer = behaviour.chat_answers.pop(0) if behaviour.chat_answers else ""
                    if behaviour.raw_chat is not None:
                        self._send_raw(behaviour.raw_chat)
                        return
                    self._send(200, {"output": {"message": {"role": "assistant", "content": [{"text": answer}]}},
                                     "stopReason": "end_turn", "metrics": {"latencyMs": 5},
                                     "usage": {"inputTokens": 10, "outputTokens": 10, "totalTokens": 20}})  # fmt: skip
                    return
                if self.path.startswith("/model/"):  # Bedrock InvokeModel: one text per call
                    text = body["inputText"]
                    if behaviour.raw_embeddings is not None:
                        self._send_raw(behaviour.raw_embeddings)
                        return
                    self._send(
                        200,
                        {
                            "embedding": behaviour.bedrock_embedding_of(text)
                            if behaviour.bedrock_embedding_of is not None
                            else self._vector(text, body.get("dimensions", behaviour.dimension)),
                            "inputTextTokenCount": len(text.split()),
                        },
                    )
                    return
                texts = body["input"]
                if behaviour.raw_embeddings is not None:
                    self._send_raw(behaviour.raw_embeddings)
                    return
                if behaviour.on_embed is not None:
                    behaviour.on_embed(texts)
                if behaviour.max_inputs is not None and len(texts) > behaviour.max_inputs:
                    self._send(400, {"detail": f"The batch size limit is {behaviour.max_inputs}."})
                    return
                if any(marker in text for marker in behaviour.reject_for for text in texts):
                    self._send(behaviour.reject_status, {"error": {"message": "fake rejection: input too long"}})
                    return
                if behaviour.drop_one:
                    texts = texts[:-1]
                index_of = behaviour.index_of or (lambda i, _: i)
                data = [
                    {
                        "object": "embedding",
                        "index": index_of(i, len(texts)),
                        "embedding": self._vector(t, behaviour.dimension),
                    }
                    for i, t in enumerate(texts)
                ]
                if behaviour.mangle is not None:
                    data = behaviour.mangle(len(behaviour.requests), data)
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": list(reversed(data)),
                        "model": behaviour.answer_model or body.get("model"),
                    },
                )

            def _vector(self, text: str, dimension: int) -> list[float]:
                extra = 1 if any(marker in text for marker in behaviour.wrong_dimension_for) else 0
                if any(marker in text for marker in behaviour.zero_for):
                    return [0.0] * dimension
                vector = vector_for(text, dimension + extra)
                for marker, value in behaviour.value_for.items():
                    if marker in text:
                        vector[0] = value
                return vector

            def _send_raw(self, raw: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self._record["answered"] = True  # before the bytes a client may act on at once (`_send`)
                self.wfile.write(raw)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(payload).encode()
                if behaviour.gzip:
                    self._send_gzip(status, raw)
                    return
                if behaviour.trickle_head:
                    self._send_trickled_head(status, raw)
                    return
                self.send_response(status)
                if behaviour.retry_after is not None:
                    self.send_header("Retry-After", behaviour.retry_after)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(behaviour.pad + len(raw)))
                self.end_headers()
                try:
                    if behaviour.trickle_s:
                        for _ in range(behaviour.pad):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(behaviour.trickle_s)
                    else:
                        self.wfile.write(b" " * behaviour.pad)
                    # marked before the last bytes go: a client that has read them may look at once (a flag set
                    # after the write raced a test reading it right after the client's call returned)
                    self._record["answered"] = True
                    self.wfile.write(raw)
                except OSError:  # the client gave up on the answer
                    pass

            def _send_trickled_head(self, status: int, raw: bytes) -> None:
                head = f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                self.close_connection = True  # the head is written here, not by the handler
                with contextlib.suppress(OSError):  # the client gave up on the answer
                    self.wfile.write(head.encode() + b"X-Padding: ")
                    for sent in range(1, behaviour.trickle_head + 1):
                        self.wfile.flush()
                        time.sleep(behaviour.trickle_s)
                        self.wfile.write(b"x")
                        self._record["head_sent"] = sent  # how much of the head the client waited for
                    self.wfile.write(b"\r\nConnection: close\r\n\r\n" + raw)
                    self._record["answered"] = True

            def _send_gzip(self, status: int, raw: bytes) -> None:
                deflate, spaces = zlib.compressobj(9, zlib.DEFLATED, 31), b" " * 65536  # 31: a gzip member
                pieces = [
                    deflate.compress(spaces[: min(65536, behaviour.pad - n)]) for n in range(0, behaviour.pad, 65536)
                ]
                body = b"".join(pieces) + deflate.compress(raw) + deflate.flush()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up on the answer
                    self.wfile.write(body)
                    self._record["answered"] = True

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeEmbeddings:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def down(self) -> None:
        """Stop answering at all (connection refused)."""
        self._server.shutdown()
        self._server.server_close()
