"""The Opsgenie reader: alerts and incidents as the API answers them, with notes and the incident timeline, streamed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricIncident, Reader, Refusal
from grandbo.history.sources.opsgenie import READER
from tests.history_shapes import check_any_value_anywhere_is_read_or_refused, read_and_peak

DATA = Path(__file__).parent / "data" / "history" / "opsgenie"


def read(path: Path) -> list[HistoricIncident | Refusal]:
    return list(READER.read(path))


def records(path: Path) -> dict[str, HistoricIncident]:
    found = read(path)
    assert all(isinstance(item, HistoricIncident) for item in found), found
    return {item.source_id: item for item in found if isinstance(item, HistoricIncident)}


def test_the_reader_is_named_opsgenie_and_satisfies_the_contract():
    reader: Reader = READER
    assert reader.name == "opsgenie"


def test_every_mapped_field_of_a_list_alerts_answer():
    alert = records(DATA / "alerts_list.json")["3f1c9a52-7d0e-4b8e-9a61-2c5d7e0f4a11"]
    assert (alert.source, alert.location, alert.url) == ("opsgenie", "data[0]", None)  # alerts have no web link
    assert alert.title == "orders-db replica lag above 300 s"
    assert alert.summary == "Opsgenie alert #2741, alias: orders-db-replication-lag"  # a list item has no description
    assert alert.started_at == datetime(2025, 2, 3, 6, 12, 30, tzinfo=UTC)
    # createdAt + report.closeTime (2,912,500 ms)
    assert alert.resolved_at == datetime(2025, 2, 3, 7, 1, 2, 500_000, tzinfo=UTC)
    assert (alert.status, alert.severity) == ("closed", "P2")
    assert alert.labels == ["database", "Replication / Lag", "eu-central"]  # tags kept as written
    assert alert.services == [] and alert.findings == [] and alert.postmortem == ""


def test_an_alert_s_notes_and_report_form_its_timeline_in_time_order():
    alert = records(DATA / "alerts_list.json")["3f1c9a52-7d0e-4b8e-9a61-2c5d7e0f4a11"]
    assert alert.notes == [
        "2025-02-03T06:14:05.000Z acknowledged by ines.moreau@acme-shop.example",  # createdAt + ackTime 95,000 ms
        "2025-02-03T06:30:10.512Z ines.moreau@acme-shop.example: Replica was rebuilding an index after the 06:00 "
        "vacuum; paused the vacuum.",
        "2025-02-03T06:58:44.007Z ines.moreau@acme-shop.example: Lag back under 5 s.",
        "2025-02-03T07:01:02.500Z closed by ines.moreau@acme-shop.example",
    ]


def test_an_open_alert_has_no_end():
    alert = records(DATA / "alerts_list.json")["b07d2e19-4c3a-4f6e-8d15-90a1b2c3d4e5"]
    assert alert.status == "open" and alert.resolved_at is None and alert.notes == [] and alert.labels == []


def test_detail_answers_one_a_line_carry_description_details_and_the_whole_notes_answer():
    found = read(DATA / "alerts_detail.jsonl")
    assert [item.location for item in found] == ["page 1, data", "page 2, data"]  # JSON Lines name the page
    alert = found[0]
    assert isinstance(alert, HistoricIncident)
    assert alert.summary.split("\n\n") == [
        "5xx ratio on POST /checkout reached 7.4% over 5 minutes.",
        "monitor: checkout-5xx\nregion: eu-west-1\nthreshold: 5%",
        "Opsgenie alert #2790, alias: checkout-5xx-ratio",
    ]
    plus_one = timezone(timedelta(hours=1))
    assert alert.started_at == datetime(2025, 2, 10, 13, 2, 0, 250_000, tzinfo=plus_one)
    assert alert.resolved_at == datetime(2025, 2, 10, 13, 47, 0, 250_000, tzinfo=plus_one)  # + 2,700,000 ms
    assert alert.severity == "P1" and alert.labels == ["checkout", "customer-facing"]
    assert alert.notes == [  # the report's times written in UTC, as Opsgenie writes its own
        "2025-02-10T12:06:00.250Z acknowledged by tom.becker@acme-shop.example",
        "2025-02-10T12:31:05.000Z tom.becker@acme-shop.example: Feature flag new-tax-engine turned off; errors stopped.",
        "2025-02-10T12:47:00.250Z closed by tom.becker@acme-shop.example",
    ]


def test_unknown_times_stay_unknown_and_so_does_an_end_counted_from_them():
    tls = read(DATA / "alerts_detail.jsonl")[1]
    assert isinstance(tls, HistoricIncident)
    assert tls.started_at is None  # createdAt "sometime in February": unknown, not refused
    assert tls.resolved_at is None  # closeTime counts from createdAt: unknown too
    assert tls.status == "closed" and tls.summary == "Opsgenie alert #2791, alias: tls-expiry-api"


def test_every_mapped_field_of_an_incident():
    incident = records(DATA / "incidents_list.json")["4c9e1f2a-3b4d-4e5f-8a6b-7c8d9e0f1a2b"]
    assert incident.location == "data[0]"
    assert incident.url == (
        "https://acme-shop.app.opsgenie.com/incident/detail/4c9e1f2a-3b4d-4e5f-8a6b-7c8d9e0f1a2b/details"
    )
    assert incident.title == "Payments declined for EU cards"
    assert incident.summary.split("\n\n") == [
        "The card processor rejected EU cards with 3DS errors after a key rotation.",
        "customer_impact: about 18% of EU checkouts\nbridge: zoom",  # extraProperties
        "Opsgenie incident #118",
    ]
    assert incident.started_at == datetime(2025, 1, 20, 9, 10, tzinfo=UTC)
    assert incident.resolved_at == datetime(2025, 1, 20, 10, 5, tzinfo=UTC)  # the IncidentResolved entry, not updatedAt
    assert (incident.status, incident.severity) == ("resolved", "P1")
    assert incident.services == ["0d8f7e6a-5b4c-4d3e-9f2a-1b0c9d8e7f6a", "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"]
    assert incident.labels == ["payments", "Stack Exchange", "Database/Human Error"]


def test_an_incident_s_notes_and_visible_timeline_entries_in_time_order_each_once():
    incident = records(DATA / "incidents_list.json")["4c9e1f2a-3b4d-4e5f-8a6b-7c8d9e0f1a2b"]
    assert incident.notes == [
        "2025-01-20T09:10:00Z ines.moreau@acme-shop.example: Incident created",
        "2025-01-20T09:30:00Z tom.becker@acme-shop.example: 3DS failures started 09:02, right after the key rotation job.",
        "2025-01-20T09:48:00.000Z ines.moreau@acme-shop.example: Rotated key had the wrong 3DS merchant id; rolled "
        "back the rotation.",
        "2025-01-20T10:05:00Z ines.moreau@acme-shop.example: Incident resolved",
    ]  # the hidden entry is left out; the note's own timeline entry is kept once


def test_an_open_incident_has_no_end_and_empty_fields_stay_empty():
    incident = records(DATA / "incidents_list.json")["7b6a5948-3726-4150-9e8d-7c6b5a493827"]
    assert incident.status == "open" and incident.resolved_at is None
    assert (incident.services, incident.labels, incident.notes) == ([], [], [])
    assert incident.summary == "Opsgenie incident #121"


def test_alert_and_incident_answers_in_one_json_array_name_their_page():
    found = read(DATA / "mixed_answers.json")
    assert [item.location for item in found] == [
        "page 1, data[0]",
        "page 1, data[1]",
        "page 2, data[0]",
        "page 2, data[1]",
    ]
    assert [item.url is not None for item in found if isinstance(item, HistoricIncident)] == [False, False, True, True]


def test_a_record_without_an_id_is_refused_and_fields_of_the_wrong_type_are_ignored_and_said():
    found = read(DATA / "damaged.json")
    assert isinstance(found[0], HistoricIncident)
    refused = {item.location: item.reason for item in found if isinstance(item, Refusal)}
    assert list(refused) == ["data[1]", "data[2]", "data[3]"]
    assert "the alert #2801 has no `id`" in refused["data[1]"] and "GET /v2/alerts" in refused["data[1]"]
    assert "a number (2802), not Opsgenie's text id" in refused["data[2]"]
    assert "a number (42) where a record (an object) was expected" in refused["data[3]"]
    # Fails on the old reader, which refused both records whole.
    tags, service = found[4], found[5]
    assert isinstance(tags, HistoricIncident) and tags.labels == [] and tags.ignored == ["tags: a string, not a list"]
    assert isinstance(service, HistoricIncident) and service.services == []
    assert service.ignored == ["impactedServices[0]: an object, not a string"]


def test_a_file_that_is_not_json_or_empty_is_one_error_and_another_shape_is_refused_by_its_page(tmp_path):
    garbage, empty, pagerduty = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    garbage.write_text("id,message\n1,disk full\n")
    empty.write_text("")
    pagerduty.write_text(json.dumps({"incidents": [{"id": "PT4KHLK"}], "limit": 25}))
    with pytest.raises(ImportFormatError, match=r"a\.json is not JSON"):
        read(garbage)
    with pytest.raises(ImportFormatError, match=r"b\.json is empty"):
        read(empty)
    (refusal,) = read(pagerduty)
    assert isinstance(refusal, Refusal) and refusal.location == "the file"
    assert "no `data` array in this page" in refusal.reason and "GET /v1/incidents" in refusal.reason


def test_any_value_anywhere_in_an_alert_or_an_incident_is_read_or_refused_never_raised():
    for name in ("alerts_list.json", "incidents_list.json"):
        record = json.loads((DATA / name).read_text())["data"][0]
        check_any_value_anywhere_is_read_or_refused(READER, record, "data")


def test_a_path_that_cannot_be_read_is_an_import_format_error(tmp_path):
    with pytest.raises(ImportFormatError, match="cannot read"):
        read(tmp_path)  # a folder


def _write_alerts(path: Path, count: int) -> None:
    """One `GET /v2/alerts` answer of `count` alerts with notes, written as it is made."""
    with path.open("w") as out:
        out.write('{"data": [')
        for n in range(count):
            at = (datetime(2020, 1, 1, tzinfo=UTC) + timedelta(minutes=n)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            alert = {
                "id": f"00000000-0000-4000-8000-{n:012d}",
                "tinyId": str(n),
                "alias": f"disk-{n % 40}",
                "message": f"Disk above 90% on host-{n % 40}",
                "status": "closed",
                "acknowledged": True,
                "tags": ["disk", f"host-{n % 40}"],
                "createdAt": at,
                "priority": "P3",
                "report": {"ackTime": 60000, "closeTime": 600000, "closedBy": "ops@acme-shop.example"},
                "description": "Usage grew after log rotation failed; " + "details " * 100,
                "notes": [{"note": "cleared old logs " * 5, "owner": "ops@acme-shop.example", "createdAt": at}],
            }
            out.write(("," if n else "") + json.dumps(alert))
        out.write('], "paging": {}, "took": 0.1, "requestId": "00000000-0000-4000-8000-000000000000"}')


def _peak(path: Path) -> tuple[int, int]:
    return read_and_peak(READER, path)


def test_a_5000_alert_export_is_read_one_alert_at_a_time(tmp_path):
    small, large = tmp_path / "500.json", tmp_path / "5000.json"
    _write_alerts(small, 500)
    _write_alerts(large, 5_000)
    (small_count, small_peak), (large_count, large_peak) = _peak(small), _peak(large)
    assert (small_count, large_count) == (500, 5_000)
    size = large.stat().st_size
    assert size > 6_000_000
    # Flat: ten times the alerts, not more memory. The peak is a fixed ~0.5 MB (3% apart from 500 to 10,000 alerts,
    # measured 2026-12); an eighth of it over 4,500 more alerts is 14 bytes an alert, less than any object a reader
    # could keep of each (an int kept per alert fails it; the bound was a quarter over 9,000 more, 18 bytes).
    assert large_peak < small_peak * 1.125, (small_peak, large_peak)
    assert large_peak < size / 5, (large_peak, size)
