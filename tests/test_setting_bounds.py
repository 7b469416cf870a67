"""Every numeric setting has a finite range (probe 20b S1): `inf`, `nan`, a negative or a 20-digit value is refused
at start in one line naming the variable and its range, or it is a value the whole process runs with. `inf` used
to pass: the server said "ready", then webhooks answered 500 and the re-drive thread died.

The walk is over `Settings.model_fields`, so a setting added later is held to it too."""

from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
import time
import typing

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.config import Settings
from grandbo.ports import NewWork
from grandbo.redrive import INCIDENT_SYNC
from grandbo.service import Grandbo
from tests.serving import serving
from tests.test_webhooks import ALERTMANAGER, post

EXTREMES = ("inf", "-inf", "nan", "-1", "1e20", "99999999999999999999")


def _numeric(annotation: object) -> bool:
    return bool({int, float} & set(typing.get_args(annotation) or (annotation,)))


NUMERIC = sorted(name for name, field in Settings.model_fields.items() if _numeric(field.annotation))


def _bounds(name: str) -> dict[str, float]:
    """The bounds the field declares: ge/gt (its floor) and le (its ceiling)."""
    return {kind: getattr(m, kind) for m in Settings.model_fields[name].metadata for kind in ("ge", "gt", "le")
            if hasattr(m, kind)}  # fmt: skip


def _read(name: str) -> tuple[float | None, ValidationError | None]:
    """The setting as the environment gives it, or the refusal."""
    try:
        return getattr(Settings(), name), None
    except ValidationError as error:
        return None, error


def _env(value: float) -> str:
    return str(int(value)) if isinstance(value, int) else repr(float(value))


def test_every_numeric_setting_declares_a_finite_floor_and_ceiling():
    assert len(NUMERIC) >= 50 and "alert_retention_days" in NUMERIC and "readyz_counts" not in NUMERIC
    unbounded = [name for name in NUMERIC if "le" not in _bounds(name) or not {"ge", "gt"} & set(_bounds(name))]
    assert unbounded == []
    assert all(math.isfinite(value) for name in NUMERIC for value in _bounds(name).values())


@pytest.mark.parametrize("name", NUMERIC)
def test_an_extreme_value_is_refused_at_start_in_one_line_or_runs(monkeypatch, name):
    variable, runner, shown = f"GRANDBO_{name.upper()}", CliRunner(), False
    for value in EXTREMES:
        monkeypatch.setenv(variable, value)
        taken, refusal = _read(name)
        if refusal is not None:
            assert {problem["loc"] for problem in refusal.errors()} == {(name,)}, value
            if shown:  # the CLI's line once per setting: the rest are the same line (a CLI run costs 0.1 s)
                continue
            shown, refused = True, runner.invoke(app, ["stats"])
            assert refused.exit_code == 2, (value, refused.stdout)
            (line,) = refused.stderr.splitlines()  # one line, never pydantic's report nor a traceback
            assert line.startswith(f"error: {variable}: ") and "(accepted: " in line, (value, line)
            continue
        bounds = _bounds(name)  # taken: within the range, and the CLI runs with it
        assert taken is not None and math.isfinite(taken), value
        assert bounds.get("ge", -math.inf) <= taken <= bounds["le"], (value, taken)
        for args in (["init", "--embedding", "deterministic"], ["stats"]):  # a store only for a value taken
            ran = runner.invoke(app, args)
            assert ran.exit_code == 0, (value, ran.stderr)


