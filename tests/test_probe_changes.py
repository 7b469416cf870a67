"""Change deliveries as sloppy and hostile senders make them: what is stored can be read back."""

from __future__ import annotations

from tests.serving import serving


def test_a_change_whose_id_holds_a_slash_is_read_back_by_its_id(grandbo) -> None:  # type: ignore[no-untyped-def]
    # A generic change `{"id": "release/2026.12"}` was stored, but `GET /v1/changes/generic:release/2026.12`
    # was the router's bare "Not Found": the id could be listed, never fetched.
    memory = grandbo.org("acme", create=True)
    _, write = memory.keys.create("write")
    change = {"id": "release/2026.12", "service": "checkout", "kind": "deploy", "summary": "s",
              "at": "2026-12-04T10:00:00Z"}  # fmt: skip
    with serving(grandbo) as served, served.client(write) as client:
        assert client.post("/v1/changes/generic", json=change).status_code == 202
        for asked in ("generic:release/2026.12", "release/2026.12", "generic:release%2F2026.12"):
            got = client.get(f"/v1/changes/{asked}")
            assert got.status_code == 200 and got.json()["id"] == "release/2026.12", (asked, got.text[:200])
        missing = client.get("/v1/changes/generic:no/such")
        assert missing.status_code == 404 and "grandbo change list" in missing.json()["error"]["message"]
