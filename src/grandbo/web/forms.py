"""The console's forms: what each POST carries, one model a form (FastAPI reads it from the form body), so the
routes that take the same form declare it once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Form
from pydantic import BaseModel

from grandbo.model import Entry, Kind

FormText = Annotated[str, Form()]  # one field of a form a route reads alone
SERVICES_SUGGESTED = 1_000
"""The most services a filter's service field suggests (its datalist). Each memory and triage page drew the
catalog's every name: 10,000 services of 128 characters made 1.5 MB of options, 83 ms of the process's one
interpreter lock on each view, every other organization's requests waiting behind it (probe 29). Past it the field
suggests none (a part of the list, say its first names, would leave out the one typed and look like none matched),
and takes any name typed, as it always did."""


def suggested_services(names: Sequence[str]) -> Sequence[str]:
    """The catalog's service names a filter's field suggests: all of them, or none past SERVICES_SUGGESTED."""
    return names if len(names) <= SERVICES_SUGGESTED else ()


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


class SignedForm(BaseModel):
    """A form of the signed-in console: each carries the session's CSRF token."""

    csrf: str = ""


class EntryForm(SignedForm):
    """Adding or correcting an entry: the fields as typed, lists comma- or line-separated."""

    title: str = ""
    body: str = ""
    kind: str = ""
    services: str = ""
    tags: str = ""
    severity: str = ""
    reason: str = ""

    def fields(self, kind: str = Kind.FACT.value) -> dict[str, Any]:
        """The entry's fields as the write seam takes them (`kind` when the form left it empty)."""
        return {
            "title": self.title,
            "body": self.body,
            "kind": self.kind or kind,
            "services": _split(self.services),
            "tags": _split(self.tags),
            "severity": self.severity or None,
        }

    def changes(self, old: Entry) -> dict[str, Any]:
        """The fields that differ from `old` (what a correction carries)."""
        current = {
            "title": old.title,
            "body": old.body,
            "kind": old.kind.value,
            "services": old.services,
            "tags": old.tags,
            "severity": old.severity.value if old.severity else None,
        }
        return {name: value for name, value in self.fields(old.kind.value).items() if value != current[name]}


class VoteForm(SignedForm):
    """A vote on a runbook of an alert's or an incident's plan, or its undo (`worked` empty)."""

    kind: str = "alert"
    subject: str = ""
    runbook: str = ""
    worked: str = ""
    queue: str = ""


class GroupForm(SignedForm):
    """Opening an incident from an alert group of the queue."""

    group: str = ""
    queue: str = ""


EntryFormDep = Annotated[EntryForm, Form()]
GroupFormDep = Annotated[GroupForm, Form()]
VoteFormDep = Annotated[VoteForm, Form()]