def test_the_refusal_says_the_range_of_each_kind_of_bound(cli, monkeypatch):
    for variable, value, said in (
        ("GRANDBO_EMBED_LEASE_SECONDS", "inf", "Input should be a finite number (accepted: more than 0, up to 86400)"),
        ("GRANDBO_EMBED_MAX_ATTEMPTS", "99999999999999999999", "(accepted: 1 to 1000)"),
        ("GRANDBO_WRITE_BEHIND_POLL_SECONDS", "0", "(accepted: 0.01 to 3600)"),
        ("GRANDBO_ALERT_RETENTION_DAYS", "1e20", "(accepted: 0, or 30 to 36500)"),
        ("GRANDBO_RATE_LIMIT_PER_KEY", "1e-9", "use 0 (no limit) or 0.001 to 1000000 requests per second"),
        ("GRANDBO_HNSW_BUILD_MEMORY", "99999999999GB", "use 1MB to 2047GB"),
    ):
        monkeypatch.setenv(variable, value)
        refused = cli("stats", code=2)
        assert refused.stderr.startswith(f"error: {variable}: "), refused.stderr
        assert said in refused.stderr and len(refused.stderr.splitlines()) == 1, refused.stderr
        monkeypatch.delenv(variable)


def _at(edge: str) -> dict[str, str]:
    """Every numeric setting at its ceiling, or at its floor (just over it where the floor is excluded)."""
    values = {}
    for name in NUMERIC:
        bounds = _bounds(name)
        if edge == "ceiling":
            value = bounds["le"]
        else:
            value = bounds["ge"] if "ge" in bounds else math.nextafter(bounds["gt"], math.inf)
        values[f"GRANDBO_{name.upper()}"] = _env(int(value) if Settings.model_fields[name].annotation in (int, int | None)
                                                 else value)  # fmt: skip
    return values


@pytest.mark.parametrize("edge", ["floor", "ceiling"])
def test_a_process_with_every_setting_at_its_edge_writes_receives_alerts_and_redrives(monkeypatch, edge):
    """One process whose every number is at its bound: a REST write, a webhook delivery, the embedding and a
    re-drive round that fails a write-behind (so its back-off is computed) all work, and the re-drive thread lives."""
    for variable, value in _at(edge).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("GRANDBO_WRITE_BEHIND_GRACE_SECONDS", "0")  # else a ceiling's day: the round takes nothing
    monkeypatch.setenv("GRANDBO_DISK_RESERVE_MB", "0")  # else a ceiling's 16 TiB reserve refuses every write, as meant
    settings = Settings()
    Grandbo.init(settings, embedding="deterministic").close()
    with Grandbo.open(settings, background=True) as grandbo:
        memory = grandbo.org("acme", create=True)
        _, key = memory.keys.create("write", name="edges")
        with serving(grandbo) as served, served.client(key) as client:
            written = client.post("/v1/memories", json={"title": "redis evicted session keys", "body": "lru storm"})
            assert written.status_code == 201, written.text
            delivered = post(client, "alertmanager", ALERTMANAGER)
            assert delivered.status_code == 202, delivered.text
            assert client.get(f"/v1/alerts/{delivered.json()['alerts'][0]['id']}").status_code == 200
        grandbo._store.put_documents("acme", [], "test", [NewWork(INCIDENT_SYNC, "INC-404")])  # fails: no incident
        # A drain here, or the re-drive thread first (at the floor its rounds are due at once, and it took the work
        # before the drain did in one CI run): either way an attempt failed on the missing incident, its back-off
        # computed. One at least: at the floor's lease length a lease can also run out under a loaded machine and be
        # counted as a lapsed attempt (`store.sql.holders.LAPSED_COUNTED`), as one CI run did.
        query = "SELECT attempts, last_error FROM pending_work"
        with contextlib.closing(sqlite3.connect(settings.home / "grandbo.db")) as db:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any("INC-404" in (error or "") for _, error in db.execute(query)):
                grandbo.redriver.drain()
            [(attempts, error)] = db.execute(query).fetchall()
            assert attempts >= 1 and "No incident 'INC-404'" in error, (attempts, error)
        grandbo.flush(timeout=60)
        assert grandbo.backfill().failed == 0
        assert "grandbo-redrive" in {thread.name for thread in threading.enumerate()}
        assert memory.stats().write_behinds_failed == (1 if edge == "floor" else 0)  # floor: 1 attempt, given up
