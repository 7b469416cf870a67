"""The PagerDuty reader: `GET /incidents` pages as the API answers them, with notes and log entries, streamed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricIncident, Reader, Refusal
from grandbo.history.sources.pagerduty import READER
from tests.history_shapes import check_any_value_anywhere_is_read_or_refused, read_and_peak

DATA = Path(__file__).parent / "data" / "history" / "pagerduty"


def read(path: Path) -> list[HistoricIncident | Refusal]:
    return list(READER.read(path))


def incidents(path: Path) -> dict[str, HistoricIncident]:
    found = read(path)
    assert all(isinstance(item, HistoricIncident) for item in found), found
    return {item.source_id: item for item in found if isinstance(item, HistoricIncident)}


def test_the_reader_is_named_pagerduty_and_satisfies_the_contract():
    reader: Reader = READER
    assert reader.name == "pagerduty"


def test_every_mapped_field_of_a_list_incidents_page():
    first = incidents(DATA / "incidents_page.json")["Q1RDB7KX"]
    assert first.source == "pagerduty" and first.location == "incidents[0]"
    assert first.url == "https://acme-shop.pagerduty.com/incidents/Q1RDB7KX"
    assert first.title == "Checkout latency above 2 s"
    # the description (it says more than the title), the body's details, the incident key
    assert first.summary.split("\n\n") == [
        "p99 of POST /checkout over 2 s for 10 minutes in eu-west-1",
        "Connection pool to orders-db exhausted after the 08:05 deploy (max 20, in use 20).",
        "PagerDuty incident #4182, incident key: checkout-latency/eu-west-1",
    ]
    assert first.started_at == datetime(2025, 3, 11, 8, 14, 5, tzinfo=UTC)
    assert first.resolved_at == datetime(2025, 3, 11, 9, 2, 40, tzinfo=UTC)
    assert (first.status, first.severity) == ("resolved", "P1")  # priority.summary, as the account names it
    assert first.services == ["checkout-api"]
    assert first.labels == ["urgency:high", "team:Payments", "team:SRE Europe"]
    assert first.postmortem == "" and first.findings == [] and first.runbooks == []


def test_without_a_priority_the_urgency_is_the_severity_and_a_repeated_title_is_not_the_summary():
    second = incidents(DATA / "incidents_page.json")["Q2SEARCH9"]
    assert second.severity == "low" and second.labels == ["urgency:low"]
    # description == title: not repeated; no body, so the first trigger log entry's channel details say what was seen
    assert second.summary == "Indexer consumer group 40 minutes behind the orders topic.\n\nPagerDuty incident #4190"
    assert second.started_at == datetime(2025, 3, 12, 14, 0, tzinfo=timezone(timedelta(hours=1)))


def test_notes_and_the_four_kinds_of_log_entries_form_the_timeline_in_time_order():
    first = incidents(DATA / "incidents_page.json")["Q1RDB7KX"]
    assert first.notes == [
        "2025-03-11T08:14:05Z Triggered through the API.",
        "2025-03-11T08:16:30Z Acknowledged by Maya Okafor",
        "2025-03-11T08:41:00Z Maya Okafor: Rolled back checkout-api to v812; pool usage back to 6 of 20.",
        "2025-03-11T08:52:10Z Lena Vogt: Deploy 08:05 raised pool max to 50 on paper but the config key was misspelt.",
        "2025-03-11T09:02:40Z Resolved by Maya Okafor",
    ]  # the note's own annotate entry is kept once; the notify entry and the conference bridge are left out
    assert not any("meet.example.com" in text or "Notified" in text for text in [first.summary, *first.notes])


def test_the_end_comes_from_resolved_at_then_the_resolve_log_entry_then_the_last_status_change():
    read_ = incidents(DATA / "incidents_page.json")
    assert read_["Q1RDB7KX"].resolved_at == datetime(2025, 3, 11, 9, 2, 40, tzinfo=UTC)  # resolved_at
    # log_entries given as the whole `GET /incidents/{id}/log_entries` answer; the resolve entry, not the later change
    assert read_["Q2SEARCH9"].resolved_at == datetime(2025, 3, 12, 15, 5, tzinfo=timezone(timedelta(hours=1)))
    assert read_["Q3DNSFAIL"].resolved_at == datetime(2025, 4, 1, 3, 20, tzinfo=UTC)  # resolved: last status change


def test_unknown_or_missing_times_stay_unknown():
    read_ = incidents(DATA / "incidents_page.json")
    assert read_["Q3DNSFAIL"].started_at is None  # created_at "not recorded": kept unknown, the incident is not refused
    assert read_["Q3DNSFAIL"].title == "Amazon Incident"  # a generic title is the importer's to replace, not ours
    assert read_["Q4QUEUE22"].resolved_at is None  # acknowledged, not resolved: its status change is not an end
    assert read_["Q4QUEUE22"].status == "acknowledged"


@pytest.mark.parametrize("name", ["incidents_pages.json", "incidents_pages.jsonl"])
def test_several_pages_in_a_json_array_or_one_a_line(name):
    found = read(DATA / name)
    assert [item.source_id for item in found if isinstance(item, HistoricIncident)] == [
        "QP1A0001",
        "QP1B0002",
        "QP2A0003",
    ]
    # a JSON array of pages or JSON Lines: every location names its page, the first one too
    assert [item.location for item in found] == ["page 1, incidents[0]", "page 1, incidents[1]", "page 2, incidents[0]"]
    assert [item.severity for item in found if isinstance(item, HistoricIncident)] == ["P2", "low", "P1"]


def test_a_record_without_an_id_is_refused_and_a_field_of_the_wrong_type_is_ignored_and_said():
    found = read(DATA / "incidents_damaged.json")
    assert isinstance(found[0], HistoricIncident) and found[0].source_id == "QREF0001"
    refused = {item.location: item.reason for item in found if isinstance(item, Refusal)}
    assert list(refused) == ["incidents[1]", "incidents[2]", "incidents[3]"]
    assert "#6002 has no `id`" in refused["incidents[1]"] and "GET /incidents" in refused["incidents[1]"]
    assert "a number (6003), not PagerDuty's text id" in refused["incidents[2]"]
    assert "a string where a record (an object) was expected" in refused["incidents[3]"]
    # `teams` as a string: refused the whole incident before; now read without teams, and said
    fourth = found[4]
    assert isinstance(fourth, HistoricIncident) and fourth.source_id == "QREF0004"
    assert fourth.ignored == ["teams: a string, not a list"] and not any(x.startswith("team:") for x in fourth.labels)


def test_a_file_that_is_not_json_is_one_error_and_what_was_read_before_a_break_stays(tmp_path):
    garbage = tmp_path / "export.json"
    garbage.write_text("<html>502 Bad Gateway</html>")
    with pytest.raises(ImportFormatError) as caught:
        read(garbage)
    assert "export.json is not JSON" in caught.value.message and "GET /incidents" in caught.value.message
    cut = tmp_path / "cut.jsonl"
    page = json.loads((DATA / "incidents_pages.jsonl").read_text().splitlines()[0])
    cut.write_text(json.dumps(page) + "\n" + '{"incidents": [{"id": "QX"')  # the export was interrupted
    *read_, last = read(cut)
    assert [item.source_id for item in read_ if isinstance(item, HistoricIncident)] == ["QP1A0001", "QP1B0002"]
    assert isinstance(last, Refusal) and last.location == "page 2, incidents[0]" and "stops being JSON" in last.reason


def test_an_empty_file_is_one_error_and_another_tool_s_export_is_refused_by_its_page(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("\n")
    with pytest.raises(ImportFormatError, match=r"empty\.json is empty"):
        read(empty)
    opsgenie = tmp_path / "alerts.json"
    opsgenie.write_text(json.dumps({"data": [{"id": "a1", "message": "disk full"}], "paging": {}}))
    (refusal,) = read(opsgenie)
    assert isinstance(refusal, Refusal) and refusal.location == "the file"
    assert "no `incidents` array in this page" in refusal.reason and "GET /incidents" in refusal.reason


def test_a_page_without_incidents_among_pages_is_refused_not_skipped(tmp_path):
    # Fails on the old reader, which skipped a page without `incidents` when another page had them.
    path = tmp_path / "export.json"
    page = json.loads((DATA / "incidents_pages.jsonl").read_text().splitlines()[0])
    path.write_text(json.dumps([page, {"alerts": [{"id": "A1"}], "limit": 25}]))
    found = read(path)
    assert [item.location for item in found] == ["page 1, incidents[0]", "page 1, incidents[1]", "page 2"]
    assert isinstance(found[2], Refusal) and "no `incidents` array in this page" in found[2].reason


def test_an_integer_beyond_64_bits_is_a_number_not_a_file_that_is_not_json(tmp_path):
    # Fails on the old reader: ijson's float mode raised "integer overflow" and the whole file was "not JSON".
    path = tmp_path / "export.json"
    path.write_text(
        '{"incidents": [{"id": "QBIG", "title": "Disk", "incident_number": 18446744073709551617,'
        ' "body": {"details": {"bytes": 18446744073709551617, "ratio": 0.25}}}], "total": 18446744073709551617}'
    )
    (only,) = read(path)
    assert isinstance(only, HistoricIncident) and only.source_id == "QBIG"
    assert "bytes: 18446744073709551617\nratio: 0.25" in only.summary
    assert "PagerDuty incident #18446744073709551617" in only.summary


def test_any_value_anywhere_in_an_incident_is_read_or_refused_never_raised():
    incident = json.loads((DATA / "incidents_page.json").read_text())["incidents"][0]
    check_any_value_anywhere_is_read_or_refused(READER, incident, "incidents")


def test_a_path_that_cannot_be_read_is_an_import_format_error(tmp_path):
    with pytest.raises(ImportFormatError, match="cannot read"):
        read(tmp_path / "missing.json")


def _write_export(path: Path, count: int) -> None:
    """One `GET /incidents` page of `count` incidents, each with notes and log entries, written as it is made."""
    with path.open("w") as out:
        out.write('{"incidents": [')
        for n in range(count):
            at = (datetime(2020, 1, 1, tzinfo=UTC) + timedelta(hours=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
            incident = {
                "id": f"Q{n:07d}",
                "type": "incident",
                "incident_number": n,
                "title": f"Queue lag on worker-{n % 50}",
                "description": f"Consumer group {n} is {n % 90} minutes behind; " + "backlog detail " * 90,
                "created_at": at,
                "status": "resolved",
                "urgency": "high",
                "html_url": f"https://acme-shop.pagerduty.com/incidents/Q{n:07d}",
                "service": {"id": "PSV1", "type": "service_reference", "summary": f"worker-{n % 50}"},
                "teams": [{"id": "PT1", "type": "team_reference", "summary": "Platform"}],
                "notes": [{"id": f"N{n}", "content": "restarted the consumer " * 5, "created_at": at}],
                "log_entries": [
                    {
                        "id": f"L{n}a",
                        "type": "trigger_log_entry",
                        "summary": "Triggered through the API.",
                        "created_at": at,
                    },
                    {"id": f"L{n}b", "type": "resolve_log_entry", "summary": "Resolved by Maya", "created_at": at},
                ],
            }
            out.write(("," if n else "") + json.dumps(incident))
        out.write('], "limit": 100, "offset": 0, "more": false, "total": null}')


def _peak(path: Path) -> tuple[int, int]:
    return read_and_peak(READER, path)


def test_a_5000_incident_export_is_read_one_incident_at_a_time(tmp_path):
    small, large = tmp_path / "500.json", tmp_path / "5000.json"
    _write_export(small, 500)
    _write_export(large, 5_000)
    (small_count, small_peak), (large_count, large_peak) = _peak(small), _peak(large)
    assert (small_count, large_count) == (500, 5_000)
    size = large.stat().st_size
    assert size > 10_000_000
    # Flat: ten times the incidents, not more memory (a fixed ~0.5 MB of buffers and caches, 0.6% apart from 500 to
    # 10,000 incidents, measured 2026-12); an eighth of it over 4,500 more incidents is 14 bytes an incident, less
    # than any object a reader could keep of each (an int kept per incident fails it; the bound was a quarter over
    # 9,000 more, 18 bytes).
    assert large_peak < small_peak * 1.125, (small_peak, large_peak)
    assert large_peak < size / 10, (large_peak, size)
