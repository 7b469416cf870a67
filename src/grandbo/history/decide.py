"""The importer's decisions about one record's words: its severity, whether it is over, its title, its labels, and
the ids it is filed under. Pure functions; the importer counts each decision in its report.

Severity words (case, spaces, `-` and `_` ignored; a leading number or `SEVn`/`Pn` wins, so "SEV1 - Critical" is
sev1):

| Grandbo | the source's words |
|---|---|
| sev1 | sev0, sev1, p0, p1, 0, 1, critical, urgent, emergency, blocker, highest, fatal, disaster |
| sev2 | sev2, p2, 2, high, major, error |
| sev3 | sev3, p3, 3, medium, moderate, normal, warning |
| sev4 | sev4, p4, 4, low, minor |
| sev5 | sev5, p5, 5, lowest, info, informational, trivial |

Anything else is unknown: no severity (counted `severity_unknown`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from grandbo.history.record import HistoricIncident
from grandbo.model import Severity

SEVERITY_WORDS: dict[str, Severity] = {
    **dict.fromkeys(["critical", "urgent", "emergency", "blocker", "highest", "fatal", "disaster"], Severity.SEV1),
    **dict.fromkeys(["high", "major", "error"], Severity.SEV2),
    **dict.fromkeys(["medium", "moderate", "normal", "warning"], Severity.SEV3),
    **dict.fromkeys(["low", "minor"], Severity.SEV4),
    **dict.fromkeys(["lowest", "info", "informational", "trivial"], Severity.SEV5),
}
_NUMBERED = re.compile(r"^(?:sev|p)?(\d)(?!\d)")
_FIRST_WORD = re.compile(r"[a-z]+")

CLOSED_WORDS = frozenset(
    {"resolved", "closed", "done", "completed", "complete", "fixed", "postincident", "postmortem", "learning",
     "documenting", "reviewed"}
)  # fmt: skip


def severity(word: str) -> Severity | None:
    """The source's severity word as sev1..sev5 (the module's table), or None when it is empty or unknown."""
    text = re.sub(r"[\s_-]+", "", word.strip().lower())
    if not text:
        return None
    if text in SEVERITY_WORDS:
        return SEVERITY_WORDS[text]
    if numbered := _NUMBERED.match(text):
        return Severity(f"sev{min(5, max(1, int(numbered.group(1))))}")
    first = _FIRST_WORD.match(word.strip().lower())
    return SEVERITY_WORDS.get(first.group(0)) if first else None


def is_closed(record: HistoricIncident) -> tuple[bool, bool]:
    """(closed, inferred): closed when the source's status says so (resolved, closed, done, ...); a record with no
    status at all is closed when it has a resolution time, a post-mortem or findings (inferred)."""
    status = re.sub(r"[\s_-]+", "", record.status.strip().lower())
    if status:
        return status in CLOSED_WORDS, False
    return bool(record.resolved_at or record.postmortem.strip() or record.findings), True


_GENERIC = frozenset(
    {"incident", "incidents", "outage", "outages", "postmortem", "post-mortem", "post", "mortem", "report", "issue",
     "problem", "event", "downtime", "disruption", "the", "a", "an", "of", "on", "alert", "untitled", "ticket"}
)  # fmt: skip
_WORD = re.compile(r"[\w&'.-]+")
_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec"
_NUMBER = re.compile(  # numbers, severities, dates
    rf"#?\d+(st|nd|rd|th)?[.,]?|sev-?\d|p\d|\d{{4}}-\d{{2}}-\d{{2}}|({_MONTHS})[a-z]*\.?"
)


def is_generic(title: str, labels: Sequence[str] = ()) -> bool:
    """Whether a title says nothing about what happened: empty, only such words as "Incident", "Outage", numbers
    and dates ("Incident #12"), or those beside a name alone ("Amazon Incident", "Slack Outage Jan 4, 2021", or a
    label's words: "Stack Exchange Incident" when "Stack Exchange" is a label). A title without any such word is
    never generic."""
    words = _WORD.findall(title.strip())
    if not words:
        return True
    rest = [w for w in words if w.lower().strip(".") not in _GENERIC and not _NUMBER.fullmatch(w.lower())]
    if len(rest) == len(words):
        return False
    if not rest:
        return True
    if " ".join(rest).lower() in {label.strip().lower() for label in labels}:
        return True
    return len(rest) == 1 and rest[0][:1].isupper()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MARKUP = re.compile(r"^\s*(?:#+\s*|[-*>]\s+|\d+[.)]\s+)|\*\*|__|`")
# `\s*\**\s*` as `\s*(?:\*+\s*)?`: the same lines, but a run of spaces is no longer split between two `\s*`
# in every way (14 s for a line of 8,000 spaces)
_META_LINE = re.compile(
    r"^\s*(?:\*+\s*)?(category|severity|source|date|status|impact|root causes?)\s*(?:\*+\s*)?:", re.I
)
TITLE_CHARS = 120


def first_sentence(text: str) -> str:
    """The first sentence of the first line of prose in `text` (headings, metadata lines and markup dropped),
    cut at a word near `TITLE_CHARS`; empty when there is none."""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or _META_LINE.match(line):
            continue
        prose = _MARKUP.sub("", line).strip()
        if not prose:
            continue
        sentence = _SENTENCE_END.split(prose, maxsplit=1)[0].strip()
        if len(sentence) > TITLE_CHARS:
            sentence = sentence[:TITLE_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "..."
        return sentence
    return ""


def derived_title(record: HistoricIncident) -> str:
    """A title from the content: the first sentence of the summary, else of the first cause (or any finding),
    else of the post-mortem, else of the first note; empty when the record holds no text at all."""
    causes = [f.text for f in record.findings if f.kind in ("cause", "trigger")]
    for text in (record.summary, *causes, *(f.text for f in record.findings), record.postmortem, *record.notes):
        if sentence := first_sentence(text):
            return sentence
    return ""


_SLUG = re.compile(r"[^\w.:@-]+")


def slug(label: str) -> str:
    """A free-text label as one identifier: lowercased, every run of spaces, slashes and the like one `-`."""
    return _SLUG.sub("-", label.strip().lower()).strip("-")[:128]


_SAFE_ID = re.compile(r"[A-Za-z0-9._@-]{1,64}")


def incident_id(source: str, source_id: str) -> str:
    """The incident id of (source, source id), the same at every import: `<source>:<id>` when the source's id is a
    short token of safe characters, else `<source>@<hash of the id>` (ids of other shapes cannot collide)."""
    if _SAFE_ID.fullmatch(source_id):
        return f"{source}:{source_id}"
    return f"{source}@{hashlib.sha256(source_id.encode()).hexdigest()[:20]}"


IMPORTER_VERSION = 1  # raised when the importer files the same record differently: a re-import then updates it


def content_hash(record: HistoricIncident) -> str:
    """What decides unchanged on re-import: the record as the source has it (not where in the file it was, nor
    what the reader could not read in it)."""
    data = record.model_dump(mode="json", exclude={"location", "ignored"})
    text = json.dumps([IMPORTER_VERSION, data], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
