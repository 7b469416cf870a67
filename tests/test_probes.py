"""What a caller without a key can learn: `/readyz` costs the same whatever the number of organizations and
shows no credential, and a refused key takes the same steps whichever organization it names.

Work is counted, never timed: the SQL statements the store sends (psycopg's cursor on Postgres, SQLite's own
trace callback) and the constant-time comparisons made.
"""

from __future__ import annotations

import hmac

import psycopg
import pytest

from grandbo.config import Settings
from grandbo.errors import NotAuthorizedError, StoreUnavailableError
from grandbo.model import EventType, utcnow
from grandbo.ports import NewEvent
from grandbo.service import Grandbo
from grandbo.urls import mask_url
from tests.conftest import reset_postgres
from tests.serving import free_port, serving


@pytest.fixture
def statements(monkeypatch):
    """Every SQL statement sent through psycopg from now on (the store's pool included), in order; not the
    pool's empty liveness check."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        if str(query):
            sent.append(str(query))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return sent


def _pending(grandbo: Grandbo, org: str) -> None:
    """One entry of `org` whose embed job waits in the outbox."""
    payload = {"title": "pending", "body": "b", "kind": "fact", "source": "admin", "occurred_at": utcnow().isoformat()}
    grandbo._store.append(org, [NewEvent(f"{org}-pending", EventType.REMEMBERED, payload, "test", utcnow())])


@pytest.mark.postgres
def test_readyz_sends_the_same_statements_whatever_the_number_of_orgs(pg_database, tmp_path, statements):
    reset_postgres(pg_database)
    settings = Settings(home=tmp_path, database_url=pg_database, readyz_counts=True)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("org-0", create=True)
        _pending(grandbo, "org-0")
        with serving(grandbo) as served, served.client() as client:
            client.get("/readyz")
            statements.clear()
            assert client.get("/readyz").json()["store"]["outbox"] == 1
            one_org = list(statements)
            for n in range(1, 20):
                grandbo.org(f"org-{n}", create=True)
                if n % 2:
                    _pending(grandbo, f"org-{n}")
            statements.clear()
            ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["store"]["outbox"] == 11  # every org's jobs counted
    # Two transactions, each its setting and one query: the outbox, and the write-behinds waiting and failed.
    assert len(statements) == len(one_org) == 4, statements
    assert [s for s in statements if "set_config" not in s] == [
        "SELECT (SELECT max(version) FROM schema_migrations), waiting, failed FROM grandbo_outbox_counts(%s)",
        "SELECT coalesce(sum(waiting), 0), coalesce(sum(failed), 0) FROM grandbo_pending_work(%s)",
    ]


@pytest.mark.postgres
def test_readyz_by_default_sends_one_query_and_no_counts(pg_database, tmp_path, statements):
    """Audit 20: the issue asks one query whatever the number of orgs; the write-behinds' was a second, for counts
    a keyless caller should not see by default. One now, counting nothing (review: it counted the outbox still,
    every org's, and dropped the number), and no count in the answer."""
    reset_postgres(pg_database)
    with Grandbo.init(Settings(home=tmp_path, database_url=pg_database), embedding="deterministic") as grandbo:
        for n in range(5):
            _pending(grandbo, grandbo.org(f"org-{n}", create=True).org)
        with serving(grandbo) as served, served.client() as client:
            client.get("/readyz")
            statements.clear()
            ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and set(ready["store"]) == {"ok", "schema"}
    assert [s for s in statements if "set_config" not in s] == [
        "SELECT (SELECT max(version) FROM schema_migrations), 0, 0"
    ]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:hunter2@db:5432/grandbo", "postgresql://app:***@db:5432/grandbo"),
        (
            "postgresql://app@db/grandbo?sslmode=require&password=hunter2&sslpassword=opensesame",
            "postgresql://app@db/grandbo?sslmode=require&password=***&sslpassword=***",
        ),
        (
            "postgresql://app:a%40b@db/g?PASSWORD=x;application_name=g",
            "postgresql://app:***@db/g?PASSWORD=***;application_name=g",
        ),
        (
            "postgresql://db/g?api_key=k&access_token=t&passfile=/p",
            "postgresql://db/g?api_key=***&access_token=***&passfile=***",
        ),
        ("host=db user=app password='hunter 2\\' x' dbname=g", "host=db user=app password=*** dbname=g"),
        ("host=db password = hunter2 sslpassword=x", "host=db password=*** sslpassword=***"),
        # a password with a space, not quoted: libpq refuses its second word, and it is shown masked too (review 23)
        ("host=db password=hunter 2wo dbname=g", "host=db password=*** *** dbname=g"),
        ("sqlite:///home/me/.grandbo/grandbo.db", "sqlite:///home/me/.grandbo/grandbo.db"),
        ("postgresql://app@db/grandbo", "postgresql://app@db/grandbo"),
    ],
)
def test_a_url_is_shown_with_every_credential_masked(url, shown):
    assert mask_url(url) == shown


