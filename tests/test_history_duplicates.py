"""Two records with one id in one import (a copied post-mortem template that keeps the old `id:`, a duplicated export
page): the first is filed, a later one with other content is refused naming both places, an exact copy is skipped,
and every run keeps the same one (probe 20b, finding I2)."""

from __future__ import annotations

import json
from pathlib import Path

from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from tests.serving import serving

REDIS = "---\nid: INC-100\ntitle: Redis eviction storm\ndate: 2024-01-01\n---\n# Redis eviction storm\n## Root cause\nmaxmemory\n"
KAFKA = "---\nid: INC-100\ntitle: Kafka lag during deploy\ndate: 2024-02-02\n---\n# Kafka lag during deploy\n## Root cause\nconsumer rebalance\n"


def _pd(title: str, number: int = 20) -> dict:
    return {"id": f"PD{number}", "type": "incident", "incident_number": number, "title": title, "status": "resolved",
            "created_at": "2024-03-01T00:00:00Z", "service": {"summary": "api"}}  # fmt: skip


def _page(*incidents: dict) -> str:
    return json.dumps({"incidents": list(incidents)})


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "postmortems"
    folder.mkdir()
    (folder / "2024-01-01-redis.md").write_text(REDIS)
    (folder / "2024-02-02-kafka.md").write_text(KAFKA)
    return folder


def test_a_copied_template_id_is_refused_naming_both_files_and_every_run_keeps_the_first(memory, tmp_path):
    folder = _folder(tmp_path)
    first = import_history(memory, reader("markdown"), folder)
    assert (first.imported, first.updated) == (1, 0)  # the old code: imported 1, updated 1 (Kafka replaced Redis)
    [refusal] = first.refused
    assert refusal["location"] == "2024-02-02-kafka.md"
    assert refusal["reason"].startswith(
        "two records have id INC-100 (2024-01-01-redis.md and 2024-02-02-kafka.md) with different content"
    )
    assert "give each its own id, or remove the copy" in refusal["reason"]
    for _ in range(2):  # the old code flipped the incident between the two at every run
        again = import_history(memory, reader("markdown"), folder)
        assert (again.imported, again.updated, again.unchanged, len(again.refused)) == (0, 0, 1, 1)
    assert memory.incidents.get("markdown:INC-100").title == "Redis eviction storm"
    assert "maxmemory" in memory.get("markdown:INC-100-postmortem").body
    assert len(memory.history("markdown:INC-100-postmortem")) == 1  # never corrected back and forth


def test_an_exact_copy_is_skipped_and_a_repeat_with_other_content_refused_in_a_jsonl_file(memory, tmp_path):
    row = {
        "id": "INC-7",
        "title": "Checkout returned 502s",
        "summary": "Customers could not pay.",
        "date": "2025-03-02",
    }
    rows = [row, {**row, "id": "OTHER"}, row, {**row, "summary": "Checkout answered 502s."}]
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = import_history(memory, reader("jsonl"), path, mapping={"started_at": "date"})
    assert (report.imported, report.updated, report.skipped) == (2, 0, 1)
    assert report.decisions["duplicates_skipped"] == 1
    assert report.refused == [{"location": "line 4", "reason": (
        "two records have id INC-7 (line 1 and line 4) with different content (only the first is imported): give each "
        "its own id, or remove the copy")}]  # fmt: skip
    assert memory.incidents.get("jsonl:INC-7").symptoms == ["Customers could not pay."]
    dry = import_history(memory, reader("jsonl"), path, mapping={"started_at": "date"}, dry_run=True)
    assert (dry.imported, dry.updated, dry.unchanged, dry.skipped, len(dry.refused)) == (0, 0, 2, 1, 1)


def test_the_cli_exits_1_on_a_duplicated_pagerduty_page_and_files_the_first(cli, tmp_path):
    path = tmp_path / "pd.json"
    path.write_text(_page(_pd("api latency after deploy"), _pd("second copy same id"), _pd("db failover", 21)))
    cli("orgs", "create", "acme")
    done = cli("import-from", "pagerduty", str(path), "--org", "acme", code=1)
    assert "imported 2, updated 0" in done.stdout
    assert (
        "incidents[1]: two records have id PD20 (incidents[0] and incidents[1]) with different content" in done.stderr
    )
    same = tmp_path / "same.json"
    same.write_text(_page(_pd("api latency after deploy"), _pd("api latency after deploy")))
    copied = json.loads(cli("import-from", "pagerduty", str(same), "--org", "acme", "--json").stdout)
    assert (copied["unchanged"], copied["skipped"], copied["refused"]) == (1, 1, [])
    shown = json.loads(cli("incident", "show", "pagerduty:PD20", "--org", "acme").stdout)
    assert shown["incident"]["title"] == "api latency after deploy"


def test_the_rest_route_refuses_the_second_record_with_an_id(grandbo):
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    body = _page(_pd("api latency after deploy"), _pd("second copy same id")).encode()
    with serving(grandbo) as served, served.client(admin) as client:
        for _ in range(2):
            answer = client.post("/v1/import-from/pagerduty", content=body).json()
            assert answer["updated"] == 0 and [r["location"] for r in answer["refused"]] == ["incidents[1]"]
    assert memory.incidents.get("pagerduty:PD20").title == "api latency after deploy"
