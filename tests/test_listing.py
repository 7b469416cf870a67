"""Listing an organization's entries a page at a time in the store (`Listing`), as `GET /v1/memories` and
`GET /v1/runbooks` do: the same pages, in the same order, as sorting every entry here did, on both backends.
Before, each page read and validated every entry of the org: a page of a 20,000-entry org took 234 ms (SQLite)
and 388 ms (Postgres), and one org's listing slowed another's recalls 92 times over (a hostile probe)."""

from __future__ import annotations

import itertools
import random

import httpx

from grandbo.model import Kind, Listing
from tests.serving import serving


def _seeded(memory) -> None:
    rng = random.Random(4)
    kinds, services = ["finding", "runbook", "fact"], ["cart", "auth", "db"]
    for batch in range(6):  # a batch is written at one time: ties on created_at, broken by id
        memory.remember_many([
            {"id": f"E-{rng.choice('abcXYZ')}{batch:02d}{n:02d}", "title": f"{rng.choice(services)} broke, case {batch} {n}",
             "kind": rng.choice(kinds), "services": rng.sample(services, rng.randint(0, 2))}
            for n in range(8)
        ])  # fmt: skip
    every = memory.entries()
    for entry in every[::5]:
        memory.retire(entry.id, reason="stale")
    memory.correct(every[3].id, {"title": "corrected: db broke"}, reason="typo")


def test_the_stores_pages_are_the_whole_sorted_list_cut_in_pieces(memory):
    _seeded(memory)
    for inactive, kind, service in itertools.product((False, True), (None, Kind.RUNBOOK, Kind.FACT), (None, "db")):
        whole = sorted(
            (e for e in memory.entries(include_inactive=inactive)
             if (kind is None or e.kind is kind) and (service is None or service in e.services)),
            key=lambda e: (e.created_at, e.id), reverse=True,
        )  # fmt: skip
        walked, before = [], None
        while True:
            page = memory.entries(include_inactive=inactive, listing=Listing(4, before, kind, service))
            walked += page
            if len(page) < 4:
                break
            before = (page[-1].created_at, page[-1].id)
        assert [e.id for e in walked] == [e.id for e in whole], (inactive, kind, service)
        assert walked == whole
    assert len(memory.entries(include_inactive=True)) > len(memory.entries())  # retired and superseded are there


def test_memories_and_runbooks_page_over_the_api_as_they_did(grandbo, memory):
    _seeded(memory)
    key = memory.keys.create("read")[1]
    with serving(grandbo) as served:
        for path, params, kept in (
            ("/v1/memories", {}, lambda e: True),
            ("/v1/memories", {"service": "DB", "kind": "finding"}, lambda e: "db" in e.services and e.kind is Kind.FINDING),
            ("/v1/runbooks", {"service": "auth"}, lambda e: e.kind is Kind.RUNBOOK and "auth" in e.services),
        ):  # fmt: skip
            ids, cursor = [], None
            while True:
                answer = httpx.get(f"{served.url}{path}", params={**params, "limit": 3, **({"cursor": cursor} if cursor else {})},
                                   headers={"Authorization": f"Bearer {key}"}).json()  # fmt: skip
                ids += [item["runbook"]["id"] if "runbook" in item else item["id"] for item in answer["items"]]
                cursor = answer["next_cursor"]
                if cursor is None:
                    break
            expected = sorted(
                (e for e in memory.entries() if kept(e)), key=lambda e: (e.created_at, e.id), reverse=True
            )
            assert ids == [e.id for e in expected] and ids, (path, params)
