"""The incident-memory commands, end to end on a real SQLite file."""

import json


def test_incident_lifecycle_catalog_runbooks_and_the_ledger(cli, tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "services:\n  - name: auth-service\n    depends_on: [redis-sessions]\n  - name: redis-sessions\n"
    )
    assert "imported 2 services" in cli("catalog", "import", str(catalog)).stdout
    assert "auth-service: depends on redis-sessions" in cli("catalog", "show").stdout
    cli("runbook", "add", "RB-LRU", "--title", "Switch to volatile-lru", "--step", "set the policy", "--step", "scale")
    untried = cli("runbook", "stats", "RB-LRU").stdout
    assert "RB-LRU: no outcome recorded yet" in untried and "0 of 0" not in untried
    mistyped = cli("runbook", "stats", "RB-LUR", code=2).stderr
    assert "No runbook 'RB-LUR'" in mistyped and "'RB-LRU'" in mistyped
    cli("incident", "open", "Logins slow", "--service", "auth-service", "--severity", "sev2", "--id", "INC-7")
    cli(
        "incident",
        "finding",
        "INC-7",
        "keys evicted under maxmemory",
        "--status",
        "corroborated",
        "--mechanism",
        "eviction storm",
        "--runbook",
        "RB-LRU",
        "--service",
        "redis-sessions",
    )
    cli("incident", "finding", "INC-7", "maybe the network", "--status", "hypothesis")
    closed = cli("incident", "close", "INC-7", "--runbook", "RB-LRU", "--succeeded", "--ttm", "600").stdout
    assert "memory: INC-7-f1" in closed and "sync done" in closed
    stats = json.loads(cli("runbook", "stats", "RB-LRU", "--json").stdout)
    assert stats["attempts"] == 1 and stats["successes"] == 1 and stats["mttr_median_s"] == 600
    cli("outcome", "RB-LRU", "--kind", "rated", "--rating", "1", "--comment", "worked fast")
    assert json.loads(cli("runbook", "stats", "RB-LRU", "--json").stdout)["thumbs_up"] == 1
    text = cli("runbook", "stats", "RB-LRU").stdout
    assert "1 of 1 attempts succeeded" in text and "median 10.0 min" in text and "1 up, 0 down" in text
    table = cli("recall", "eviction storm with keys evicted on auth-service logins", "--severity", "sev2").stdout
    assert "INC-7-f1" in table and "same service" in table and "answer:" in table
    shown = json.loads(cli("incident", "show", "INC-7", "--history").stdout)
    assert shown["incident"]["status"] == "closed" and len(shown["history"]) >= 4
    assert "INC-7  closed" in cli("incident", "list", "--status", "closed").stdout
    assert json.loads(cli("incident", "sync", "INC-7").stdout)["unchanged"] == ["INC-7-f1"]


def test_rerank_settings_and_bad_input(cli):
    weights = json.loads(cli("settings", "rerank", "--age", "0.0").stdout)
    assert weights["age"] == 0.0 and weights["similarity"] == 0.4
    assert "sev1..sev5" in cli("incident", "open", "Broken", "--severity", "sev9", code=2).stderr
    assert "thumbs" in cli("outcome", "RB-X", "--kind", "rated", "--rating", "5", code=2).stderr
    assert "No incident" in cli("incident", "close", "INC-404", code=2).stderr


def test_runbook_stats_says_what_it_looked_for_when_nothing_counts(cli):
    """A mistyped id was refused with the outcome's wording ("its outcome would count for nothing... Record it
    under the runbook's id"), though stats records nothing; and a runbook tried on other services only was
    said to have "no outcome recorded yet" on the one asked, with a command that records none there."""
    cli("runbook", "add", "RB-LRU", "--title", "Switch to volatile-lru", "--step", "set the policy")
    mistyped = cli("runbook", "stats", "RB-LUR", code=2).stderr
    assert "No runbook 'RB-LUR'" in mistyped and "Did you mean 'RB-LRU'?" in mistyped
    assert "outcome would count" not in mistyped and "grandbo runbook stats RB-LRU" in mistyped
    cli("outcome", "RB-LRU", "--kind", "succeeded", "--service", "auth-service")
    elsewhere = cli("runbook", "stats", "RB-LRU", "--service", "billing").stdout
    assert "RB-LRU on billing: no outcome recorded on billing yet" in elsewhere
    assert "1 on every service" in elsewhere and "--service billing" in elsewhere
