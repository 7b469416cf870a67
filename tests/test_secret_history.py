"""Webhook signing secrets are never kept readable in the document history: the current document holds the
secrets deliveries are checked with, the history only how many there were; so a secret rotated out is gone from
the history, the exports and the backups (issue 26)."""

import hashlib
import json
import sqlite3

import psycopg
import pytest

from grandbo import Grandbo
from tests.conftest import owner_url

OLD, NEW = "rotated-out-signing-secret-1", "current-signing-secret-2"


def _rotate(memory):
    memory.webhook_secrets.add("pagerduty", OLD)
    memory.webhook_secrets.add("pagerduty", NEW)
    assert memory.webhook_secrets.remove_all_but_newest("pagerduty") == 1


def test_a_rotated_out_secret_is_not_readable_in_the_history_nor_an_export(memory, raw, tmp_path):
    """Before, every event of the history held the secrets of its time in clear: the rotated-out one stayed
    readable in the store and in an export made `--with-secrets` (to move the org), long after it was dropped."""
    _rotate(memory)
    history = raw("SELECT type, data FROM document_events WHERE collection = 'webhook_secret' ORDER BY seq", org="acme")
    assert [(kind, _data(data)) for kind, data in history] == [
        ("webhook.secret_added", {"held": 1}),
        ("webhook.secret_added", {"held": 2}),
        ("webhook.secret_rotated", {"held": 1}),
    ]
    assert memory.webhook_secrets.secrets("pagerduty") == [NEW]  # deliveries are still checked with it
    path = tmp_path / "acme.jsonl"
    memory.export_log(path, with_secrets=True)
    moved = path.read_text(encoding="utf-8")
    assert OLD not in moved and NEW in moved  # the move carries the secret that signs, and only that one


def test_a_backup_of_the_embedded_store_holds_no_rotated_out_secret(tmp_path):
    """The backup copies every page of the file, free ones too: the page the old history row lived on must not
    hold it either."""
    from grandbo.config import Settings

    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        _rotate(grandbo.org("acme", create=True))
        grandbo.backup(tmp_path / "backup.db")
    held = (tmp_path / "backup.db").read_bytes()
    assert OLD.encode() not in held and NEW.encode() in held


def test_migration_15_takes_the_secrets_out_of_an_existing_history(settings, raw):
    with Grandbo.init(settings, embedding="deterministic") as before:
        _rotate(before.org("acme", create=True))
    upgrade = _history_as_before_migration_15(settings)
    assert any(OLD in json.dumps(_data(data)) for (data,) in _history(raw))
    with Grandbo.open(upgrade) as upgraded:
        assert 15 in upgraded.schema_versions()
        assert upgraded.org("acme").webhook_secrets.secrets("pagerduty") == [NEW]
    assert [_data(data) for (data,) in _history(raw)] == [{"held": 1}, {"held": 2}, {"held": 1}]


@pytest.mark.org_made_again_at_once  # dropped and made again at once (no wait for a key cache)
def test_replaying_an_older_export_keeps_no_secret_in_the_history(grandbo, memory, raw, tmp_path):
    """An export made before this change carries the old secrets in its history events: the replay keeps their
    count only."""
    _rotate(memory)
    path = tmp_path / "acme.jsonl"
    memory.export_log(path, with_secrets=True)
    _as_an_older_export(path, [[OLD], [OLD, NEW], [NEW]])
    assert OLD in path.read_text(encoding="utf-8")
    grandbo.drop_org("acme")
    memory = grandbo.org("acme", create=True)
    memory.import_log(path)
    assert memory.webhook_secrets.secrets("pagerduty") == [NEW]
    assert [_data(data) for (data,) in _history(raw)] == [{"held": 1}, {"held": 2}, {"held": 1}]


def _data(data):
    return json.loads(data) if isinstance(data, str) else data


def _history(raw):
    return raw("SELECT data FROM document_events WHERE collection = 'webhook_secret' ORDER BY seq", org="acme")


