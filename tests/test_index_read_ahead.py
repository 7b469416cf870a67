"""What a recall no longer reads each time: the embedded store's watermarks while nothing was written (a write by
another connection or process is still seen), and the entries of a new index, cached ahead after its second read
(never served stale after a write, a retirement or a purge)."""

from __future__ import annotations

import random
import threading

from grandbo.config import Settings
from grandbo.eval.bench import synthetic_entry, synthetic_query
from grandbo.model import NewEntry
from grandbo.service import Grandbo

TOPIC = synthetic_query(random.Random(3))


def _seed(grandbo: Grandbo, count: int) -> None:
    rng = random.Random(7)
    grandbo.org("acme", create=True).remember_many([synthetic_entry(rng, n) for n in range(count)], actor="test")


def test_watermarks_are_answered_again_until_another_connection_writes(settings: Settings) -> None:
    embedded = settings.database_url is None
    with Grandbo.init(settings, embedding="deterministic") as server:
        _seed(server, 40)
        memory = server.org("acme")
        memory.recall(TOPIC, 10)
        server._keeper.settle()  # its image saved (a commit too)
        for _ in range(5):  # each pooled reader's watermarks read once
            memory.recall(TOPIC, 10)
        if embedded:  # nothing written since: no watermark read (one pragma instead)
            statements: list[str] = []
            server._store.trace(statements.append)
            memory.recall(TOPIC, 10)
            server._store.trace(None)
            assert not [s for s in statements if "max(seq)" in s], statements
        with Grandbo.open(settings) as other:  # another connection to the same file (as another process has)
            written = other.org("acme").remember(
                NewEntry(title="zanzibar quokka outage", body="the zanzibar quokka queue stalled"), actor="test"
            )
        hits = memory.recall("the zanzibar quokka queue stalled again", 10, arm="lexical").hits
        assert [hit.entry.id for hit in hits][:1] == [written.id]
        mine = memory.remember(NewEntry(title="yellowstone marmot", body="the yellowstone marmot cache"), actor="t")
        assert [
            hit.entry.id for hit in memory.recall("the yellowstone marmot cache went cold", 10, arm="lexical").hits
        ][:1] == [mine.id]


def test_a_new_index_caches_its_entries_ahead_and_a_later_write_is_still_what_recall_returns(
    settings: Settings,
) -> None:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _seed(grandbo, 60)
    with Grandbo.open(settings) as server:  # loads the org's index from its image: new, its entries not cached
        memory, keeper = server.org("acme"), server._keeper
        memory.recall(TOPIC, 10)
        memory.recall(TOPIC, 10)  # a later read: the entries are read ahead on the fetch thread
        keeper.settle()
        index = keeper._indexes["acme"]
        assert len(index.cached_entries([entry.id for entry in memory.entries()])) == 60
        first, second, third = [hit.entry for hit in memory.recall(TOPIC, 10, arm="lexical").hits[:3]]
        corrected = memory.correct(first.id, {"body": first.body + " pangolin"}, actor="test")
        memory.retire(second.id, actor="test")
        memory.purge(third.id, reason="test", actor="test")
        hits = {hit.entry.id: hit.entry for hit in memory.recall(TOPIC, 10, arm="lexical").hits}
        assert hits[corrected.id].body.endswith(" pangolin")
        assert not {first.id, second.id, third.id} & set(hits)


def test_entries_read_ahead_before_a_write_the_index_has_not_applied_are_not_cached(settings: Settings) -> None:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _seed(grandbo, 60)
    with Grandbo.open(settings) as server:
        memory, keeper = server.org("acme"), server._keeper
        first = memory.recall(TOPIC, 10, arm="lexical").hits[0].entry
        go = threading.Event()
        keeper._fetcher.submit(go.wait)  # the fetch thread busy: the read-ahead waits behind it
        memory.recall(TOPIC, 10)
        with Grandbo.open(settings) as other:  # written after the read queued it, before the read-ahead reads
            corrected = other.org("acme").correct(first.id, {"body": first.body + " pangolin"}, actor="test")
        go.set()
        keeper.settle()
        index = keeper._indexes["acme"]
        assert index.cached_entries([first.id])[first.id].body == first.body  # read by the recall, before the write
        assert len(index.cached_entries([entry.id for entry in memory.entries()])) < 60  # none read ahead
        hits = {hit.entry.id: hit.entry for hit in memory.recall(TOPIC, 10, arm="lexical").hits}
        assert hits[corrected.id].body.endswith(" pangolin") and first.id not in hits
