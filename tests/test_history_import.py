"""Importing past incidents (`grandbo.history.importer`): filed through the org handle as incidents and memory,
re-import as an update keyed by (source, source id), messy data decided and counted, never refused for being
messy; the CLI, the REST route and `demo --public` on top."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history import decide
from grandbo.history.importer import CHUNK, import_history
from grandbo.history.public import PUBLIC_FILE, PUBLIC_MAPPING
from grandbo.history.registry import reader
from grandbo.model import Severity, Status
from grandbo.tiers.imported import RUNNING, Imported
from tests.serving import serving

MARKDOWN = Path(__file__).parent / "data" / "history" / "markdown" / "2021-08-30-queue-backlog.md"  # dated by its name
ROW = {
    "id": "INC-7", "title": "Incident #7", "summary": "Checkout returned 502s for 20 minutes. Customers could not pay.",
    "date": "2025-03-02T10:00:00Z", "resolved": "2025-03-02T10:20:00Z", "status": "Resolved", "severity": "SEV-1",
    "services": ["checkout-api", "Payments DB"], "tags": ["Database/Human Error", "Stack Exchange"],
    "root_cause": "A migration locked the orders table.", "fix": "Killed the migration and re-ran it at night.",
    "postmortem": "# Checkout outage\n\nA migration locked the orders table.", "runbook": "RB-DB-LOCKS",
    "worked": "yes", "url": "https://example.com/inc/7",
}  # fmt: skip
MAP = {"started_at": "date", "resolved_at": "resolved", "remediation": "fix", "runbook_succeeded": "worked",
       "url": "url"}  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(memory, path: Path, **options):
    return import_history(memory, reader("jsonl"), path, mapping=options.pop("mapping", MAP), **options)


def test_a_record_becomes_an_incident_with_its_findings_post_mortem_outcome_and_history(memory, tmp_path):
    report = run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW]))
    assert (report.imported, report.updated, report.unchanged, report.refused) == (1, 0, 0, [])
    incident = memory.incidents.get("jsonl:INC-7")
    assert incident.status.value == "closed" and incident.severity is Severity.SEV1
    assert incident.title == "Checkout returned 502s for 20 minutes."  # "Incident #7" is generic: derived
    assert incident.services == ["checkout-api", "payments-db"]
    assert [f.root_cause or f.remediation for f in incident.findings] == [ROW["root_cause"], ROW["fix"]]
    assert incident.runbook_used == "RB-DB-LOCKS" and incident.closed_at is not None
    entries = {entry.id: entry for entry in memory.entries()}
    assert set(entries) == {"jsonl:INC-7-f1", "jsonl:INC-7-f2", "jsonl:INC-7-postmortem"}
    for entry in entries.values():
        assert entry.meta["history"] == {
            "source": "jsonl", "source_id": "INC-7", "url": ROW["url"], "incident_id": "jsonl:INC-7",
            "labels": ["Database/Human Error", "Stack Exchange"], "started_at": "2025-03-02T10:00:00+00:00",
        }  # fmt: skip
        assert "database-human-error" in entry.tags and "stack-exchange" in entry.tags
        assert entry.occurred_at.isoformat() == "2025-03-02T10:00:00+00:00"
    assert memory.ledger.effectiveness("RB-DB-LOCKS").successes == 1
    assert report.decisions["generic_title"] == 1 and report.decisions["labels_kept"] == 1
    assert report.decisions["services_slugged"] == 1


def test_a_service_named_by_one_of_its_catalog_aliases_is_filed_under_the_catalog_name(memory, tmp_path):
    # A vendor names services its own way (PagerDuty's `Payments DB`): the catalog's alias says which service that
    # is, as an alert naming it is read. The import slugged it into `payments-db`, a service no alert is about.
    memory.catalog.import_text("services:\n  - {name: orders-store, aliases: [Payments DB]}\n")
    report = run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW]))
    assert report.imported == 1
    assert memory.incidents.get("jsonl:INC-7").services == ["checkout-api", "orders-store"]
    assert {tuple(entry.services) for entry in memory.entries()} == {("checkout-api", "orders-store")}
    assert run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW])).unchanged == 1  # the same record: unchanged


def test_import_again_writes_nothing_and_reports_every_record_unchanged(memory, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [ROW, {**ROW, "id": "INC-8"}])
    run(memory, path)
    seq, _ = memory.changed_since(0)
    documents = len(memory.incidents.documents.log().events)
    report = run(memory, path)
    assert (report.imported, report.updated, report.unchanged) == (0, 0, 2)
    assert memory.changed_since(seq) == (seq, [])  # not one entry event
    written = {event.doc_id for event in memory.incidents.documents.log().events[documents:]}
    assert written == {RUNNING}  # no document but the org's import lease, taken and given back


def test_a_changed_record_is_a_correction_with_history_naming_the_import(memory, tmp_path):
    run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW]))
    changed = {**ROW, "root_cause": "A migration took an exclusive lock on the orders table.", "fix": ""}
    report = run(memory, write_jsonl(tmp_path / "b.jsonl", [changed]))
    assert (report.imported, report.updated, report.unchanged, report.refused) == (0, 1, 0, [])
    old = memory.get("jsonl:INC-7-f1")
    assert old.status is Status.SUPERSEDED and old.superseded_by
    new = memory.get(old.superseded_by)
    assert new.body.startswith("Root cause: A migration took an exclusive lock") and new.meta["history"]["source_id"]
    reasons = [event.payload.get("reason", "") for event in memory.history("jsonl:INC-7-f1")]
    assert any("re-import of jsonl:INC-7" in reason for reason in reasons)
    assert memory.get("jsonl:INC-7-f2").status is Status.RETIRED  # the fix is gone from the record
    history = memory.incidents.history("jsonl:INC-7")
    assert [event["type"] for event in history] == ["history.imported", "history.reimported"]
    again = run(memory, write_jsonl(tmp_path / "b.jsonl", [changed]))
    assert (again.imported, again.updated, again.unchanged) == (0, 0, 1)


def test_a_dry_run_writes_nothing_and_says_what_would_change(memory, tmp_path):
    run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW]))
    seq, _ = memory.changed_since(0)
    documents = memory.incidents.documents.version()
    rows = [{**ROW, "summary": "Checkout answered 502s."}, {**ROW, "id": "INC-9"}]
    report = run(memory, write_jsonl(tmp_path / "b.jsonl", rows), dry_run=True)
    assert (report.imported, report.updated, report.dry_run) == (1, 1, True)
    assert memory.changed_since(seq) == (seq, []) and memory.incidents.documents.version() == documents


def test_records_that_cannot_be_read_are_refused_with_their_location_and_reason(memory, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(ROW) + "\n{not json\n" + json.dumps({**ROW, "id": ""}) + "\n"
                    + json.dumps({**ROW, "id": "NUL", "summary": "bad \u0000 byte"}) + "\n[1, 2]\n")  # fmt: skip
    report = run(memory, path)
    assert report.imported == 1
    where = {refusal["location"]: refusal["reason"] for refusal in report.refused}
    assert set(where) == {"line 2", "line 3", "line 4", "line 5"}
    assert "not a JSON object" in where["line 2"] and "--map source_id=COLUMN" in where["line 3"]
    assert "NUL" in where["line 4"] or "character" in where["line 4"]


def test_an_unknown_date_stays_unknown_and_the_record_is_kept_as_memory(memory, tmp_path):
    rows = [
        {**ROW, "id": "U1", "date": "Unknown"},
        {**ROW, "id": "U2", "date": None},
        {**ROW, "id": "U3", "date": "soon"},
    ]
    report = run(memory, write_jsonl(tmp_path / "a.jsonl", rows))
    assert report.imported == 3 and report.refused == [] and report.decisions["unknown_date"] == 3
    entry = memory.get("jsonl:U1-f1")
    assert entry.meta["history"]["started_at"] is None
    assert memory.incidents.find() == []  # an incident's start is required: kept as its memory entries only
    assert Imported(memory.incidents).held("jsonl:U1") is not None


@pytest.mark.parametrize(
    ("word", "expected"),
    [("P1", "sev1"), ("SEV-1", "sev1"), ("SEV1", "sev1"), ("critical", "sev1"), ("Urgent", "sev1"), ("SEV0", "sev1"),
     ("SEV2 - Major", "sev2"), ("High", "sev2"), ("Medium", "sev3"), ("low", "sev4"), ("Lowest", "sev5"),
     ("whenever", None), ("", None)],
)  # fmt: skip
def test_severity_words_map_to_sev1_to_sev5(word, expected):
    found = decide.severity(word)
    assert (found.value if found else None) == expected


@pytest.mark.parametrize(
    ("title", "generic"),
    [("Amazon Incident", True), ("Incident #12", True), ("Outage", True), ("", True), ("Stack Exchange Incident", True),
     ("NASA Incident (1997-07-04)", True), ("Cloudflare Outage July 2, 2019", True),
     ("Redis failover left the primary read-only", False), ("Mayday: the march of the retries", False)],
)  # fmt: skip
def test_generic_titles_are_recognised(title, generic):
    assert decide.is_generic(title, ["Stack Exchange"]) is generic


def test_the_public_post_mortems_import_without_a_refusal_and_report_their_decisions(memory):
    if not PUBLIC_FILE.is_file():
        pytest.skip("../shared/data/public-incidents.jsonl is not beside this checkout")
    first = import_history(memory, reader("jsonl"), PUBLIC_FILE, mapping=PUBLIC_MAPPING)
    assert (first.imported, first.refused) == (200, [])
    assert first.decisions["unknown_date"] == 140 and first.decisions["generic_title"] >= 140  # "Amazon Incident"
    assert first.decisions["labels_kept"] == 200
    assert not any(decide.is_generic(e.title.removeprefix("Post-mortem: ")) for e in memory.entries())
    second = import_history(memory, reader("jsonl"), PUBLIC_FILE, mapping=PUBLIC_MAPPING)
    assert (second.imported, second.updated, second.unchanged) == (0, 0, 200)


def test_an_import_holds_at_most_one_chunk_of_records_whatever_the_file_size(memory, tmp_path):
    rows = [{"id": f"R{n}", "title": f"Queue consumer {n} stalled", "summary": f"Consumer {n} stopped reading.",
             "date": "2025-01-01T00:00:00Z"} for n in range(3 * CHUNK + 7)]  # fmt: skip
    path = write_jsonl(tmp_path / "big.jsonl", rows)
    outstanding = []
    jsonl = reader("jsonl")

    class Counting:
        name = "jsonl"

        def read(self, path, mapping=None):
            for pulled, record in enumerate(jsonl.read(path, mapping), start=1):
                if pulled % 100 == 0:  # read, and not yet filed
                    outstanding.append(pulled - len(Imported(memory.incidents).hashes("jsonl")))
                yield record

    report = import_history(memory, Counting(), path)
    assert report.imported == len(rows)
    assert max(outstanding) <= CHUNK and len(outstanding) == len(rows) // 100


def test_a_killed_import_resumes_without_duplicates(memory, tmp_path):
    rows = [{**ROW, "id": f"K{n}"} for n in range(CHUNK + 50)]
    path = write_jsonl(tmp_path / "a.jsonl", rows)

    class Dies:
        name = "jsonl"

        def read(self, path, mapping=None):
            for n, record in enumerate(reader("jsonl").read(path, mapping)):
                if n == CHUNK + 10:
                    raise KeyboardInterrupt
                yield record

    with pytest.raises(KeyboardInterrupt):
        import_history(memory, Dies(), path, mapping=MAP)
    report = run(memory, path)
    assert (report.imported, report.unchanged) == (50, CHUNK)
    assert len(memory.entries()) == 3 * len(rows)


def test_csv_with_a_mapping(memory, tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("key,what,cause,when,sev,svc\nA-1,Disk full on db-1,Log rotation was off,2024-05-01,P2,"
                    '"db-1, api"\nA-2,Generic Incident,Cron overlapped,unknown,weird,api\n')  # fmt: skip
    mapping = {"source_id": "key", "title": "what", "cause": "cause", "started_at": "when", "severity": "sev",
               "services": "svc"}  # fmt: skip
    report = import_history(memory, reader("csv"), path, mapping=mapping)
    assert (report.imported, report.refused) == (2, [])
    assert report.decisions["severity_unknown"] == 1 and report.decisions["generic_title"] == 1
    assert memory.incidents.get("csv:A-1").services == ["db-1", "api"]
    assert memory.get("csv:A-2-f1").title == "Cron overlapped"


REPEATED = "key,title,cause,title,sev,sev,,\nA-1,Disk full on db-1,Log rotation was off,P2,x,y,,\n"


def test_a_csv_file_naming_a_column_twice_is_refused_before_any_row_naming_the_column(memory, tmp_path):
    # Failed before: each row kept the value of the last `title` column only ("Disk full" was filed as "P2"),
    # and nothing said so.
    path = tmp_path / "a.csv"
    path.write_text(REPEATED)
    with pytest.raises(ImportFormatError) as refused:
        import_history(memory, reader("csv"), path, mapping={"source_id": "key"})
    assert refused.value.message.startswith("a.csv names column(s) 'sev', 'title' more than once in its header row")
    assert refused.value.detail["duplicated"] == ["sev", "title"]  # the blank names of trailing cells are none
    assert memory.find("csv:A-1-f1") is None
    path.write_text("key,title,cause,,\nA-1,Disk full on db-1,Log rotation was off,,\n")  # blank names only
    report = import_history(memory, reader("csv"), path, mapping={"source_id": "key"})
    assert (report.imported, report.refused) == (1, [])
    assert "Log rotation was off" in memory.get("csv:A-1-f1").title


def test_the_rest_route_refuses_a_csv_file_naming_a_column_twice_with_a_422(grandbo):
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    with serving(grandbo) as served, served.client(admin) as client:
        refused = client.post("/v1/import-from/csv?map=source_id=key", content=REPEATED.encode())
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert "'sev', 'title' more than once" in error["message"] and error["detail"]["duplicated"] == ["sev", "title"]


def test_the_cli_refuses_a_csv_file_naming_a_column_twice(cli, tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(REPEATED)
    cli("orgs", "create", "acme")
    printed = cli("import-from", "csv", str(path), "--map", "source_id=key", "--org", "acme", code=2)
    assert printed.stderr.startswith("error: a.csv names column(s) 'sev', 'title' more than once")
    assert "Traceback" not in printed.stderr


def test_an_unknown_source_is_an_error_listing_the_sources():
    with pytest.raises(Exception, match=r"the sources are csv, .*jsonl"):
        reader("servicenow")


def test_the_cli_prints_one_json_line_and_its_errors_without_a_traceback(cli, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [ROW])
    out = cli("import-from", "jsonl", str(path), "--map", "started_at=date,remediation=fix", "--json").stdout
    line = json.loads(out.strip().splitlines()[-1])
    assert (line["source"], line["imported"], line["refused"]) == ("jsonl", 1, [])
    again = json.loads(cli("import-from", "jsonl", str(path), "--map", "started_at=date,remediation=fix",
                           "--json").stdout.strip())  # fmt: skip
    assert (again["imported"], again["updated"], again["unchanged"]) == (0, 0, 1)
    unknown = cli("import-from", "servicenow", str(path), code=2)
    assert "the sources are csv, " in unknown.stderr and "jsonl" in unknown.stderr and "Traceback" not in unknown.stderr
    bad_map = cli("import-from", "jsonl", str(path), "--map", "title", code=2)
    assert "FIELD=COLUMN" in bad_map.stderr and "Traceback" not in bad_map.stderr
    refused = cli("import-from", "jsonl", str(write_jsonl(tmp_path / "b.jsonl", [{"title": "x"}])), code=1)
    assert "line 1" in refused.stderr


def test_demo_public_loads_the_file_once(cli):
    if not PUBLIC_FILE.is_file():
        pytest.skip("../shared/data/public-incidents.jsonl is not beside this checkout")
    first = json.loads(cli("demo", "--public", "--json").stdout.strip().splitlines()[-1])
    assert (first["imported"], first["refused"]) == (200, [])
    second = json.loads(cli("demo", "--public", "--json").stdout.strip().splitlines()[-1])
    assert (second["imported"], second["updated"]) == (0, 0)
    missing = cli("demo", "--public", "/nowhere/public.jsonl", code=2)
    assert "No public post-mortems at" in missing.stderr and "Traceback" not in missing.stderr


def test_the_rest_route_imports_with_an_admin_key_and_refuses_a_write_key(grandbo, tmp_path):
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    _, write = memory.keys.create("write")
    body = json.dumps(ROW).encode() + b"\n"
    with serving(grandbo) as served:
        with served.client(write) as client:
            refused = client.post("/v1/import-from/jsonl", content=body)
            assert refused.status_code == 403 and refused.json()["error"]["message"]
        with served.client(admin) as client:
            url = "/v1/import-from/jsonl?map=started_at=date,remediation=fix"
            answer = client.post(url, content=body)
            assert answer.status_code == 200, answer.text
            assert (answer.json()["imported"], answer.json()["skipped"], answer.json()["refused"]) == (1, 0, [])
            again = client.post(url, content=body).json()
            assert (again["imported"], again["updated"], again["unchanged"]) == (0, 0, 1)
            unknown = client.post("/v1/import-from/servicenow", content=body)
            assert unknown.status_code == 422 and "the sources are csv, " in unknown.json()["error"]["message"]
            streamed = client.post(url, content=iter([body[:10], body[10:]]))  # chunked, no Content-Length
            assert streamed.json()["unchanged"] == 1
    assert memory.incidents.get("jsonl:INC-7").title.startswith("Checkout returned 502s")


def test_a_record_repeated_in_the_file_with_other_content_is_refused_and_the_first_kept(memory, tmp_path):
    rows = [ROW, {**ROW, "id": "OTHER"}, {**ROW, "summary": "Checkout answered 502s."}]
    report = run(memory, write_jsonl(tmp_path / "a.jsonl", rows))
    assert (report.imported, report.updated, [r["location"] for r in report.refused]) == (2, 0, ["line 3"])
    assert memory.incidents.get("jsonl:INC-7").symptoms == [ROW["summary"]]  # test_history_duplicates.py: more


def test_demo_public_makes_the_store_on_a_fresh_machine(monkeypatch):
    """One command on a machine with no store yet, as the plain demo does (it said "not initialized" before)."""
    if not PUBLIC_FILE.is_file():
        pytest.skip("../shared/data/public-incidents.jsonl is not beside this checkout")
    from typer.testing import CliRunner

    from grandbo.cli import app

    monkeypatch.setenv("GRANDBO_EMBEDDING_PROVIDER", "deterministic")
    result = CliRunner().invoke(app, ["demo", "--public", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["imported"] == 200


def test_a_markdown_post_mortem_posted_again_under_its_name_is_the_same_incident(grandbo):
    """The upload is kept under its own name, so its id and date come from it as from a folder (a random temporary
    name made every post a new incident before); without a name the route says to give one."""
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    page = MARKDOWN.read_bytes()
    with serving(grandbo) as served, served.client(admin) as client:
        unnamed = client.post("/v1/import-from/markdown", content=page)
        assert unnamed.status_code == 422 and "?name=" in unnamed.json()["error"]["message"]
        url = f"/v1/import-from/markdown?name={MARKDOWN.name}"
        first, again = client.post(url, content=page).json(), client.post(url, content=page).json()
        assert (first["imported"], again["imported"], again["unchanged"]) == (1, 0, 1)
        escaping = client.post("/v1/import-from/markdown?name=../x.md", content=page)
        assert escaping.status_code == 422
    (incident,) = memory.incidents.find()
    assert incident.id == "markdown:2021-08-30-queue-backlog" and incident.started_at.date().isoformat() == "2021-08-30"


def test_an_imported_incident_edited_here_keeps_its_memories_history(memory, tmp_path):
    """A finding edited after the import rewrites its memory in the incident's own words; the memory still says
    where it came from (`meta.history`: the eval from history and a re-import find it by that; it was dropped)."""
    run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW]))
    incident = memory.incidents.get("jsonl:INC-7")
    finding = incident.findings[0]
    memory.incidents.update_finding(incident.id, finding.id, root_cause="The migration took an exclusive lock.")
    entry_id = memory.incidents.get(incident.id).memory[finding.id]
    edited = memory.get(entry_id)
    assert "exclusive lock" in edited.body and edited.status is Status.ACTIVE
    assert edited.meta["history"]["source_id"] == "INC-7" and edited.meta["history"]["incident_id"] == incident.id


def _jira_page(tmp_path: Path) -> Path:
    """A Jira search page: one issue resolved as a duplicate, one with its labels written as a string."""

    def issue(key: str, **fields) -> dict:
        return {"id": key[-1], "key": key, "self": f"https://acme.atlassian.net/rest/api/3/issue/{key[-1]}",
                "fields": {"summary": f"Checkout 503s ({key})", "created": "2025-03-02T10:00:00.000+0000",
                           "description": "Orders migration held a lock on the orders table.", **fields}}  # fmt: skip

    page = {"issues": [issue("OPS-1", resolution={"name": "Duplicate"}), issue("OPS-2", labels="database")]}
    path = tmp_path / "search.json"
    path.write_text(json.dumps(page))
    return path


def test_skipped_records_are_counted_apart_and_ignored_fields_are_decisions(memory, tmp_path):
    # Fails on the old importer and readers: the duplicate was refused and the string labels dropped unsaid.
    path = _jira_page(tmp_path)
    report = import_history(memory, reader("jira"), path)
    assert (report.imported, report.skipped, report.refused) == (1, 1, [])
    assert report.decisions["fields_ignored"] == 1 and report.to_dict()["skipped"] == 1
    assert report.read == 2
    again = import_history(memory, reader("jira"), path)  # `ignored` is not content: nothing changed
    assert (again.imported, again.updated, again.unchanged, again.skipped) == (0, 0, 1, 1)


def test_the_cli_exits_0_when_records_were_only_skipped(cli, tmp_path):
    out = cli("import-from", "jira", str(_jira_page(tmp_path)), "--json").stdout
    line = json.loads(out.strip().splitlines()[-1])
    assert (line["imported"], line["skipped"], line["refused"]) == (1, 1, [])
    assert line["decisions"]["fields_ignored"] == 1


def test_one_import_of_an_org_at_a_time_and_a_dead_one_s_lease_is_taken_over(memory, tmp_path):
    """Two imports at once each read the hashes before the other wrote and filed every record twice (the probe's
    repro: twice the documents); the second is now a 409 saying to retry, a dry run still runs, and the lease of
    an import that died (not renewed for `LEASE`) is taken over."""
    from grandbo.errors import ConflictError
    from grandbo.ports import DocumentWrite
    from grandbo.tiers.imported import HISTORY, LEASED

    path = write_jsonl(tmp_path / "a.jsonl", [ROW])
    running = Imported(memory.incidents)
    lease = running.begin("another import")
    with pytest.raises(ConflictError, match=r"An import of this organization started at .* is running"):
        run(memory, path)
    assert run(memory, path, dry_run=True).imported == 1  # writes nothing: no lease needed
    running.end(lease, "another import")
    assert run(memory, path).imported == 1
    dead = {"until": "2000-01-01T00:00:00+00:00", "actor": "killed", "renewed_at": "2000-01-01T00:00:00+00:00"}
    memory.incidents.documents.put([DocumentWrite(HISTORY, RUNNING, dead, "test", ref=LEASED)], "test")
    assert run(memory, path).unchanged == 1  # taken over, and given back
    assert memory.incidents.documents.get(HISTORY, RUNNING) is None


def test_a_changed_record_that_masking_makes_too_long_is_refused_and_the_rest_imported(memory, tmp_path):
    """Comparing a re-imported record with what the store holds masks it first; a record the org's masking refuses
    (too long once masked) stopped the whole import with the error instead of being refused alone."""
    run(memory, write_jsonl(tmp_path / "a.jsonl", [ROW, {**ROW, "id": "INC-8"}]))
    memory.org_settings.set_redaction(add={"letter-q": "q"})
    # Near the body's limit with a few matches, each masked longer than itself: not thousands of matches, which
    # under a loaded machine ran into the masking's time budget and were refused as too slow instead.
    changed = {**ROW, "postmortem": "note " * 39_800 + "q " * 100}
    rows = [changed, {**ROW, "id": "INC-8", "fix": "Rolled back."}, {**changed, "id": "INC-9"}]
    report = run(memory, write_jsonl(tmp_path / "b.jsonl", rows))
    assert (report.updated, report.imported, len(report.refused)) == (1, 0, 2), report.to_dict()
    assert all("too long" in refused["reason"] for refused in report.refused)
    assert memory.get("jsonl:INC-7-postmortem").status is Status.ACTIVE  # left as it was


def test_a_jsonl_line_naming_a_key_twice_is_refused_naming_it_and_the_other_lines_are_filed(memory, tmp_path):
    # Failed before: the line was filed with its last `title` ("P2"), and nothing said so.
    path = tmp_path / "a.jsonl"
    lines = [
        '{"key": "A-1", "title": "Disk full on db-1", "cause": "Log rotation was off", "title": "P2"}',
        '{"key": "A-2", "title": "Cron overlapped", "cause": "Two schedulers ran", "labels": {"a": 1, "a": 2}}',
        '{"key": "A-3", "title": "Cert expired on the edge", "cause": "Renewal job was disabled"}',
    ]
    path.write_text("\n".join(lines) + "\n")
    report = import_history(memory, reader("jsonl"), path, mapping={"source_id": "key"})
    assert report.imported == 1 and [refusal["location"] for refusal in report.refused] == ["line 1", "line 2"]
    assert report.refused[0]["reason"].startswith("names the key 'title' more than once in one object")
    assert "'a'" in report.refused[1]["reason"]  # a nested object's key too
    assert memory.find("jsonl:A-1-f1") is None and memory.find("jsonl:A-2-f1") is None
    assert memory.get("jsonl:A-3-f1").title
