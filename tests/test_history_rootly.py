"""The Rootly reader: pages of `GET /v1/incidents` (JSON:API) to HistoricIncidents.

Payloads in tests/data/history/rootly/ follow Rootly's documented response shapes (NOTE.md there says which).
"""

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricFinding, HistoricIncident, Skipped
from grandbo.history.sources.rootly import READER
from tests.history_shapes import check_any_value_anywhere_is_read_or_refused, read_and_peak

DATA = Path(__file__).parent / "data" / "history" / "rootly"
PAGES = DATA / "incidents_pages.json"
PACIFIC = timezone(timedelta(hours=-7))


def read(path):
    return list(READER.read(path))


def resource(number, **attributes):
    base = {"title": f"incident {number}", "status": "resolved", "created_at": "2025-01-01T00:00:00.000Z"}
    return {"id": f"00000000-0000-4000-8000-{number:012d}", "type": "incidents", "attributes": {**base, **attributes}}


def page(tmp_path, *data, name="page.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"data": list(data), "links": {}, "meta": {"current_page": 1}}))
    return path


def test_every_attribute_of_an_incident_is_mapped():
    first = read(PAGES)[0]
    assert isinstance(first, HistoricIncident)
    assert (first.source, first.source_id) == ("rootly", "d3b07384-d9a0-4f5c-9a1e-2c1f0f3e7a01")
    assert first.location == "page 1, data[0]"
    assert first.url == "https://rootly.com/account/incidents/318-login-failures-after-session-store-failover"
    assert first.title == "Login failures after session store failover"
    assert first.summary == "Users were logged out and could not log in for 27 minutes."
    assert (first.status, first.severity) == ("resolved", "SEV1")  # the severity resource's name
    assert first.services == ["auth-service", "session-store"]
    # environments, incident types, functionalities, teams, then the key/value labels as `key:value`
    assert first.labels == ["Production", "Security Adjacent", "Login", "Identity", "platform:web", "region:us-west-2"]


def test_times_and_the_time_to_mitigate_keep_their_zone():
    first = read(PAGES)[0]
    assert first.started_at == datetime(2025, 4, 2, 10, 15, tzinfo=PACIFIC)
    assert first.resolved_at == datetime(2025, 4, 2, 11, 30, tzinfo=PACIFIC)
    assert first.time_to_mitigate_s == 27 * 60  # mitigated_at 10:42 - started_at 10:15


def test_messages_action_items_the_retrospective_and_its_sections_and_events_are_kept():
    first = read(PAGES)[0]
    assert first.findings == [
        HistoricFinding(
            kind="remediation", text="Pinned sessions to the new primary and flushed the stale replica cache."
        ),
        HistoricFinding(
            kind="remediation", text="Raised the failover health-check threshold so a slow primary is not demoted."
        ),
        HistoricFinding(
            kind="action", text="Add session-store failover to the quarterly drill: Include a stale-replica case."
        ),
        # the retrospective's sections under finding headings
        HistoricFinding(kind="cause", text="The failover promoted a replica that still served stale session keys."),
        HistoricFinding(kind="lesson", text="Failover drills must include the session store."),
    ]
    assert first.postmortem.startswith("## Root cause\nThe failover promoted a replica")
    assert first.notes == [
        "2025-04-02T10:19:00.000-07:00: Login error rate at 64%",  # events in time order, not as listed
        "2025-04-02T10:41:00.000-07:00: Sessions pinned to new primary",
        "Retrospective: https://rootly.com/account/incidents/318/retrospective",
    ]


def test_a_plain_severity_name_the_short_url_and_missing_times():
    plain = read(PAGES)[1]
    assert (plain.severity, plain.url, plain.status) == ("SEV3", "https://root.ly/z9y8x7", "mitigated")
    # No started_at nor detected_at: unknown (created_at is when the record was made, not when it started).
    assert (plain.started_at, plain.resolved_at, plain.time_to_mitigate_s) == (None, None, None)
    assert (plain.summary, plain.services, plain.labels, plain.findings) == ("", [], [], [])


def test_detected_and_closed_times_stand_in_for_missing_start_and_resolve(tmp_path):
    path = page(tmp_path, resource(1, detected_at="2025-02-01T10:00:00Z", closed_at="2025-02-01T12:00:00Z"))
    (only,) = read(path)
    assert only.started_at == datetime(2025, 2, 1, 10, tzinfo=UTC)
    assert only.resolved_at == datetime(2025, 2, 1, 12, tzinfo=UTC)


def test_another_resource_type_test_incidents_and_duplicates_are_skipped_not_refused(tmp_path):
    # Fails on the old reader, which refused them (and so made the import exit 1).
    assert read(PAGES)[2] == Skipped(
        location="page 2, data[0]",
        reason="a resource of type 'alerts', not an incident: export `GET /v1/incidents`, not another list",
    )
    path = page(
        tmp_path,
        resource(1, kind="test"),
        resource(2, kind="normal"),
        {"id": "3", "type": "incidents"},
        resource(4, duplicate_incident_id="00000000-0000-4000-8000-000000000002"),
    )
    test, real, bare, duplicate = read(path)
    assert [type(r).__name__ for r in (test, real, bare, duplicate)] == [
        "Skipped",
        "HistoricIncident",
        "Refusal",
        "Skipped",
    ]
    assert duplicate.location == "data[3]"
    assert "a duplicate of incident 00000000-0000-4000-8000-000000000002" in duplicate.reason
    assert test.location == "data[0]" and "a test incident" in test.reason
    assert real.source_id.endswith("000000000002")
    assert bare.location == "data[2]" and "`attributes`" in bare.reason


def test_an_optional_field_of_the_wrong_type_is_read_as_absent_and_said(tmp_path):
    # Fails on the old reader, which read them as absent without a word.
    odd = resource(1, severity=["SEV1"], services="checkout", started_at=1735689600, labels=[{"name": "db"}, True])
    (only,) = read(page(tmp_path, odd))
    assert isinstance(only, HistoricIncident)
    assert (only.severity, only.services, only.started_at, only.labels) == ("", [], None, ["db"])
    assert only.ignored == [
        "attributes.started_at: a number (1735689600), not a time",
        "attributes.severity: a list, not a name or an object",
        "attributes.services: a string, not a list",
        "attributes.labels[1]: true/false, not a string or an object",
    ]


def test_one_page_and_json_lines_of_pages_read_the_same(tmp_path):
    pages = json.loads(PAGES.read_text())
    one = tmp_path / "one.json"
    one.write_text(json.dumps(pages[0]))
    assert [r.location for r in read(one)] == ["data[0]", "data[1]"]
    lines = tmp_path / "pages.ndjson"
    lines.write_text("\n".join(json.dumps(p) for p in pages))
    assert [r.model_dump() for r in read(lines)] == [r.model_dump() for r in read(PAGES)]


def test_events_and_action_items_may_be_whole_api_answers_or_flat(tmp_path):
    event = {"event": "paged the database team", "occurred_at": "2025-02-01T10:05:00Z"}
    item = {"summary": "add a replica lag alert"}
    path = page(
        tmp_path,
        resource(1, events={"data": [{"id": "e", "type": "incident_events", "attributes": event}]},
                 action_items={"data": [{"id": "a", "type": "incident_action_items", "attributes": item}], "meta": {}}),
        resource(2, timeline=[event], action_items=[item]),
    )  # fmt: skip
    answers, flat = read(path)
    assert answers.notes == flat.notes == ["2025-02-01T10:05:00Z: paged the database team"]
    assert answers.findings == flat.findings == [HistoricFinding(kind="action", text="add a replica lag alert")]


def test_labels_as_a_list_and_flattened_related_resources_are_read(tmp_path):
    path = page(
        tmp_path, resource(1, labels=[{"name": "p1"}, "db"], services=[{"name": "api"}], severity={"name": "High"})
    )
    (only,) = read(path)
    assert (only.labels, only.services, only.severity) == (["p1", "db"], ["api"], "High")


@pytest.mark.parametrize(
    ("content", "said"),
    [("id,title\n1,x", "is not JSON"), ("", "is empty"), ("null", "bare JSON null")],
)
def test_a_file_that_is_not_an_incidents_answer_is_one_clear_error(tmp_path, content, said):
    path = tmp_path / "export.json"
    path.write_text(content)
    with pytest.raises(ImportFormatError) as caught:
        read(path)
    assert said in caught.value.message and "GET /v1/incidents" in caught.value.message


def test_a_page_without_data_is_refused(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"errors": [{"title": "Unauthorized"}]}))
    (refused,) = read(path)
    assert refused.location == "the file" and "no `data` array" in refused.reason


