"""Small edges a hostile-input probe found (probe 20b, its LOW list): each was answered, but wrongly or unclearly."""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest

from grandbo.errors import EntryStateError, InvalidInputError
from grandbo.ingest import adapters, changes
from grandbo.ingest.adapters import MAX_SENDER_ID
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent
from tests.serving import serving
from tests.test_webhooks import ALERTMANAGER, GRAFANA, OPSGENIE, PAGERDUTY


@pytest.mark.parametrize("status", ["RESOLVED", "Resolved"])
def test_an_alertmanager_resolve_in_capitals_is_a_resolve(status):
    """It was filed as firing, silently: only the exact "resolved" resolved."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"][0]["status"] = status
    (first, *_) = adapters.parse("alertmanager", json.dumps(body).encode())
    assert first.status == "resolved"


def test_a_sender_id_past_its_bound_is_refused_naming_it_and_ids_under_it_are_kept_as_sent():
    """A 1 MB Alertmanager fingerprint was stored whole (twice: the fingerprint and the event id) with the alert. Past
    MAX_SENDER_ID it is refused (cutting or hashing it would change the id of an alert stored with it: review)."""
    body = copy.deepcopy(ALERTMANAGER)
    body["alerts"][1]["fingerprint"] = "f" * 1_000_000
    with pytest.raises(InvalidInputError, match="alert 1's fingerprint is 1,000,000 characters"):
        adapters.parse("alertmanager", json.dumps(body).encode())
    body["alerts"][1]["fingerprint"] = "f" * MAX_SENDER_ID
    assert adapters.parse("alertmanager", json.dumps(body).encode())[1].fingerprint == "f" * MAX_SENDER_ID


def test_an_event_for_an_entry_the_org_lacks_names_the_verb_whole(grandbo):
    """`import-events` of an edited export said "No entry 'mem-x' in org 'gamma' to purg."."""
    memory = grandbo.org("acme", create=True)
    for kind, verb in ((EventType.PURGED, "purge"), (EventType.RETIRED, "retire"), (EventType.CORRECTED, "correct")):
        with pytest.raises(EntryStateError, match=f"to {verb}\\.$"):
            grandbo._store.append("acme", [NewEvent("mem-x", kind, {"reason": "r"}, "test", utcnow())])
    assert memory.org == "acme"


def test_an_empty_org_name_is_refused_not_read_as_the_default(cli):
    """`--org ''` (an unset shell variable) silently meant the default org."""
    result = cli("stats", "--org", "", code=2)
    assert "Invalid organization id ''" in result.stderr


def test_keys_revoke_of_a_3000_character_id_says_its_start_and_length_not_the_whole_id(cli):
    """The whole id was echoed in the error (3,032 characters on the terminal)."""
    cli("orgs", "create", "acme")
    refused = cli("keys", "revoke", "k" * 3000, "--org", "acme", code=2).stderr
    assert f"No key '{'k' * 60}…' (3,000 characters) in org 'acme'" in refused
    assert "grandbo keys list --org acme" in refused and len(refused) < 300
    short = cli("keys", "revoke", "0123456789ab", "--org", "acme", code=2).stderr
    assert "No key '0123456789ab' in org 'acme'" in short


@pytest.mark.parametrize(
    ("source", "path", "value", "named"),
    [
        ("opsgenie", ("alert", "alertId"), 12345, "alert.alertId must be a string, not a number (12345)"),
        ("opsgenie", ("alert", "message"), ["lag"], "alert.message must be a string, not a list"),
        ("opsgenie", ("action",), True, "action must be a string, not a boolean"),
        ("opsgenie", ("alert", "alias"), 7, "alert.alias must be a string, not a number"),
        ("pagerduty", ("event", "id"), 42, "event.id must be a string, not a number (42)"),
        ("pagerduty", ("event", "event_type"), {"t": 1}, "event.event_type must be a string, not an object"),
        ("pagerduty", ("event", "data", "title"), 5, "event.data.title must be a string, not a number"),
        ("pagerduty", ("event", "data", "incident_key"), 99, "event.data.incident_key must be a string"),
        ("alertmanager", ("alerts", 1, "fingerprint"), 123, "alerts[1].fingerprint must be a string"),
        ("alertmanager", ("alerts", 0, "status"), 1, "alerts[0].status must be a string"),
        ("grafana", ("alerts", 0, "fingerprint"), 5.5, "alerts[0].fingerprint must be a string"),
    ],
)
def test_a_webhook_field_of_the_wrong_type_is_named_not_reported_missing(source, path, value, named):
    """Opsgenie's `alertId` sent as a number was refused as "action, alert.alertId and alert.message are required"
    (it was there; read as absent), PagerDuty's `event.id` likewise; an Alertmanager fingerprint sent as a number
    was replaced by a digest of the labels, silently."""
    body = copy.deepcopy({"opsgenie": OPSGENIE, "pagerduty": PAGERDUTY, "grafana": GRAFANA}.get(source, ALERTMANAGER))
    *parents, last = path
    holder = body
    for step in parents:
        holder = holder[step]
    holder[last] = value
    with pytest.raises(InvalidInputError, match=re.escape(named)) as refused:
        adapters.parse(source, json.dumps(body).encode())
    assert "required" not in str(refused.value)


@pytest.mark.parametrize(
    ("source", "path", "value", "named"),
    [
        ("pagerduty", ("routing_key",), {"k": 1}, "event 0's routing_key must be text or a number, not an object"),
        ("pagerduty", ("payload", "summary"), ["x"], "event 0's payload.summary must be text or a number, not a list"),
        ("pagerduty", ("payload", "source"), True, "event 0's payload.source must be text or a number, not a boolean"),
        ("argocd", ("app",), {"name": "checkout"}, "item 0: `app` must be text or a number, not an object"),
        ("argocd", ("revision",), ["4c1e"], "item 0: `revision` must be text or a number, not a list"),
    ],
)
def test_a_change_field_of_the_wrong_type_is_named_not_reported_missing(source, path, value, named):
    """A PagerDuty change event's routing_key sent as an object was refused as "has no routing_key", an Argo CD
    `app` as an object as "has no `app` or no `revision`": both were there."""
    body = json.loads((Path(__file__).parent / "data" / "changes" / f"{source}.json").read_bytes())
    *parents, last = path
    holder = body
    for step in parents:
        holder = holder[step]
    holder[last] = value
    with pytest.raises(InvalidInputError, match=re.escape(named)):
        changes.parse(source, json.dumps(body).encode())


def test_a_rest_body_in_another_charset_is_said_not_utf8_with_the_byte_and_where(grandbo):
    """A body of Latin-1 bytes (`charset=latin-1`) was answered 400 "There was an error parsing the body", with the
    remedy for a body nested too deep. It says the byte, where, and to send UTF-8; UTF-8 of the same goes in."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    sent = {"title": "Café checkout timeouts", "body": "pool exhausted", "kind": "fact"}
    latin = json.dumps(sent, ensure_ascii=False).encode("latin-1")
    with serving(grandbo) as served, served.client(key) as client:
        refused = client.post("/v1/memories", content=latin,
                              headers={"Content-Type": "application/json; charset=latin-1"})  # fmt: skip
        error = refused.json()["error"]
        assert refused.status_code == 400 and error["type"] == "bad_request"
        at = latin.index(b"\xe9")
        assert error["message"] == f"The body is not UTF-8: byte 0xe9 at position {at} is not valid there."
        assert "UTF-8" in error["remedy"] and "nested" not in error["remedy"]
        assert error["detail"] == {"byte": "0xe9", "position": at}
        taken = client.post("/v1/memories", content=json.dumps(sent, ensure_ascii=False).encode(),
                            headers={"Content-Type": "application/json"})  # fmt: skip
        assert taken.status_code == 201, taken.text


