"""What an admin keeps is bounded and listed a page at a time (hostile probe 22b, H3): an organization holds at most
GRANDBO_KEYS_PER_ORG active keys (21,000 were made, and `GET /v1/keys` answered all of them in one 6.5 MB body), and
`GET /v1/keys`, `/v1/notes` and `/v1/catalog` page with `limit` and `cursor` as every other list does."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from grandbo.errors import KeyLimitError
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


def walk(client: httpx.Client, path: str, limit: int, **asked: Any) -> list[list[dict[str, Any]]]:
    """Every page of a list, following `next_cursor` from the first."""
    pages, cursor = [], None
    while True:
        params: dict[str, Any] = asked | {"limit": limit} | ({"cursor": cursor} if cursor else {})
        answer = client.get(path, params=params)
        assert answer.status_code == 200, answer.text
        assert set(answer.json()) == {"items", "next_cursor"}
        pages.append(answer.json()["items"])
        if (cursor := answer.json()["next_cursor"]) is None:
            return pages
        assert len(pages) < 50, "the cursor never ends"


def test_an_org_at_its_key_limit_is_refused_a_key_until_it_revokes_one(settings):
    with Grandbo.init(settings.model_copy(update={"keys_per_org": 3}), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        admin, key = memory.keys.create("admin", name="ops")
        other = grandbo.org("other", create=True)
        with serving(grandbo) as served, served.client(key) as client:
            made = [client.post("/v1/keys", json={"scope": "read", "name": f"agent {n}"}) for n in range(2)]
            assert [answer.status_code for answer in made] == [201, 201]
            refused = client.post("/v1/keys", json={"scope": "read", "name": "one too many"})
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["type"] == "key_limit" and "GRANDBO_KEYS_PER_ORG" in error["message"]
            assert "Revoke the keys no one uses" in error["remedy"] and error["detail"]["limit"] == 3
            assert error["detail"]["active_keys"] == 3
            listed = [item["id"] for page in walk(client, "/v1/keys", 50) for item in page]
            assert len(listed) == 3 and "one too many" not in refused.text.replace(error["message"], "")
            assert client.delete(f"/v1/keys/{made[0].json()['id']}").status_code == 200  # revoked: counts no more
            assert client.post("/v1/keys", json={"scope": "read", "name": "in its place"}).status_code == 201
            assert client.post("/v1/keys", json={"scope": "read"}).status_code == 409
        with pytest.raises(KeyLimitError):  # the library (and `grandbo keys create`) alike
            memory.keys.create("read")
        assert other.keys.create("read")[0].active  # another org's keys are its own count
        assert len(memory.keys.all()) == 4 and memory.keys.verify(key) is not None and admin.active


def test_keys_list_a_page_at_a_time_each_once(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("admin", name="ops")
    made = [memory.keys.create("read", name=f"agent {n}")[0] for n in range(6)]
    memory.keys.revoke(made[2].id)
    with serving(grandbo) as served, served.client(key) as client:
        pages = walk(client, "/v1/keys", 3)
        first = client.get("/v1/keys").json()
    assert [len(page) for page in pages] == [3, 3, 1]
    listed = [item for page in pages for item in page]
    assert len({item["id"] for item in listed}) == 7 and {m.id for m in made} <= {item["id"] for item in listed}
    assert [item["revoked_at"] is not None for item in listed].count(True) == 1  # revoked keys stay listed
    assert next(item for item in listed if item["id"] == made[2].id)["revoked_at"] is not None
    assert set(listed[1]) == {"id", "name", "scope", "created_at", "revoked_at"}  # never a hash
    assert len(first["items"]) == 7 and first["next_cursor"] is None  # no limit: up to 50


def _note(memory, note_id: str, status: str) -> None:  # type: ignore[no-untyped-def]
    data = {
        "id": note_id, "category": "tone", "part": "tone_style", "text": f"Rule {note_id}.", "status": status,
        "signals": [], "fingerprint": note_id, "created_at": "2026-01-01T00:00:00+00:00",
    }  # fmt: skip
    write = DocumentWrite("learned_note", note_id, data, "note.learned", ref=f"{status}/tone")
    memory._documents.put([write], "test")


def test_notes_list_a_page_at_a_time_in_force_and_pending_unless_every_one_is_asked(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("admin", name="ops")
    statuses = ["active", "pending", "rejected", "edited", "archived", "pending", "active"]
    for n, status in enumerate(statuses):
        _note(memory, f"note-{n}", status)
    with serving(grandbo) as served, served.client(key) as client:
        shown = walk(client, "/v1/notes", 2)
        every = walk(client, "/v1/notes", 3, include_inactive=True)
    assert [len(page) for page in shown] == [2, 2, 1]
    assert [note["id"] for page in shown for note in page] == ["note-6", "note-5", "note-3", "note-1", "note-0"]
    assert [len(page) for page in every] == [3, 3, 1]
    assert sorted(note["id"] for page in every for note in page) == [f"note-{n}" for n in range(7)]


def test_the_catalog_lists_a_page_at_a_time_by_name(grandbo):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("admin", name="ops")
    names = [f"svc-{n:02d}" for n in range(7)]
    with serving(grandbo) as served, served.client(key) as client:
        put = client.put("/v1/catalog", json={"services": [{"name": name} for name in reversed(names)]})
        assert put.status_code == 200, put.text
        pages = walk(client, "/v1/catalog", 3)
        refused = client.get("/v1/catalog", params={"cursor": "not-a-cursor"})
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [service["name"] for page in pages for service in page] == names
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "invalid_input"
