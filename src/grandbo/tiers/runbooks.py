"""Runbooks and post-mortems (the semantic tier): memories of their own kinds, written and read through the
org-bound handle's seams."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.model import Entry, Kind, Source

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

_NUMBERED = re.compile(r"(?:^|(?<=\s))(\d{1,2})[.)]\s+")


def steps_of(entry: Entry) -> list[str]:
    """A runbook's steps: those it was added with (`meta.steps`), else the numbered steps of its text ("1. Do
    this. 2. Then that.", on lines or inline, as imported runbooks hold them), else none."""
    held = entry.meta.get("steps")
    if isinstance(held, list) and held:
        return [str(step) for step in held]
    marks, expected = [], 1
    for match in _NUMBERED.finditer(entry.body):
        if int(match.group(1)) == expected:
            marks.append(match)
            expected += 1
    if len(marks) < 2:
        return []
    ends = [m.start() for m in marks[1:]] + [len(entry.body)]
    return [step for m, end in zip(marks, ends, strict=True) if (step := entry.body[m.end() : end].strip())]


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
        steps = [step.strip() for step in steps]
        if not steps or not all(steps):
            raise InvalidInputError(
                f"Runbook {runbook_id!r} needs at least one step, and no step may be empty.", detail={"id": runbook_id}
            )
        body = "\n".join(filter(None, [description, *(f"{n}. {step}" for n, step in enumerate(steps, start=1))]))
        return self.memory.remember(
            {"id": runbook_id, "title": title, "body": body, "kind": Kind.RUNBOOK, "services": list(services),
             "tags": [runbook_id, *tags], "meta": {"steps": list(steps)}},
            actor=actor,
        )  # fmt: skip

    def postmortem(self, incident_id: str, title: str, body: str, *, services: Sequence[str] = (),
                   severity: str | None = None, actor: str = "api", entry_id: str | None = None) -> Entry:  # fmt: skip
        """Retain a post-mortem as memory (kind post-mortem, linked to its incident); `entry_id` makes a
        retry write it once."""
        return self.memory.remember(
            {"title": title, "body": body, "kind": Kind.POSTMORTEM, "source": Source.INCIDENT,
             "services": list(services), "severity": severity, "tags": [incident_id],
             "meta": {"incident_id": incident_id}, **({"id": entry_id} if entry_id else {})},
            actor=actor,
        )  # fmt: skip

    def get(self, runbook_id: str) -> Entry:
        entry = self.memory.get(runbook_id)
        if entry.kind is not Kind.RUNBOOK:
            raise NotFoundError(f"{runbook_id!r} is a {entry.kind.value}, not a runbook.", detail={"id": runbook_id})
        return entry
