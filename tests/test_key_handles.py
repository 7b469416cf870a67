"""The handle an API key or a console session opens: of the incarnation of the org the key was read in, whichever way
the key was checked (review 22: M1, M2, L6, M4)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import psycopg
import pytest
from starlette.requests import Request

from grandbo.config import Settings
from grandbo.errors import OrgDroppedError
from grandbo.incarnation import Incarnation
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.store.scoped import confirming
from grandbo.web.session import SESSION, Sessions
from tests.serving import serving
from tests.test_console_http import csrf_of, signed_in


def test_a_key_checked_through_keys_verify_still_authenticates(grandbo: Grandbo):
    """`OrgMemory.keys.verify` keeps the key in the process's cache without its org's incarnation: `authenticate`
    took that for "the org was dropped" and refused the valid key (401) until the cache let it go."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write", name="verified first")
    assert memory.keys.verify(key) is not None
    for _ in range(2):  # the first reads the store again, the second is answered from the cache
        opened, record = grandbo.authenticate(key)
        assert (opened.org, record.scope.value) == ("acme", "write")
    held = grandbo.held(key)
    assert held is not None and held[0].org == "acme"


@pytest.fixture
def operator(settings: Settings) -> Iterator[Grandbo]:
    """`grandbo orgs delete` then `grandbo orgs create` from another process (no key cache to wait out)."""
    with Grandbo.open(settings.model_copy(update={"key_cache_seconds": 0})) as opened:
        yield opened


def _replace(operator: Grandbo) -> OrgMemory:
    operator.drop_org("acme")
    operator.create_org("acme")
    return operator.org("acme")


def test_a_console_page_checked_before_the_drop_writes_nothing_into_the_org_created_again(grandbo, operator):
    """The page's key was checked, then (while it waited for its org's slot) the org was deleted and created again:
    its handle is the signed-in org's, so its write is refused, not filed in the new org."""
    _, key = grandbo.org("acme", create=True).keys.create("write", name="console")
    sessions = Sessions(grandbo, b"s" * 32, 8)
    cookie, _, _ = sessions.sign_in(key)
    request = Request({"type": "http", "headers": [(b"cookie", f"{SESSION}={cookie}".encode())], "state": {}})
    viewer = sessions.viewer(request)
    assert viewer is not None
    new = _replace(operator)
    with pytest.raises(OrgDroppedError) as refused:
        viewer.memory.remember({"id": "OLD-ORG-NOTE", "title": "the old session's write", "kind": "finding"})
    assert "after this console session was signed in" in refused.value.message
    with pytest.raises(OrgDroppedError):
        viewer.memory.pin()  # what the page does once its slot is held
    assert new.entries(include_inactive=True) == []
    assert sessions.viewer(request) is None and "Sign in again" in request.state.ended


def test_a_console_session_whose_org_was_deleted_is_sent_to_sign_in_saying_so(grandbo, operator):
    """Over HTTP: a signed-in page after the org was deleted and created again is sent to sign in, with why, and its
    form's write goes nowhere."""
    _, key = grandbo.org("acme", create=True).keys.create("write", name="console")
    with serving(grandbo) as served:
        client = signed_in(served, key)
        token = csrf_of(client)
        new = _replace(operator)
        answer = client.post("/ui/memory", data={"title": "the old session's write", "csrf": token})
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/sign-in"), answer.text
        page = client.get(answer.headers["location"])
        assert "was deleted after this console session was signed in" in page.text
        assert "Sign in again" in page.text
    assert new.entries(include_inactive=True) == []


@pytest.fixture
def statements(grandbo: Grandbo, backend: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement the store sends from now on (SQLite: its trace; Postgres: psycopg's cursors)."""
    sent: list[str] = []
    if backend == "sqlite":
        grandbo._store.trace(sent.append)  # type: ignore[attr-defined]
        return sent
    execute = psycopg.Cursor.execute

    def recorded(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(query if isinstance(query, str) else repr(query))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    return sent


def test_a_cached_keys_handle_reads_nothing_until_it_is_used(grandbo, statements):
    """A request whose key this process verified a moment ago gets its handle from memory, on the event loop and
    before it waits for its org's slot: that reads no store, nor does building any of the handle's parts. Its first
    use reads the org's incarnation, so a drop while it waited is seen."""
    memory = grandbo.org("acme", create=True)
    memory.remember({"title": "walrus-cache stampede after a cold start", "kind": "finding"})
    _, key = memory.keys.create("write", name="cached")
    grandbo.authenticate(key)  # verified: kept in the process's key cache
    statements.clear()
    held = grandbo.held(key)
    assert held is not None
    handle = held[0]
    for part in (handle.incidents, handle.runbooks, handle.keys, handle.alerts, handle.learning, handle.catalog):
        assert part is not None
    assert statements == []
    handle.stats()
    assert any("incarnation" in sql for sql in statements), statements


def test_the_confirming_store_reads_when_called_not_when_a_method_is_taken(grandbo, statements):
    """A wrapper or tier that keeps one of the store's methods for later (`partial(store.erasures, org)`) reads
    nothing as the handle is built; the org's incarnation is read at the first call, once."""
    grandbo.create_org("acme")
    read = partial(grandbo._store.incarnation, "acme")
    pinned = Incarnation("acme", read, read())
    store = confirming(grandbo._store, pinned)
    statements.clear()
    erasures, searches = store.erasures, store.searches_vectors
    assert statements == [] and not pinned.confirmed and isinstance(searches, bool)
    assert erasures("acme") == 0
    assert pinned.confirmed and any("incarnation" in sql for sql in statements), statements


def _confirming_reads(statements: list[str]) -> int:
    return sum(sql.startswith("SELECT incarnation FROM orgs") for sql in statements)


def test_a_cached_keys_recall_is_confirmed_by_the_read_it_makes_anyway(grandbo, statements, operator):
    """A recall reads its org's watermarks (its row in `orgs`) before it searches: that read carries the org's
    incarnation, so a cached key's recall makes no read of its own to confirm it (on Postgres 3 transactions, not
    4), and is still refused once the org was deleted and created again."""
    memory = grandbo.org("acme", create=True)
    memory.remember({"title": "walrus-cache stampede after a cold start", "kind": "finding"})
    _, key = memory.keys.create("write", name="cached")
    grandbo.authenticate(key)
    handle, _ = grandbo.authenticate(key)  # from the cache
    statements.clear()
    assert [
        hit.entry.title for hit in handle.recall("walrus-cache stampede after a cold start on the cache tier", 3).hits
    ][:1] == ["walrus-cache stampede after a cold start"]
    assert _confirming_reads(statements) == 0, statements
    handle.remember({"title": "a later write of the same request", "kind": "finding"})  # confirmed: no read either
    assert _confirming_reads(statements) == 0, statements
    late, _ = grandbo.authenticate(key)
    _replace(operator)
    with pytest.raises(OrgDroppedError):
        late.recall("walrus-cache stampede after a cold start on the cache tier", 3)
