"""`grandbo worker` takes turns between the embed outbox and the write-behinds (`grandbo.rounds`): one org's
backlog of write-behinds never holds another org's new entry from its vector (probe 20a, F1's candidate).

The provider is the fake one at the HTTP layer; its `on_embed` hook looks at the store while the worker asks it
for the other org's vector: how many of the first org's write-behinds had run by then is counted, not timed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from pydantic import SecretStr
from typer.testing import CliRunner

from grandbo.config import Settings
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent, NewWork
from grandbo.redrive import CLAIM, INCIDENT_SYNC
from grandbo.rounds import Rounds
from grandbo.service import Grandbo
from tests.fakes import FakeEmbeddings

BACKLOG = 3 * CLAIM  # acme's write-behinds: three full claims' worth
MARKER = "beta-walrus-marker"


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    with FakeEmbeddings(dimension=8) as served:
        yield served


@pytest.fixture
def tuned(settings: Settings, fake: FakeEmbeddings) -> Settings:
    """The fake provider; write-behinds anyone may re-drive at once (no grace)."""
    return settings.model_copy(update={
        "openai_base_url": fake.url, "openai_model": "fake-embed", "openai_dimension": 8,
        "openai_api_key": SecretStr("test-key"), "write_behind_grace_seconds": 0,
    })  # fmt: skip


def _acme_backlog(grandbo: Grandbo) -> None:
    """acme: BACKLOG closed incidents (synced as they closed, their entries embedded) and a re-sync of each left
    recorded, as a process that died leaves them: real work for a re-driver, through the incident tier."""
    incidents = grandbo.org("acme", create=True).incidents
    for n in range(BACKLOG):
        incidents.open(f"Cache stampede {n}", services=["cache"], incident_id=f"INC-{n}")
        incidents.close(f"INC-{n}", resolution="warmed the cache")
    work = [NewWork(INCIDENT_SYNC, f"INC-{n}", {"actor": "api"}) for n in range(BACKLOG)]
    grandbo._store.put_documents("acme", [], "test", work)


def _beta_writes(grandbo: Grandbo) -> None:
    """beta writes one entry whose job waits in the outbox for a worker (as an API process's `--no-worker` do)."""
    grandbo._store.ensure_org("beta")
    now = utcnow()
    payload = {"title": f"{MARKER} eviction", "body": "b", "kind": "fact", "source": "admin",
               "occurred_at": now.isoformat()}  # fmt: skip
    grandbo._store.append("beta", [NewEvent("beta-1", EventType.REMEMBERED, payload, "test", now)])


def _acme_waiting(grandbo: Grandbo) -> int:
    return grandbo._store.org_work_counts("acme", grandbo.settings.write_behind_max_attempts)[0]


def _when_beta_is_embedded(fake: FakeEmbeddings, grandbo: Grandbo) -> list[int]:
    """acme's write-behinds still waiting each time the provider is asked for beta's vector."""
    seen: list[int] = []

    def look(texts: list[str]) -> None:
        if any(MARKER in text for text in texts):
            seen.append(_acme_waiting(grandbo))

    fake.behaviour.on_embed = look
    return seen


def _env(settings: Settings, fake: FakeEmbeddings) -> dict[str, Any]:
    env = {"GRANDBO_HOME": str(settings.home), "GRANDBO_OPENAI_BASE_URL": fake.url,
           "GRANDBO_OPENAI_MODEL": "fake-embed", "GRANDBO_OPENAI_DIMENSION": "8", "GRANDBO_OPENAI_API_KEY": "test-key",
           "GRANDBO_WRITE_BEHIND_GRACE_SECONDS": "0"}  # fmt: skip
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    return env


def test_another_orgs_write_behind_backlog_does_not_hold_a_new_entry_from_its_vector(tuned, fake):
    """`grandbo worker --once` ran the write-behinds until none was ready, then the outbox: beta's vector was asked
    for after all of acme's BACKLOG re-syncs had run. Now at most one claim of them runs first (none: the round
    starts with the outbox), and the rest after; everything is done in the end. Fails against the old loop."""
    from grandbo.cli import app

    with Grandbo.init(tuned, embedding="openai") as grandbo:
        _acme_backlog(grandbo)
        _beta_writes(grandbo)
        assert _acme_waiting(grandbo) == BACKLOG
        seen = _when_beta_is_embedded(fake, grandbo)
        result = CliRunner().invoke(app, ["worker", "--once"], env=_env(tuned, fake))
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert len(seen) == 1 and BACKLOG - seen[0] <= CLAIM, seen
        assert f"write-behinds done {BACKLOG}, failed 0" in result.stdout
        assert _acme_waiting(grandbo) == 0 and grandbo._store.vectors("beta", ["beta-1"])


def test_the_running_worker_embeds_a_new_entry_in_the_round_after_it_arrives(tuned, fake):
    """The long-running loop: acme's backlog is being re-driven when beta writes; the next round embeds beta's
    entry while most of acme's backlog still waits its turn."""
    with Grandbo.init(tuned, embedding="openai") as grandbo:
        _acme_backlog(grandbo)
        rounds = Rounds(grandbo.worker(), grandbo.redriver)
        first = rounds.round()
        assert first.redriven.done >= 1 and not first.idle
        _beta_writes(grandbo)
        seen = _when_beta_is_embedded(fake, grandbo)
        second = rounds.round()
        assert second.embed.embedded == 1 and seen and seen[0] >= BACKLOG - 1 - CLAIM
        while not rounds.round().idle:  # and acme's backlog is done in the rounds that follow
            pass
        assert _acme_waiting(grandbo) == 0


def test_a_round_held_past_the_stall_time_is_logged_with_what_holds_it(tuned, fake):
    """A worker that completed nothing for minutes logged nothing (probe 20a F1): the watchdog says so, and
    where the round is held (here: the provider, asked for beta's vector, does not answer until released)."""
    with Grandbo.init(tuned, embedding="openai") as grandbo:
        _beta_writes(grandbo)
        fake.behaviour.hold, fake.behaviour.hold_for = threading.Event(), {MARKER}
        rounds = Rounds(grandbo.worker(), grandbo.redriver, stall_s=0.01)
        with structlog.testing.capture_logs() as logs:
            held = threading.Thread(target=rounds.round)
            held.start()
            for _ in range(600):  # until the provider holds the request (recorded as it arrives)
                if any(MARKER in str(request["body"]) for request in fake.behaviour.requests):
                    break
                threading.Event().wait(0.05)
            threading.Event().wait(0.05)  # past stall_s, however fast the machine
            rounds.check()
            rounds.check()  # logged once per stall_s, not on every look
            fake.behaviour.hold.set()
            held.join(30)
        stalled = [line for line in logs if line["event"] == "worker.stalled"]
        assert len(stalled) == 1 and stalled[0]["phase"] == "embed" and stalled[0]["stalled_s"] >= 0.01
        assert [line["event"] for line in logs].count("worker.resumed") == 1
        assert grandbo._store.vectors("beta", ["beta-1"])
