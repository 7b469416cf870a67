"""The incident.io reader: pages of `GET /v2/incidents` to HistoricIncidents.

Payloads in tests/data/history/incidentio/ follow incident.io's documented response shapes (NOTE.md there says
which).
"""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricFinding, HistoricIncident, Refusal, Skipped
from grandbo.history.sources.incidentio import READER
from tests.history_shapes import check_any_value_anywhere_is_read_or_refused, read_and_peak

DATA = Path(__file__).parent / "data" / "history" / "incidentio"
PAGES = DATA / "incidents_pages.jsonl"


def read(path):
    return list(READER.read(path))


def incident(number, **fields):
    base = {
        "id": f"01HX{number:022d}",
        "reference": f"INC-{number}",
        "name": f"incident {number}",
        "mode": "standard",
        "created_at": "2025-01-01T00:00:00Z",
        "incident_status": {"category": "closed", "id": "01HS", "name": "Closed", "rank": 5},
        "custom_field_entries": [],
        "incident_role_assignments": [],
    }
    return {**base, **fields}


def test_every_field_of_an_incident_is_mapped():
    first = read(PAGES)[0]
    assert isinstance(first, HistoricIncident)
    assert (first.source, first.source_id) == ("incidentio", "01HXINC0SEARCH00000000000A")
    assert first.location == "page 1, incidents[0]"
    assert first.url == "https://app.incident.io/acme/incidents/2041"
    assert first.title == "Search latency above 5s for EU tenants"
    assert first.summary == "p99 search latency rose from 300ms to 6s for EU tenants."
    assert (first.severity, first.status) == ("Major", "closed")  # the source's words: the status's category, over
    assert first.services == ["search-api", "indexer"]  # the "Affected services" catalog entries
    assert first.labels == ["Production Outage", "Affected Team: Search"]  # the type, then the option fields
    assert first.findings == [
        HistoricFinding(kind="cause", text="An index rebuild ran on the primary and starved queries of IO.")
    ]


def test_times_come_from_the_incidents_timestamps():
    first = read(PAGES)[0]
    assert first.started_at == datetime(2025, 5, 14, 7, 41, tzinfo=UTC)  # "Impact started", before "Reported at"
    assert first.resolved_at == datetime(2025, 5, 14, 9, 3, tzinfo=UTC)  # "Resolved at"
    assert first.time_to_mitigate_s == 56 * 60  # "Fixed at" 08:37 - 07:41


def test_the_reference_roles_text_fields_the_postmortem_link_and_updates_become_notes_in_order():
    assert read(PAGES)[0].notes == [
        "Reference: INC-2041",  # what people call it; the id stays the source id
        "Incident Lead: Nadia Ferreira",
        "Customer notes: Two enterprise tenants opened tickets.",
        "Post-mortem: https://docs.acme.example/postmortems/inc-2041",
        # The API lists updates newest first; the notes keep time order.
        "2025-05-14T08:05:00.000000Z Nadia Ferreira [Investigating]: Investigating IO saturation on search-db-1.",
        "2025-05-14T08:40:00.000000Z Tom Ek [Monitoring]: Rebuild paused; latency recovering.",
    ]


def test_an_incident_without_timestamps_starts_when_it_was_created_and_one_without_any_time_stays_unknown():
    found = read(PAGES)
    bare, untimed = found[1], found[2]
    assert bare.started_at == datetime(2025, 6, 1, 12, tzinfo=UTC)
    assert (bare.resolved_at, bare.time_to_mitigate_s, bare.url, bare.severity) == (None, None, None, "")
    assert (untimed.started_at, untimed.resolved_at) == (None, None)


def test_pages_on_json_lines_keep_their_page_in_each_location():
    assert [r.location for r in read(PAGES)] == [
        "page 1, incidents[0]",
        "page 1, incidents[1]",
        "page 2, incidents[0]",
        "page 2, incidents[1]",
        "page 2, incidents[2]",
    ]


def test_one_page_and_an_array_of_pages_read_the_same(tmp_path):
    pages = [json.loads(line) for line in PAGES.read_text().splitlines()]
    one, array = tmp_path / "one.json", tmp_path / "array.json"
    one.write_text(json.dumps(pages[0], indent=2))
    array.write_text(json.dumps(pages))
    assert [r.location for r in read(one)] == ["incidents[0]", "incidents[1]"]
    assert [r.model_dump() for r in read(array)] == [r.model_dump() for r in read(PAGES)]


def test_a_test_incident_is_skipped_and_one_without_an_id_is_refused_with_a_reason():
    # Fails on the old reader, which refused the test incident (and so made the import exit 1).
    found = read(PAGES)
    assert found[3] == Skipped(
        location="page 2, incidents[1]",
        reason="a test incident (`mode` is 'test'), not a real one: left out on purpose",
    )
    assert isinstance(found[4], Refusal)
    assert found[4].location == "page 2, incidents[2]" and "without `id`" in found[4].reason


def test_a_live_status_keeps_its_name_and_declined_or_merged_incidents_are_skipped(tmp_path):
    def status(name, category):
        return {"id": "01HS", "name": name, "category": category, "rank": 1}

    path = tmp_path / "page.json"
    path.write_text(
        json.dumps(
            {
                "incidents": [
                    incident(1, incident_status=status("Fixing", "live")),
                    incident(2, incident_status=status("Resolved - awaiting PIR", "learning")),
                    incident(3, incident_status=status("Declined", "declined")),
                    incident(4, incident_status=status("Merged", "merged")),
                ]
            }
        )
    )
    live, learning, declined, merged = read(path)
    assert (live.status, learning.status) == ("Fixing", "learning")
    assert isinstance(declined, Skipped) and isinstance(merged, Skipped)
    assert declined.location == "incidents[2]" and "declined in triage, not an incident" in declined.reason
    assert merged.location == "incidents[3]" and "merged into holds it" in merged.reason


