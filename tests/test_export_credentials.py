"""Credentials belong to one organization: an export replayed under another name carries no API keys and no
webhook signing secrets; replayed under its own name (a move to a new machine) it keeps them. Both backends
(the `grandbo` fixture runs each test on SQLite and on the session's Postgres)."""

from __future__ import annotations

import json

import pytest

from grandbo.errors import SignatureError
from grandbo.ingest.flow import receive
from grandbo.ingest.signatures import sign
from tests.test_webhooks import PAGERDUTY

SECRET = "pd-signing-secret-of-acme"


def signed(body: bytes, secret: str) -> dict[str, str]:
    return {"x-pagerduty-signature": sign(body, secret)}


def exported(grandbo, tmp_path, *export_args):
    origin = grandbo.org("acme", create=True)
    origin.remember({"id": "E1", "title": "redis keys evicted under maxmemory on the session cache"})
    _, key = origin.keys.create("write", name="alerts")
    origin.webhook_secrets.add("pagerduty", SECRET)
    path = tmp_path / "log.jsonl"
    origin.export_log(path, *export_args)
    return origin, key, path


def test_a_replay_under_another_name_carries_no_keys_and_no_webhook_secrets(grandbo, tmp_path):
    origin, _, path = exported(grandbo, tmp_path)
    copy = grandbo.org("copy", create=True)
    report = copy.import_log(path)
    assert copy.get("E1").title.startswith("redis keys")  # the memory came over
    assert copy.keys.all() == [] and copy.webhook_secrets.secrets("pagerduty") == []
    assert report.keys_left_out == 1 and report.sources_without_secret == ["pagerduty"]
    notes = " ".join(report.notes)
    assert "grandbo keys create --org copy" in notes and "grandbo webhooks add pagerduty --org copy" in notes
    assert [e for e in copy._documents.log().events if e.collection in ("api_key", "webhook_secret")] == []
    body = json.dumps(PAGERDUTY).encode()
    with pytest.raises(SignatureError):  # acme's signed deliveries are not copy's
        receive(copy, "pagerduty", body, signed(body, SECRET))
    assert receive(origin, "pagerduty", body, signed(body, SECRET))  # still acme's


def test_a_replay_under_the_same_name_keeps_keys_and_webhook_secrets(grandbo, tmp_path):
    origin, key, path = exported(grandbo, tmp_path)
    key_ids = [k.id for k in origin.keys.all()]
    grandbo.drop_org("acme")  # the move: the same name, now on "another machine"
    moved = grandbo.org("acme", create=True)
    report = moved.import_log(path)
    assert report.keys_left_out == 0 and report.sources_without_secret == [] and report.notes == []
    assert [k.id for k in moved.keys.all()] == key_ids
    assert grandbo.authenticate(key)[0].org == "acme"
    body = json.dumps(PAGERDUTY).encode()
    assert receive(moved, "pagerduty", body, signed(body, SECRET))
