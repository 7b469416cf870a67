"""A request the HTTP parser refuses gets a 400 that says what is wrong with it, on a real server with raw sockets.

uvicorn drops httptools' reason ("Invalid character in Content-Length"): every such 400 said a header or the request
line held a byte HTTP/1.1 does not allow, and to send header values of printable characters, whatever was wrong.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tests.test_http_bounds import WAIT_S, _port, _served

HEAD = b"POST /v1/memories HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
TLS_HELLO = bytes.fromhex("16030100c8010000c40303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00"  # its beginning

CASES = {  # what was sent: words the message says, words the remedy says, the parser's reason
    "a Content-Length that is no number": (
        HEAD + b"Content-Length: 2x\r\n\r\n{}",
        "Content-Length is not one number",
        "decimal digits",
        "Invalid character in Content-Length",
    ),
    "two Content-Lengths": (
        HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        "Content-Length is not one number",
        "a single Content-Length",
        "Duplicate Content-Length",
    ),
    "Content-Length with Transfer-Encoding": (
        HEAD + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "both a Content-Length and a Transfer-Encoding",
        "Send one of them",
        "Transfer-Encoding can't be present with Content-Length",
    ),
    "a Transfer-Encoding that is not chunked": (
        HEAD + b"Transfer-Encoding: gzip\r\n\r\n{}",
        "does not end with chunked",
        "Transfer-Encoding: chunked",
        None,
    ),
    "TLS to the plain-HTTP port": (TLS_HELLO, "TLS handshake", "http://", "Invalid method encountered"),
}


def _refused(port: int, sent: bytes) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), WAIT_S) as sock:
        sock.sendall(sent)
        answer = b""
        while more := sock.recv(65536):  # to its end: the connection is closed after it
            answer += more
    got, _, body = answer.partition(b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in got.lower(), answer[:300]
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["type"] == "bad_request"
    return error


@pytest.mark.parametrize("case", list(CASES))
def test_a_request_the_parser_refuses_is_told_what_is_wrong_with_it(tmp_path, case):
    sent, says, remedy, reason = CASES[case]
    with _served(tmp_path) as (served, _):
        error = _refused(_port(served), sent)
    assert says in error["message"], error
    assert remedy in error["remedy"] and "printable characters" not in error["remedy"], error
    if reason is not None:
        assert error["detail"]["parser"] == reason


def test_a_header_byte_the_parser_refuses_is_still_told_as_one_with_its_reason(tmp_path):
    with _served(tmp_path) as (served, _):
        error = _refused(_port(served), b"GET /v1/stats HTTP/1.1\r\nHost: x\r\nX-Trace: a\x01b\r\n\r\n")
    assert error["message"].startswith("Invalid HTTP request: its line or a header")
    assert "printable characters" in error["remedy"]
    assert error["detail"] == {"parser": "Invalid header value char"}