def test_updates_may_be_the_whole_updates_answer(tmp_path):
    update = {
        "created_at": "2025-01-01T00:10:00Z",
        "id": "01HU",
        "incident_id": "01HX",
        "message": "rolled back",
        "new_incident_status": {"id": "01HS", "name": "Monitoring", "category": "live", "rank": 3},
        "updater": {"workflow": {"id": "01HW", "name": "Auto-update"}},
    }
    answer = {"incident_updates": [update], "pagination_meta": {"page_size": 25}}
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"incidents": [incident(1, incident_updates=answer), incident(2, updates=[update])]}))
    whole, listed = read(path)
    assert whole.notes[1:] == listed.notes[1:] == ["2025-01-01T00:10:00Z Auto-update [Monitoring]: rolled back"]


def test_custom_fields_are_read_by_their_names(tmp_path):
    def field(name, *values):
        return {"custom_field": {"id": "01HCF", "name": name, "field_type": "text"}, "values": list(values)}

    path = tmp_path / "page.json"
    path.write_text(
        json.dumps(
            {
                "incidents": [
                    incident(
                        7,
                        custom_field_entries=[
                            field("Trigger", {"value_text": "a config push"}),
                            field("Contributing factors", {"value_text": "no canary"}),
                            field("Lessons learned", {"value_text": "canary config too"}),
                            field("Remediation", {"value_text": "rolled back the push"}),
                            field("Impacted system", {"value_option": {"id": "o", "value": "edge-proxy"}}),
                            field("Runbook", {"value_link": "https://wiki.acme.example/rb/edge"}),
                            field("Customers", {"value_numeric": "12"}),
                            field("Nothing set"),
                        ],
                    )
                ]
            }
        )
    )
    (only,) = read(path)
    assert [(f.kind, f.text) for f in only.findings] == [
        ("trigger", "a config push"),
        ("contributing", "no canary"),
        ("lesson", "canary config too"),
        ("remediation", "rolled back the push"),
    ]
    assert only.services == ["edge-proxy"]
    assert only.labels == ["Runbook: https://wiki.acme.example/rb/edge", "Customers: 12"]


@pytest.mark.parametrize(
    ("content", "said"),
    [("<html>sign in</html>", "is not JSON"), ("  \n", "is empty"), ('"incidents"', "bare JSON string")],
)
def test_a_file_that_is_not_an_incidents_answer_is_one_clear_error(tmp_path, content, said):
    path = tmp_path / "export.json"
    path.write_text(content)
    with pytest.raises(ImportFormatError) as caught:
        read(path)
    assert said in caught.value.message and "GET /v2/incidents" in caught.value.message


def test_a_page_without_incidents_is_refused_with_its_page(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps({"incidents": [incident(1)]}) + "\n" + json.dumps({"alerts": []}) + "\n")
    found = read(path)
    assert found[0].location == "page 1, incidents[0]"
    assert found[1].location == "page 2" and "no `incidents` array" in found[1].reason


def test_a_malformed_value_is_refused_not_raised(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"incidents": [incident(1, id=["not", "a", "string"]), incident(2)]}))
    refused, fine = read(path)
    assert isinstance(refused, Refusal) and refused.location == "incidents[0]"
    assert fine.source_id == incident(2)["id"]


def test_an_optional_field_of_the_wrong_type_is_read_as_absent_and_said(tmp_path):
    # Fails on the old reader, which read them as absent without a word.
    path = tmp_path / "export.json"
    odd = incident(1, severity=["Major"], custom_field_entries="Affected services: checkout", summary=7)
    path.write_text(json.dumps({"incidents": [odd]}))
    (only,) = read(path)
    assert isinstance(only, HistoricIncident)
    assert (only.severity, only.services, only.summary) == ("", [], "7")  # a number is text as written
    assert only.ignored == ["custom_field_entries: a string, not a list", "severity: a list, not a string"]


def test_memory_stays_flat_however_many_incidents_the_file_holds(tmp_path):
    def write(path, pages):
        full = json.loads(PAGES.read_text().splitlines()[0])["incidents"][0]
        full["summary"] += " the queue backed up" * 220  # 10 KB an incident: the file's size with half the incidents
        with path.open("w") as out:
            for number in range(pages):
                batch = [dict(full, id=f"01HX{number:06d}{i:04d}") for i in range(25)]
                out.write(json.dumps({"incidents": batch, "pagination_meta": {"page_size": 25}}) + "\n")

    def peak(path):
        return read_and_peak(READER, path)

    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    write(small, 2)
    write(big, 20)
    (small_count, small_peak), (big_count, big_peak) = peak(small), peak(big)
    assert (small_count, big_count) == (50, 500)
    # Ten times the incidents, about the same peak (2% apart from 50 to 1,000, measured 2026-12): an eighth of it
    # over 450 more incidents is 180 bytes an incident (the bound was half and 200 KB over 950 more, 660 bytes).
    assert big_peak < small_peak * 1.125
    # The parser reads 64 KiB at a time; the peak is that batch of events and one record, not the file.
    assert big_peak < 3_000_000 < 5_000_000 < big.stat().st_size


def test_any_value_anywhere_in_an_incident_is_read_or_refused_never_raised():
    incident_ = json.loads(PAGES.read_text().splitlines()[0])["incidents"][0]
    check_any_value_anywhere_is_read_or_refused(READER, incident_, "incidents")
