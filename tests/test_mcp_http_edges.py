"""`/mcp` over HTTP at its edges, on a real server (found by a hostile probe): an idle GET stream one key could
hold without bound, two Authorization headers read two ways, and a Host header that is not loopback refused."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.conftest import BACKENDS
from tests.serving import BOUND, Served, serving
from tests.test_webhooks import REDIS

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend of the module's one store (tests/conftest.py's `backend` is a test's)."""
    return str(request.param)


@pytest.fixture(scope="module")
def served(backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Served]:
    """One server for the module, as `grandbo serve` runs (a server each test took 1-2.5 s under load to start,
    25 of them): its tests ask, and none changes what another reads. A test that writes does so in an org of its
    own; the test of what starting a server does to logging starts one of its own."""
    database_url = str(request.getfixturevalue("pg_database")) if backend == "postgres" else None  # the module's
    settings = Settings(home=tmp_path_factory.mktemp("mcp-edges"), database_url=database_url)
    with Grandbo.init(settings, embedding="deterministic") as grandbo, serving(grandbo) as served:
        yield served


@pytest.fixture(scope="module")
def keys(served: Served) -> dict[str, str]:
    alpha, beta = served.grandbo.org("alpha", create=True), served.grandbo.org("beta", create=True)
    return {"alpha": alpha.keys.create("read")[1], "beta": beta.keys.create("admin")[1]}


def _headers(*keys: str, **more: str) -> list[tuple[str, str]]:
    return [("Accept", "application/json, text/event-stream"), *(("Authorization", f"Bearer {k}") for k in keys),
            *more.items()]  # fmt: skip


def test_a_get_stream_is_refused_at_once_not_held_open(served, keys):
    """The endpoint is stateless: a GET stream can never carry a message, yet it answered 200 and stayed open
    until the client left, uncounted; one read key held 999 against a server of 1,024 descriptors and another
    org's requests were cut off. It is a 405 now, in the API's error shape, and the connection is free again."""
    port = int(served.url.rsplit(":", 1)[1])
    held = []
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
            sock.sendall(f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {keys['alpha']}\r\n"
                         "Accept: text/event-stream\r\n\r\n".encode())  # fmt: skip
            held.append(sock)
        heads = [_head(sock) for sock in held]
    finally:
        for sock in held:
            sock.close()
    answer = httpx.get(f"{served.url}/mcp", headers=_headers(keys["alpha"]), timeout=BOUND)
    assert all(head.startswith(b"HTTP/1.1 405") for head in heads), heads[0]
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json()["error"]["type"] == "method_not_allowed" and "POST" in answer.json()["error"]["remedy"]


def _head(sock: socket.socket) -> bytes:
    sock.settimeout(BOUND)  # a head comes at once either way (a 405, or the 200 of a stream held open)
    head, started = b"", time.monotonic()
    while b"\r\n\r\n" not in head and time.monotonic() - started < BOUND:
        data = sock.recv(65536)
        if not data:
            break
        head += data
    return head


def test_two_authorization_headers_are_refused(served, keys):
    """The guard checked (and logged) one key, the tool acted with the other: beta's incident was written under
    alpha's name in the request log. Two are a 400 now, whichever they are."""
    both = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(keys["beta"], keys["alpha"]), timeout=BOUND)
    one = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(keys["beta"]), timeout=BOUND)
    assert both.status_code == 400 and both.json()["error"]["type"] == "invalid_input", both.text
    assert "one" in both.json()["error"]["remedy"]
    assert one.status_code == 200 and one.json()["result"]["tools"]


@pytest.mark.parametrize("host", ["grandbo.internal.example", "127.0.0.1", "10.0.0.7:8080"])
def test_any_host_header_reaches_the_tools_with_a_key(served, keys, host):
    """The SDK's DNS-rebinding guard answered 421 (plain text) to every Host but loopback with a port: behind a
    reverse proxy or on 0.0.0.0, /mcp refused all while /v1 answered. Every request needs a key first."""
    answered = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(keys["alpha"], Host=host), timeout=BOUND)
    refused = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(Host=host), timeout=BOUND)
    assert answered.status_code == 200 and answered.json()["result"]["tools"], answered.text
    assert refused.status_code == 401