def test_an_unreachable_postgres_is_reported_without_its_password(tmp_path):
    url = f"postgresql://app@127.0.0.1:{free_port()}/g?password=hunter2&sslpassword=opensesame&connect_timeout=5"
    with pytest.raises(StoreUnavailableError) as caught:
        Grandbo.open(Settings(home=tmp_path, database_url=url))
    shown = f"{caught.value.message} {caught.value.detail}"
    assert "hunter2" not in shown and "opensesame" not in shown
    assert "password=***" in caught.value.message


def test_a_refused_key_takes_the_same_steps_whichever_org_it_names(grandbo, backend, monkeypatch, statements):
    memory = grandbo.org("acme", create=True)
    record, key = memory.keys.create("read")
    secret = key.rsplit(".", 1)[1]
    compared: list[int] = []
    compare = hmac.compare_digest

    def counted(a, b):  # type: ignore[no-untyped-def]
        compared.append(1)
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counted)
    if backend == "sqlite":
        grandbo._store.trace(statements.append)
    refused = {
        "an org that does not exist": f"gbk.nosuchorg.{record.id}.{secret}",
        "a known org, a wrong secret": f"{key[:-4]}AAAA",
        "a known org, a key id it does not have": f"gbk.acme.0123456789ab.{secret}",
    }
    work = {}
    for _ in range(2):  # and the same the second time (nothing of a refusal is kept)
        for case, candidate in refused.items():
            compared.clear()
            statements.clear()
            with pytest.raises(NotAuthorizedError):
                grandbo.authenticate(candidate)
            work.setdefault(case, set()).add((len(compared), len(statements)))
    steps = set().union(*work.values())
    assert len(steps) == 1, work
    ((compares, reads),) = steps
    assert compares == 1 and reads >= 1, work
    assert grandbo.authenticate(key)[1].id == record.id  # the right key still opens its org


def test_readyz_counts_failed_embed_jobs_apart_from_those_waiting(settings):
    """A job that used its GRANDBO_EMBED_MAX_ATTEMPTS (parked until `grandbo backfill`) was counted in `outbox` with
    those waiting, and a settled unembeddable one too: a poller saw a depth that never drained, and not why. Now
    `outbox` counts the jobs waiting, `outbox_failed` those parked (the unembeddable neither), every org's together
    and nothing per org, as the write-behinds' two counts."""
    tuned = settings.model_copy(update={"readyz_counts": True, "embed_max_attempts": 2})
    with Grandbo.init(tuned, embedding="deterministic") as grandbo:
        store = grandbo._store
        for org in ("org-a", "org-b", "org-c"):
            grandbo.org(org, create=True)
            _pending(grandbo, org)
        jobs = {job.org_id: job for job in store.claim_jobs(10, 2)}
        store.fail_jobs([jobs["org-a"]], "provider down", utcnow())
        (again,) = store.claim_jobs(10, 2)  # due at once: claimed again under a new lease
        store.fail_jobs([again], "provider down", utcnow())  # its second attempt: parked
        store.mark_unembeddable([jobs["org-b"]], "all zeros")  # settled, not failed
        with serving(grandbo) as served, served.client() as client:
            ready = client.get("/readyz").json()
    assert ready["status"] == "ready"
    assert ready["store"] == {"ok": True, "schema": ready["store"]["schema"], "outbox": 1, "outbox_failed": 1,
                              "write_behinds": 0, "write_behinds_failed": 0}  # fmt: skip
