"""Redaction (issue 12, part 6): secrets and personal data masked before text is stored, embedded, indexed or
sent to an LLM; a per-org extensible pattern set. The secrets are built at run time so that no scanner
mistakes this file for a leak, but they have the real shapes."""

from __future__ import annotations

import json

import pytest

from grandbo.config import Settings
from grandbo.errors import InvalidInputError
from grandbo.llm import OpenAIChatClient
from grandbo.redaction import DEFAULT_NAMES, Redactor
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings
from tests.serving import BOUND

AWS = "AKIA" + "Q3EXAMPLE7RZ2XKV"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
OPENAI = "sk-proj-" + "Zt4kQ9vW2xY7bN3mL8pR5sT1uV6wX0yA"
SLACK = "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiJvbmNhbGwtYm90In0." + "c2lnbmF0dXJlLXNpZ25hdHVyZQ"
OPAQUE = "9f8e7d6c5b4a3928" + "1706f5e4d3c2b1a0"
DB_PASSWORD = "Tr0ub4dor-and-3"
CARD = "4111 1111 1111 1111"  # the classic test Visa: passes Luhn
SECRETS = [AWS, GITHUB, OPENAI, SLACK, JWT, OPAQUE, DB_PASSWORD, "oncall.lead@example.com", "10.20.30.40",
           "2001:db8:85a3::8a2e:370:7334", CARD, "hunter2secret"]  # fmt: skip
TEXT = (
    f"Deploy broke: the pipeline printed AWS key {AWS} and token {GITHUB}; the app used {OPENAI}. "
    f"Slack bot {SLACK} posted Authorization: Bearer {OPAQUE} with session {JWT}. DSN postgres://app:{DB_PASSWORD}@db.internal:5432/orders. "
    f"Page oncall.lead@example.com; hosts 10.20.30.40 and 2001:db8:85a3::8a2e:370:7334; refund card {CARD}; "
    "config had password=hunter2secret"
)


def test_every_default_pattern_masks_its_secret_and_keeps_what_is_around():
    masked = Redactor().text(TEXT)
    for secret in SECRETS:
        assert secret not in masked, secret
    for kept in ("Deploy broke", "postgres://app:", "@db.internal:5432/orders", "password=", "Bearer "):
        assert kept in masked, kept
    for name in ("aws_access_key", "github_token", "api_key", "slack_token", "bearer_token", "jwt", "url_password",
                 "email", "ipv4", "ipv6", "card_number", "secret_value"):  # fmt: skip
        assert f"[REDACTED:{name}]" in masked, name
    assert Redactor().text(masked) == masked  # idempotent: a replay or rerun keeps the same text


@pytest.mark.parametrize(
    "harmless",
    [
        "ERR_CONN_RESET on checkout-api at 10:30:00 (INC-044)",
        "occurred 2026-11-01T08:00:00+00:00, p99 1200ms, 503s for 15 minutes",
        "order 4111 1111 1111 1112 was refunded",  # 16 digits failing Luhn: not a card
        "std::vector<int> grew past 2 GB; version 12.4",
        "see runbook RB-LRU step 3: set maxmemory-policy volatile-lru",
        "999.10.10.10 is not an address",
        "https://web.archive.org/web/20220427012208/https://status.example.com/incident/17003#5660850647990272",
    ],
)
def test_ordinary_incident_text_is_left_alone(harmless):
    assert Redactor().text(harmless) == harmless


@pytest.mark.parametrize("written", ["card=4111111111111111", "card 4111-1111-1111-1111.", "(5500 0000 0000 0004)"])
def test_card_numbers_are_masked_however_written(written):
    assert "[REDACTED:card_number]" in Redactor().text(written)


def test_stored_embedded_and_indexed_text_is_masked(tmp_path):
    settings = Settings(home=tmp_path, openai_base_url="", openai_model="fake", openai_dimension=8)
    with FakeEmbeddings(dimension=8) as fake:
        settings = settings.model_copy(update={"openai_base_url": fake.url})
        with Grandbo.init(settings, embedding="openai") as grandbo:
            memory = grandbo.org("acme", create=True)
            entry = memory.remember({"title": f"leaked key {AWS} in deploy logs", "body": TEXT, "tags": ["10.1.2.3"],
                                     "meta": {"contact": "oncall.lead@example.com"}})  # fmt: skip
            stored = memory.get(entry.id).model_dump_json() + json.dumps([e.payload for e in memory.history(entry.id)])
            lexical = [h.entry.id for h in memory.recall(f"deploy logs leaked key {AWS}", arm="lexical").hits]
            assert memory.stats().readable == 1
            memory.export_log(tmp_path / "log.jsonl")
        sent = json.dumps([request["body"] for request in fake.behaviour.requests])
    for secret in [*SECRETS, "10.1.2.3"]:
        assert secret not in stored and secret not in sent, secret
        assert secret not in (tmp_path / "log.jsonl").read_text(), secret
    assert "[REDACTED:aws_access_key]" in stored and "[REDACTED:aws_access_key]" in sent
    assert lexical == [entry.id]  # the rest of the text is still found; the key itself is not indexed
    assert AWS.lower() not in memory_terms(tmp_path)


