"""The console's sessions, forms and walls over plain HTTP on a real server, on both backends: the cookie's
attributes, forged and expired sessions, CSRF, revoked keys, scopes, and one organization's pages never
showing another's data."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.plain_ledger import every_outcome
from tests.serving import BOUND, serving
from tests.test_unreadable_records import _note

SECRET = {
    "id": "ALPHA-SECRET-1",
    "title": "Alpha walrus-cache stampede after a cold start",
    "body": "alpha-private walrus-cache stampede",
    "kind": "finding",
    "services": ["walrus-cache"],
}
BRAVO = {
    "id": "BRAVO-SECRET-1",
    "title": "Bravo zebra-queue poison message loop",
    "body": "bravo-private zebra-queue",
    "kind": "finding",
    "services": ["zebra-queue"],
}


@pytest.fixture
def served(grandbo):
    alpha = grandbo.org("alpha", create=True)
    alpha.remember(SECRET)
    alpha.runbooks.add("RB-WALRUS", "Runbook: warm the walrus-cache", ["warm it"], services=["walrus-cache"])
    bravo = grandbo.org("bravo", create=True)
    bravo.remember(BRAVO)
    keys = {scope: alpha.keys.create(scope, name=f"alpha {scope}")[1] for scope in ("read", "write", "admin")}
    keys["bravo"] = bravo.keys.create("admin", name="bravo")[1]
    with serving(grandbo) as running:
        running.keys = keys  # type: ignore[attr-defined]
        yield running


def signed_in(served, key: str) -> httpx.Client:
    client = httpx.Client(base_url=served.url, timeout=30)
    page = client.get("/ui/sign-in")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    response = client.post("/ui/sign-in", data={"key": key, "csrf": token, "next": "/ui/memory"})
    assert response.status_code == 303 and response.headers["location"] == "/ui/memory", response.text
    return client


def csrf_of(client: httpx.Client, path: str = "/ui/memory") -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get(path).text).group(1)


def test_the_session_cookie_is_httponly_samesite_strict_and_holds_no_key(served):
    client = httpx.Client(base_url=served.url, timeout=BOUND)
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/sign-in").text).group(1)
    response = client.post("/ui/sign-in", data={"key": served.keys["read"], "csrf": token})
    cookie = next(h for h in response.headers.get_list("set-cookie") if h.startswith("gb_session="))
    attributes = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/ui"} <= attributes
    assert served.keys["read"].rsplit(".", 1)[1] not in cookie  # the key's secret never leaves the sign-in
    headers = client.get("/ui/memory").headers
    assert "default-src 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"


def test_sign_in_refuses_a_form_without_its_token_and_never_redirects_off_site(served):
    client = httpx.Client(base_url=served.url, timeout=BOUND)
    refused = client.post("/ui/sign-in", data={"key": served.keys["read"], "csrf": "forged"})
    assert refused.status_code == 400 and "gb_session" not in refused.headers.get("set-cookie", "")
    client.get("/ui/sign-in")
    assert client.post("/ui/sign-in", data={"key": served.keys["read"], "csrf": "\u00e9"}).status_code == 400
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/sign-in").text).group(1)
    response = client.post(
        "/ui/sign-in", data={"key": served.keys["read"], "csrf": token, "next": "//evil.example/ui/x"}
    )
    assert response.headers["location"] == "/ui/triage"


def test_a_forged_or_tampered_session_is_sent_to_sign_in(served):
    client = signed_in(served, served.keys["read"])
    value = client.cookies["gb_session"]
    body, _, mac = value.partition(".")
    raw = httpx.get(
        f"{served.url}/ui/memory", headers={"Cookie": "gb_session=a.\u00e9t\u00e9".encode()}, timeout=BOUND
    )  # not ASCII
    assert raw.status_code == 303
    tampered = mac[:-2] + ("AB" if mac.endswith("AA") else "AA")  # never the real MAC by chance
    for forged in (f"{body}.{tampered}", "e30." + mac, "nonsense"):
        stranger = httpx.Client(base_url=served.url, cookies={"gb_session": forged}, timeout=BOUND)
        response = stranger.get("/ui/memory")
        assert response.status_code == 303 and response.headers["location"].startswith("/ui/sign-in")


def test_a_form_post_without_the_session_token_is_refused(served):
    client = signed_in(served, served.keys["write"])
    before = served.grandbo.org("alpha").stats().total
    response = client.post("/ui/memory", data={"title": "cross-site write", "csrf": "not-the-token"})
    assert response.status_code == 403 and "did not come from this console" in response.text
    assert served.grandbo.org("alpha").stats().total == before
    made = client.post("/ui/memory", data={"title": "a real write from the console", "csrf": csrf_of(client)})
    assert made.status_code == 303 and served.grandbo.org("alpha").stats().total == before + 1


def test_revoking_a_key_ends_its_sessions(served):
    client = signed_in(served, served.keys["read"])
    assert client.get("/ui/memory").status_code == 200
    alpha = served.grandbo.org("alpha")
    key_id = served.keys["read"].split(".")[2]
    alpha.keys.revoke(key_id)
    response = client.get("/ui/memory")
    assert response.status_code == 303 and "/ui/sign-in" in response.headers["location"]


def test_a_session_whose_key_record_cannot_be_read_is_sent_to_sign_in(served, raw, backend):
    """The session rechecks its key's record: one that fails its model answered every page with a 500."""
    client = signed_in(served, served.keys["write"])
    assert client.get("/ui/memory").status_code == 200
    key_id = served.keys["write"].split(".")[2]
    cast = "::jsonb" if backend == "postgres" else ""
    raw(f"UPDATE documents SET data = %s{cast} WHERE org_id = 'alpha' AND collection = 'api_key' AND doc_id = %s",
        (json.dumps({"id": key_id, "scope": "root"}), key_id), org="alpha")  # fmt: skip
    response = client.get("/ui/memory")
    assert response.status_code == 303 and "/ui/sign-in" in response.headers["location"]
    assert signed_in(served, served.keys["read"]).get("/ui/memory").status_code == 200  # the other keys still work


