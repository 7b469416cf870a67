"""`POST /v1/changes/{source}` and `GET /v1/changes` on a real server on loopback, both backends: each source's
documented payload mapped, GitHub's signature checked, redeliveries stored once, clear errors for bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from grandbo.errors import InvalidInputError
from grandbo.ingest.changes import parse, sign_github
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.tiers.change_model import ChangeKind, NewChange
from tests.serving import BOUND, serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

DATA = Path(__file__).parent / "data" / "changes"
SECRET = "gh-hook-secret-1"


def body(name: str) -> bytes:
    return (DATA / name).read_bytes()


def github(client, name: str, event: str, *, secret: str | None = SECRET, raw: bytes | None = None):  # type: ignore[no-untyped-def]
    payload = raw if raw is not None else body(name)
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": "5f1b6c2e-0d4a-11f0-8a1b-3c7d2e9f4a10",
               "Content-Type": "application/json"}  # fmt: skip
    if secret is not None:
        headers["X-Hub-Signature-256"] = sign_github(payload, secret)
    return client.post("/v1/changes/github", content=payload, headers=headers)


@pytest.fixture
def org(grandbo):  # type: ignore[no-untyped-def]
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    return memory, key


# ------------------------------------------------------------------------------------ mapping


def test_a_github_deployment_and_its_status_are_one_change():
    (created,) = parse("github", body("github_deployment.json"), {"X-GitHub-Event": "deployment"})
    (status,) = parse("github", body("github_deployment_status.json"), {"X-GitHub-Event": "deployment_status"})
    assert created.id == status.id == "314159"
    assert status.service == "payments-gateway" and status.kind is ChangeKind.DEPLOY and status.version == "v2.14.0"
    assert status.at == datetime(2026, 11, 30, 14, 2, 11, tzinfo=UTC)
    assert status.summary.startswith("acme-pay/payments-gateway v2.14.0 to production: success")
    assert created.summary.startswith("acme-pay/payments-gateway v2.14.0 to production: created")
    assert status.url == "https://ci.acme-pay.example/runs/5521"


def test_a_github_deployment_names_its_service_and_kind_in_its_payload():
    sent = json.loads(body("github_deployment.json"))
    sent["deployment"]["payload"] = {"service": "ledger-writer", "kind": "config"}
    sent["deployment"]["ref"] = ""
    (change,) = parse("github", json.dumps(sent).encode(), {"X-GitHub-Event": "deployment"})
    assert change.service == "ledger-writer" and change.kind is ChangeKind.CONFIG
    assert change.version == "9f3c2a7d1e4b"  # no ref: the sha, short
    sent["deployment"]["payload"], sent["deployment"]["task"] = {"kind": "restart"}, "deploy:rollback"
    (change,) = parse("github", json.dumps(sent).encode(), {"X-GitHub-Event": "deployment"})
    assert change.kind is ChangeKind.ROLLBACK and change.service == "payments-gateway"


def test_a_github_deployment_created_with_its_payload_as_json_text_names_its_service_too():
    # GitHub delivers the payload as the deployment was created with it: an object, or the JSON text of one (a
    # string). The text was read as no payload: the change was filed under the repository's name.
    sent = json.loads(body("github_deployment_status.json"))
    sent["deployment"]["payload"] = json.dumps({"service": "ledger-writer", "kind": "config"})
    (change,) = parse("github", json.dumps(sent).encode(), {"X-GitHub-Event": "deployment_status"})
    assert change.service == "ledger-writer" and change.kind is ChangeKind.CONFIG
    for text in ("", "not json", '["ledger-writer"]', "[" * 5000, '{"service": null}'):  # no service in it
        sent["deployment"]["payload"] = text
        (change,) = parse("github", json.dumps(sent).encode(), {"X-GitHub-Event": "deployment_status"})
        assert change.service == "payments-gateway" and change.kind is ChangeKind.DEPLOY


@pytest.mark.parametrize("links", [5, True, 1.5, "https://flags.example/x", {"href": "https://flags.example/x"}])
def test_a_pagerduty_change_event_whose_links_are_no_list_has_no_link(links):
    # A number or true was iterated: a TypeError, answered 500. Anything but a list is no links.
    sent = json.loads(body("pagerduty.json")) | {"links": links}
    (change,) = parse("pagerduty", json.dumps(sent).encode())
    assert change.url is None and change.service == "tax-service"


def test_an_argocd_notification_from_the_readme_template():
    (change,) = parse("argocd", body("argocd.json"))
    assert change.service == "checkout-api" and change.kind is ChangeKind.DEPLOY
    assert change.id == "checkout-api@4c1e9b27d0a35f6e8b2c7d9a1f0e3b5c7d9e1a2b@2026-11-30T13:58:02Z"
    assert change.at == datetime(2026, 11, 30, 13, 59, 47, tzinfo=UTC)
    assert change.summary == "Argo CD sync of checkout-api to 4c1e9b27d0a3: Succeeded"
    assert change.url == "https://argocd.acme-pay.example/applications/checkout-api"


def test_a_pagerduty_change_event():
    (change,) = parse("pagerduty", body("pagerduty.json"))
    assert change.service == "tax-service" and change.kind is ChangeKind.FLAG
    assert change.summary == "Feature flag checkout.new-tax-engine turned on for 25% of traffic"
    assert change.at == datetime(2026, 11, 30, 13, 40, 5, 120000, tzinfo=UTC)
    assert change.url == "https://flags.acme-pay.example/flags/checkout.new-tax-engine"
    assert "f0e1d2c3" not in change.model_dump_json()  # the routing key is never kept
    assert parse("pagerduty", body("pagerduty.json"))[0].id == change.id  # a retry is the same change


def test_the_generic_shape_one_object_or_a_list():
    config, infra = parse("generic", body("generic.json"))
    assert (config.id, config.kind, config.version) == ("cfg-7781", ChangeKind.CONFIG, "r412")
    assert infra.at == datetime(2026, 11, 30, 11, 0, tzinfo=UTC) and infra.url is None
    (one,) = parse("generic", json.dumps(json.loads(body("generic.json"))[0]).encode())
    assert one == config


# ------------------------------------------------------------------------------------ over HTTP


def test_github_signatures_good_bad_and_missing(grandbo, org):
    memory, key = org
    with serving(grandbo) as served, served.client(key) as client:
        unset = github(client, "github_deployment.json", "deployment")
        assert unset.status_code == 401 and "grandbo webhooks add github" in unset.json()["error"]["message"]
        memory.webhook_secrets.add("github", SECRET)
        assert github(client, "github_deployment.json", "deployment", secret="not-the-secret").status_code == 401
        missing = github(client, "github_deployment.json", "deployment", secret=None)
        assert missing.status_code == 401 and missing.json()["error"]["type"] == "signature_invalid"
        tampered = body("github_deployment.json").replace(b"v2.14.0", b"v9.99.9")
        forged = client.post(
            "/v1/changes/github",
            content=tampered,
            headers={
                "X-GitHub-Event": "deployment",
                "X-Hub-Signature-256": sign_github(body("github_deployment.json"), SECRET),
            },
        )
        assert forged.status_code == 401
        assert client.get("/v1/changes").json()["items"] == []  # nothing refused was stored
        ping = github(client, "", "ping", raw=b'{"zen": "Keep it logically awesome.", "hook_id": 12}')
        assert ping.status_code == 200 and ping.json()["changes"] == []
        stored = github(client, "github_deployment.json", "deployment")
        assert stored.status_code == 202 and stored.json()["new"] == 1


def test_github_delivers_with_the_key_in_its_url_as_basic_credentials(grandbo, org):
    """GitHub's webhook settings cannot add a header: its URL's `user:KEY@` arrives as Basic credentials, which
    authenticate as the key does (every delivery was a 401 before); a wrong password is still a 401."""
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    with serving(grandbo) as served:
        with httpx.Client(base_url=served.url, auth=("github", key), timeout=BOUND) as client:
            stored = github(client, "github_deployment.json", "deployment")
            assert stored.status_code == 202 and stored.json()["new"] == 1
        with httpx.Client(base_url=served.url, auth=("github", key + "x"), timeout=BOUND) as client:
            assert github(client, "github_deployment.json", "deployment").status_code == 401
        with httpx.Client(base_url=served.url, headers={"Authorization": "Basic %%%"}, timeout=BOUND) as client:
            refused = github(client, "github_deployment.json", "deployment")
            assert refused.status_code == 401 and "Basic credentials" in refused.json()["error"]["message"]
    assert len(memory.changes.find()[0]) == 1  # stored once, by the Basic delivery


def test_a_redelivery_stores_nothing_and_a_status_updates_the_change(grandbo, org):
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    with serving(grandbo) as served, served.client(key) as client:
        assert github(client, "github_deployment.json", "deployment").json()["new"] == 1
        again = github(client, "github_deployment.json", "deployment")
        assert again.status_code == 200 and again.json()["unchanged"] == 1
        status = github(client, "github_deployment_status.json", "deployment_status")
        assert status.status_code == 202 and status.json()["updated"] == 1
        kept = client.get("/v1/changes/github:314159").json()
        assert kept["summary"].startswith("acme-pay/payments-gateway v2.14.0 to production: success")
        assert client.get("/v1/changes/314159").json() == kept  # the source's id alone
        assert len(client.get("/v1/changes").json()["items"]) == 1
        late = github(client, "github_deployment.json", "deployment")  # redelivered after its status
        assert late.status_code == 200 and late.json()["unchanged"] == 1
        assert client.get("/v1/changes/github:314159").json() == kept
    history = memory.changes.documents.history("change", "github:314159")
    assert [event["data"]["summary"].split(": ")[1][:7] for event in history] == ["created", "success"]


@pytest.mark.parametrize(("source", "fixture"), [("argocd", "argocd.json"), ("pagerduty", "pagerduty.json"),
                                             ("generic", "generic.json")])  # fmt: skip
def test_each_source_is_stored_and_listed(grandbo, org, source, fixture):
    _, key = org
    with serving(grandbo) as served, served.client(key) as client:
        response = client.post(f"/v1/changes/{source}", content=body(fixture),
                               headers={"Content-Type": "application/json"})  # fmt: skip
        assert response.status_code == 202, response.text
        assert client.post(f"/v1/changes/{source}", content=body(fixture)).json()["new"] == 0
        listed = client.get("/v1/changes", params={"source": source}).json()["items"]
    assert len(listed) == len(parse(source, body(fixture))) and {c["source"] for c in listed} == {source}


def test_lists_filter_and_page_by_cursor(grandbo, org):
    _, key = org
    changes = [{"id": f"d{n}", "service": "checkout-api" if n % 2 else "cart", "kind": "deploy" if n % 3 else "config",
                "summary": f"release {n}", "at": f"2026-11-30T10:{n:02d}:00Z"} for n in range(1, 26)]  # fmt: skip
    with serving(grandbo) as served, served.client(key) as client:
        assert client.post("/v1/changes/generic", json=changes).json()["new"] == 25
        seen, cursor = [], None
        while True:
            page = client.get("/v1/changes", params={"service": "checkout-api", "limit": 4,
                                                     **({"cursor": cursor} if cursor else {})}).json()  # fmt: skip
            seen += [c["id"] for c in page["items"]]
            if not (cursor := page["next_cursor"]):
                break
        assert seen == [f"d{n}" for n in range(25, 0, -2)]
        configs = client.get("/v1/changes", params={"kind": "config", "since": "2026-11-30T10:06:00Z",
                                                    "until": "2026-11-30T10:15:00Z"}).json()["items"]  # fmt: skip
        assert [c["id"] for c in configs] == ["d15", "d12", "d9", "d6"]
        bad = client.get("/v1/changes", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 422 and "next_cursor" in bad.json()["error"]["message"]
        unknown_kind = client.get("/v1/changes", params={"kind": "restart"})
        assert unknown_kind.status_code == 422 and "error" in unknown_kind.json()


def test_bad_input_gets_one_clear_error(grandbo, org):
    _, key = org
    with serving(grandbo) as served, served.client(key) as client:
        unknown = client.post("/v1/changes/jenkins", json={"id": "1"})
        assert unknown.status_code == 404
        assert "github, argocd, pagerduty, generic" in unknown.json()["error"]["message"]
        cases = [
            ("generic", b"{not json"),
            ("generic", json.dumps({"id": "x", "service": "cart", "at": "yesterday"}).encode()),
            ("generic", json.dumps({"id": "x", "service": "cart", "at": "2026-11-30T10:00:00Z", "kind": "restart"}).encode()),
            ("generic", b"[]"),
            ("argocd", json.dumps({"app": "cart", "revision": "<no value>", "finished_at": "2026-11-30T10:00:00Z"}).encode()),
            ("pagerduty", json.dumps({"payload": {"summary": "deploy", "source": "cart"}}).encode()),
            ("pagerduty", json.dumps({"routing_key": "r" * 32, "payload": {"summary": "deploy"}}).encode()),
        ]  # fmt: skip
        for source, sent in cases:
            refused = client.post(f"/v1/changes/{source}", content=sent, headers={"Content-Type": "application/json"})
            assert refused.status_code == 422, (source, sent, refused.text)
            error = refused.json()["error"]
            assert error["type"] == "invalid_input" and error["remedy"] and "Traceback" not in refused.text
            assert f"Malformed {source} change" in error["message"]
        assert "at" in client.post("/v1/changes/generic", content=cases[1][1]).json()["error"]["detail"]["fields"]
        missing = client.get("/v1/changes/generic:nope")
        assert missing.status_code == 404 and "grandbo change list" in missing.json()["error"]["message"]
        assert client.get("/v1/changes").json()["items"] == []


def test_one_org_never_sees_anothers_changes(grandbo, org):
    _, key = org
    other = grandbo.org("globex", create=True)
    _, other_key = other.keys.create("write")
    with serving(grandbo) as served:
        with served.client(key) as client:
            assert client.post("/v1/changes/generic", content=body("generic.json")).status_code == 202
        with served.client(other_key) as client:
            assert client.get("/v1/changes").json()["items"] == []
            assert client.get("/v1/changes/generic:cfg-7781").status_code == 404


def test_posting_changes_needs_a_write_key(grandbo, org):
    memory, _ = org
    _, reader = memory.keys.create("read")
    with serving(grandbo) as served, served.client(reader) as client:
        assert client.post("/v1/changes/generic", content=body("generic.json")).status_code == 403
        assert client.get("/v1/changes").status_code == 200
    with serving(grandbo) as served, served.client(None) as client:
        assert client.post("/v1/changes/generic", content=body("generic.json")).status_code == 401


# ------------------------------------------------------------------------------------ CLI


def test_change_add_and_list(cli):
    cli("orgs", "create", "acme")
    added = cli("change", "add", "--service", "payments-gateway", "--summary", "Raise the pool to 64", "--kind",
                "config", "--version", "r9", "--at", "2026-11-30T14:00:00Z", "--id", "pool-64", "--org", "acme")  # fmt: skip
    assert added.stdout.startswith("new cli:pool-64 (config of payments-gateway at 2026-11-30 14:00Z)")
    again = cli("change", "add", "--service", "payments-gateway", "--summary", "Raise the pool to 64", "--kind",
                "config", "--version", "r9", "--at", "2026-11-30T14:00:00Z", "--id", "pool-64", "--org", "acme")  # fmt: skip
    assert again.stdout.startswith("unchanged cli:pool-64")
    cli("change", "add", "--service", "cart", "--summary", "Ship 3.1", "--at", "2026-11-30T15:00:00Z", "--org", "acme")
    listed = json.loads(cli("change", "list", "--json", "--org", "acme").stdout)
    assert [c["service"] for c in listed] == ["cart", "payments-gateway"] and listed[1]["source"] == "cli"
    table = cli("change", "list", "--kind", "config", "--org", "acme").stdout
    assert "payments-gateway r9" in table and "cart" not in table
    after = cli("change", "list", "--since", "2026-12-01T00:00:00Z", "--org", "acme").stdout
    assert after.startswith("No change matches --since 2026-12-01T00:00:00+00:00:") and "yet" not in after


def test_change_add_again_with_the_same_id_and_no_at_stores_nothing_new(cli):
    cli("orgs", "create", "acme")
    args = ("change", "add", "--service", "cart", "--summary", "Ship 3.1", "--id", "ship-31", "--org", "acme")
    first = cli(*args).stdout
    assert first.startswith("new cli:ship-31") and cli(*args).stdout == first.replace("new", "unchanged", 1)


def test_change_add_refuses_bad_input_with_one_line(cli):
    cli("orgs", "create", "acme")
    refused = cli("change", "add", "--service", "cart", "--summary", "x" * 2001, "--org", "acme", code=2)
    assert (
        refused.stderr.startswith("error: The change cannot be stored: summary") and "Traceback" not in refused.stderr
    )
    kind = cli("change", "add", "--service", "cart", "--summary", "s", "--kind", "restart", "--org", "acme", code=2)
    assert "restart" in kind.stderr


def test_webhooks_add_github_takes_its_secret(cli, tmp_path):
    cli("orgs", "create", "acme")
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    assert "github: 1 secret(s) accepted" in cli("webhooks", "add", "github", "--secret-file", str(secret),
                                                 "--org", "acme").stdout  # fmt: skip


def test_a_pagerduty_change_event_retried_without_a_timestamp_keeps_its_first_time(grandbo, org):
    memory, key = org
    sent = json.loads(body("pagerduty.json"))
    del sent["payload"]["timestamp"]
    with serving(grandbo) as served, served.client(key) as client:
        first = client.post("/v1/changes/pagerduty", json=sent).json()
        again = client.post("/v1/changes/pagerduty", json=sent).json()
    assert first["new"] == 1 and again["unchanged"] == 1
    assert again["changes"][0]["at"] == first["changes"][0]["at"]
    assert len(memory.changes.documents.history("change", "pagerduty:" + first["changes"][0]["id"])) == 1


def test_a_late_waiting_status_or_inactive_never_hides_how_a_deployment_ended(grandbo, org):
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    sent = json.loads(body("github_deployment_status.json"))

    with serving(grandbo) as served, served.client(key) as client:
        for state, outcome in [("in_progress", "new"), ("failure", "updated"), ("in_progress", "unchanged"),
                               ("inactive", "unchanged"), ("success", "updated")]:  # fmt: skip
            sent["deployment_status"]["state"] = state
            answer = github(client, "", "deployment_status", raw=json.dumps(sent).encode()).json()
            assert answer[outcome] == 1, (state, answer)
        kept = client.get("/v1/changes/github:314159").json()
    assert kept["summary"].startswith("acme-pay/payments-gateway v2.14.0 to production: success")


FUTURE = "9999-12-31T00:00:00Z"
FUTURE_BODIES = {
    "generic": lambda: json.dumps([{"id": "ok", "service": "cart", "at": "2026-11-30T10:00:00Z"},
                                   {"id": "far", "service": "cart", "at": FUTURE}]).encode(),
    "argocd": lambda: body("argocd.json").replace(b"2026-11-30T13:59:47Z", FUTURE.encode()),
    "pagerduty": lambda: body("pagerduty.json").replace(b"2026-11-30T13:40:05.120+0000", FUTURE.encode()),
    "github": lambda: body("github_deployment.json").replace(b"2026-11-30T14:02:11Z", FUTURE.encode()),
}  # fmt: skip


def test_a_change_dated_more_than_a_day_ahead_is_refused_by_every_source(grandbo, org):
    # Failed before: 9999-12-31 was stored (202) and sat first in every list, and could outrank real changes.
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    with serving(grandbo) as served, served.client(key) as client:
        for source, make in FUTURE_BODIES.items():
            sent = make()
            assert FUTURE.encode() in sent
            if source == "github":
                refused = github(client, "", "deployment", raw=sent)
            else:
                refused = client.post(
                    f"/v1/changes/{source}", content=sent, headers={"Content-Type": "application/json"}
                )
            assert refused.status_code == 422, (source, refused.text)
            error = refused.json()["error"]
            assert "when the change took effect" in error["message"] and "9999-12-31" in error["message"]
            assert error["detail"]["fields"] == ["at"]
        assert client.get("/v1/changes").json()["items"] == []  # the whole delivery refused, nothing half-stored
        skewed = (utcnow() + timedelta(hours=20)).isoformat()  # another host's clock a little ahead is fine
        assert client.post("/v1/changes/generic", json={"id": "s", "service": "cart", "at": skewed}).status_code == 202


def test_change_add_refuses_a_time_far_ahead(cli):
    cli("orgs", "create", "acme")
    refused = cli("change", "add", "--service", "cart", "--summary", "s", "--at", "9999-12-31", "--org", "acme", code=2)
    assert "when the change took effect" in refused.stderr and "Traceback" not in refused.stderr
    assert "No changes yet" in cli("change", "list", "--org", "acme").stdout


def test_change_list_says_when_its_filters_matched_nothing(cli):
    # Failed before: "No changes yet" although changes were stored and only the filters matched none.
    cli("orgs", "create", "acme")
    cli("change", "add", "--service", "cart", "--summary", "Ship 3.1", "--org", "acme")
    nope = cli("change", "list", "--service", "nope", "--kind", "config", "--org", "acme").stdout
    assert nope.strip() == (
        "No change matches --service nope, --kind config: widen or drop a filter (`grandbo change list` lists them all)."
    )


# ------------------------------------------------------------------------------------ urls

NOT_WEB = ["javascript:alert(document.cookie)", "data:text/html,<script>alert(1)</script>", "file:///etc/passwd",
           "JavaScript:alert(1)", "//evil.example/x", "https:///no-host", "https://ci.example/a b",
           "https://ci.example/txt.\u202eexe", "https://ci.example/\u200bx"]  # fmt: skip  # RTL override, zero width


def _with_url(source: str, url: str) -> bytes:
    """The source's documented payload (tests/data/changes) with its change's url replaced by `url`."""
    if source == "github":
        return body("github_deployment_status.json").replace(b"https://ci.acme-pay.example/runs/5521", url.encode())
    if source == "argocd":
        return body("argocd.json").replace(b"https://argocd.acme-pay.example/applications/checkout-api",
                                           url.encode())  # fmt: skip
    if source == "pagerduty":
        return body("pagerduty.json").replace(b"https://flags.acme-pay.example/flags/checkout.new-tax-engine",
                                              url.encode())  # fmt: skip
    return json.dumps({"id": "cfg-1", "service": "cart", "at": "2026-11-30T10:00:00Z", "url": url}).encode()


URL_FIELDS = {"github": "deployment_status.log_url", "argocd": "url", "pagerduty": "links[0].href", "generic": "url"}


def test_a_change_url_other_than_http_or_https_is_refused_by_every_source_naming_its_field(grandbo, org):
    # Failed before: a `javascript:` (or `data:`, `file:`) url was stored as the change's link and handed on in
    # every plan and list.
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    with serving(grandbo) as served, served.client(key) as client:
        for done, (source, field) in enumerate(URL_FIELDS.items()):
            for url in NOT_WEB:
                sent = _with_url(source, url)
                assert json.dumps(url)[1:-1].encode() in sent or url.encode() in sent, (source, url)
                if source == "github":
                    refused = github(client, "", "deployment_status", raw=sent)
                else:
                    refused = client.post(f"/v1/changes/{source}", content=sent,
                                          headers={"Content-Type": "application/json"})  # fmt: skip
                assert refused.status_code == 422, (source, url, refused.text)
                error = refused.json()["error"]
                assert error["detail"]["fields"] == [field] and f"`{field}`" in error["message"], (source, url)
                assert "http or https URL" in error["message"] and "Traceback" not in refused.text
            assert len(client.get("/v1/changes").json()["items"]) == done  # nothing stored: the good ones before
            good = _with_url(source, "https://ci.example/runs/42")
            if source == "github":
                assert github(client, "", "deployment_status", raw=good).status_code == 202
            else:
                assert client.post(f"/v1/changes/{source}", content=good).status_code == 202, source
        urls = {change["url"] for change in client.get("/v1/changes").json()["items"]}
    assert urls == {"https://ci.example/runs/42"}


def test_a_change_url_refused_names_the_scheme_and_what_to_send():
    with pytest.raises(InvalidInputError) as refused:
        parse("generic", _with_url("generic", "javascript:alert(1)"))
    assert refused.value.message == (
        "Malformed generic change: item 0: `url` has javascript: where http: or https: must be. A change's url must "
        "be an absolute http or https URL (https://ci.example.com/runs/42), or left out."
    )


def test_a_change_stored_with_another_url_before_is_still_read(memory):
    memory.changes.add(NewChange(id="d1", service="cart", summary="deploy", at=utcnow() - timedelta(hours=1)))
    stored = memory.changes.documents.get("change", "cli:d1")
    assert stored is not None
    old = {**stored.data, "url": "javascript:alert(1)"}  # as a release before this one stored it
    memory.changes.documents.put([DocumentWrite("change", "cli:d1", old, "change.updated", ref=stored.ref,
                                                expected_version=stored.version)], "test")  # fmt: skip
    assert memory.changes.get("cli:d1").url == "javascript:alert(1)"
    assert [c.id for c in memory.changes.find(service="cart")[0]] == ["d1"]
    with pytest.raises(ValidationError):
        NewChange(id="d2", service="cart", at=utcnow(), url="javascript:alert(1)")


def test_change_add_refuses_a_url_other_than_http_or_https(cli):
    cli("orgs", "create", "acme")
    for url in ("javascript:alert(1)", "data:text/html,x", "file:///etc/passwd"):
        refused = cli("change", "add", "--service", "cart", "--summary", "s", "--url", url, "--org", "acme", code=2)
        scheme = url.split(":", 1)[0]
        assert refused.stderr.startswith(f"error: --url has {scheme}: where http: or https: must be."), refused.stderr
        assert "https://ci.example.com/runs/42" in refused.stderr and "Traceback" not in refused.stderr
    assert "No changes yet" in cli("change", "list", "--org", "acme").stdout
    added = cli(
        "change", "add", "--service", "cart", "--summary", "s", "--url", "https://ci.example/1", "--org", "acme"
    )
    assert added.stdout.startswith("new cli:cart@")


def test_change_times_on_the_command_line_are_iso_8601_as_on_every_face(cli):
    # Failed before: `--at 1733400000` was read as seconds since 1970 (2024-12-05T12:00Z, stored), where every
    # change webhook refuses a number.
    cli("orgs", "create", "acme")
    for option in ("--at", "--since", "--until"):
        command = "add" if option == "--at" else "list"
        extra = ("--service", "cart", "--summary", "s") if command == "add" else ()
        refused = cli("change", command, *extra, option, "1733400000", "--org", "acme", code=2)
        assert "ISO 8601" in refused.stderr and "2026-05-01T12:00:00Z" in refused.stderr, refused.stderr
        assert "1733400000" in refused.stderr and "Traceback" not in refused.stderr
    assert "No changes yet" in cli("change", "list", "--org", "acme").stdout
    added = cli("change", "add", "--service", "cart", "--summary", "s", "--at", "2026-11-30T14:00:00+02:00",
                "--org", "acme")  # fmt: skip
    assert "at 2026-11-30 12:00Z" in added.stdout
    listed = cli("change", "list", "--since", "2026-11-30T11:59:00Z", "--until", "2026-11-30", "--org", "acme")
    assert listed.stdout.startswith("No change matches")  # --until 2026-11-30 is its midnight