def memory_terms(home):
    import sqlite3

    with sqlite3.connect(home / "grandbo.db") as db:
        return " ".join(row[0] for row in db.execute("SELECT terms FROM memory_entries"))


def test_an_org_adds_patterns_and_switches_defaults_off(grandbo):
    acme, other = grandbo.org("acme", create=True), grandbo.org("other", create=True)
    acme.org_settings.set_redaction(add={"ticket": r"TKT-[0-9]{6}"}, disable=["ipv4"])
    text = "customer TKT-123456 cannot reach 10.9.8.7 from the VPN gateway"
    assert (
        acme.remember({"title": text}).title == "customer [REDACTED:ticket] cannot reach 10.9.8.7 from the VPN gateway"
    )
    assert (
        other.remember({"title": text}).title == "customer TKT-123456 cannot reach [REDACTED:ipv4] from the VPN gateway"
    )
    corrected = acme.correct(acme.entries()[0].id, {"body": f"key {GITHUB}"}, reason="more detail")
    assert GITHUB not in corrected.body
    with pytest.raises(InvalidInputError, match="not a valid regular expression"):
        acme.org_settings.set_redaction(add={"bad": "([unclosed"})
    with pytest.raises(InvalidInputError, match="No default pattern"):
        acme.org_settings.set_redaction(disable=["ssn"])
    with pytest.raises(InvalidInputError, match="empty text"):
        acme.org_settings.set_redaction(add={"everything": ".*"})
    with pytest.raises(InvalidInputError, match="no pattern of its own named tiket; its own are: ticket"):
        acme.org_settings.set_redaction(remove=["tiket"])  # a typo is said, not taken for done
    with pytest.raises(InvalidInputError, match="switched off with disable"):
        acme.org_settings.set_redaction(remove=["email"])
    assert acme.org_settings.redaction() == {"extra": {"ticket": r"TKT-[0-9]{6}"}, "disabled": ["ipv4"]}


def test_a_rerun_import_of_a_file_with_secrets_does_not_duplicate(memory, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"title": f"rotated {OPENAI} after the leak", "body": "mail oncall.lead@example.com"}))
    first, again = memory.import_file(path), memory.import_file(path)
    assert first.imported == 1 and again.imported == 0 and again.already == 1 and again.complete
    assert OPENAI not in memory.entries()[0].title


def test_nothing_secret_reaches_the_llm(memory):
    with FakeEmbeddings() as fake:
        fake.behaviour.chat_answers = [json.dumps({"category": "tone", "summary": "calmer"})] * 3 + ["Be calm."]
        learning = memory.learning_with(OpenAIChatClient(fake.url, "chat", None, timeout=BOUND))
        for n in range(3):
            learning.record_edit(f"URGENT!!! db password={DB_PASSWORD} leaked, call oncall.lead@example.com {n}",
                                 f"The database credential leaked; we are rotating it ({AWS}). {n}",
                                 content_type="status-update", author="ann")  # fmt: skip
        sent = json.dumps([r["body"] for r in fake.behaviour.requests if r["path"].endswith("/chat/completions")])
    assert sent.count("messages") >= 3
    kept = json.dumps([signal.model_dump(mode="json") for signal in learning.signals()])
    for secret in (DB_PASSWORD, "oncall.lead@example.com", AWS):
        assert secret not in sent and secret not in kept, secret
    assert "[REDACTED:aws_access_key]" in sent and "[REDACTED:aws_access_key]" in kept