def test_a_webhook_or_change_in_latin1_is_said_not_utf8_not_just_not_json():
    """Both said "the body is not valid JSON" of a body that was JSON, in another charset."""
    alert = copy.deepcopy(OPSGENIE)
    alert["alert"]["message"] = "Caché miss storm on orders"
    latin = json.dumps(alert, ensure_ascii=False).encode("latin-1")
    at = latin.index(b"\xe9")
    with pytest.raises(InvalidInputError, match=f"the body is not UTF-8: byte 0xe9 at position {at} is not valid"):
        adapters.parse("opsgenie", latin)
    change = json.dumps({"id": "c1", "service": "café", "at": "2026-01-01T00:00:00Z"}, ensure_ascii=False)
    at = change.index("é")
    with pytest.raises(
        InvalidInputError, match=f"not UTF-8: byte 0xe9 at position {at} is not valid.* encoded as UTF-8"
    ):
        changes.parse("generic", change.encode("latin-1"))


def test_vectors_of_1e308_are_dropped_and_embedded_again_without_a_numpy_warning(grandbo, tmp_path):
    """`import-events` of an export whose vectors held 1e308 printed numpy's "RuntimeWarning: overflow encountered in
    cast" on stderr (the cast made them Infinity, then dropped them); `import` of such a line stored it. Now they are
    found out of float32's range before any cast: dropped and embedded again, silently as intended."""
    import hashlib
    import warnings

    origin = grandbo.org("acme", create=True)
    origin.remember({"id": "E-1", "title": "checkout-api pool exhausted after a deploy"})
    origin.export_log(tmp_path / "log.jsonl")
    lines = (tmp_path / "log.jsonl").read_bytes().splitlines(keepends=True)[:-1]
    edited = []
    for line in lines:
        record = json.loads(line)
        if "vector" in record:
            record["vector"]["vector"] = [1e308] * len(record["vector"]["vector"])
            line = (json.dumps(record) + "\n").encode()
        edited.append(line)
    assert edited != lines
    checksum = {"checksum": {"sha256": hashlib.sha256(b"".join(edited)).hexdigest(), "lines": len(edited)}}
    (tmp_path / "huge.jsonl").write_bytes(b"".join(edited) + (json.dumps(checksum) + "\n").encode())
    copy = grandbo.org("copy", create=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = copy.import_log(tmp_path / "huge.jsonl")
    assert [str(w.message) for w in caught] == []
    assert report.vectors_kept == 0 and report.embedded == 1
    assert copy.vectors(["E-1"])["E-1"].tolist() == origin.vectors(["E-1"])["E-1"].tolist()  # embedded again
    origin.export_file(tmp_path / "entries.jsonl")  # `grandbo export --entries`: each entry with its vector
    (line,) = [json.loads(raw) for raw in (tmp_path / "entries.jsonl").read_text().splitlines()]
    line["embedding"]["vector"] = [1e308] * len(line["embedding"]["vector"])
    (tmp_path / "entries.jsonl").write_text(json.dumps(line) + "\n")
    again = grandbo.org("again", create=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = again.import_file(tmp_path / "entries.jsonl")
    assert [str(w.message) for w in caught] == [] and imported.imported == 1
    assert "within ±3.4e38" in imported.problems[0][1]
    assert again.vectors(["E-1"])["E-1"].tolist() == origin.vectors(["E-1"])["E-1"].tolist()


def test_a_vector_past_float32_is_no_vector_to_every_reader():
    from grandbo.embeddings.base import as_float32

    assert as_float32([1e308, 0.5]) is None and as_float32([float("nan")]) is None and as_float32([10**400]) is None
    assert as_float32([3e38, -1.0]).tolist() == pytest.approx([3e38, -1.0])


def _label_chars(source: str, body: dict[str, object]) -> int:
    """The characters of the labels (names and values) the delivery's first alert keeps."""
    return sum(
        len(name) + len(value) for name, value in adapters.parse(source, json.dumps(body).encode())[0].labels.items()
    )


@pytest.mark.parametrize("source", ["alertmanager", "grafana"])
def test_common_labels_copied_into_each_alert_past_the_bound_are_refused_naming_them(source):
    """commonLabels are copied into each alert of a delivery: 3,700 of them (3.7 MB) over 100 alerts stored 750 MB and
    took the server to 2.2 GB (probe 26). An alert's labels past MAX_LABEL_CHARS are refused; at it, kept whole."""
    body = copy.deepcopy(ALERTMANAGER if source == "alertmanager" else GRAFANA)
    body["alerts"] = body["alerts"][:1]  # one alert: its delivery is larger than its labels
    room = adapters.MAX_LABEL_CHARS - _label_chars(source, body)  # in labels of 1,000 characters, a value's most
    padding = {f"p{i:04d}": "v" * min(995, room - 1000 * i - 5) for i in range(-(-room // 1000))}
    body["commonLabels"] = body.get("commonLabels", {}) | padding
    assert _label_chars(source, body) == adapters.MAX_LABEL_CHARS
    body["commonLabels"]["one-more"] = "v"
    with pytest.raises(InvalidInputError, match=r"alerts\[0\]\.labels with commonLabels hold 65,545 characters"):
        adapters.parse(source, json.dumps(body).encode())


def test_a_delivery_whose_labels_outgrow_it_by_its_common_labels_is_refused_and_a_vendors_is_not():
    """Under the bound of one alert's labels, 114 KB of 500 resolved alerts under 63 common labels of 1,000
    characters stored 67 MB (probe 26): a delivery's labels, commonLabels copied into each alert, may not hold more
    characters than its bytes. Alertmanager's own deliveries repeat the common labels in each alert: never refused."""
    common = {"alertname": "DiskFull", "cluster": "c" * 900, "namespace": "n" * 900}
    alerts = [{"status": "resolved", "labels": common | {"instance": f"node-{i}"}, "fingerprint": f"f{i}"}
              for i in range(500)]  # fmt: skip
    sent = {"version": "4", "commonLabels": common, "alerts": alerts}
    assert len(adapters.parse("alertmanager", json.dumps(sent).encode())) == 500
    for alert in alerts:
        alert["labels"] = {"alertname": "DiskFull", "instance": alert["labels"]["instance"]}
    with pytest.raises(
        InvalidInputError, match=r"labels, commonLabels copied into each, hold 924,390 characters, more"
    ):
        adapters.parse("alertmanager", json.dumps(sent).encode())


def test_an_opsgenie_created_at_of_true_is_no_start_not_the_unix_epoch():
    """`"createdAt": true` was read as 1 epoch millisecond: the alert and its group started 1970-01-01 (probe 26),
    where every webhook reads the epoch as no time."""
    body = copy.deepcopy(OPSGENIE)
    body["alert"]["createdAt"] = True
    assert adapters.parse("opsgenie", json.dumps(body).encode())[0].started_at is None


def test_a_compressed_body_is_refused_naming_its_encoding_on_every_face_never_inflated(grandbo):
    """A gzip body was read as JSON and answered "not UTF-8: byte 0x8b" (REST 400, a webhook 422, MCP a parse error),
    which said nothing of the Content-Encoding (probe 26). It is refused (422) naming it, never inflated (no gzip bomb)."""
    memory = grandbo.org("gz", create=True)
    _, key = memory.keys.create("write")
    sent = {"/v1/memories": {"title": "zipped", "body": "a body sent compressed"},
            "/v1/webhooks/alertmanager": ALERTMANAGER, "/mcp": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}}  # fmt: skip
    with serving(grandbo) as served, served.client(key) as client:
        for path, body in sent.items():
            response = client.post(path, content=gzip.compress(json.dumps(body).encode()), headers={
                "Content-Type": "application/json", "Content-Encoding": "gzip",
                "Accept": "application/json, text/event-stream"})  # fmt: skip
            assert response.status_code == 422, (path, response.text)
            assert response.json()["error"]["detail"] == {"content_encoding": "gzip"}
        plain = client.post("/v1/memories", json=sent["/v1/memories"], headers={"Content-Encoding": "identity"})
    assert plain.status_code == 201
    assert [entry.title for entry in memory.entries()] == ["zipped"] and memory.alerts.recent() == []