def test_every_mcp_message_counts_against_the_keys_rate_limit(tmp_path):
    """Only tool calls took a token: `tools/list` and `ping` went uncounted (a hostile probe). Every message to
    `/mcp` now takes one, as every /v1 request does, and a tool call takes one, not two."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0.01, rate_limit_burst=3)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        key = grandbo.org("acme", create=True).keys.create("read")[1]
        other = grandbo.org("beta", create=True).keys.create("read")[1]
        third = grandbo.org("acme").keys.create("read")[1]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "query_org_memory", "arguments": {"topic": "checkout-api pool exhausted", "k": 1}},
        }
        with serving(grandbo) as served:
            answers = [httpx.post(f"{served.url}/mcp", json=message, headers=_headers(key), timeout=BOUND)
                       for message in (LIST, ping, LIST, ping)]  # fmt: skip
            beta = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(other), timeout=BOUND)
            calls = [
                httpx.post(f"{served.url}/mcp", json=call, headers=_headers(third), timeout=BOUND) for _ in range(3)
            ]
    assert [answer.status_code for answer in calls] == [200, 200, 200]  # one token each, not two
    assert not any(answer.json()["result"]["isError"] for answer in calls)
    assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
    assert answers[-1].json()["error"]["type"] == "rate_limited" and int(answers[-1].headers["retry-after"]) >= 1
    assert beta.status_code == 200


def test_an_oversized_message_without_a_length_is_a_413_in_the_error_shape(served, keys):
    """A body sent in chunks (no Content-Length) passed the API's limit to the SDK, whose own 413 was plain text
    (and came only past 4 MiB, where a body with a length was refused past 1 MiB)."""

    def chunks():
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "'
        for _ in range(20):
            yield b"x" * 65_536
        yield b'"}}'

    response = httpx.post(f"{served.url}/mcp", content=chunks(), timeout=BOUND,
                          headers=_headers(keys["alpha"], **{"Content-Type": "application/json"}))  # fmt: skip
    after = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(keys["alpha"]), timeout=BOUND)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["type"] == "payload_too_large"
    assert after.status_code == 200 and after.json()["result"]["tools"]


def test_a_json_rpc_batch_is_refused_in_one_sentence(served, keys):
    """Probe 19: a batch (an array of messages) was answered 400 with pydantic's report of four validation errors
    of a union it tried; MCP takes no batch since 2025-06-18. A 400 in the error shape saying what to send."""
    batch = httpx.post(f"{served.url}/mcp", json=[LIST, LIST], headers=_headers(keys["alpha"]), timeout=BOUND)
    one = httpx.post(f"{served.url}/mcp", json=LIST, headers=_headers(keys["alpha"]), timeout=BOUND)
    assert batch.status_code == 400 and batch.json()["error"]["type"] == "invalid_input", batch.text
    assert "a POST of its own" in batch.json()["error"]["remedy"] and "validation error" not in batch.text
    assert one.status_code == 200 and one.json()["result"]["tools"]


def test_a_refused_call_names_a_few_unknown_arguments_and_cuts_an_unknown_tools_name_short(served, keys):
    """Probe 23c: a call with 70,000 arguments no tool takes (900 KB, under the body's bound) was answered with every
    name, 689 KB; a call of a tool named by 1 MB of text echoed it whole. A few names, each cut short, now. (Since
    probe 27 a message of over 10,000 values is refused before it is read: 4,000 arguments here.)"""

    def call(name: str, arguments: dict[str, object]) -> str:
        message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        answer = httpx.post(f"{served.url}/mcp", json=message, headers=_headers(keys["alpha"]), timeout=30)
        assert answer.status_code == 200 and answer.json()["result"]["isError"], answer.text[:300]
        return str(answer.json()["result"]["content"][0]["text"])

    extra = call("query_org_memory", {"topic": "a", **{f"k{n}": 0 for n in range(4_000)}, "x" * 5000: 1})
    unknown = call("q" * 500_000, {})
    assert len(extra) < 1000 and "`k0`" in extra and "and 3996 more" in extra and "send only `topic`" in extra, extra[
        :300
    ]
    assert len(unknown) < 300 and "(500000 characters)" in unknown and "tools/list" in unknown, unknown[:300]


def test_prompts_get_is_refused_in_one_sentence_and_nothing_draws_a_traceback(served, keys, capfd):
    """Probe 20b: the SDK set the root logger up with a Rich handler, and `prompts/get` of any name raised into it:
    a boxed, highlighted traceback drawn on the event loop for each call (1-6 s, every org's requests waiting), with
    a read key. No prompt is offered: -32602 in one sentence; the root logger is as Grandbo left it."""
    import logging

    before = logging.getLogger().handlers[:]
    with serving(served.grandbo) as own:  # a server started here: what starting one does is looked at too
        body = {"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "x" * 500}}
        answers = [httpx.post(f"{own.url}/mcp", json=body, headers=_headers(keys["alpha"]), timeout=BOUND)
                   for _ in range(3)]  # fmt: skip
    assert logging.getLogger().handlers == before
    for answer in answers:
        error = answer.json()["error"]
        assert error["code"] == -32602 and "tools/list" in error["message"] and len(error["message"]) < 200, error
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("given", [None, 1.5, {"a": 1}, True])
def test_a_request_whose_id_is_no_id_gets_a_json_rpc_error_not_a_silent_202(served, keys, given):
    """Probe 20b: a `tools/call` with `id` null, 1.5 or an object was read by the SDK as a notification: 202, an
    empty body, the call never run, and the client waited for an answer for ever."""
    call = {"jsonrpc": "2.0", "id": given, "method": "tools/call",
            "params": {"name": "query_org_memory", "arguments": {"topic": "redis evictions under memory pressure"}}}  # fmt: skip
    answer = httpx.post(f"{served.url}/mcp", json=call, headers=_headers(keys["alpha"]), timeout=BOUND)
    fine = httpx.post(f"{served.url}/mcp", json={**call, "id": "c-1"}, headers=_headers(keys["alpha"]), timeout=BOUND)
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["id"] is None and body["error"]["code"] == -32600
    assert (
        "is not a string or an integer" in body["error"]["message"]
        and "Send the request again" in body["error"]["message"]
    )
    assert fine.status_code == 200 and fine.json()["id"] == "c-1" and "result" in fine.json()


def test_a_message_that_is_not_json_or_no_object_is_answered_in_json_rpc(served, keys):
    post = lambda body: httpx.post(f"{served.url}/mcp", content=body, timeout=BOUND,  # noqa: E731
                                   headers=_headers(keys["alpha"], **{"Content-Type": "application/json"}))  # fmt: skip
    broken, number = post(b"{not json"), post(b"42")
    notification = post(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700 and broken.json()["id"] is None
    assert number.status_code == 400 and number.json()["error"]["code"] == -32600
    assert notification.status_code == 202  # a real notification is still one


STDIO_LINES = [
    '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},'
    '"clientInfo":{"name":"probe","version":"1"}}}',
    '{"jsonrpc":"2.0","method":"notifications/initialized"}',
    "not json",
    "[1,2]",
    '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"query_org_memory",'
    '"arguments":{"topic":"\\ud800 lone surrogate in a topic"}}}',
    '{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":6,"method":"no/such","params":[1]}',
    '{"jsonrpc":"2.0","id":9,"method":"tools/list"}',
]


def test_grandbo_mcp_over_stdio_answers_every_line_it_cannot_take(served, keys):
    """Probe 20b: a line that is not JSON, a batch and a lone surrogate escape got nothing at all on stdout (the SDK's
    reader logged them and went on), a null id was read as a notification, and a request whose params are no object
    was dropped as well: an agent waited for ever. Each gets its JSON-RPC error, in order, and the next request is
    answered as ever."""
    import json
    import os
    import subprocess
    import sys

    settings = served.grandbo.settings
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_API_KEY": keys["alpha"]}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    # As an MCP client does, stdin stays open until the answers came (a pipe that closes: the test below)
    server = subprocess.Popen([sys.executable, "-m", "grandbo", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, text=True)  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("\n".join(STDIO_LINES) + "\n")
    server.stdin.flush()
    lines = [server.stdout.readline() for _ in range(7)]  # the pytest timeout bounds a server that never answers
    server.stdin.close()
    stderr = server.stderr.read() if server.stderr is not None else ""
    server.wait(timeout=60)
    answers = [json.loads(line) for line in lines if line.strip()]
    said = {answer.get("error", {}).get("message", str(answer["id"])).split(" (")[0]: answer for answer in answers}
    assert len(answers) == 7 and answers[0]["id"] == 0 and "result" in answers[0], lines
    for message, given, code in [
        ("Parse error: the message is not JSON", None, -32700),
        ("Invalid Request: a JSON-RPC batch", None, -32600),
        ("Parse error: the message holds a lone surrogate", 5, -32700),
        ("Invalid Request: the id null is not a string or an integer, so no answer could name it", None, -32600),
        ("Invalid Request: params must be an object", 6, -32600),  # before: nothing (the SDK's reader dropped it)
    ]:
        assert said[message]["id"] == given and said[message]["error"]["code"] == code, said
    assert said["9"]["result"]["tools"] and stderr == ""


def _call(params, id_=1, method="tools/call"):  # type: ignore[no-untyped-def]
    return {"jsonrpc": "2.0", "id": id_, "method": method, **({} if params is None else {"params": params})}


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (_call({"name": "query_org_memory", "arguments": ["redis"]}), "params.arguments must be an object"),
        (_call({"name": 5, "arguments": {}}), "params.name must be a string"),
        (_call(None, method="initialize"), "Invalid params for initialize: params is required"),
    ],
)
def test_params_a_method_does_not_take_are_named_with_what_to_send(served, keys, message, said):
    """Probe 20b: the SDK answered each -32602 "Invalid request parameters" with `data: ""`, naming neither the param
    nor what to send. The answer is still the request's error (200, its id); it names the param and the remedy."""
    answer = httpx.post(f"{served.url}/mcp", json=message, headers=_headers(keys["alpha"]), timeout=BOUND)
    assert answer.status_code == 200 and answer.json()["id"] == 1, answer.text
    error = answer.json()["error"]
    assert error["code"] == -32602 and said in error["message"] and "Send " in error["message"], error
    assert "data" not in error  # no empty data


@pytest.mark.parametrize("version", ["1999-01-01", "not-a-version"])
def test_an_unsupported_protocol_version_is_refused_naming_the_versions_spoken(served, keys, version):
    """Probe 20b: an MCP-Protocol-Version header of no version this server speaks was answered with a message about
    `params._meta` (the SDK took the request for a 2026 one): a 400 (the spec's) saying which versions it speaks."""
    post = lambda given: httpx.post(f"{served.url}/mcp", json=LIST, timeout=BOUND,  # noqa: E731
                                    headers=_headers(keys["alpha"], **{"MCP-Protocol-Version": given}))  # fmt: skip
    refused, spoken = post(version), post("2025-06-18")
    assert refused.status_code == 400 and refused.json()["id"] == 1, refused.text
    error = refused.json()["error"]
    assert error["code"] == -32022 and "_meta must be" not in error["message"]
    assert "2025-11-25" in error["message"] and "Send the version initialize agreed on" in error["message"]
    assert error["data"] == {"supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"],
                             "requested": version}  # fmt: skip
    assert spoken.status_code == 200 and spoken.json()["result"]["tools"]


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_every_method_but_post_is_a_405_in_one_shape(served, keys, method):
    """Probe 20b: GET answered in Grandbo's error shape, DELETE in JSON-RPC's, and PUT named GET and DELETE allowed.
    The endpoint is stateless, so it offers no stream (GET) and no session to end (DELETE): each is the spec's 405,
    `Allow: POST`, in the API's error shape, with or without a key."""
    answers = [httpx.request(method, f"{served.url}/mcp", headers=_headers(*given), timeout=BOUND)
               for given in ([keys["alpha"]], [])]  # fmt: skip
    for answer in answers:
        assert answer.status_code == 405 and answer.headers["allow"] == "POST", answer.text
        error = answer.json()["error"]
        assert error["type"] == "method_not_allowed" and "POST" in error["remedy"] and method in error["message"]


def test_grandbo_mcp_over_stdio_says_a_request_before_initialize_waits_for_it(served, keys):
    """The SDK answered a request before the session's initialize -32602 "Invalid request parameters", `data: ""`."""
    import json
    import os
    import subprocess
    import sys

    settings = served.grandbo.settings
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_API_KEY": keys["alpha"]}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    lines = [json.dumps(_call(None, 7, "tools/list")), STDIO_LINES[0], STDIO_LINES[1],
             json.dumps(_call({"name": "query_org_memory", "arguments": ["x"]}, 8)), STDIO_LINES[-1]]  # fmt: skip
    server = subprocess.Popen([sys.executable, "-m", "grandbo", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, text=True)  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("\n".join(lines) + "\n")
    server.stdin.flush()
    answers = [json.loads(server.stdout.readline()) for _ in range(4)]
    server.stdin.close()
    server.wait(timeout=60)
    by_id = {answer["id"]: answer for answer in answers}
    assert by_id[7]["error"]["code"] == -32602 and "Send initialize first" in by_id[7]["error"]["message"]
    assert "data" not in by_id[7]["error"] and "result" in by_id[0]
    assert "params.arguments must be an object" in by_id[8]["error"]["message"] and by_id[9]["result"]["tools"]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"id": 1, "method": "ping"}', '"jsonrpc" is missing'),
        (b'{"jsonrpc": 2, "id": 1, "method": "ping"}', '"jsonrpc" must be "2.0", not 2'),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', '"method" must be a string naming the method'),
        (b'{"jsonrpc": "2.0", "method": {"a": 1}}', '"method" must be a string naming the method'),
        (b'{"jsonrpc": "2.0", "id": 1}', 'it has no "method" (a request or a notification)'),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "no/such", "params": 5}', "params must be an object"),
        (b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 1, "method": "ping"}', "starts with a byte order mark"),
    ],
)
def test_an_object_that_is_no_json_rpc_message_is_told_what_to_send(served, keys, body, said):
    """Probe 27: the SDK answered each with pydantic's report of 4-7 validation errors of a union of four message
    types (links to pydantic's site, the input echoed), as -32602; a byte order mark with "expected value at line 1
    column 1". Failed before: one sentence saying what is wrong and the shape to send, -32600 (-32700: the mark)."""
    answer = httpx.post(f"{served.url}/mcp", content=body, timeout=BOUND,
                        headers=_headers(keys["alpha"], **{"Content-Type": "application/json"}))  # fmt: skip
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["code"] == (-32700 if body[:1] == b"\xef" else -32600), answer.text
    assert said in error["message"] and "Send one JSON-RPC message: a JSON object" in error["message"], answer.text
    assert "validation error" not in answer.text.lower() and "pydantic" not in answer.text


