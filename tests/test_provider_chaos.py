"""Chaos, bounded, on loopback: a hosted provider that answers with bad indexes, a vector of the wrong dimension
or a NaN, in turn with honest answers, while a real server takes writes from several clients and an import runs
beside it. Afterwards every acknowledged entry is stored, every vector written is the one of its own entry's text
(never another entry's), and once the provider is healthy a backfill completes (issue 26, items 2 and 6)."""

from __future__ import annotations

import json
import threading

import pytest
import structlog

from grandbo.model import entry_text
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings, vector_for
from tests.serving import serving
from tests.test_embedding_faults import _hosted

CLIENTS, PER_CLIENT, IMPORTED = 4, 12, 48


def _chaos(number: int, data: list[dict]) -> list[dict]:
    """The number-th answer of the fake: every index 0, one vector a dimension too long, one NaN, or honest."""
    fault = number % 4
    if fault == 0 and len(data) > 1:
        return [dict(item, index=0) for item in data]  # one server's answer, which filed vectors under others
    if fault == 1:
        return [dict(data[0], embedding=[*data[0]["embedding"], 0.5]), *data[1:]]
    if fault == 2:
        return [dict(data[0], embedding=[float("nan"), *data[0]["embedding"][1:]]), *data[1:]]
    return data


def test_a_provider_answering_badly_during_writes_and_an_import_never_files_a_vector_under_another_entry(
    tmp_path, database_url
):
    lines = [{"id": f"imp-{n:03d}", "title": f"imported runbook {n}: queue {n} backlog on shard {n % 7}"}
             for n in range(IMPORTED)]  # fmt: skip
    path = tmp_path / "entries.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with FakeEmbeddings(dimension=8) as fake:
        # small batches, many attempts: many answers, each judged whole, and no job given up during the chaos
        settings = _hosted(tmp_path, fake.url, database_url=database_url, embed_batch_size=4, embed_max_attempts=1000)
        with Grandbo.init(settings, embedding="openai") as first:
            _, key = first.org("acme", create=True).keys.create("write")
        fake.behaviour.mangle = _chaos
        acknowledged: list[str] = []
        refused: list[int] = []
        with (
            structlog.testing.capture_logs() as logs,
            Grandbo.open(settings, background=True) as server,
            serving(server) as served,
        ):

            def client(number: int) -> None:
                with served.client(key) as http:
                    for n in range(PER_CLIENT):
                        title = f"client {number} memory {n}: latency spike on node {number * 100 + n}"
                        answer = http.post("/v1/memories", json={"title": title, "body": f"seen at step {n}"})
                        (acknowledged if answer.status_code == 201 else refused).append(
                            answer.json()["id"] if answer.status_code == 201 else answer.status_code
                        )

            threads = [threading.Thread(target=client, args=(number,)) for number in range(CLIENTS)]
            for thread in threads:
                thread.start()
            with Grandbo.open(settings) as importer:  # beside the server, as `grandbo import` would be
                report = importer.org("acme").import_file(path)
            for thread in threads:
                thread.join(60)
        assert refused == [] and len(acknowledged) == CLIENTS * PER_CLIENT
        assert report.imported == IMPORTED
        asked_during_chaos = len(fake.behaviour.requests)
        fake.behaviour.mangle = None  # the provider is healthy again: the operator runs `grandbo backfill`
        with Grandbo.open(settings) as after:
            healed = after.backfill()
            memory = after.org("acme")
            entries = {entry.id: entry for entry in memory.entries()}
            vectors = memory.vectors(list(entries))
            stats = memory.stats()
    assert asked_during_chaos >= 8  # the provider was asked, and so answered badly, many times
    assert any(log["event"] in ("embedding.malformed_answer", "embedding.unusable_answer") for log in logs)
    assert set(acknowledged) | {line["id"] for line in lines} == set(entries)  # every acknowledged write stored
    assert healed.errors == [] and (stats.total, stats.readable, stats.pending, stats.failed) == (
        len(entries), len(entries), 0, 0
    )  # fmt: skip
    for entry_id, entry in entries.items():
        own = vector_for(entry_text(entry.title, entry.body, entry.tags, entry.services), 8)
        assert vectors[entry_id].tolist() == pytest.approx(own, abs=1e-6), entry_id
