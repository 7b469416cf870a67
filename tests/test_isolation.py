"""One organization never sees another's memory, through any seam."""

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.errors import NotFoundError

SECRET = {
    "id": "B-SECRET",
    "title": "Redis eviction storm on auth-service",
    "kind": "finding",
    "body": "maxmemory reached, keys evicted, auth-service p99 above 1200ms; ERR_CONN_RESET",
    "tags": ["ERR_CONN_RESET"],
    "services": ["auth-service"],
}
TOPIC = "redis eviction storm with ERR_CONN_RESET on auth-service"


def test_org_a_never_reads_org_b_even_when_b_matches_better(grandbo, store):
    a, b = grandbo.org("org-a", create=True), grandbo.org("org-b", create=True)
    b.remember(SECRET)
    a.remember({"title": "Unrelated disk alert", "body": "disk full on a batch node"})
    for arm in ("lexical", "vector", "hybrid"):
        assert "B-SECRET" not in [hit.entry.id for hit in a.recall(TOPIC, arm=arm).hits]
    assert b.recall(TOPIC).hits[0].entry.id == "B-SECRET"
    assert store.get_many("org-a", ["B-SECRET"]) == {}
    assert store.events("org-a", "B-SECRET") == []
    assert all(e.org_id == "org-a" for e in store.entries("org-a", include_inactive=True))
    assert a.stats().total == 1 and b.stats().total == 1
    with store.snapshot("org-a") as snapshot:  # the change feed the search index is built from
        assert [row.entry_id for row in snapshot.rows(0, active_only=False)] == [a.entries()[0].id]
        assert all(row["id"] != "B-SECRET" for row in snapshot.recent(0, 100))


def test_writes_cannot_reach_another_org(grandbo):
    a, b = grandbo.org("org-a", create=True), grandbo.org("org-b", create=True)
    b.remember(SECRET)
    with pytest.raises(NotFoundError, match="No entry 'B-SECRET' in org 'org-a'"):
        a.correct("B-SECRET", {"title": "hijack"})
    with pytest.raises(NotFoundError):
        a.retire("B-SECRET")
    assert b.get("B-SECRET").status.value == "active" and b.get("B-SECRET").title == SECRET["title"]


def test_the_cli_scopes_every_command_to_its_org(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--embedding", "deterministic"]).exit_code == 0
    path = tmp_path / "b.jsonl"
    path.write_text('{"id": "B-SECRET", "title": "Redis eviction storm on auth-service", "body": "ERR_CONN_RESET"}\n')
    for org in ("org-a", "org-b"):
        assert runner.invoke(app, ["orgs", "create", org]).exit_code == 0
    assert runner.invoke(app, ["import", str(path), "--org", "org-b"]).exit_code == 0
    out = runner.invoke(app, ["recall", TOPIC, "--org", "org-a", "--json"])
    assert out.exit_code == 0 and "B-SECRET" not in out.stdout
    shown = runner.invoke(app, ["show", "B-SECRET", "--org", "org-a"])
    assert shown.exit_code == 2 and "No entry 'B-SECRET' in org 'org-a'" in shown.stderr


def test_an_unknown_org_is_refused_unless_asked_for(grandbo):
    with pytest.raises(NotFoundError, match=r"No organization 'acmee'.*grandbo orgs create acmee"):
        grandbo.org("acmee")
    assert "acmee" not in grandbo.orgs()
    grandbo.org("acmee", create=True).remember({"title": "now it exists"})
    assert grandbo.org("acmee").stats().total == 1


def test_the_cli_refuses_a_mistyped_org_instead_of_answering_from_an_empty_one():
    runner = CliRunner()
    assert runner.invoke(app, ["init", "--embedding", "deterministic", "--org", "demo"]).exit_code == 0
    out = runner.invoke(app, ["recall", "redis evicted session keys under memory pressure", "--org", "dmeo"])
    assert out.exit_code == 2 and "No organization 'dmeo'" in out.stderr and "grandbo orgs create dmeo" in out.stderr
    assert "Traceback" not in out.stderr
    assert runner.invoke(app, ["orgs", "list"]).stdout.split() == ["demo"]


def test_the_handle_holds_no_store_and_takes_no_org(memory):
    import inspect

    from grandbo.memory import OrgMemory

    assert not any("store" in name for name in vars(memory))
    named = [name for name in dir(memory) if "org" in name.lower() and not name.startswith("__")]
    assert named == ["_org", "org", "org_settings"]  # org_settings: this org's own, no other's
    faces = [OrgMemory, *(type(getattr(memory, tier)) for tier in
                          ("incidents", "runbooks", "ledger", "catalog", "org_settings", "profile", "learning"))]  # fmt: skip
    for face in faces:
        for name, method in inspect.getmembers(face, inspect.isfunction):
            if not name.startswith("_"):
                assert not {"org", "org_id"} & set(inspect.signature(method).parameters), (face, name)
