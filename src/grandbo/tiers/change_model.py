"""What changed: a deploy, a config push, a flag flip, as a change source reported it, before and as stored.

Every change source (GitHub deployments, Argo CD notifications, PagerDuty change events, the generic shape,
`grandbo change add`) is read into one `NewChange`; the org keeps it as a `Change`, idempotent by (`source`, `id`).
Triage reads the changes in a window before an alert (`Changes.between`) to say what most likely started it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grandbo.names import ServiceName
from grandbo.urls import web_url_problem
from grandbo.values import utc
from grandbo.words import Vocabulary


class ChangeKind(Vocabulary):
    """What kind of change: the plan compares a change only with earlier changes of the same kind."""

    DEPLOY = "deploy"
    ROLLBACK = "rollback"
    CONFIG = "config"
    FLAG = "flag"
    INFRA = "infra"
    OTHER = "other"


class NewChange(BaseModel):
    """A change as a source reported it (the generic shape: `{"id", "service", "kind", "summary", "version", "url",
    "at"}`)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: str = Field(min_length=1, max_length=200, description="The source's id: a second delivery is the same change.")
    service: ServiceName = Field(
        min_length=1, max_length=200, description="The service changed, as the catalog names it."
    )
    kind: ChangeKind = ChangeKind.DEPLOY
    summary: str = Field("", max_length=2000)
    version: str | None = Field(None, max_length=200)
    url: str | None = Field(None, max_length=2000, description="Where to read more: an absolute http(s) URL.")
    at: datetime = Field(description="When the change took effect (ISO 8601 with a zone).")

    @field_validator("at")
    @classmethod
    def _in_the_calendar(cls, value: datetime) -> datetime:
        # 0001-01-01T00:00:00+01:00 is valid ISO 8601 but a day before the calendar in UTC: every route that met it
        # answered 500. (A time far ahead is refused later, with the skew a change may have: `_refuse_implausible`.)
        return utc(value)

    @field_validator("url")
    @classmethod
    def _web_url(cls, value: str | None) -> str | None:
        # Every face draws or hands on a change's url as a link (the plan, the console, an agent): a javascript:,
        # data: or file: one would run, show or open what its sender chose. Empty is no link.
        if value and (problem := web_url_problem(value)):
            raise ValueError(f"{URL_RULE}; this one {problem}")
        return value


URL_RULE = "must be an absolute http or https URL (https://ci.example.com/runs/42), or left out"


class Change(NewChange):
    """A change as the org keeps it."""

    source: str = Field(description="Who reported it: github, argocd, pagerduty, generic or cli.")
    received_at: datetime

    @classmethod
    def _web_url(cls, value: str | None) -> str | None:  # no validator here: one stored before is still read
        return value
