"""The memory explorer's listing reads a page from the store, not the org: every view of `/ui/memory` walked every
entry of the org in Python (from the console's entry cache, or, for an org over the cache's bound, read whole
from the store each time) to count them and slice one page, and four viewers of an org of 228,000 entries took
another org's recall p50 from 7 to 182 ms (probe 20a F0). Its pages go by the (time, id) cursor of
`GET /v1/memories`, with the filters asked in SQL; on both backends."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

from grandbo.model import Entry, Status
from grandbo.service import Grandbo
from grandbo.store.scoped import ScopedEntries
from grandbo.web.routes_memory import LISTED, Filters
from tests.serving import serving
from tests.test_console_http import signed_in

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

ROW = re.compile(r'<a href="/ui/memory/([^"]+)">')
KINDS = ("finding", "runbook", "fact", "note", "post-mortem")


@pytest.fixture
def small_cache(settings) -> Iterator[Grandbo]:  # type: ignore[no-untyped-def]
    """A process of 1 MiB of indexes: the console kept a quarter of it of entries, and the org below, over that, was
    read whole for each view."""
    with Grandbo.init(settings.model_copy(update={"index_memory_mb": 1}), embedding="deterministic") as opened:
        yield opened


def _seed(grandbo: Grandbo, n: int, body: str = "") -> list[str]:
    memory = grandbo.org("big", create=True)
    memory.remember_many([
        {"id": f"M{i:04d}", "title": f"checkout pool note {i}", "kind": KINDS[i % len(KINDS)],
         "services": ["checkout-api" if i % 3 else "orders-db"], "body": body or f"pool {i} " * 300}
        for i in range(n)
    ])  # fmt: skip
    for i in range(0, n, 7):
        memory.retire(f"M{i:04d}", reason="stale")
    for i in range(3, n, 11):
        if i % 7:
            memory.correct(f"M{i:04d}", {"title": f"checkout pool note {i}, corrected"}, reason="typo")
    return [memory.keys.create("read", name="console")[1]]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many entries each read of the org's entries from the store gave (the list, or some by id)."""
    counts: list[int] = []
    entries, get_many = ScopedEntries.entries, ScopedEntries.get_many

    def listed(self, *args, **kwargs) -> list[Entry]:  # type: ignore[no-untyped-def]
        found = entries(self, *args, **kwargs)
        counts.append(len(found))
        return found

    def by_id(self, *args, **kwargs) -> dict[str, Entry]:  # type: ignore[no-untyped-def]
        found = get_many(self, *args, **kwargs)
        counts.append(len(found))
        return found

    monkeypatch.setattr(ScopedEntries, "entries", listed)
    monkeypatch.setattr(ScopedEntries, "get_many", by_id)
    return counts


def test_a_view_of_the_memory_list_reads_a_page_of_the_org_not_every_entry(small_cache, monkeypatch):
    (key,) = _seed(small_cache, 400)
    counts = _counting(monkeypatch)
    with serving(small_cache) as served:
        client = signed_in(served, key)
        small_cache.flush(60)  # whatever the sign-in left running, done before the views are counted
        counts.clear()
        page = client.get("/ui/memory", params={"status": "any"}).text
        first = sum(counts)
        older = html.unescape(re.search(r'<a href="([^"]+)" rel="next">', page)[1])
        counts.clear()
        second = client.get(older).text
        client.close()
    assert len(ROW.findall(page)) == LISTED and len(ROW.findall(second)) == LISTED
    # One page and the one after it that says another follows, in the parts `pages.filled` reads: not 400+.
    assert first <= LISTED + 2 and sum(counts) <= LISTED + 2, (first, counts)


def _walk(client, params: dict[str, str]) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The ids the listing shows page after page, older and older, and the pages' headings."""
    shown, headings = [], []
    page = client.get("/ui/memory", params=params).text
    while True:
        shown += ROW.findall(page)
        headings.append(re.search(r'<h2 id="results-h">([^<]*)</h2>', page)[1])
        older = re.search(r'<a href="([^"]+)" rel="next">', page)
        if older is None:
            return shown, headings
        page = client.get(html.unescape(older[1])).text


@pytest.mark.parametrize(
    "params",
    [{"status": "any"}, {"status": "superseded", "kind": "finding"}, {"tier": "semantic", "service": "checkout-api"}],
)  # fmt: skip
def test_paging_the_memory_list_walks_every_entry_it_admits_once_newest_first(grandbo, params):
    (key,) = _seed(grandbo, 130)
    filters = Filters.model_validate(params)
    every = grandbo.org("big").entries(include_inactive=True)
    wanted = [e.id for e in sorted(every, key=lambda e: (e.created_at, e.id), reverse=True) if filters.admits(e)]
    with serving(grandbo) as served:
        client = signed_in(served, key)
        shown, headings = _walk(client, params)
        client.close()
    assert shown == wanted  # each once, newest first by creation, only those the filters admit
    if len(wanted) > LISTED:
        assert headings[1].endswith(f"{LISTED + 1}–{2 * LISTED} shown (newest first)"), headings
    else:
        which = "" if filters.status == "any" else f"{filters.status} "
        assert headings == [f"{len(wanted)} {which}entr{'y' if len(wanted) == 1 else 'ies'}"]


def test_a_memory_list_page_is_bounded_by_bytes_and_walks_back_to_the_newest(grandbo):
    """A page of entries near their 200,000-character cap is cut at `pages.MAX_PAGE_BYTES`, as the API's is; the
    newer links lead back, page by page, to the first."""
    (key,) = _seed(grandbo, 24, body="drain the pool and restart the cache warmer. " * 4000)
    memory = grandbo.org("big")
    active = [e.id for e in sorted(memory.entries(), key=lambda e: (e.created_at, e.id), reverse=True)]
    with serving(grandbo) as served:
        client = signed_in(served, key)
        shown, headings = _walk(client, {})
        page = client.get("/ui/memory").text
        first = ROW.findall(page)
        while (older := re.search(r'<a href="([^"]+)" rel="next">', page)) is not None:
            page = client.get(html.unescape(older[1])).text
        back = [ROW.findall(page)]
        while (newer := re.search(r'<a href="([^"]+)" rel="prev">', page)) is not None:
            page = client.get(html.unescape(newer[1])).text
            back.append(ROW.findall(page))
        client.close()
    assert shown == active and 1 < len(first) < len(active) and len(headings) > 1  # cut by bytes, before LISTED
    assert back[-1] == first and {entry for rows in back for entry in rows} == set(active)


def test_an_edited_or_stale_pager_link_lists_rather_than_fails(grandbo):
    (key,) = _seed(grandbo, 60)
    memory = grandbo.org("big")
    with serving(grandbo) as served:
        client = signed_in(served, key)
        first = client.get("/ui/memory", params={"status": "any"}).text
        older = html.unescape(re.search(r'<a href="([^"]+)" rel="next">', first)[1])
        last = ROW.findall(client.get(older).text)
        for entry_id in last:
            if memory.get(entry_id).status is Status.ACTIVE:
                memory.retire(entry_id, reason="gone")
        for path in [older.replace("status=any", "status=active"), "/ui/memory?before=bm9uc2Vuc2U&start=x"]:
            response = client.get(path)
            assert response.status_code == 200 and ROW.findall(response.text), path
        client.close()
