"""An export read under the wrong vendor's name (a PagerDuty page as `incidentio`): the file is refused up front,
naming the vendor it looks like, instead of filing untitled, open incidents; a lone record without the vendor's
fields in a good file is refused, the rest filed (probe 20b, finding I3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.history.sources._sniff import FIRST
from tests.serving import serving

DATA = Path(__file__).parent / "data" / "history"


def _pd(number: int) -> dict:
    """A PagerDuty incident as the probe's export had it: no `incident_number`, `urgency` or `html_url`."""
    return {"id": f"PD{number}", "type": "incident", "title": f"pd incident {number} api latency", "status": "resolved",
            "created_at": "2024-03-01T00:00:00Z", "service": {"summary": "api"}}  # fmt: skip


def _incidentio(number: int) -> dict:
    return {"id": f"01HX{number:04d}", "name": f"Search latency {number}", "reference": f"INC-{number}",
            "incident_status": {"category": "closed", "name": "Closed"}, "created_at": "2024-03-01T00:00:00Z"}  # fmt: skip


def _page(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps({"incidents": records}))
    return path


def test_a_pagerduty_page_imported_as_incidentio_is_refused_naming_pagerduty_and_nothing_is_filed(memory, tmp_path):
    path = _page(tmp_path / "pd.json", [_pd(n) for n in range(3)])
    with pytest.raises(ImportFormatError) as refused:
        import_history(memory, reader("incidentio"), path)  # the old code: imported 3, untitled and open
    message = refused.value.message
    assert message.startswith("pd.json does not look like an incident.io export: 3 of its first 3 records have none")
    assert "It looks like a PagerDuty export (records with `title`, `service`)" in message
    assert "run `grandbo import-from pagerduty FILE`" in message and message.endswith("nothing was imported.")
    assert refused.value.detail["looks_like"] == "pagerduty"
    assert memory.incidents.find() == []
    assert len(import_history(memory, reader("pagerduty"), path).refused) == 0  # the right reader reads it


def test_a_long_file_mostly_foreign_in_its_first_records_is_refused_before_anything_is_filed(memory, tmp_path):
    records = [_incidentio(1), *(_pd(n) for n in range(FIRST)), *(_incidentio(n) for n in range(2, 40))]
    with pytest.raises(ImportFormatError, match=r"does not look like an incident\.io export: 6 of its first 7"):
        import_history(memory, reader("incidentio"), _page(tmp_path / "mixed.json", records))
    assert memory.incidents.find() == []


def test_a_record_without_the_vendors_fields_in_a_good_file_is_refused_and_the_rest_filed(memory, tmp_path):
    records = [*(_incidentio(n) for n in range(8)), _pd(99), {"id": "X1", "status": "resolved"}]
    report = import_history(memory, reader("incidentio"), _page(tmp_path / "mostly.json", records))
    assert report.imported == 8
    assert report.refused == [
        {"location": "incidents[8]", "reason": "a record with none of incident.io's fields (`name`, `incident_status`, "
         "`reference`) but PagerDuty's (`title`, `service`): import it as `pagerduty`"},
        {"location": "incidents[9]", "reason": "a record with none of incident.io's fields (`name`, `incident_status`, "
         "`reference`): not filed (it would be an untitled, open incident)"},
    ]  # fmt: skip
    assert len(memory.incidents.find()) == 8


@pytest.mark.parametrize(
    ("data", "wrong", "right"),
    [("incidentio/incidents_pages.jsonl", "pagerduty", "incidentio"),
     ("rootly/incidents_pages.json", "opsgenie", "rootly"),
     ("opsgenie/alerts_list.json", "rootly", "opsgenie")],
)  # fmt: skip
def test_each_vendors_own_export_under_another_name_is_refused_naming_it(data, wrong, right):
    with pytest.raises(ImportFormatError, match=rf"run `grandbo import-from {right} FILE`"):
        list(reader(wrong).read(DATA / data))
    assert not any(
        type(item).__name__ == "Refusal" and "fields" in item.reason for item in reader(right).read(DATA / data)
    )


def test_the_cli_refuses_a_pagerduty_export_as_incidentio_with_exit_2_and_files_nothing(cli, tmp_path):
    path = _page(tmp_path / "pd.json", [_pd(n) for n in range(3)])
    cli("orgs", "create", "imp")
    refused = cli("import-from", "incidentio", str(path), "--org", "imp", code=2)
    assert "It looks like a PagerDuty export" in refused.stderr and "Traceback" not in refused.stderr
    assert cli("incident", "list", "--org", "imp", "--json").stdout.strip() in ("[]", "")


def test_the_rest_route_refuses_a_pagerduty_export_as_incidentio_with_a_422(grandbo, tmp_path):
    memory = grandbo.org("imp", create=True)
    _, admin = memory.keys.create("admin")
    body = json.dumps({"incidents": [_pd(n) for n in range(3)]}).encode()
    with serving(grandbo) as served, served.client(admin) as client:
        refused = client.post("/v1/import-from/incidentio", content=body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["type"] == "import_malformed" and error["detail"]["looks_like"] == "pagerduty"
    assert "`POST /v1/import-from/pagerduty`" in error["message"]
    assert memory.incidents.find() == []


def test_a_file_of_records_with_no_vendors_fields_is_refused_asking_whose_export_it_is(memory, tmp_path):
    path = _page(tmp_path / "bare.json", [{"id": f"X{n}", "status": "resolved"} for n in range(FIRST + 5)])
    with pytest.raises(ImportFormatError) as refused:
        import_history(memory, reader("incidentio"), path)
    assert refused.value.message.startswith("bare.json does not look like an incident.io export: 6 of its first 6")
    assert "is it an incident.io export? Name the tool it comes from" in refused.value.message
    assert refused.value.detail["looks_like"] is None and memory.incidents.find() == []


def test_a_refused_rest_import_names_its_upload_not_the_folder_the_server_keeps_it_in(grandbo):
    """The detail of a REST import refused as not JSON gave any org's admin the server's upload folder, under
    GRANDBO_HOME (`/root/.grandbo/uploads/import-.../upload.json`: probe 26)."""
    _, admin = grandbo.org("imp", create=True).keys.create("admin")
    with serving(grandbo) as served, served.client(admin) as client:
        refused = client.post("/v1/import-from/pagerduty", content=b"\xff\xfe{}")
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["detail"]["path"] == "upload.json"
    assert "upload.json is not JSON" in refused.json()["error"]["message"]
    assert str(grandbo.settings.home) not in refused.text
