"""Stored documents of every tier that fail their model (written by an older release, changed by hand or by a
damaged disk): a single read is an error naming the record and its fields (`record_unreadable`), a listing
leaves the record out (logged) and keeps every other one; an unreadable key or secret authenticates nothing.
Each record is corrupted straight in the database, then read through the real CLI and REST API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.ingest.signatures import sign
from grandbo.ports import DocumentWrite
from tests.serving import serving
from tests.test_webhooks import PAGERDUTY


@pytest.fixture
def corrupt(raw, backend):  # type: ignore[no-untyped-def]
    """Replace a stored document's data with `data`, in the database itself (on Postgres as the app role)."""

    def run(collection: str, doc_id: str, data: Any, org: str = "acme") -> None:
        cast = "::jsonb" if backend == "postgres" else ""
        raw(
            f"UPDATE documents SET data = %s{cast} WHERE org_id = %s AND collection = %s AND doc_id = %s",
            (json.dumps(data), org, collection, doc_id),
            org=org,
        )
        (stored,) = raw(
            "SELECT data FROM documents WHERE org_id = %s AND collection = %s AND doc_id = %s",
            (org, collection, doc_id),
            org=org,
        )[0]
        assert (json.loads(stored) if isinstance(stored, str) else stored) == data

    return run


