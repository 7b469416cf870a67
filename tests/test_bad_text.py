"""Text no store can keep is refused at the door (issue 26, bad input refused cleanly): a NUL character or a lone
surrogate in any query parameter or JSON field, and NaN or Infinity anywhere in a body, are a 422 naming the field
on both backends. On Postgres a NUL in a query or a correction's reason was a 500 (psycopg DataError), where
SQLite stored it in the event log; the Alertmanager webhook took a raw NaN and dropped the annotation."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError, InvalidInputError
from tests.serving import serving

NUL = "a\x00b"


@pytest.fixture
def keyed(grandbo):
    acme = grandbo.org("acme", create=True)
    acme.remember({"id": "KNOWN-1", "title": "checkout-api pool exhausted after a deploy"})
    return acme, acme.keys.create("admin", name="admin")[1]


def _refused(response, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_input" and error["remedy"]
    assert [problem["field"] for problem in error["detail"]["errors"]] == [field]
    assert "NUL" in error["message"] or "NaN" in error["message"] or "surrogate" in error["message"]


def test_a_nul_in_a_query_or_a_body_is_a_422_naming_the_field_on_both_backends(grandbo, keyed, backend):
    _, key = keyed
    with serving(grandbo) as served, served.client(key) as client:
        _refused(client.get("/v1/examples", params={"content_type": NUL}), "content_type")
        _refused(client.delete("/v1/memories/KNOWN-1", params={"reason": NUL}), "reason")
        _refused(client.post("/v1/memories/KNOWN-1/purge", params={"reason": NUL}), "reason")
        _refused(client.patch("/v1/memories/KNOWN-1", json={"reason": NUL, "title": "new title"}), "reason")
        _refused(client.post("/v1/memories", json={"title": "t", "meta": {"deep": [1, {"x": NUL}]}}), "meta.deep[1].x")
        _refused(client.post("/v1/incidents", json={"title": NUL}), "title")
        lone = b'{"title": "t", "services": ["a\\udc80"]}'
        _refused(
            client.post("/v1/incidents", content=lone, headers={"Content-Type": "application/json"}), "services[0]"
        )
        _refused(client.post("/v1/memories", content=b'{"title": "t", "meta": {"v": NaN}}',
                             headers={"Content-Type": "application/json"}), "body")  # fmt: skip
        # A plain escaped backslash is text like any other.
        fine = client.patch("/v1/memories/KNOWN-1", json={"reason": "C:\\u0000 is a path", "title": "new title"})
        assert fine.status_code == 200, fine.text


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-16"])
def test_a_json_body_in_utf_16_or_utf_32_is_checked_like_utf_8(grandbo, keyed, encoding):
    """JSON may be sent in UTF-16 or UTF-32, and the routes read it; the door's check for NaN, overflowing numbers
    and NUL read only UTF-8 bytes, so such a body passed it: a memory's own validator then refused NaN as "meta",
    and 1e400 as "NaN or Infinity", never naming the number. Now the door reads every encoding alike."""
    _, key = keyed
    json_type = {"Content-Type": "application/json"}
    with serving(grandbo) as served, served.client(key) as client:

        def post(text: str):
            return client.post("/v1/memories", content=text.encode(encoding), headers=json_type)

        _refused(post('{"title": "t", "meta": {"v": NaN}}'), "body")
        assert "1e400" in post('{"title": "t", "meta": {"v": 1e400}}').json()["error"]["message"]
        _refused(post('{"title": "t", "meta": {"deep": "a\\u0000b"}}'), "meta.deep")
        fine = post('{"title": "t é", "meta": {"v": 1.5}}')
        assert fine.status_code == 201 and fine.json()["title"] == "t é", fine.text


ALERT = {"status": "firing", "labels": {"alertname": "x y z"}, "startsAt": "2026-01-01T00:00:00Z"}


def test_the_alertmanager_webhook_refuses_nan_and_a_numeric_start(grandbo, keyed, backend):
    acme, key = keyed
    headers = {"Content-Type": "application/json"}
    nan = b'{"alerts":[{"status":"firing","labels":{"alertname":"x y z"},"annotations":{"v":NaN},' \
          b'"startsAt":"2026-01-01T00:00:00Z"}]}'  # fmt: skip
    numeric = json.dumps({"alerts": [{**ALERT, "startsAt": 99999999999}]}).encode()
    with serving(grandbo) as served, served.client(key) as client:
        refused = client.post("/v1/webhooks/alertmanager", content=nan, headers=headers)
        assert refused.status_code == 422 and "NaN" in refused.json()["error"]["message"]
        numbered = client.post("/v1/webhooks/alertmanager", content=numeric, headers=headers)
        assert numbered.status_code == 422 and "ISO 8601" in numbered.json()["error"]["message"]
        for start in ("-0", "2026-11-30T10:00:00+25:00", "yesterday"):  # kept silently, in the alert's id (probe 25)
            untimely = client.post("/v1/webhooks/alertmanager", json={"alerts": [{**ALERT, "startsAt": start}]})
            assert untimely.status_code == 422 and repr(start) in untimely.json()["error"]["message"], untimely.text
        good = client.post("/v1/webhooks/alertmanager", json={"alerts": [ALERT]})
        assert good.status_code == 202
    assert len(acme.alerts.recent()) == 1


def test_the_webhook_parser_itself_refuses_nan():
    from grandbo.errors import InvalidInputError
    from grandbo.ingest.adapters import parse

    with pytest.raises(InvalidInputError, match="NaN"):
        parse("alertmanager", b'{"alerts":[{"labels":{"alertname":"x"},"annotations":{"v":NaN}}]}')


def test_a_number_too_large_for_a_float_is_refused_like_infinity(grandbo, keyed, backend):
    # Failed before (probe26): Python reads 1e400 as Infinity; an Alertmanager annotation of 1e400 was kept as the
    # summary "inf" with a 202.
    from grandbo.ingest.adapters import parse

    acme, key = keyed
    huge = b'{"alerts":[{"status":"firing","labels":{"alertname":"x y z"},"annotations":{"summary":-1e400},' \
           b'"startsAt":"2026-01-01T00:00:00Z"}]}'  # fmt: skip
    with pytest.raises(InvalidInputError, match="1e400"):
        parse("alertmanager", huge)
    with serving(grandbo) as served, served.client(key) as client:
        refused = client.post("/v1/webhooks/alertmanager", content=huge, headers={"Content-Type": "application/json"})
        assert refused.status_code == 422 and "-1e400 (too large" in refused.json()["error"]["message"]
        # A body of JSON whose number has more digits than Python reads was "an error parsing the body" (400).
        digits = client.post("/v1/memories", content=b'{"title": "t", "meta": {"v": ' + b"9" * 5000 + b"}}",
                             headers={"Content-Type": "application/json"})  # fmt: skip
        assert digits.status_code == 422 and "5,000 digits" in digits.json()["error"]["message"], digits.text
        # 250 digits and a 2-digit exponent overflow too: named as the number, not "contains NaN or Infinity"
        long = client.post("/v1/memories", content=b'{"title": "t", "meta": {"v": ' + b"9" * 250 + b"e99}}",
                           headers={"Content-Type": "application/json"})  # fmt: skip
        assert long.status_code == 422 and "too large for a number" in long.json()["error"]["message"], long.text
        fine = client.post("/v1/memories", json={"title": "t", "meta": {"v": 1.5e300, "w": 12345678901234567890}})
        assert fine.status_code == 201, fine.text
    assert acme.alerts.recent() == []


def _with_nul(export: Path, marker: str) -> None:
    """The export as a store that kept a NUL (SQLite before this check) wrote it, with its checksum redone."""
    body = export.read_bytes().splitlines(keepends=True)[:-1]
    body = [line.replace(marker.encode(), b"a\\u0000b") for line in body]
    digest = hashlib.sha256(b"".join(body)).hexdigest()
    checksum = json.dumps({"checksum": {"sha256": digest, "lines": len(body)}}).encode() + b"\n"
    export.write_bytes(b"".join(body) + checksum)


def test_an_export_holding_a_nul_is_refused_by_line_and_the_library_refuses_one(grandbo, tmp_path, backend):
    acme = grandbo.org("acme", create=True)
    acme.remember({"id": "E-1", "title": "checkout-api pool exhausted after a deploy"})
    acme.correct("E-1", {"title": "checkout-api pool exhausted"}, reason="MARKER")
    acme.export_log(tmp_path / "log.jsonl")
    _with_nul(tmp_path / "log.jsonl", "MARKER")
    copy = grandbo.org("copy", create=True)
    with pytest.raises(ImportFormatError, match=r"line \d+ of .* NUL"):
        copy.import_log(tmp_path / "log.jsonl")
    assert copy.entries(include_inactive=True) == []
    for write in (
        lambda: acme.correct("E-1", {"title": "new"}, reason=NUL),
        lambda: acme.retire("E-1", reason=NUL),
        lambda: acme.purge("E-1", reason=NUL, actor="admin"),
        lambda: acme.remember({"title": "t", "meta": {"k": NUL}}),
    ):
        with pytest.raises(InvalidInputError, match="NUL"):
            write()
    assert [entry.title for entry in acme.entries()] == ["checkout-api pool exhausted"]


def test_import_events_of_a_nul_is_one_clean_line_not_a_traceback(cli, tmp_path):
    cli("orgs", "create", "acme")
    cli("remember", "--id", "E-1", "--title", "redis keys evicted under maxmemory", "--org", "acme")
    cli("retire", "E-1", "--reason", "MARKER", "--org", "acme")  # a reason: no entry check reads it on replay
    cli("export", str(tmp_path / "log.jsonl"), "--org", "acme")
    _with_nul(tmp_path / "log.jsonl", "MARKER")
    cli("orgs", "create", "copy")
    out = cli("import-events", str(tmp_path / "log.jsonl"), "--org", "copy", code=2)
    said = (out.stdout + out.stderr).strip()
    assert "Traceback" not in said and re.search(r"line \d+ of .* NUL", said), said


@pytest.mark.parametrize("started_at", [99999999999, "99999999999", 0, -1, 1.5, True])
def test_an_incident_start_is_iso_8601_only(grandbo, keyed, backend, started_at):
    """A number (or a string of digits) was read as seconds or milliseconds since 1970: 99999999999 became
    1973-03-03, stored with a 201."""
    _, key = keyed
    with serving(grandbo) as served, served.client(key) as client:
        response = client.post("/v1/incidents", json={"title": "t", "started_at": started_at})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["detail"]["errors"][0]["field"] == "started_at"
        assert "ISO 8601" in response.json()["error"]["message"]
        good = client.post("/v1/incidents", json={"title": "t", "started_at": "2026-01-01T00:00:00Z"})
        assert good.status_code == 201 and good.json()["started_at"].startswith("2026-01-01")
        assert len(client.get("/v1/incidents").json()["items"]) == 1
        tool = client.post("/v1/tools/open_incident", json={"title": "t", "started_at": started_at})  # MCP's tool
        assert tool.status_code == 422 and "ISO 8601" in tool.json()["error"]["message"], tool.text


@pytest.mark.parametrize("k", [True, "5", 5.0])
def test_recall_k_is_a_whole_number_not_a_boolean_or_a_string(grandbo, keyed, k):
    _, key = keyed
    with serving(grandbo) as served, served.client(key) as client:
        response = client.post("/v1/recall", json={"topic": "checkout-api pool exhausted", "k": k})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["detail"]["errors"][0]["field"] == "k"
        assert client.post("/v1/recall", json={"topic": "checkout-api pool exhausted", "k": 5}).status_code == 200
