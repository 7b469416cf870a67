"""The normalized alert every webhook source becomes, and the sentence recall is asked."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Set
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from grandbo.model import Severity, utcnow
from grandbo.values import IsoTime, iso_8601, utc

# What monitoring systems call their levels, beyond Severity.parse's spellings.
_LEVELS = {"page": "high", "error": "high", "warning": "medium", "warn": "medium", "notice": "low", "none": "info"}
# Labels that say what a short alert is about, added to its sentence (never ids, urgencies or event types).
_CONTEXT_LABELS = ("alertname", "namespace", "container", "pod", "instance", "reason")
_SERVICE_LABELS = ("service", "service_name", "app", "application", "job", "component", "deployment", "container")
ALIKE_WORDS = 0.5  # the share of their words (Jaccard) two summaries have in common to be alike
_SUMMARY_WORD = re.compile(r"[a-z0-9]+")


def summary_words(summary: str) -> set[str]:
    """A summary's words as the alike tests read them (the recurrence label's, alert grouping's): lowercased runs of
    letters and digits."""
    return set(_SUMMARY_WORD.findall(summary.lower()))


def words_alike(ours: Set[str], theirs: Set[str]) -> bool:
    """Whether two summaries' words (or the same marks of them) have ALIKE_WORDS of them in common."""
    common = len(ours & theirs)  # the union counted, not made: alert grouping asks it of many pairs a delivery
    return common / max(len(ours) + len(theirs) - common, 1) >= ALIKE_WORDS


def start_of(value: datetime | None) -> datetime | None:
    """A sender's start: without a zone, UTC, as every time Grandbo is given; one whose offset puts it past the
    calendar in UTC is no start at all (a delivery's other alerts, and an alert stored so before, stay readable)."""
    try:
        return None if value is None else utc(value)
    except ValueError:
        return None


def fired_at(started: datetime | None, received: datetime) -> datetime:
    """When an alert started firing, as its sender tells, but never after Grandbo received it (a sender whose clock
    runs ahead cannot move it later); when received, if untold."""
    return min(started, received) if started else received


def severity_of(value: Any) -> Severity | None:
    """A vendor's severity or priority as Grandbo's tier, or None when it names none that maps."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    try:
        return Severity.parse(_LEVELS.get(text, text))
    except ValueError:
        return None


def service_of(labels: dict[str, str]) -> str | None:
    """The service an alert is about, from the labels monitoring systems usually set."""
    for key in _SERVICE_LABELS:
        value = labels.get(key, "").strip().lower()
        if value:
            return value
    return None


class Alert(BaseModel):
    """One alert, whatever sent it."""

    source: Literal["pagerduty", "alertmanager", "grafana", "opsgenie", "manual"]
    event_id: str = Field(
        description="The sender's id of this alert (PagerDuty: its incident's; or the fingerprint and start)."
    )
    fingerprint: str
    status: Literal["firing", "resolved"] = "firing"
    service: str | None = None
    severity: Severity | None = None
    summary: str = Field(min_length=1, max_length=2000)
    description: str = Field(default="", max_length=20_000)
    labels: dict[str, str] = Field(default_factory=dict)
    links: dict[str, str] = Field(
        default_factory=dict,
        description="Links the payload carried, by what they are: incident (PagerDuty's html_url), source "
        "(generatorURL), panel and dashboard (Grafana's panelURL, dashboardURL), runbook (a runbook_url "
        "annotation). Only absolute http(s) URLs are kept.",
    )
    started_at: Annotated[datetime | None, BeforeValidator(iso_8601), AfterValidator(start_of)] = None
    received_at: IsoTime = Field(default_factory=utcnow)

    @property
    def id(self) -> str:
        """Stable across redeliveries of the same alert: the source and the sender's event id."""
        digest = hashlib.sha256(f"{self.source}\x1f{self.event_id}".encode()).hexdigest()[:24]
        return f"alert-{digest}"

    def query(self) -> str:
        """The sentence recall is asked: what fired and what it says; always three words or more. The service
        is not added to a sentence: recall gets it apart (the re-ranker's topology term), and its name in the text
        would count as evidence that any past incident of that service is this problem. A title of fewer than
        three words (`label-renderer OOMKilled`, as a PagerDuty incident is often titled) is no sentence, and recall
        refuses it as a slug: it becomes one, with the service and the labels that say what fired."""
        text = self.summary.strip().rstrip(".")
        description = " ".join(self.description.split())[:400]
        if description and description.lower() not in text.lower():
            text = f"{text}; {description}"
        if len(text.split()) < 3:  # a bare alert name or title: say what kind of thing it is, where
            text = f"{text} alert firing on {self.service or 'an unnamed service'}"
            context = [f"{key} {value}" for key, value in sorted(self.labels.items())
                       if key in _CONTEXT_LABELS and value and value.lower() not in text.lower()]  # fmt: skip
            if context:
                text = f"{text} ({', '.join(context)})"
        return text
