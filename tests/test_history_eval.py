"""`grandbo eval|calibrate --from-history`: an organization's own past incidents as a "has this happened before" set.

The importer (`grandbo import-from`) files each past incident as memories carrying `meta.history`; these tests file
them the same way through `remember_many`, and native incidents through the incidents API.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.errors import InvalidInputError
from grandbo.eval.history import ANSWERABLE, NO_SYMPTOMS, UNANSWERABLE, _category, build, observed
from grandbo.eval.history_runs import calibrate_history, evaluate_history
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo

# category -> (labels, what was seen, what was learned); every incident of a category says it in its own words
CATEGORIES: dict[str, tuple[list[str], str, str]] = {
    "lock": (["Database", "Locking"], "checkout requests timed out while orders piled up in queue {n}",
             "a schema migration held an exclusive lock on the orders table for {n} minutes"),
    "dns": (["Network", "DNS"], "clients in region {n} could not resolve api hostnames and saw NXDOMAIN",
            "the resolver cache expired after a zone transfer failed on secondary {n}"),
    "evict": (["Cache", "Eviction"], "session logins failed and users were logged out on shard {n}",
              "redis evicted session keys under maxmemory with allkeys-lru on node {n}"),
    "cert": (["Security", "Certificates"], "browsers showed certificate warnings on the storefront for {n} hours",
             "the tls certificate renewal job silently failed after token rotation {n}"),
    "disk": (["Storage", "Disk"], "log shipping stopped and writes returned ENOSPC on volume {n}",
             "the log volume filled with debug logs left on by release {n}"),
}  # fmt: skip
UNIQUE = [
    (["Power", "Datacenter"], "every rack in hall {n} went dark and hosts stopped answering pings",
     "a utility feed failed and the generator transfer switch stuck"),
    (["Time", "Leap second"], "java services spun at full cpu right after midnight on day {n}",
     "the kernel leap second insertion livelocked futex waits"),
    (["Supply chain", "Dependency"], "builds began failing to fetch a left-pad package version {n}",
     "an upstream maintainer unpublished the package from the registry"),
    (["Billing", "Rounding"], "invoices for {n} customers showed totals off by one cent",
     "currency amounts were rounded per line instead of per invoice"),
    (["Email", "Bounce"], "password reset mails bounced for every gmail address on batch {n}",
     "the spf record lost an include during a dns provider move"),
    (["Queue", "Poison"], "the payments consumer restarted in a loop and lag grew past {n} messages",
     "one malformed message crashed the deserializer on every retry"),
]  # fmt: skip


def history_entries(incident_id: str, labels: list[str], seen: str, learned: str, when: str | None,
                    services: list[str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """What the importer files for one past incident: its post-mortem and a finding, with `meta.history`."""
    history = {"source": "jsonl", "source_id": incident_id, "url": f"https://tracker.example/{incident_id}",
               "incident_id": incident_id, "labels": labels}  # fmt: skip
    common = {"occurred_at": when, "services": services or [], "meta": {"history": history}}
    return [
        {"id": f"{incident_id}-pm", "title": f"Post-mortem {incident_id}", "kind": "post-mortem", **common,
         "body": f"# Post-mortem {incident_id}\nCategory: {'/'.join(labels)}\n\n## Summary\n{seen.capitalize()}.\n\n"
                 f"## Root cause\n{learned.capitalize()}.\n\n## Action items\n- Alert on it sooner.\n"},
        {"id": f"{incident_id}-f1", "title": f"Cause of {incident_id}", "kind": "finding", **common,
         "body": f"Root cause: {learned}."},
    ]  # fmt: skip


def file_history(memory: OrgMemory, incidents: list[tuple[str, list[str], str, str, str | None]]) -> None:
    memory.remember_many([entry for spec in incidents for entry in history_entries(*spec)], actor="import")


def day(n: int) -> str:
    return (datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=n)).isoformat()


def many(answerable: range, unanswerable: range, *, dated_from: int | None = None) -> list[Any]:
    """Incidents numbered `answerable` over the shared categories, and `unanswerable` ones of a category each;
    dated one a day from `dated_from` in that order (answerable ones first), or undated (None)."""
    specs = []
    for n in answerable:
        key = list(CATEGORIES)[n % len(CATEGORIES)]
        labels, seen, learned = CATEGORIES[key]
        specs.append((f"{key}-{n}", labels, seen.format(n=n), learned.format(n=n)))
    for n in unanswerable:
        labels, seen, learned = UNIQUE[n % len(UNIQUE)]
        specs.append((f"unique-{n}", [*labels, f"variant {n}"], seen.format(n=n), learned.format(n=n)))
    return [(*spec, None if dated_from is None else day(dated_from + i)) for i, spec in enumerate(specs)]


def snapshot(grandbo: Grandbo, memory: OrgMemory) -> Any:
    """Everything a read-only evaluation must leave as it was."""
    entries = [e.model_dump() for e in memory.entries(include_inactive=True)]
    incidents = [i.model_dump() for i in memory.incidents.find()]
    return entries, incidents, memory.changed_since(0)[0], memory.org_settings.calibration(), grandbo.orgs()


def test_the_set_grades_own_memories_2_same_label_1_and_holds_out_a_category_seen_once(memory):
    file_history(memory, [
        ("A", ["Database", "Locking"], "checkout timed out while orders piled up", "a migration locked orders", day(1)),
        ("B", ["database", "locking "], "order writes hung behind a blocked query", "a vacuum full took a lock", day(2)),
        ("C", ["Database", "Replication"], "reads returned stale carts for ten minutes", "the replica lagged", day(3)),
        ("D", ["Database", "Replication"], "customers saw old prices after an update", "replication slot stalled",
         day(4)),
        ("E", ["Network", "DDoS"], "the edge dropped most requests from every region", "a syn flood hit", day(5)),
        ("F", [], "the admin console returned blank pages to every operator", "a css bundle was missing", day(6)),
    ])  # fmt: skip
    built = build(memory)
    assert {i.id: built.role[i.id] for i in built.incidents} == {
        "A": ANSWERABLE, "B": ANSWERABLE, "C": ANSWERABLE, "D": ANSWERABLE, "E": UNANSWERABLE, "F": ANSWERABLE,
    }  # fmt: skip
    assert built.qrels["A"] == {"A-pm": 2, "A-f1": 2, "B-pm": 1, "B-f1": 1, "C-pm": 1, "C-f1": 1, "D-pm": 1, "D-f1": 1}
    assert built.qrels["F"] == {"F-pm": 2, "F-f1": 2}  # no labels: its own memories only, never held out
    corpus = {doc["_id"]: doc for doc in built.corpus}
    assert "E-pm" not in corpus and "E-f1" not in corpus and "E" not in built.qrels  # held out: nothing to find
    question = built.by_id["A"].question
    assert question == "Checkout timed out while orders piled up."  # what was seen: the summary, not the title
    own = corpus["A-pm"]
    assert "checkout timed out" not in (own["title"] + own["text"]).lower()  # cut out of its own memories
    assert "A migration locked orders." in own["text"] and "Category" not in own["text"]
    assert built.summary()["unlabelled"] == 1


def test_the_question_is_what_was_seen_never_what_was_learned():
    postmortem = (
        "# Payments outage\n**Severity:** sev1\nSource: https://status.example/1\n\n## Impact\n"
        "Card payments failed for 40 minutes.\n- Checkout p99 above 9 s\n\n## Root cause(s)\nA bad pool size.\n"
        "## Timeline\n- 10:02: alerts on payment errors\nResolution: rolled back the config.\n"
        "Lessons learned:\n- size pools from load tests\n"
    )
    assert observed(postmortem) == [
        "Card payments failed for 40 minutes.", "Checkout p99 above 9 s", "10:02: alerts on payment errors",
    ]  # fmt: skip


def test_the_split_is_by_time_newer_dated_half_is_test_undated_ones_go_to_dev_counted(memory):
    dated = many(range(6), range(0), dated_from=0)
    undated = many(range(6, 10), range(0))  # four more of the same categories, without a date
    file_history(memory, [*dated, *undated])
    corrected = memory.correct(
        undated[0][0] + "-pm", {"body": "# Post-mortem\n## Summary\nLogins failed on shard 9 for every user."}
    )
    assert corrected.supersedes is not None  # a correction keeps "no date" (it carries the first write's time)
    built = build(memory)
    assert {i for i, s in built.split.items() if s == "test"} == {spec[0] for spec in dated[3:]}
    assert {i for i, s in built.split.items() if s == "dev"} == {spec[0] for spec in [*dated[:3], *undated]}
    summary = built.summary()
    assert summary["undated"] == 4 and summary["test_from"] == day(3)
    assert built.by_id[undated[0][0]].when is None and built.by_id[dated[0][0]].when is not None


def test_closed_native_incidents_are_asked_by_their_title_and_symptoms(memory):
    for number, title in ((1, "Checkout latency spike"), (2, "Cart service slow for everyone")):
        incident = memory.incidents.open(title, symptoms=[f"p99 above {number} s on checkout-api for EU users"],
                                         services=["checkout-api"], incident_id=f"INC-{number}")  # fmt: skip
        memory.incidents.add_finding(incident.id, "Connection pool exhausted", status="corroborated",
                                     mechanism="Pool exhaustion", root_cause=f"pool of {number * 10} connections")  # fmt: skip
        memory.incidents.close(incident.id, postmortem=f"## Summary\n{title}.\n## Root cause\nThe pool was too small.")
    memory.incidents.open("Still open, not history", incident_id="INC-3")
    built = build(memory)
    assert [(i.id, i.origin, built.role[i.id]) for i in built.incidents] == [
        ("INC-1", "native", ANSWERABLE), ("INC-2", "native", ANSWERABLE),
    ]  # fmt: skip
    assert built.by_id["INC-1"].question == "Checkout latency spike p99 above 1 s on checkout-api for EU users"
    assert built.qrels["INC-1"] == {"INC-1-f1": 2, "INC-1-postmortem": 2, "INC-2-f1": 1, "INC-2-postmortem": 1}
    finding = next(doc for doc in built.corpus if doc["_id"] == "INC-1-f1")
    assert finding["title"] == "Connection pool exhausted" and "p99" not in finding["text"]
    assert "Root cause: pool of 10 connections" in finding["text"]


def test_eval_from_history_scores_each_arm_per_split_and_leaves_the_org_as_it_was(settings, grandbo, memory):
    file_history(memory, [*many(range(8), range(2)), *many(range(8, 14), range(2, 6), dated_from=0)])
    before = snapshot(grandbo, memory)
    built = build(memory)  # test: the newest 5 of the 10 dated, answerable 13 first, then the 4 held out
    assert [built.count(role, split) for split in ("dev", "test") for role in (ANSWERABLE, UNANSWERABLE)] == [
        13, 2, 1, 4,
    ]  # fmt: skip
    report = evaluate_history(built, settings, "deterministic", cache=False)
    assert [(line["split"], line["arm"]) for line in report.lines] == [
        (split, arm) for split in ("dev", "test") for arm in ("lexical", "vector", "hybrid", "reranked")
    ]
    assert all(0.0 <= line["nDCG@10"] <= 1.0 and 0.0 <= line["R@10_own"] <= 1.0 for line in report.lines)
    assert max(line["R@10_own"] for line in report.lines) > 0  # recall finds incidents from their symptoms
    assert [(found["split"], found["unanswerable"]) for found in report.separations] == [("dev", 2), ("test", 4)]
    assert snapshot(grandbo, memory) == before


def test_calibrate_from_history_refuses_with_too_few_saying_how_many_are_missing(settings, memory):
    file_history(memory, many(range(12), range(2)))
    with pytest.raises(InvalidInputError) as refused:
        calibrate_history(build(memory), settings, "deterministic", cache=False)
    assert "12 answerable and 2 unanswerable" in refused.value.message
    assert "8 more answerable and 3 more unanswerable are missing" in refused.value.message
    assert refused.value.detail["missing_unanswerable"] == 3


def test_calibrate_from_history_fits_on_dev_and_reports_on_test(settings, grandbo, memory):
    file_history(memory, [*many(range(24), range(6)), *many(range(24, 32), range(6, 8), dated_from=0)])
    before = snapshot(grandbo, memory)
    built = build(memory)
    assert (built.count(ANSWERABLE, "dev"), built.count(UNANSWERABLE, "dev")) == (29, 6)
    fitted = calibrate_history(built, settings, "deterministic", cache=False)
    assert fitted.calibration.provider == "deterministic"
    assert fitted.calibration.fitted_on == f"{memory.org} history dev: 29 answerable, 6 unanswerable queries"
    assert (fitted.test["answerable"], fitted.test["unanswerable"]) == (3, 2)
    assert 0.0 <= fitted.test["accuracy"] <= 1.0 and fitted.dev["auc"] is not None
    assert snapshot(grandbo, memory) == before  # storing it is the caller's (the CLI's) one write


def test_an_org_without_history_is_told_how_to_get_some(memory):
    memory.remember({"title": "Disk full on db-1", "body": "logs filled the volume"})
    with pytest.raises(InvalidInputError, match="grandbo import-from"):
        build(memory)
    file_history(memory, [("A", [], "it", "x", None)])  # too little said of what was seen to ask with
    built = build(memory)
    assert built.role["A"] == NO_SYMPTOMS and not built.asked()
    with pytest.raises(InvalidInputError, match="none to score recall on: 0 answerable"):
        evaluate_history(built, Settings(), "deterministic", cache=False)


# ------------------------------------------------------------------ the CLI (embedded store)


def _file_in_cli_store(specs: list[Any]) -> None:
    with Grandbo.open(Settings()) as grandbo:
        file_history(grandbo.org("default"), specs)


def test_cli_eval_from_history_prints_the_set_then_json_lines_like_eval(cli):
    _file_in_cli_store([*many(range(8), range(2)), *many(range(8, 14), range(2, 6), dated_from=0)])
    lines = [json.loads(line) for line in cli("eval", "--from-history", "--embedding", "deterministic",
                                              "--json").stdout.splitlines()]  # fmt: skip
    assert lines[0]["set"] == "default history" and lines[0]["dev"] == {"answerable": 13, "unanswerable": 2}
    arms = [line for line in lines if "arm" in line]
    assert {"set", "arm", "nDCG@10", "R@5", "R@10", "MRR@10", "split", "R@10_own"} <= set(arms[0])
    assert [line["split"] for line in arms] == ["dev"] * 4 + ["test"] * 4
    text = cli("eval", "--from-history", "--org", "default", "--embedding", "deterministic").stdout
    assert "history of 'default': 20 past incidents" in text and "own incident R@10" in text
    assert not any(line.lstrip().startswith("{") for line in text.splitlines())
    gated = cli("eval", "--from-history", "--embedding", "deterministic", "--min", "R@5=1", code=1)
    assert "below the bar: test hybrid R@5" in gated.stderr  # 6 relevant memories: at most 5 of them


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["eval"], "Give a BEIR-layout folder"),
        (["eval", "incidents", "--from-history"], "not both"),
        (["eval", "--from-history", "--split", "dev"], "--split applies to a data set folder"),
        (["eval", "incidents", "--org", "default"], "Add --from-history"),
        (["eval", "--from-history", "--org", "nope"], "No organization 'nope'"),
        (["eval", "--from-history"], "no past incidents to learn from"),
        (["calibrate"], "Give a BEIR-layout folder"),
        (["calibrate", "--from-history", "--split", "dev"], "--split applies"),
    ],
)
def test_cli_from_history_errors_are_one_clear_line(cli, args, said):
    result = cli(*args, code=2)
    assert said in result.stderr and "Traceback" not in result.stderr


def test_cli_calibrate_from_history_refuses_with_too_few_and_stores_with_enough(cli):
    _file_in_cli_store(many(range(12), range(2)))
    refused = cli("calibrate", "--from-history", code=2)
    assert "8 more answerable and 3 more unanswerable are missing" in refused.stderr
    assert "nothing was stored" in refused.stderr and "Traceback" not in refused.stderr
    assert json.loads(cli("settings", "calibration", "--json").stdout)["applies"] == "shipped"

    _file_in_cli_store([*many(range(12, 36), range(2, 6)), *many(range(36, 44), range(6, 8), dated_from=0)])
    fitted = json.loads(cli("calibrate", "--from-history", "--json").stdout)
    assert fitted["calibration"]["source"] == "organization"
    assert fitted["set"]["dev"] == {"answerable": 41, "unanswerable": 6} and fitted["test"]["accuracy"] is not None
    state = json.loads(cli("settings", "calibration", "--json").stdout)
    assert state["applies"] == "organization" and "default history dev" in state["calibration"]["fitted_on"]
    text = cli("calibrate", "--from-history").stdout
    assert re.search(r"test \(\d+ answerable, \d+ unanswerable\): accuracy", text) and "stored" in text


def test_a_split_of_unanswerable_incidents_only_is_scored_not_a_traceback(settings, memory):
    # dev answers (undated, shared categories); every dated incident is of a category seen once: test holds no
    # answerable query, and the verdict's answerable figures are None there (a traceback before)
    file_history(memory, [*many(range(6), range(0)), *many(range(0), range(4), dated_from=0)])
    built = build(memory)
    assert built.count(ANSWERABLE, "test") == 0 and built.count(UNANSWERABLE, "test") > 0
    report = evaluate_history(built, settings, "deterministic", cache=False)
    test = next(found for found in report.separations if found["split"] == "test")
    assert test["answerable"] == 0 and test["separation"]["reranked"]["answerable_mean_top"] is None
    assert test["separation"]["reranked"]["novel_when_unanswerable"] is not None


def test_attribute_labels_are_no_category_and_a_label_s_parts_are():
    file_like = [["Database/Human Error", "team:payments", "urgency:high"], ["database", "Human  error"]]
    assert _category(file_like[0]) == _category(file_like[1]) == frozenset({"database", "human error"})


def test_an_imported_incident_is_asked_what_was_seen_never_its_title(memory, tmp_path):
    """An imported record's title often names its cause, and a generic one is replaced by the cause's first
    sentence: the question leaves it out and asks what the post-mortem says was seen (it asked the cause)."""
    from grandbo.history.importer import import_history
    from grandbo.history.registry import reader

    row = {"id": "P-1", "title": "Acme Incident", "date": "2024-05-01", "category": "Database/Locking",
           "root_cause": "A schema migration held an exclusive lock on the orders table.",
           "postmortem": "# Acme outage\nCheckout requests timed out for 40 minutes while order writes queued.\n"
                         "Root cause: A schema migration held an exclusive lock on the orders table."}  # fmt: skip
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(row) + "\n")
    mapping = {"started_at": "date", "labels": "category", "cause": "root_cause", "postmortem": "postmortem"}
    import_history(memory, reader("jsonl"), path, mapping=mapping)
    assert memory.incidents.get("jsonl:P-1").title.startswith("A schema migration")  # derived from the cause
    (incident,) = [i for i in build(memory).incidents if i.id == "jsonl:P-1"]
    assert "timed out" in incident.question and "exclusive lock" not in incident.question
