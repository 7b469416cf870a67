"""Runbooks and post-mortems (semantic tier), the effectiveness ledger, the service catalog and the
re-ranking settings of an organization. All of them go through `OrgMemory` and its store."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from grandbo import operations
from grandbo.effectiveness import Effectiveness, Outcome, OutcomeKind, summarize
from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.memory import OrgMemory
from grandbo.model import Entry, Kind, RerankWeights, Source, utcnow
from grandbo.operations import OUTCOMES, SERVICES, SETTINGS
from grandbo.store.base import DocumentWrite
from grandbo.topology import Service, Topology, parse_catalog


class RunbookStep(BaseModel):
    text: str = Field(min_length=1)


class Runbooks:
    """Runbooks are memories of kind `runbook` whose id outcomes refer to; their steps live in meta."""

    def __init__(self, memory: OrgMemory) -> None:
        self.memory = memory

    def add(
        self,
        runbook_id: str,
        title: str,
        steps: Sequence[str],
        *,
        description: str = "",
        services: Sequence[str] = (),
        tags: Sequence[str] = (),
        actor: str = "api",
    ) -> Entry:
        if not steps:
            raise InvalidInputError(f"Runbook {runbook_id!r} needs at least one step.", detail={"id": runbook_id})
        body = "\n".join(filter(None, [description, *(f"{n}. {step}" for n, step in enumerate(steps, start=1))]))
        return self.memory.remember(
            {"id": runbook_id, "title": title, "body": body, "kind": Kind.RUNBOOK, "services": list(services),
             "tags": [runbook_id, *tags], "meta": {"steps": list(steps)}},
            actor=actor,
        )  # fmt: skip

    def postmortem(self, incident_id: str, title: str, body: str, *, services: Sequence[str] = (),
                   severity: str | None = None, actor: str = "api") -> Entry:  # fmt: skip
        """Retain a post-mortem as memory (kind post-mortem, linked to its incident)."""
        return self.memory.remember(
            {"title": title, "body": body, "kind": Kind.POSTMORTEM, "source": Source.INCIDENT,
             "services": list(services), "severity": severity, "tags": [incident_id],
             "meta": {"incident_id": incident_id}},
            actor=actor,
        )  # fmt: skip

    def get(self, runbook_id: str) -> Entry:
        entry = self.memory.get(runbook_id)
        if entry.kind is not Kind.RUNBOOK:
            raise NotFoundError(f"{runbook_id!r} is a {entry.kind.value}, not a runbook.", detail={"id": runbook_id})
        return entry


class Ledger:
    """What each runbook did when it was tried: outcome events, summarized at query time."""

    def __init__(self, memory: OrgMemory) -> None:
        self.memory = memory

    def record(
        self,
        runbook_id: str,
        kind: OutcomeKind | str,
        *,
        incident_id: str | None = None,
        service: str | None = None,
        time_to_mitigate_s: float | None = None,
        rating: int | None = None,
        comment: str = "",
        actor: str = "api",
    ) -> Outcome:
        kind = OutcomeKind(kind)
        if kind is OutcomeKind.RATED and rating not in (1, -1):
            raise InvalidInputError("A rating is +1 (thumbs up) or -1 (thumbs down).", detail={"rating": rating})
        outcome = Outcome(
            org_id=self.memory.org_id, runbook_id=runbook_id, kind=kind, incident_id=incident_id,
            service=service.lower() if service else None, time_to_mitigate_s=time_to_mitigate_s, rating=rating,
            comment=comment, actor=actor, at=utcnow(),
        )  # fmt: skip
        data = outcome.model_dump(mode="json", exclude={"seq", "org_id"})
        doc_id = f"out-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}"
        self.memory.store.put_documents(
            self.memory.org_id, [DocumentWrite(OUTCOMES, doc_id, data, f"outcome.{kind.value}", ref=runbook_id)], actor
        )
        return outcome

    def outcomes(self, runbook_ids: Sequence[str]) -> list[Outcome]:
        return operations.outcomes(self.memory.store, self.memory.org_id, runbook_ids)

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        return summarize(runbook_id, self.outcomes([runbook_id]), service)


class Catalog:
    """The organization's services and their dependencies."""

    def __init__(self, memory: OrgMemory) -> None:
        self.memory = memory

    def import_text(self, text: str, *, replace: bool = False, actor: str = "api") -> list[Service]:
        """Add or update services from a YAML/JSON catalog; with `replace`, drop services not in it."""
        services = parse_catalog(text)
        return self.put(services, replace=replace, actor=actor)

    def put(self, services: Sequence[Service], *, replace: bool = False, actor: str = "api") -> list[Service]:
        writes = [
            DocumentWrite(SERVICES, s.name, s.model_dump(mode="json"), "service.put", ref=s.name) for s in services
        ]
        if replace:
            keep = {s.name for s in services}
            writes += [
                DocumentWrite(SERVICES, doc.doc_id, None, "service.removed", ref=doc.doc_id)
                for doc in self.memory.store.find_documents(self.memory.org_id, SERVICES)
                if doc.doc_id not in keep
            ]
        self.memory.store.put_documents(self.memory.org_id, writes, actor)
        return list(services)

    def topology(self) -> Topology:
        return operations.snapshot(self.memory.store, self.memory.org_id).topology


def set_rerank_weights(memory: OrgMemory, weights: RerankWeights | dict[str, Any], actor: str = "api") -> RerankWeights:
    checked = RerankWeights.model_validate(weights)
    memory.store.put_documents(
        memory.org_id, [DocumentWrite(SETTINGS, "rerank", checked.model_dump(), "settings.rerank")], actor
    )
    return checked