def test_grandbo_mcp_fed_a_pipe_answers_every_request_before_it_exits(served):
    """`printf '<initialize>\\n<initialized>\\n<tools/call>\\n' | grandbo mcp` ended at its input's end with the
    last call still running, cancelled by the SDK as its input ended: the call got no answer at all. Every request
    read is answered, in full, before the server exits 0; one the client cancelled is not waited for (it gets none)."""
    import json
    import os
    import subprocess
    import sys

    settings, gamma = served.grandbo.settings, served.grandbo.org("gamma", create=True)  # its memory its own
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_API_KEY": gamma.keys.create("read")[1]}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    gamma.remember(REDIS)
    lines = [STDIO_LINES[0], STDIO_LINES[1], json.dumps(_call({"name": "query_org_memory",
             "arguments": {"topic": "redis connection resets while keys are evicted", "k": 3}}, 4))]  # fmt: skip
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
    piped = [*lines, json.dumps(_call({}, 5, "tools/list")), json.dumps(cancel)]

    def run(given):  # type: ignore[no-untyped-def]
        done = subprocess.run([sys.executable, "-m", "grandbo", "mcp"], input="\n".join(given) + "\n", env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", done
        return {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines()) if "id" in answer}

    answers = run(lines)
    assert sorted(answers) == [0, 4], answers
    assert answers[4]["result"]["structuredContent"]["memories"][0]["id"] == "INC-044-F1", answers[4]
    assert sorted(run(piped))[:2] == [0, 4]  # 5, cancelled, may have been answered before its cancel was read
    # a 2026-07-28 session: its listen stream is answered only as it closes (the client's disconnect ends it)
    envelope = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
                          "io.modelcontextprotocol/clientCapabilities": {}}}  # fmt: skip
    modern = [json.dumps(_call({**envelope, "notifications": {}}, 1, "subscriptions/listen")),
              json.dumps(_call(envelope, 2, "tools/list"))]  # fmt: skip
    assert run(modern)[2]["result"]["tools"]