def test_the_profile_page_says_its_profile_cannot_be_read_and_still_reviews_notes(served, grandbo, raw, backend):
    """The page answered an unreadable profile with the API's JSON 500, so neither the facts form that mends it
    nor the review of learned notes on the same page could be reached."""
    alpha = grandbo.org("alpha")
    alpha.profile.update({"facts": {"name": "Alpha"}, "voice": {"tone": ["plain"]}})
    _note(alpha, "note-1")
    cast = "::jsonb" if backend == "postgres" else ""
    raw(f"UPDATE documents SET data = %s{cast} WHERE org_id = 'alpha' AND collection = 'profile'",
        (json.dumps({"facts": {"name": 5}, "voice": {"tone": ["plain"]}}),), org="alpha")  # fmt: skip
    client = signed_in(served, served.keys["admin"])
    page = client.get("/ui/profile")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"], page.text[:200]
    assert "The stored profile &#39;explicit&#39; cannot be read: facts.name" in page.text
    assert "Rule note-1." in page.text  # the learned notes are still there to review
    saved = client.post("/ui/profile/facts", data={"csrf": csrf_of(client, "/ui/profile"), "name": "name",
                                                   "value": "Alpha"})  # fmt: skip
    assert saved.status_code == 303
    mended = client.get("/ui/profile")
    assert "cannot be read" not in mended.text and "Alpha" in mended.text
    assert alpha.profile.get().voice.tone == ["plain"]  # the readable part was kept


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_store_outage_while_a_session_is_checked_keeps_the_session(served, pg_server, database_url):
    """A key's record that cannot be read signs its session out, but every GrandboError did: a Postgres that
    answered no read for a moment (here: the documents table locked past the statement timeout) deleted the
    session cookie of whoever loaded a page, and sent them to a sign-in that could not answer either."""
    from urllib.parse import urlsplit

    import psycopg

    database = urlsplit(database_url).path.lstrip("/")
    client = signed_in(served, served.keys["read"])

    def app_sessions(statement: str) -> None:
        with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER ROLE grandbo_app IN DATABASE "{database}" {statement}')
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'grandbo_app'")

    app_sessions("SET statement_timeout = '200ms'")
    try:
        with psycopg.connect(pg_server.url(database)) as locker:
            locker.execute("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
            during = client.get("/ui/memory")
            locker.rollback()
    finally:
        app_sessions("RESET statement_timeout")
    assert during.status_code == 503, (during.status_code, during.headers.get("location"))
    assert "set-cookie" not in during.headers  # the session was not ended
    assert client.get("/ui/memory").status_code == 200  # and works once the store answers again


def test_a_read_key_changes_nothing_and_a_write_key_cannot_administer(served):
    alpha = served.grandbo.org("alpha")
    reader = signed_in(served, served.keys["read"])
    token = csrf_of(reader)
    before = (alpha.stats().total, len(every_outcome(alpha)), alpha.get(SECRET["id"]).status)
    for path, form in [("/ui/memory", {"title": "reader"}), (f"/ui/memory/{SECRET['id']}/retire", {}),
                       (f"/ui/memory/{SECRET['id']}/correct", {"title": "reader"}),
                       ("/ui/triage/vote", {"runbook": "RB-WALRUS", "worked": "yes", "subject": "x"}),
                       ("/ui/profile/facts", {"name": "a", "value": "b"})]:  # fmt: skip
        response = reader.post(path, data={**form, "csrf": token})
        assert response.status_code == 403 and "read scope" in response.text, path
    assert (alpha.stats().total, len(every_outcome(alpha)), alpha.get(SECRET["id"]).status) == before
    writer = signed_in(served, served.keys["write"])
    refused = writer.post("/ui/profile/facts", data={"name": "a", "value": "b", "csrf": csrf_of(writer)})
    assert refused.status_code == 403 and alpha.profile.get().facts == {}


def test_no_console_page_shows_another_organizations_data(served):
    bravo = signed_in(served, served.keys["bravo"])
    pages = [
        "/ui/triage",
        "/ui/memory?status=any",
        "/ui/memory?q=walrus-cache+stampede+after+a+cold+start",
        "/ui/analytics",
        "/ui/profile",
    ]
    for path in pages:
        text = bravo.get(path).text
        assert "alpha-private" not in text and "Alpha walrus-cache" not in text and "RB-WALRUS" not in text, path
    for entry_id in (SECRET["id"], "RB-WALRUS"):  # asked for by id: not bravo's, so not found
        response = bravo.get(f"/ui/memory/{entry_id}")
        assert response.status_code == 404 and "alpha-private" not in response.text and "walrus" not in response.text
    assert BRAVO["title"] in bravo.get("/ui/memory?status=any").text
    response = bravo.post(f"/ui/memory/{SECRET['id']}/retire", data={"csrf": csrf_of(bravo)})
    assert response.status_code == 303
    assert served.grandbo.org("alpha").get(SECRET["id"]).status.value == "active"  # untouched


def test_an_entry_page_shows_its_own_embed_job_pending_then_embedded(tmp_path):
    """Not the org's counts: this entry's job, its attempts and its last error, then its vector."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo
    from tests.fakes import FakeEmbeddings

    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(
            home=tmp_path / "home",
            openai_base_url=fake.url,
            openai_model="fake-embed",
            openai_dimension=8,
            openai_api_key="test-key",
            http_timeout_seconds=0.5,
            embed_retry_seconds=0,
        )
        with Grandbo.init(settings, embedding="openai") as grandbo:
            memory = grandbo.org("alpha", create=True)
            fake.behaviour.status = 503
            entry = memory.remember({"title": "walrus-cache stampede after a cold start", "kind": "finding"})
            key = memory.keys.create("read", name="reader")[1]
            with serving(grandbo) as running:
                client = signed_in(running, key)
                page = client.get(f"/ui/memory/{entry.id}").text
                assert 'data-embedding="pending"' in page and "after 1 failed attempt" in page
                assert "503" in page  # the last error, so the reader knows why
                fake.behaviour.status = 200
                grandbo.backfill()
                assert 'data-embedding="embedded"' in client.get(f"/ui/memory/{entry.id}").text


def test_the_routes_the_profile_page_names_exist_with_that_method(served):
    """The page said to edit voice and people with PUT /v1/profile, which answers 405: the route is PATCH."""
    page = signed_in(served, served.keys["admin"]).get("/ui/profile").text
    named = re.findall(r"\b(GET|PUT|PATCH|POST|DELETE) (/v1/[\w/{}-]+)", page)
    assert ("PATCH", "/v1/profile") in named
    paths = httpx.get(f"{served.url}/openapi.json", timeout=30).json()["paths"]
    for method, path in named:
        assert method.lower() in paths.get(path, {}), (method, path)


@pytest.mark.parametrize("title", ["Walrus-cache stampede after a cold start", "Quokka ledger drift on payouts"])
def test_with_the_provider_down_the_triage_page_gives_no_verdict_not_no_similar_incident(tmp_path, title):
    """An organization's own calibration weighs the best cosine; with the provider down there is none, and
    the page says it has no verdict instead of "No similar past incident" over a matching memory, nor over
    no lexical match at all (it said "Memory holds nothing related": the vector arm never looked)."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo
    from tests.fakes import FakeEmbeddings, fake_embed_calibration

    with FakeEmbeddings(dimension=8) as fake:
        settings = Settings(
            home=tmp_path / "home", openai_base_url=fake.url, openai_model="fake-embed", openai_dimension=8,
            openai_api_key="test-key", http_timeout_seconds=0.5, embed_retry_seconds=0,
        )  # fmt: skip
        with Grandbo.init(settings, embedding="openai") as grandbo:
            memory = grandbo.org("alpha", create=True)
            memory.remember(SECRET)
            memory.org_settings.set_calibration(fake_embed_calibration())
            memory.incidents.open(title, services=[title.split()[0].lower()], incident_id="INC-W1")
            key = memory.keys.create("read", name="reader")[1]
            fake.behaviour.status = 503
            with serving(grandbo) as running:
                page = signed_in(running, key).get("/ui/triage?incident=INC-W1").text
    assert "No verdict (lexical matches only)" in page
    assert "No similar past incident" not in page and "Memory holds nothing related" not in page
    assert (SECRET["title"] in page) is title.startswith("Walrus")  # found by its words, or by none
    assert ("No memory matches by its words" in page) is not title.startswith("Walrus")


def test_an_alert_whose_kept_plan_cannot_be_read_still_shows_its_breakdown(served, raw, backend):
    """The breakdown read the plan kept with an alert raw: one kept in another shape answered a 500."""
    alpha = served.grandbo.org("alpha")
    body = {"alerts": [{"status": "firing", "labels": {"alertname": "WalrusCacheStampede", "service": "walrus-cache",
                                                       "severity": "critical"},
                        "annotations": {"summary": "walrus-cache stampede after a cold start"},
                        "startsAt": "2026-12-01T10:00:00Z", "fingerprint": "walrus01"}]}  # fmt: skip
    with httpx.Client(
        base_url=served.url, timeout=30, headers={"Authorization": f"Bearer {served.keys['write']}"}
    ) as api:
        (alert,) = api.post("/v1/webhooks/alertmanager", json=body).json()["alerts"]
    stored = alpha._documents.get("alert", alert["id"]).data
    assert stored["plan"]
    cast = "::jsonb" if backend == "postgres" else ""
    raw(f"UPDATE documents SET data = %s{cast} WHERE org_id = 'alpha' AND collection = 'alert' AND doc_id = %s",
        (json.dumps({**stored, "plan": {"path": 5, "runbooks": "none"}}), alert["id"]), org="alpha")  # fmt: skip
    page = signed_in(served, served.keys["read"]).get("/ui/triage", params={"alert": alert["id"]})
    assert page.status_code == 200 and "RB-WALRUS" in page.text


def test_the_explorer_reads_filters_it_does_not_know_as_none_and_keeps_those_it_does(served):
    bravo = signed_in(served, served.keys["bravo"])
    odd = bravo.get("/ui/memory", params={"tier": "nope", "kind": "weird", "status": "gone", "offset": "x"})
    assert odd.status_code == 200 and BRAVO["title"] in odd.text  # an edited link lists, never a 422
    kept = bravo.get("/ui/memory", params={"kind": "runbook", "status": "any", "service": " Checkout-API "})
    assert kept.status_code == 200 and BRAVO["title"] not in kept.text
    assert 'value="checkout-api"' in kept.text or "checkout-api" in kept.text


def test_console_requests_count_against_the_keys_rate_limit(tmp_path):
    """The limit was taken by the API and per MCP tool call; a console session (the same key, signed in) was
    never counted, so one read key searched through `/ui/memory?q=` without limit (400 recalls in 2.3 s at the
    default 50/s, a hostile probe). Past the key's limit a console page is a 429 with Retry-After."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0.01, rate_limit_burst=3)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        key = grandbo.org("acme", create=True).keys.create("read")[1]
        with serving(grandbo) as served:
            client = signed_in(served, key)
            answers = [
                client.get("/ui/memory", params={"q": f"checkout-api pool exhausted, case {n}"}) for n in range(6)
            ]
            signed_out = client.post("/ui/sign-out", data={"csrf": csrf_of_page(answers[0].text)})  # over the limit
    limited = [answer for answer in answers if answer.status_code == 429]
    assert limited and answers[0].status_code == 200, [answer.status_code for answer in answers]
    assert int(limited[0].headers["retry-after"]) >= 1 and "text/html" in limited[0].headers["content-type"]
    assert "GRANDBO_RATE_LIMIT_PER_KEY" in limited[0].text  # the page says why and what to do
    assert signed_out.status_code == 303, signed_out.text  # signing out is never refused for the rate


def test_a_keys_sign_ins_count_against_its_rate_limit(tmp_path):
    """Probe 23c: signing in was counted nowhere, so a valid key could sign in without limit. Past the key's limit
    the sign-in form comes back 429 with Retry-After, saying why; a wrong key is never counted (it names an org
    whose rate anyone could use up so)."""
    from grandbo.config import Settings
    from grandbo.service import Grandbo

    settings = Settings(home=tmp_path / "home", rate_limit_per_key=0.01, rate_limit_burst=2)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        key = grandbo.org("acme", create=True).keys.create("read")[1]
        with serving(grandbo) as served, httpx.Client(base_url=served.url, timeout=30) as client:
            wrong = [_sign_in(client, key[:-4] + "xxxx").status_code for _ in range(4)]
            answers = [_sign_in(client, key) for _ in range(4)]
    assert wrong == [401] * 4 and answers[0].status_code == 303
    limited = [answer for answer in answers if answer.status_code == 429]
    assert limited and int(limited[0].headers["retry-after"]) >= 1, [answer.status_code for answer in answers]
    assert "GRANDBO_RATE_LIMIT_PER_KEY" in limited[0].text and "gb_session" not in limited[0].headers.get(
        "set-cookie", ""
    )


def _sign_in(client: httpx.Client, key: str) -> httpx.Response:
    client.cookies.clear()
    token = csrf_of_page(client.get("/ui/sign-in").text)
    return client.post("/ui/sign-in", data={"key": key, "csrf": token, "next": "/ui/memory"})


def csrf_of_page(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def test_a_console_page_asked_with_text_no_store_keeps_answers_a_console_page(served):
    """A NUL in a console page's query was refused at the door with the API's JSON; a browser showed raw JSON."""
    client = signed_in(served, served.keys["read"])
    page = client.get("/ui/memory", params={"q": "walrus\x00cache"})
    api = httpx.get(f"{served.url}/v1/memories", params={"kind": "finding\x00"},
                    headers={"Authorization": f"Bearer {served.keys['read']}"}, timeout=BOUND)  # fmt: skip
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html"), page.text[:300]
    assert "Invalid request: q:" in page.text and "<html" in page.text.lower()
    assert api.status_code == 422 and api.json()["error"]["type"] == "invalid_input"


def test_an_admin_deletes_a_learned_note_on_the_console_and_never_another_organizations(served, grandbo):
    alpha, bravo = grandbo.org("alpha"), grandbo.org("bravo")
    _note(alpha, "note-1")
    _note(bravo, "note-b")
    reader = signed_in(served, served.keys["read"])
    assert 'action="/ui/notes/note-1/delete"' not in reader.get("/ui/profile").text  # an admin's
    assert reader.post("/ui/notes/note-1/delete", data={"csrf": csrf_of(reader, "/ui/profile")}).status_code == 403
    other = signed_in(served, served.keys["bravo"])
    tried = other.post("/ui/notes/note-1/delete", data={"csrf": csrf_of(other, "/ui/profile")})
    assert tried.status_code == 303 and "No learned note &#39;note-1&#39;" in other.get(tried.headers["location"]).text
    admin = signed_in(served, served.keys["admin"])
    assert 'action="/ui/notes/note-1/delete"' in admin.get("/ui/profile").text
    deleted = admin.post("/ui/notes/note-1/delete", data={"csrf": csrf_of(admin, "/ui/profile")})
    assert deleted.status_code == 303
    assert "Note note-1 deleted" in admin.get(deleted.headers["location"]).text
    assert alpha.learning.notes(include_inactive=True) == []
    assert [n.id for n in bravo.learning.pending()] == ["note-b"]  # the other organization's note stays