def _history_as_before_migration_15(settings):
    """The history as the release before migration 15 wrote it (each event with its secrets), and the migration
    not applied yet."""
    held = [[OLD], [OLD, NEW], [NEW]]
    if settings.database_url:
        with psycopg.connect(owner_url(settings.database_url), autocommit=True) as conn, conn.transaction():
            conn.execute(
                "SELECT set_config('grandbo.org_id', 'acme', true), set_config('grandbo.erasing', 'acme', true)"
            )
            seqs = [row[0] for row in conn.execute("SELECT seq FROM document_events WHERE collection = "
                                                   "'webhook_secret' ORDER BY seq")]  # fmt: skip
            for seq, secrets in zip(seqs, held, strict=True):
                conn.execute("UPDATE document_events SET data = %s::jsonb WHERE seq = %s",
                             (json.dumps({"secrets": secrets}), seq))  # fmt: skip
            conn.execute("DELETE FROM schema_migrations WHERE version = 15")
        return settings.model_copy(update={"migrate_database_url": owner_url(settings.database_url)})
    with sqlite3.connect(settings.home / "grandbo.db") as conn:
        conn.execute("INSERT INTO log_erasures VALUES ('acme', 'test', 'now')")
        seqs = [row[0] for row in conn.execute("SELECT seq FROM document_events WHERE collection = "
                                               "'webhook_secret' ORDER BY seq")]  # fmt: skip
        for seq, secrets in zip(seqs, held, strict=True):
            conn.execute("UPDATE document_events SET data = ? WHERE seq = ?", (json.dumps({"secrets": secrets}), seq))
        conn.execute("DELETE FROM log_erasures")
        conn.execute("DELETE FROM schema_migrations WHERE version = 15")
    return settings


def _as_an_older_export(path, held):
    """Rewrite an export's webhook secrets' history events as an export made before this change held them (each
    with its secrets in clear), with the checksum line made again."""
    lines = path.read_bytes().splitlines(keepends=True)[:-1]
    records = [json.loads(line) for line in lines]
    events = [r["document_event"] for r in records if r.get("document_event", {}).get("collection") == "webhook_secret"]
    for event, secrets in zip(events, held, strict=True):
        event["data"] = {"secrets": secrets}
    body = b"".join((json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n").encode() for r in records)
    checksum = {"checksum": {"sha256": hashlib.sha256(body).hexdigest(), "lines": len(records)}}
    path.write_bytes(body + (json.dumps(checksum) + "\n").encode())


def test_a_secret_rotated_out_while_a_server_holds_the_store_leaves_no_copy_in_its_files(tmp_path):
    """The embedded store's files: with another process holding the store open (a running `grandbo serve`), the
    write-ahead log kept the pages the old document was on, rotated-out secret and all, for as long as the
    server ran (a probe found it in `grandbo.db-wal` after `webhooks rotate-done`). The rotation now zeroes the
    freed space and empties the log, as a purge does."""
    from grandbo.config import Settings

    settings = Settings(home=tmp_path / "home")
    with Grandbo.init(settings, embedding="deterministic") as server:  # the server's connection stays open
        server.org("acme", create=True)
        with Grandbo.open(settings) as cli:
            _rotate(cli.org("acme"))
        files = sorted((tmp_path / "home").glob("grandbo.db*"))
        held = {path.name: OLD.encode() in path.read_bytes() for path in files}
        assert server.org("acme").webhook_secrets.secrets("pagerduty") == [NEW]
    assert held and not any(held.values()), held


@pytest.mark.postgres
def test_a_secret_rotated_out_on_postgres_has_its_old_row_version_vacuumed(pg_database, tmp_path):
    """On Postgres the replaced document row (the rotated-out secret in clear) stayed in the table as a dead row
    version until autovacuum came by; the rotation now owes a VACUUM of the documents, run off the request path
    as an erasure's is."""
    from grandbo.config import Settings
    from tests.conftest import reset_postgres

    reset_postgres(pg_database)
    settings = Settings(home=tmp_path / "home", database_url=pg_database)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        vacuums = grandbo._store.vacuums  # type: ignore[attr-defined]
        done = vacuums.done
        _rotate(memory)
        assert vacuums.wait(60)
        assert vacuums.done > done
        assert memory.webhook_secrets.secrets("pagerduty") == [NEW]
