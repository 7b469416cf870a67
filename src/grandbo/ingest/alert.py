"""The normalized alert every webhook source becomes, and the sentence recall is asked."""

from __future__ import annotations

import hashlib
from binascii import crc_hqx
from collections.abc import Collection, Set
from datetime import datetime
from typing import Annotated, Any, Literal
from zlib import crc32

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from grandbo.model import Severity, utcnow
from grandbo.names import ServiceName, service_name
from grandbo.values import IsoTime, iso_8601, utc

# What monitoring systems call their levels, beyond Severity.parse's spellings.
_LEVELS = {"page": "high", "error": "high", "warning": "medium", "warn": "medium", "notice": "low", "none": "info"}
# Labels that say what a short alert is about, added to its sentence (never ids, urgencies or event types).
_CONTEXT_LABELS = ("alertname", "namespace", "container", "pod", "instance", "reason")
_SERVICE_LABELS = ("service", "service_name", "app", "application", "job", "component", "deployment", "container")
ALIKE_WORDS = 0.5  # the share of their words (Jaccard) two summaries have in common to be alike
# The words of a summary the alike tests compare at most: the ones with the lowest marks, a sample of a longer
# summary (the changes scenario's summaries have at most 7 distinct words; probe 18's, 2,000 characters of random
# words, 666). Compared whole, one org's 8,000 such alerts on a service cost each of its triages 0.62 s of CPU (by
# their marks 0.055 s, `benchmarks/triage_alike_cost.py`).
WORD_MARKS = 64
# Bytes of a summary (UTF-8, lowercased) that are words: ASCII letters and digits. Every other one, of a non-ASCII
# letter's bytes too, separates two words: the runs of `[a-z0-9]+` of the lowercased text, found 2.6 times as fast as
# by that regex (35 us, not 91, for the set of a 2,000-character summary's words).
_NOT_WORD = bytes(b if 48 <= b <= 57 or 97 <= b <= 122 else 32 for b in range(256))


def summary_words(summary: str) -> set[bytes]:
    """A summary's words as the alike tests read them (the recurrence label's, alert grouping's): lowercased runs of
    ASCII letters and digits, as UTF-8 bytes (what their marks are made of)."""
    return set(summary.lower().encode("utf-8", "surrogatepass").translate(_NOT_WORD).split())


def word_mark(word: bytes) -> int:
    """A word's mark: 48 bits of two CRCs (CRC-32, then CRC-CCITT), the same in every process and release. A CRC,
    not a cryptographic hash: a triage marks every word of the alerts it reads from the store (sha256 cost 0.6 us a
    word, four times the CRCs), and the marks are never a secret (a group keeps them so as to keep no text)."""
    return crc32(word) << 16 | crc_hqx(word, 0)


def marked_words(words: Collection[bytes]) -> dict[int, bytes]:
    """The words the alike tests compare, by their marks: all of them up to WORD_MARKS, else the WORD_MARKS with the
    lowest marks (a sample of a longer summary: the same for the same words, whatever their order)."""
    if len(words) <= WORD_MARKS:
        return {word_mark(word): word for word in words}
    listed = list(words)
    crcs = list(map(crc32, listed))  # the marks' first 32 bits, for every word: where the lowest WORD_MARKS end
    guess = 2 * WORD_MARKS * (1 << 32) // len(crcs)  # below it, about twice as many (seldom fewer): sorted, not all
    low = [crc for crc in crcs if crc <= guess]
    bar = sorted(low if len(low) >= WORD_MARKS else crcs)[WORD_MARKS - 1]
    lowest = sorted((word_mark(word), word) for crc, word in zip(crcs, listed, strict=True) if crc <= bar)
    return dict(lowest[:WORD_MARKS])


def summary_marks(summary: str) -> frozenset[int]:
    """The marks of a summary's words the alike tests compare (`marked_words`): alert grouping keeps them (as hex), a
    triage compares them. Two summaries of WORD_MARKS words or fewer are alike by their marks as by their words
    (barring two words of one mark, of 48 bits)."""
    return frozenset(marked_words(summary_words(summary)))


def _alike(common: int, ours: int, theirs: int) -> bool:
    return common / max(ours + theirs - common, 1) >= ALIKE_WORDS


def words_alike(ours: Set[object], theirs: Set[object]) -> bool:
    """Whether two summaries' marks (`summary_marks`, or their hex) have ALIKE_WORDS of them in common."""
    return _alike(len(ours & theirs), len(ours), len(theirs))  # the union counted, not made: asked of many pairs


def may_be_alike(ours: Set[bytes], words: Set[bytes]) -> bool:
    """Whether a summary of `words` can be alike (`words_alike`) one whose marked words (`marked_words`) are `ours`,
    told without marking its words: its marks are those of some of its words, at most WORD_MARKS, so they share
    at most as many as it has of `ours`. False: they are not alike (barring two words of the same mark)."""
    theirs = min(len(words), WORD_MARKS)
    return _alike(min(len(ours & words), theirs), len(ours), theirs)


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
        value = service_name(labels.get(key, ""))
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
    service: ServiceName | None = None
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
    changed_at: Annotated[datetime | None, BeforeValidator(iso_8601), AfterValidator(start_of)] = Field(
        default=None,
        description="When the sender says its status last changed (PagerDuty's event.occurred_at), of the newest "
        "change Grandbo applied; null from the senders that date no change (`tiers.alert_status`).",
    )

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
