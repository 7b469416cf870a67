"""Chaos, bounded (issue 26, item 6): `kill -9` a real `grandbo serve` while clients write memories, and a
`grandbo import` half way through its file; start again. Every write answered 201 is whole after the restart
(its text as sent, found by its words, embedded), and the import run again ends with every line stored once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing

import httpx
import pytest

from grandbo.model import Status
from grandbo.service import Grandbo
from tests.serving import acked_until_killed, serve_process, until

pytestmark = pytest.mark.timeout(180)

WRITES, ACKED_BEFORE_KILL, CLIENTS, LINES = 120, 30, 6, 3_000


def _env(settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_RATE_LIMIT_PER_KEY": "0"}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    return env


def _memory(n: int) -> dict[str, str]:
    return {
        "id": f"W-{n}",
        "title": f"ledger shard shard{n}x lost its replica lease",
        "body": f"replica lease {n} expired",
    }


def test_every_write_answered_201_before_a_kill_9_is_whole_after_the_restart(settings):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        key = grandbo.org("acme", create=True).keys.create("write", name="chaos")[1]
    env, headers = _env(settings), {"Authorization": f"Bearer {key}"}
    process, client = serve_process(env)

    def writing(n: int) -> int | None:
        try:
            response = client.post("/v1/memories", headers=headers, json=_memory(n))
        except httpx.TransportError:  # the server died under it: not acknowledged
            return None
        return n if response.status_code == 201 else None

    acked = acked_until_killed(process, client, writing, WRITES, clients=CLIENTS, kill_after=ACKED_BEFORE_KILL)
    assert ACKED_BEFORE_KILL <= len(acked) < WRITES, "the kill came after every write: the run proves nothing"

    process, client = serve_process(env)  # the restart: its worker embeds what the killed process had not
    try:
        for n in acked:
            entry = client.get(f"/v1/memories/W-{n}", headers=headers)
            assert entry.status_code == 200, n
            assert {k: entry.json()["entry"][k] for k in ("title", "body")} == {
                k: _memory(n)[k] for k in ("title", "body")
            }
        found = client.post(
            "/v1/recall", headers=headers, json={"topic": f"ledger shard{acked[0]}x lost its replica lease"}
        )
        assert f"W-{acked[0]}" in [hit["entry"]["id"] for hit in found.json()["hits"]]
    finally:
        process.terminate()
        process.wait(30)
        client.close()
    with Grandbo.open(settings) as grandbo:
        memory = grandbo.org("acme")
        memory.backfill()
        for n in acked:
            assert memory.get(f"W-{n}").status is Status.ACTIVE
            assert memory.embedding(f"W-{n}").state == "embedded", n


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_import_killed_half_way_resumes_and_ends_with_every_line_once(settings, tmp_path):
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True)
    path = tmp_path / "entries.jsonl"
    path.write_text("".join(json.dumps({**_memory(n), "id": f"I-{n}"}) + "\n" for n in range(LINES)))
    command = [sys.executable, "-m", "grandbo", "import", str(path), "--org", "acme"]
    first = subprocess.Popen(command, env=_env(settings), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stored() -> int:  # read beside the importer (WAL: a reader never waits for it)
        with closing(sqlite3.connect(f"file:{settings.home / 'grandbo.db'}?mode=ro", uri=True, timeout=5)) as db:
            return int(db.execute("SELECT count(*) FROM memory_entries").fetchone()[0])

    until(lambda: first.poll() is not None or stored() >= LINES // 3, "a third of the file was imported")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    assert first.returncode == -signal.SIGKILL, "the import ended before it was killed: the run proves nothing"
    with Grandbo.open(settings) as grandbo:
        stored_before = len(grandbo.org("acme").entries())
    assert 0 < stored_before < LINES

    again = subprocess.run(command, env=_env(settings), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-500:]
    assert f"{stored_before} already there" in again.stdout
    with Grandbo.open(settings) as grandbo:
        entries = grandbo.org("acme").entries()
    assert sorted(e.id for e in entries) == sorted(f"I-{n}" for n in range(LINES))  # each line once
    assert all(e.body == f"replica lease {e.id[2:]} expired" for e in entries)