def test_memory_stays_flat_however_many_incidents_the_file_holds(tmp_path):
    full = json.loads(PAGES.read_text())[0]["data"][0]

    def write(path, pages):
        with path.open("w") as out:
            out.write("[")
            for number in range(pages):
                batch = [dict(full, id=f"{number:06d}-{i:04d}") for i in range(25)]
                out.write(("," if number else "") + json.dumps({"data": batch, "links": {}, "meta": {}}))
            out.write("]")

    def peak(path):
        return read_and_peak(READER, path)

    small, big = tmp_path / "small.json", tmp_path / "big.json"
    write(small, 2)
    write(big, 50)
    (small_count, small_peak), (big_count, big_peak) = peak(small), peak(big)
    assert (small_count, big_count) == (50, 1250)
    assert big_peak < small_peak * 1.5 + 200_000  # twenty-five times the incidents, about the same peak
    # The parser reads 64 KiB at a time; the peak is that batch of events and one record, not the file.
    assert big_peak < 3_000_000 < 5_000_000 < big.stat().st_size


def test_any_value_anywhere_in_an_incident_is_read_or_refused_never_raised():
    resource_ = json.loads(PAGES.read_text())[0]["data"][0]
    check_any_value_anywhere_is_read_or_refused(READER, resource_, "data", essential=("id", "attributes"))
