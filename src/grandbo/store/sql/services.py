"""Migration 19's step, written once for both backends: the service of every stored change in lower case.

Changes were stored with their service as the source named it (`Payments-API`, a repository's name) before
they were stored in lower case, as the catalog, the entries and the alert webhooks name services. A triage that
reads an org's changes from the store (an org of more than `triage.run.KEPT_CHANGES`) matches the service
exactly, so such a change was in none of its plans. The step lowers them as Python does (`str.lower`, as the
write path and the per-process copy do; SQL's lower() folds ASCII only, or by the database's locale), org by
org, in batches read by document id. A change's version, write time and history are kept: its history still says
what the source sent, and its retention still counts from its last delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from grandbo.store.sql.dialect import Dialect

LOWER_CHANGE_SERVICES = "-- the service of every stored change in lower case (a step in Python, not SQL)"
"""The migration step each backend runs with `lower_change_services`."""
MIGRATION = (
    19,
    "the services of changes stored before they were kept in lower case, in lower case",
    [LOWER_CHANGE_SERVICES],
)
"""Migration 19 as each backend's list holds it."""

BATCH = 2_000  # changes read at a time
CHANGES = "'change'"  # the collection of `tiers.changes`, as SQL


def read_services(dialect: Dialect) -> str:
    """A batch of one org's changes, each doc id and its service, after a doc id (parameters: org, doc id)."""
    p = dialect.param
    return (
        f"SELECT doc_id, {dialect.text_of(('service',))} FROM documents WHERE org_id = {p} AND collection = {CHANGES} "
        f"AND doc_id > {p} ORDER BY doc_id LIMIT {BATCH}"
    )


def write_service(dialect: Dialect, set_service: str) -> str:
    """One change's service replaced (parameters: the service, org, doc id); `set_service` is the backend's
    `data` with its `service` set to a text parameter."""
    p = dialect.param
    return f"UPDATE documents SET data = {set_service} WHERE org_id = {p} AND collection = {CHANGES} AND doc_id = {p}"


def lower_change_services(
    read: Callable[[str], Sequence[tuple[str, Any]]], write: Callable[[list[tuple[str, str]]], object]
) -> int:
    """One org's changes whose service is not in lower case, written in lower case; how many. `read(after)` gives
    the next batch of (doc id, service) after a doc id (`read_services`), `write` the (service, doc id) pairs."""
    after, lowered = "", 0
    while rows := read(after):
        due = [(service.lower(), doc_id) for doc_id, service in rows
               if isinstance(service, str) and service != service.lower()]  # fmt: skip
        if due:
            write(due)
        lowered += len(due)
        after = rows[-1][0]
    return lowered
