"""An org's snapshot is made by one thread at a time (`Snapshots.get`): requests arriving at once, the org's catalog
read whole (a process's first read, more than CATALOG_CHANGES writes behind, after an erasure), each made the graph
again, 0.1-0.4 s at 10,000 services a request (probe 28). Now one makes it, the others wait and take it. Both
backends."""

from __future__ import annotations

import random
import threading
import time

import pytest

from grandbo.service import Grandbo
from grandbo.tiers.topology import Service, Topology

THREADS, SIZE = 8, 3_000
TOPIC = "replica lag on the checkout database after a failover"


def _at_once(grandbo: Grandbo) -> list[Topology]:
    """The org's topology as THREADS requests that arrive at once read it, each with a handle of its own."""
    go, read = threading.Barrier(THREADS), list[Topology]()

    def request() -> None:
        memory = grandbo.org("acme")
        go.wait()
        read.append(memory.catalog.topology())

    threads = [threading.Thread(target=request) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return read


def test_requests_arriving_at_once_make_the_orgs_catalog_once(settings):
    names = [f"s{n:04d}" for n in range(SIZE)]
    rng = random.Random(5)
    with Grandbo.init(settings, embedding="deterministic") as writer:
        writer.org("acme", create=True).catalog.put([Service(name=n, depends_on=rng.sample(names, 5)) for n in names])
        writer.org("other", create=True)
    with Grandbo.open(settings) as served:  # a process's first read of the org: the graph made whole
        read = _at_once(served)
        assert len(read) == THREADS and len({id(topology) for topology in read}) == 1 and read[0].built == SIZE
        with Grandbo.open(settings) as cli:  # another process's change: the next requests take it, once
            cli.org("acme").catalog.put([Service(name="s0001", depends_on=["s0002"])])
        again = _at_once(served)
        assert len({id(topology) for topology in again}) == 1 and again[0] is not read[0]
        assert again[0].services["s0001"].depends_on == ["s0002"]
        other = served.org("other").catalog.topology()  # another org's made apart
        assert other is not again[0] and not other.names


def test_another_orgs_snapshot_is_made_while_one_orgs_is_being_made(settings, monkeypatch):
    """The lock that makes an org's snapshot one at a time is the org's: while acme's is being made, another org's
    request makes its own (review 29: shown, not only counted)."""
    with Grandbo.init(settings, embedding="deterministic") as writer:
        writer.org("acme", create=True).catalog.put([Service(name="a", depends_on=["b"])])
        writer.org("other", create=True).catalog.put([Service(name="o", depends_on=["p"])])
    with Grandbo.open(settings) as served:
        inside, held, other = threading.Event(), threading.Event(), threading.Event()
        made = served._snapshots._made

        def held_for_acme(org, *args):  # type: ignore[no-untyped-def]  # the real making, acme's held meanwhile
            if org == "acme":
                inside.set()
                held.wait(30)
            return made(org, *args)

        monkeypatch.setattr(served._snapshots, "_made", held_for_acme)
        acme = threading.Thread(target=lambda: served.org("acme").catalog.topology())
        acme.start()
        try:
            assert inside.wait(10)
            threading.Thread(target=lambda: (served.org("other").catalog.topology(), other.set())).start()
            assert other.wait(10) and acme.is_alive()  # made while acme's was held
        finally:
            held.set()
            acme.join()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # the embedded store's reads hold no transaction
def test_a_recall_waiting_for_another_thread_s_snapshot_holds_no_transaction_meanwhile(settings, raw, monkeypatch):
    """A process's first recall of an org (its index loaded from its image, in the recall's reads together) whose
    facts another thread is making waited for them inside that transaction, its pooled connection idle in it (review
    30): it ends its reads before it waits."""
    with Grandbo.init(settings, embedding="deterministic") as writer:
        writer.org("acme", create=True).remember({"title": "replica lag after failover", "body": "promote, resync"})
        writer._keeper.save_min = 1  # its index image saved after its first recall builds it
        writer.org("acme").recall(TOPIC)
    with Grandbo.open(settings) as grandbo:  # a process's first recall of the org: its view read from its image
        memory = grandbo.org("acme")
        inside, held = threading.Event(), threading.Event()
        made, snapshots = grandbo._snapshots._made, grandbo._snapshots

        def held_while_making(*args):  # type: ignore[no-untyped-def]  # the real making, held meanwhile
            inside.set()
            held.wait(30)
            return made(*args)

        monkeypatch.setattr(snapshots, "_made", held_while_making)
        making = threading.Thread(target=lambda: grandbo.org("acme").catalog.topology())  # no reads of its own open
        making.start()
        recalled: list[object] = []
        try:
            assert inside.wait(10)
            recall = threading.Thread(target=lambda: recalled.append(memory.recall(TOPIC)))
            recall.start()
            while snapshots._turns._turns["acme"].threads < 2:  # the recall at the turn, waiting
                assert recall.is_alive()
                time.sleep(0.01)
            idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%%'"
            for _ in range(200):  # it may not have ended them quite yet
                if raw(idle)[0][0] == 0:
                    break
                time.sleep(0.01)
            assert raw(idle)[0][0] == 0, "a connection idle in its transaction while the recall waited"  # before: 1
        finally:
            held.set()
            making.join()
        recall.join()
        assert len(recalled) == 1 and recalled[0].hits[0].entry.title == "replica lag after failover"
