"""The handle an API key or a console session opens: of the incarnation of the org the key was read in, whichever way
the key was checked (review 22: M1, M2, L6, M4)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.requests import Request

from grandbo.config import Settings
from grandbo.errors import OrgDroppedError
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
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