@pytest.fixture
def grandbo_cli(settings, monkeypatch):  # type: ignore[no-untyped-def]
    """Run `grandbo ARGS` on the test's store (either backend); asserts the exit code."""
    monkeypatch.setenv("GRANDBO_HOME", str(settings.home))
    if settings.database_url:
        monkeypatch.setenv("GRANDBO_DATABASE_URL", settings.database_url)

    def run(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
        result = CliRunner().invoke(app, [*args, "--org", "acme"])
        assert result.exit_code == code, (result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        return result

    return run


def _note(memory, note_id: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    data = {
        "id": note_id, "category": "tone", "part": "tone_style", "text": f"Rule {note_id}.", "status": "pending",
        "signals": [], "fingerprint": note_id, "created_at": "2026-01-01T00:00:00+00:00",
    }  # fmt: skip
    memory._documents.put([DocumentWrite("learned_note", note_id, data, "note.learned", ref="tone")], "test")
    return data


def test_an_unreadable_learned_note_is_named_and_the_other_notes_still_list(grandbo, memory, corrupt, grandbo_cli):
    _note(memory, "note-good")
    bad = _note(memory, "note-bad")
    corrupt("learned_note", "note-bad", {**bad, "category": "astrology"})
    assert [n.id for n in memory.learning.notes(include_inactive=True)] == ["note-good"]
    listed = grandbo_cli("notes", "list").stdout
    assert "note-good" in listed and "note-bad" not in listed
    refused = grandbo_cli("notes", "approve", "note-bad", code=2).stderr
    assert "learned note 'note-bad' cannot be read: category" in refused and "grandbo export" in refused
    _, key = memory.keys.create("admin")
    with serving(grandbo) as served, served.client(key) as client:
        notes = client.get("/v1/notes")
        approve = client.post("/v1/notes/note-bad/approve")
    assert notes.status_code == 200 and [n["id"] for n in notes.json()["items"]] == ["note-good"]
    assert approve.status_code == 500 and approve.json()["error"]["type"] == "record_unreadable"
    assert approve.json()["error"]["detail"] == {"id": "note-bad", "fields": ["category"]}


def test_an_unreadable_key_never_authenticates_and_the_other_keys_still_work(grandbo, memory, corrupt, grandbo_cli):
    good, admin = memory.keys.create("admin", name="ops")
    bad, stolen = memory.keys.create("read", name="old")
    stored = memory._documents.get("api_key", bad.id).data
    corrupt("api_key", bad.id, {**stored, "scope": "root"})  # its hash still matches the key
    assert [k.id for k in memory.keys.all()] == [good.id]
    assert memory.keys.verify(stolen) is None and memory.keys.verify(admin) is not None
    listed = grandbo_cli("keys", "list").stdout
    assert good.id in listed and bad.id not in listed
    refused = grandbo_cli("keys", "revoke", bad.id, code=2).stderr
    assert f"API key '{bad.id}' cannot be read: scope" in refused and "grandbo keys create" in refused
    with serving(grandbo) as served, served.client(admin) as client, served.client(stolen) as thief:
        keys = client.get("/v1/keys")
        revoke = client.delete(f"/v1/keys/{bad.id}")
        refused_key = thief.get("/v1/stats")
    assert keys.status_code == 200 and [k["id"] for k in keys.json()["items"]] == [good.id]
    assert revoke.status_code == 500 and revoke.json()["error"]["type"] == "record_unreadable"
    assert refused_key.status_code == 401 and refused_key.json()["error"]["type"] == "not_authorized"


def test_an_unreadable_webhook_secret_verifies_no_delivery_until_it_is_added_again(grandbo, memory, corrupt):
    memory.webhook_secrets.add("pagerduty", "pd-secret-one")
    # One string where the list of secrets belongs: read raw, each of its letters was a secret that verified.
    corrupt("webhook_secret", "pagerduty", {"secrets": "pd-secret-one"})
    _, key = memory.keys.create("write")
    body = json.dumps(PAGERDUTY).encode()
    headers = {"Content-Type": "application/json"}
    with serving(grandbo) as served, served.client(key) as client:
        forged = client.post("/v1/webhooks/pagerduty", content=body,
                             headers={**headers, "X-PagerDuty-Signature": sign(body, "p")})  # fmt: skip
        memory.webhook_secrets.add("pagerduty", "pd-secret-two")  # the remedy the error names
        signed = client.post("/v1/webhooks/pagerduty", content=body,
                             headers={**headers, "X-PagerDuty-Signature": sign(body, "pd-secret-two")})  # fmt: skip
    assert forged.status_code == 500 and forged.json()["error"]["type"] == "record_unreadable"
    assert "grandbo webhooks add" in forged.json()["error"]["message"]
    assert signed.status_code == 202, signed.text
    assert memory.webhook_secrets.secrets("pagerduty") == ["pd-secret-two"]


def test_an_unreadable_profile_and_settings_are_named_with_their_remedy(grandbo, memory, corrupt, grandbo_cli):
    memory.profile.update({"facts": {"name": "Acme"}, "people": [{"name": "Dana", "role": "SRE"}]})
    corrupt("profile", "explicit", {"facts": {"name": "Acme"}, "people": [{"name": ""}], "voice": {}})
    refused = grandbo_cli("profile", "show", code=2).stderr
    assert "profile 'explicit' cannot be read: people.0.name" in refused
    memory.org_settings.set_auto_apply_learned(False)
    corrupt("settings", "learning", {"auto_apply": "false"})  # read raw, a non-empty string was True: auto-apply
    refused = grandbo_cli("settings", "learning", code=2).stderr
    assert "learning setting 'learning' cannot be read: auto_apply" in refused and "--review" in refused
    assert "wait for review" in grandbo_cli("settings", "learning", "--review").stdout
    memory.org_settings.set_rerank({"similarity": 0.5})
    corrupt("settings", "rerank", {"similarity": 7})
    _, key = memory.keys.create("admin")
    with serving(grandbo) as served, served.client(key) as client:
        profile = client.get("/v1/profile")
        weights = client.get("/v1/settings/rerank")
        recall = client.post("/v1/recall", json={"topic": "redis evicted the session keys"})
        client.put("/v1/settings/rerank", json={"similarity": 0.5})  # the remedy the error names
        mended = client.get("/v1/settings/rerank")
    assert profile.status_code == 500 and profile.json()["error"]["detail"]["fields"] == ["people.0.name"]
    assert weights.status_code == 500 and "PUT /v1/settings/rerank" in weights.json()["error"]["message"]
    # A recall during an incident still answers: with the default weights, and a note saying so.
    assert recall.status_code == 200, recall.text
    assert any("re-ranking weights 'rerank' cannot be read" in note and "recall used the default weights" in note
               for note in recall.json()["notes"])  # fmt: skip
    assert mended.status_code == 200 and mended.json()["similarity"] == 0.5


def test_an_unreadable_service_or_outcome_is_left_out_and_the_rest_still_count(grandbo, memory, corrupt, grandbo_cli):
    memory.catalog.import_text("services: [{name: auth-service, depends_on: [redis]}, {name: billing}]")
    corrupt("service", "billing", {"name": "billing", "tier": 99})
    memory.runbooks.add("rb-redis", "Restart redis", ["restart the primary"])
    for kind in ("succeeded", "failed"):
        memory.ledger.record("rb-redis", kind, outcome_id=f"out-{kind}")
    corrupt("outcome", "out-failed", {**memory._documents.get("outcome", "out-failed").data, "kind": "exploded"})
    shown = grandbo_cli("catalog", "show").stdout
    assert "auth-service: depends on redis" in shown and "billing" not in shown
    assert "1 of 1 attempts succeeded" in grandbo_cli("runbook", "stats", "rb-redis").stdout
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        catalog = client.get("/v1/catalog")
        runbook = client.get("/v1/runbooks/rb-redis")
        recall = client.post("/v1/recall", json={"topic": "restart the redis primary"})
    assert catalog.status_code == 200 and [s["name"] for s in catalog.json()["items"]] == ["auth-service"]
    assert runbook.status_code == 200 and runbook.json()["effectiveness"]["attempts"] == 1
    assert recall.status_code == 200 and recall.json()["hits"][0]["entry"]["id"] == "rb-redis"


def test_an_unreadable_edit_signal_is_left_out_and_the_edits_still_fold(memory, corrupt):
    first, _ = memory.learning.record_edit("We will utilize the cache.", "We will use the cache.",
                                           content_type="status-update", author="dana")  # fmt: skip
    corrupt("edit_signal", first.id, {**memory._documents.get("edit_signal", first.id).data, "category": 5})
    notes = [
        memory.learning.record_edit(f"Please utilize step {n}.", f"Please use step {n}.", content_type="status-update",
                                    author="dana")[1]
        for n in range(3)
    ]  # fmt: skip
    assert first.id not in [s.id for s in memory.learning.signals()]
    assert notes[:2] == [None, None] and notes[2] is not None and first.id not in notes[2].signals


def test_an_unreadable_alert_leaves_the_triage_of_every_other_alert_working(grandbo, memory, corrupt):
    """Triage counts similar alerts from every stored alert, read raw: one without its `alert` part made the
    triage of every later alert fail (a KeyError kept as each new alert's error, a 500 from /v1/triage)."""
    from grandbo.ingest import adapters
    from tests.test_webhooks import ALERTMANAGER, REDIS

    memory.remember(REDIS)
    ((stored, _), *_) = memory.alerts.receive(adapters.parse("alertmanager", json.dumps(ALERTMANAGER).encode()))
    corrupt("alert", stored.id, {"id": stored.id, "deliveries": 1})
    later = {**ALERTMANAGER, "alerts": [{**a, "fingerprint": a["fingerprint"] + "9"} for a in ALERTMANAGER["alerts"]]}
    _, key = memory.keys.create("write")
    with serving(grandbo) as served, served.client(key) as client:
        delivered = client.post("/v1/webhooks/alertmanager", json=later)
        triage = client.post("/v1/triage", json={"summary": "redis evicting keys under maxmemory", "narrate": False})
        listed = client.get("/v1/alerts")
    assert delivered.status_code == 202 and delivered.json()["new"] == 3
    assert triage.status_code == 200, triage.text
    assert listed.status_code == 200 and stored.id not in [a["id"] for a in listed.json()["items"]]
    new = [a for a in listed.json()["items"] if a["id"] in {n["id"] for n in delivered.json()["alerts"]}]
    assert len(new) == 3 and {a["state"] for a in new} == {"recalled"}, [a.get("error") for a in new]


def test_an_unreadable_redaction_setting_refuses_writes_until_its_patterns_are_stated_again(
    grandbo, memory, corrupt, grandbo_cli
):  # type: ignore[no-untyped-def]
    """Every write of the organization masks its text first, so a redaction setting that cannot be read
    refuses them all (never stores unmasked text). Its remedy must work: every change to the setting read the
    unreadable one first, so nothing short of a hand edit of the database could mend it."""
    from tests.test_webhooks import REDIS

    memory.org_settings.set_redaction(add={"ticket": r"TCK-\d+"}, disable=["email"])
    corrupt("settings", "redaction", {"extra": {"ticket": 5}, "disabled": ["email"]})
    refused = grandbo_cli("settings", "redaction", code=2).stderr
    assert "redaction setting 'redaction' cannot be read: extra.ticket" in refused
    assert "grandbo settings redaction --add NAME=REGEX" in refused
    with pytest.raises(Exception, match="redaction setting 'redaction' cannot be read"):
        memory.remember(REDIS)  # refused, not stored unmasked
    grandbo_cli("settings", "redaction", "--add", r"ticket=TCK-\d+")  # the remedy the error names
    assert memory.org_settings.redaction() == {"extra": {"ticket": r"TCK-\d+"}, "disabled": []}
    stored = memory.remember({**REDIS, "body": REDIS["body"] + " See TCK-1234."})
    assert "TCK-1234" not in stored.body
    _, key = memory.keys.create("admin")
    corrupt("settings", "redaction", {"extra": [], "disabled": []})
    with serving(grandbo) as served, served.client(key) as client:
        read = client.get("/v1/settings/redaction")
        mended = client.patch("/v1/settings/redaction", json={"disable": ["email"]})
    assert read.status_code == 500 and read.json()["error"]["type"] == "record_unreadable"
    assert "PATCH /v1/settings/redaction" in read.json()["error"]["message"]
    assert mended.status_code == 200, mended.text
    assert memory.org_settings.redaction() == {"extra": {}, "disabled": ["email"]}


def test_an_unreadable_profile_is_mended_by_a_change_that_keeps_its_readable_parts(
    grandbo, memory, corrupt, grandbo_cli
):  # type: ignore[no-untyped-def]
    """The context block every agent asks for carries the profile, so an unreadable one refuses them all; every
    change to the profile read it first, so its remedy (export and report) was the only one."""
    memory.profile.update({"facts": {"name": "Acme"}, "people": [{"name": "Dana", "role": "SRE"}]})
    corrupt("profile", "explicit", {"facts": {"name": "Acme"}, "people": [{"name": ""}], "voice": {}})
    refused = grandbo_cli("context", code=2).stderr
    assert "profile 'explicit' cannot be read: people.0.name" in refused and "grandbo profile set" in refused
    grandbo_cli("profile", "set", "--fact", "team=payments")  # the remedy the error names
    mended = memory.profile.get()
    assert mended.facts == {"name": "Acme", "team": "payments"} and mended.people == []
    assert "Acme" in grandbo_cli("context").stdout
    _, key = memory.keys.create("admin")
    corrupt("profile", "explicit", {"facts": {"name": 5}, "people": [{"name": "Dana"}], "voice": {}})
    with serving(grandbo) as served, served.client(key) as client:
        patched = client.patch("/v1/profile", json={"changes": {"facts": {"name": "Acme"}}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["facts"] == {"name": "Acme"} and [p["name"] for p in patched.json()["people"]] == ["Dana"]


def test_unreadable_re_ranking_weights_are_mended_from_the_cli_too(memory, corrupt, grandbo_cli):  # type: ignore[no-untyped-def]
    """`settings rerank` with a weight read the unreadable ones first, so only the API's PUT mended them;
    meanwhile recall answers with the default weights and says so."""
    memory.org_settings.set_rerank({"similarity": 0.5})
    corrupt("settings", "rerank", {"similarity": 7})
    stood_in = memory.recall("redis evicted the session keys under maxmemory")
    assert any("recall used the default weights meanwhile" in note for note in stood_in.notes)
    refused = grandbo_cli("settings", "rerank", code=2).stderr
    assert "re-ranking weights 'rerank' cannot be read: similarity" in refused
    assert "grandbo settings rerank --similarity" in refused and "PUT /v1/settings/rerank" in refused
    mended = json.loads(grandbo_cli("settings", "rerank", "--similarity", "0.6").stdout)  # the remedy it names
    assert mended["similarity"] == 0.6 and memory.org_settings.rerank().similarity == 0.6
    assert memory.recall("redis evicted the session keys under maxmemory").hits == []


def test_an_unreadable_incident_leaves_every_recall_of_its_organization_working(grandbo, memory, corrupt):  # type: ignore[no-untyped-def]
    """The listings leave an unreadable incident out, but the runbooks' services were read from every incident
    raw: one whose services were not a list made every recall of the organization fail (a TypeError, a 500)."""
    from tests.test_webhooks import REDIS

    memory.remember(REDIS)
    memory.runbooks.add("rb-redis", "Restart redis", ["restart the primary"])
    memory.incidents.open("Logins slow", incident_id="INC-1", services=["auth-service"])
    memory.incidents.open("Sessions lost", incident_id="INC-2", services=["redis-sessions"])
    memory.incidents.close("INC-2", runbook_used="rb-redis")
    corrupt("incident", "INC-1", {**memory._documents.get("incident", "INC-1").data, "services": 5})
    _, key = memory.keys.create("read")
    with serving(grandbo) as served, served.client(key) as client:
        recall = client.post("/v1/recall", json={"topic": "redis evicted the session keys under maxmemory"})
        listed = client.get("/v1/incidents")
    assert recall.status_code == 200, recall.text
    assert recall.json()["hits"][0]["entry"]["id"] == "INC-044-F1"
    assert listed.status_code == 200 and [i["id"] for i in listed.json()["items"]] == ["INC-2"]
    assert memory.ledger._snapshot().used_on("rb-redis") == ["redis-sessions"]  # the readable incident still counts


def test_an_unreadable_alert_or_incident_leaves_the_retention_of_the_other_alerts_working(memory, corrupt):  # type: ignore[no-untyped-def]
    """The prune round read every due alert and every incident raw: one alert whose alert part was not an
    object (or an incident whose alert list was not a list) failed every round (logged, tried again an
    hour later, failing again), so no alert of the organization was ever pruned again. What cannot be read is kept, since
    whether an incident lists it cannot be told; the rest is pruned."""
    from datetime import timedelta

    from grandbo.ingest import adapters
    from grandbo.model import utcnow
    from tests.test_webhooks import ALERTMANAGER

    memory.alerts.retention_days = 90
    received = memory.alerts.receive(adapters.parse("alertmanager", json.dumps(ALERTMANAGER).encode()))
    (broken, _), (cited, _), (free, _) = received
    memory.incidents.open("Logins slow", incident_id="INC-1", alerts=[cited.id])
    memory.incidents.open("Sessions lost", incident_id="INC-2", alerts=[free.id])
    corrupt("alert", broken.id, {"id": broken.id, "alert": "redis down"})
    corrupt("incident", "INC-2", {**memory._documents.get("incident", "INC-2").data, "alerts": {"ids": [free.id]}})
    again = {**ALERTMANAGER, "alerts": [{**a, "fingerprint": a["fingerprint"] + "9"} for a in ALERTMANAGER["alerts"]]}
    memory.alerts.receive(adapters.parse("alertmanager", json.dumps(again).encode()))
    assert memory.alerts.prune(now=utcnow() + timedelta(days=91)) == 3  # the second delivery's three
    assert {doc.doc_id for doc in memory._documents.find("alert")} == {broken.id, cited.id, free.id}


def test_a_webhook_secret_erased_from_the_organization_verifies_no_delivery(grandbo, memory):  # type: ignore[no-untyped-def]
    """A signing secret pasted into an incident note is what erasure is for; erasing it rewrote the stored
    secret too, to "[purged]", a text anyone can sign with: every forged delivery verified. A secret that held
    the erased text leaked: it verifies nothing, and the sender is refused until a new one is added."""
    memory.webhook_secrets.add("pagerduty", "pd-leaked-secret-1")
    memory.incidents.open("Webhooks failing", incident_id="INC-1", symptoms=["secret was pd-leaked-secret-1"])
    report = memory.erasure.purge_text("pd-leaked-secret-1", reason="a secret in a note", actor="admin")
    assert report.found
    _, key = memory.keys.create("write")
    body = json.dumps(PAGERDUTY).encode()
    headers = {"Content-Type": "application/json"}
    with serving(grandbo) as served, served.client(key) as client:
        forged = client.post("/v1/webhooks/pagerduty", content=body,
                             headers={**headers, "X-PagerDuty-Signature": sign(body, "[purged]")})  # fmt: skip
        old = client.post("/v1/webhooks/pagerduty", content=body,
                          headers={**headers, "X-PagerDuty-Signature": sign(body, "pd-leaked-secret-1")})  # fmt: skip
    assert forged.status_code == 401 and old.status_code == 401, (forged.text, old.text)
    assert "grandbo webhooks add pagerduty" in forged.json()["error"]["message"]
    assert memory.webhook_secrets.secrets("pagerduty") == []


def test_an_unreadable_learning_setting_folds_edits_into_notes_that_wait_for_review(memory, corrupt):  # type: ignore[no-untyped-def]
    """Every third edit read the setting while folding, after its signal was stored: an unreadable one failed
    that edit (a 500) and its group never folded, even once the setting was set again."""
    memory.org_settings.set_auto_apply_learned(True)
    corrupt("settings", "learning", {"auto_apply": "yes"})
    notes = [
        memory.learning.record_edit(f"Please utilize step {n}.", f"Please use step {n}.", content_type="status-update",
                                    author="dana")[1]
        for n in range(3)
    ]  # fmt: skip
    assert notes[:2] == [None, None] and notes[2] is not None
    assert notes[2].status == "pending"  # what cannot be read turns nothing on: the note waits for an admin
    assert [n.id for n in memory.learning.pending()] == [notes[2].id]


def test_an_unreadable_calibration_leaves_recall_answering_with_a_note(memory, corrupt):  # type: ignore[no-untyped-def]
    """The organization's own calibration is joined at every re-ranked recall: unreadable, it used to refuse
    them all. Recall now goes on without it (the model's shipped one applies, if any) and says why."""
    from grandbo.model import Calibration

    memory.remember({"id": "M1", "title": "Redis evicted the session keys", "body": "maxmemory reached"})
    memory.org_settings.set_calibration(
        Calibration(provider="deterministic", model="feature-hash-v1", features=["top_cosine", "top_coverage"],
                    coefficients=[5.0, 1.0], intercept=-2.0, fitted_on="labelled queries")
    )  # fmt: skip
    assert memory.org_settings.calibration() is not None
    corrupt("settings", "calibration", {"provider": "deterministic", "coefficients": "five"})  # before any recall:
    # the snapshot recall joins is reread when a document changes, and a change made in SQL is not one
    result = memory.recall("redis evicted the session keys under maxmemory")
    assert [hit.entry.id for hit in result.hits] == ["M1"]
    assert not (result.calibration or "").startswith("organization")
    assert any("calibration 'calibration' cannot be read" in note and "meanwhile" in note for note in result.notes)


def test_an_unreadable_calibration_is_shown_as_such_and_removing_it_mends_it(memory, corrupt, grandbo_cli):  # type: ignore[no-untyped-def]
    """Its remedy was to fit it again only; removing it, the way back to the shipped calibration, works on a
    record that cannot be read too."""
    from grandbo.model import Calibration

    memory.org_settings.set_calibration(
        Calibration(provider="deterministic", model="feature-hash-v1", features=["top_cosine", "top_coverage"],
                    coefficients=[5.0, 1.0], intercept=-2.0, fitted_on="labelled queries")
    )  # fmt: skip
    corrupt("settings", "calibration", {"provider": "deterministic", "coefficients": "five"})
    shown = grandbo_cli("settings", "calibration", code=2).stderr
    assert "cannot be read" in shown and "grandbo settings calibration --remove --org ORG" in shown
    removed = grandbo_cli("settings", "calibration", "--remove").stdout
    assert "removed the calibration of org 'acme'" in removed and "the one shipped with Grandbo" in removed
    assert memory.org_settings.calibration() is None