def test_cli_settings_redaction_shows_what_is_masked_as_rest_does(cli):
    # The CLI used to show only {"extra", "disabled"}: nothing said which default patterns mask text.
    shown = json.loads(cli("settings", "redaction").stdout)
    assert shown == {"own": {}, "disabled": [], "defaults": list(DEFAULT_NAMES)} and "email" in shown["defaults"]
    out = cli("settings", "redaction", "--add", "ticket=TKT-[0-9]{6}", "--disable", "email")
    changed = json.loads(out.stdout)
    assert changed == {"own": {"ticket": "TKT-[0-9]{6}"}, "disabled": ["email"], "defaults": list(DEFAULT_NAMES)}
    cli("settings", "redaction", "--add", "nonsense", code=2)
    refused = cli("settings", "redaction", "--remove", "nope", code=2)
    assert "no pattern of its own named nope; its own are: ticket" in refused.stderr
    assert json.loads(cli("settings", "redaction", "--remove", "ticket").stdout)["own"] == {}


def test_a_replay_is_masked_by_the_patterns_the_org_holds_now(grandbo, tmp_path):
    origin = grandbo.org("acme", create=True)
    origin.remember({"id": "T1", "title": "customer TKT-123456 cannot log in after the SSO change"})
    origin.org_settings.set_redaction(add={"ticket": r"TKT-[0-9]{6}"})  # added after T1 was stored
    origin.export_log(tmp_path / "log.jsonl")
    target = grandbo.org("moved", create=True)
    report = target.import_log(tmp_path / "log.jsonl")
    assert target.get("T1").title == "customer [REDACTED:ticket] cannot log in after the SSO change"
    assert "TKT-123456" not in json.dumps([e.payload for e in target.history("T1")])
    assert report.vectors_kept == 0 and report.embedded == 1  # the exported vector was of the unmasked text


def test_the_llm_client_masks_instructions_and_prompt():
    from grandbo.llm import RedactingClient

    class Capture:
        name = "capture"

        def __init__(self) -> None:
            self.sent: list[str] = []

        def complete(self, system: str, prompt: str, *, timeout: float | None = None) -> str:
            self.sent += [system, prompt]
            return "ok"

    inner = Capture()
    client = RedactingClient(inner, Redactor({"ticket": r"TKT-[0-9]{6}"}))
    assert client.complete(f"never echo {GITHUB}", f"{TEXT} TKT-654321") == "ok"
    sent = " ".join(inner.sent)
    for secret in [*SECRETS, "TKT-654321"]:
        assert secret not in sent, secret


def test_an_admin_keeps_the_redaction_patterns_over_rest(grandbo):
    from tests.serving import serving

    acme, other = grandbo.org("acme", create=True), grandbo.org("other", create=True)
    _, admin = acme.keys.create("admin", name="ops")
    _, writer = acme.keys.create("write", name="agent")
    _, other_admin = other.keys.create("admin", name="ops")
    with serving(grandbo) as served, served.client(admin) as client, served.client(writer) as agent:
        before = client.get("/v1/settings/redaction").json()
        assert before["own"] == {} and before["disabled"] == [] and "ipv4" in before["defaults"]
        changed = client.patch("/v1/settings/redaction", json={"add": {"ticket": r"TKT-[0-9]{6}"}, "disable": ["ipv4"]})
        assert changed.status_code == 200, changed.text
        assert changed.json()["own"] == {"ticket": r"TKT-[0-9]{6}"} and changed.json()["disabled"] == ["ipv4"]
        with served.client(other_admin) as theirs:  # another organization's settings are its own
            assert theirs.get("/v1/settings/redaction").json() | {"defaults": []} == {
                "own": {},
                "disabled": [],
                "defaults": [],
            }
        stored = agent.post("/v1/memories", json={"title": "customer TKT-123456 cannot reach 10.9.8.7"})
        assert stored.json()["title"] == "customer [REDACTED:ticket] cannot reach 10.9.8.7"
        typo = client.patch("/v1/settings/redaction", json={"remove": ["tiket"]})
        assert typo.status_code == 422 and "its own are: ticket" in typo.json()["error"]["message"]
        bad = client.patch("/v1/settings/redaction", json={"add": {"bad": "([unclosed"}})
        assert bad.status_code == 422 and "not a valid regular expression" in bad.json()["error"]["message"]
        assert agent.get("/v1/settings/redaction").status_code == 403  # an admin's business only
        assert agent.patch("/v1/settings/redaction", json={"enable": ["ipv4"]}).status_code == 403
        assert (
            client.patch("/v1/settings/redaction", json={"remove": ["ticket"], "enable": ["ipv4"]}).json()["own"] == {}
        )
    assert acme.org_settings.redaction() == {"extra": {}, "disabled": []}