def test_grandbo_mcp_waits_at_most_answers_wait_s_at_the_end_of_its_input_for_a_call_still_running(served, keys):
    """`stdio.ANSWERS_WAIT_S`: the end of stdin waits for the answers of the calls still running that long at most,
    then cancels them, says so on stderr and exits; without the bound, a call that never ended kept the process
    alive for ever. Here a call waits for the store's write lock, which the test holds past the bound (set to 1 s
    in the server's process: 300 s is no time for a test), and lets go once the bound is said."""
    import json
    import os
    import subprocess
    import sys

    from tests.test_server_errors import file_locked

    settings = served.grandbo.settings
    if settings.database_url:
        pytest.skip("the write lock the test holds is the embedded store's")
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_API_KEY": keys["beta"]}
    bounded = "import sys; from grandbo.mcp import stdio; stdio.ANSWERS_WAIT_S = 1.0; import grandbo.__main__"
    server = subprocess.Popen([sys.executable, "-c", bounded, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, text=True)  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(f"{STDIO_LINES[0]}\n{STDIO_LINES[1]}\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 0  # its store open, its session initialized
    with file_locked(settings):  # the call waits for it for SQLite's busy timeout (10 s), then fails
        server.stdin.write(json.dumps(_call({"name": "open_incident", "arguments": {"title": "disk full"}}, 3)) + "\n")
        server.stdin.close()
        said = server.stderr.readline()  # before: "", the call's failure answered once the lock's wait ended
    stdout, stderr = server.stdout.read(), server.stderr.read()
    server.wait(timeout=60)
    assert said == "grandbo mcp: input ended; requests unanswered after 1 s were cancelled\n", (said, stderr)
    assert stdout == "" and stderr == "" and server.returncode == 0, (stdout, stderr, server.returncode)


def test_a_message_not_sent_as_json_or_with_an_overlong_id_gets_a_json_rpc_error_saying_what_to_send(served, keys):
    """A probe's LOWs: a body sent as text/plain, or with no Content-Type, got the SDK's 400 "Invalid Content-Type
    header" in plain text, which a JSON-RPC client cannot read; a request's 1 MB string id came back whole in its
    answer. Failed before: each is now a JSON-RPC error saying what to send, the long id not repeated (-32600)."""
    import json

    body = json.dumps(LIST)
    post = lambda content, **more: httpx.post(f"{served.url}/mcp", content=content, timeout=BOUND,  # noqa: E731
                                              headers=_headers(keys["alpha"], **more))  # fmt: skip
    plain, bare = post(body, **{"Content-Type": "text/plain"}), post(body)
    long = post(json.dumps({**LIST, "id": "x" * 1_000_000}), **{"Content-Type": "application/json"})
    fine = post(json.dumps({**LIST, "id": "x" * 256}), **{"Content-Type": "application/json; charset=utf-8"})
    for answer, sent in ((plain, 'sent as "text/plain"'), (bare, "sent without a Content-Type")):
        assert answer.status_code == 415 and answer.headers["content-type"] == "application/json", answer.text
        error = answer.json()["error"]
        assert answer.json()["id"] is None and error["code"] == -32600 and sent in error["message"], error
        assert "Send it with the header Content-Type: application/json" in error["message"]
    assert long.status_code == 400 and len(long.content) < 1000, long.text[:300]
    assert long.json()["id"] is None and long.json()["error"]["code"] == -32600
    assert "the id is 1,000,000 characters long, more than the 256" in long.json()["error"]["message"]
    assert fine.status_code == 200 and fine.json()["id"] == "x" * 256 and fine.json()["result"]["tools"]
