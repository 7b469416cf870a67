"""An organization's own past incidents as a "has this happened before" set (`grandbo eval|calibrate --from-history`).

What a past incident is (`gather`), read through the org handle only:

* **imported**: the active entries whose `meta.history.incident_id` names it (the findings and post-mortem the
  importer filed for it); its labels are their `meta.history.labels`, its date their `occurred_at` unless the
  write seam stamped it (an entry given no date gets its write time: an undated incident stays undated);
* **native**: a closed incident of `memory.incidents`, its memories the entries its findings became
  (`Incident.memory`, followed through corrections) and its post-mortem; its labels are its corroborated
  findings' mechanisms, its date `started_at`. An imported incident the importer also opened as a record is one.

The question is what was seen, never what was learned: a native incident's title and symptoms; an imported one's
symptoms (the source's summary) and its post-mortem's lines outside its learned parts (root cause, resolution,
action items, lessons...), headings, metadata lines and titles left out (an imported title often names the cause,
and a generic one was replaced by the cause's first sentence). Every line of the
question is then cut out of the set's copy of that incident's memories, so no query is a verbatim part of a
document it should find: they keep what was learned. The org's entries themselves are never changed.

Judgments: an incident's own memories are relevant (grade 2); those of the other incidents that share one of its
labels partly relevant (grade 1). An incident whose category (its set of labels) no other incident has is held out:
its memories leave the corpus and the right answer is "no similar past incident" (unanswerable). An incident with
no labels has no category: its own memories are its only relevant documents, and it is never held out. Incidents
with too little to ask with, or nothing left to find once the question is cut out, are not asked (counted); their
memories stay in the corpus.

Split by time: the newer half of the dated incidents asked about is `test`; the older half and every undated one
are `dev` (counted as `undated`).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from grandbo.errors import InvalidInputError
from grandbo.memory import OrgMemory
from grandbo.model import Entry, Kind, Status
from grandbo.tiers.incident_model import FindingStatus, Incident, IncidentStatus

MIN_QUESTION_WORDS = 5
MAX_QUESTION_CHARS = 2_000  # recall takes 4,000; the vector arm reads the first 256 word pieces anyway
ANSWERABLE, UNANSWERABLE = "answerable", "unanswerable"
NO_SYMPTOMS, NOTHING_LEFT = "no_symptoms", "nothing_left"
_LEARNED = (
    r"(?:root[ -]?causes?(?:\(s\))?|causes?|contributing(?: factors?)?|resolution|resolved by|remediation|"
    r"mitigation|fix(?:es)?|action items?|follow[ -]?ups?|lessons?(?: learned)?|what went (?:well|wrong)|"
    r"prevention|next steps|corrective actions?)"
)
_HEADING = re.compile(r"^\s*#+\s*")
_LEARNED_HEADING = re.compile(rf"^\s*#+\s*(?:\*\*)?\s*{_LEARNED}\b", re.IGNORECASE)
_LABEL = re.compile(
    r"^\s*(?:[-*]\s*)?(?:\*\*)?(?P<label>[A-Za-z][\w ()/-]{0,40}?)(?:\*\*)?\s*:(?:\*\*)?\s*(?P<rest>.*)$"
)
_LEARNED_LABEL = re.compile(rf"^{_LEARNED}$", re.IGNORECASE)
_META_LABEL = re.compile(r"^(?:category|categories|severity|sev|source|date|labels?|tags?|url|link|status)$", re.I)
_WORD = re.compile(r"\w")
_WORDS = re.compile(r"\w+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass
class PastIncident:
    id: str
    origin: str  # imported or native
    labels: frozenset[str]
    when: datetime | None
    symptoms: list[str]  # the pieces of the question, as the source text has them
    services: list[str]
    severity: str | None
    entries: list[Entry]

    @property
    def question(self) -> str:
        text = " ".join(" ".join(self.symptoms).split())
        return text if len(text) <= MAX_QUESTION_CHARS else text[:MAX_QUESTION_CHARS].rsplit(" ", 1)[0]


@dataclass
class HistorySet:
    """The set, ready to be written in the BEIR layout the runner reads."""

    org: str
    incidents: list[PastIncident]
    role: dict[str, str]  # incident id -> answerable, unanswerable, no_symptoms or nothing_left
    split: dict[str, str]  # asked incident id -> dev or test
    corpus: list[dict[str, Any]]
    qrels: dict[str, dict[str, int]]  # incident id -> entry id -> grade
    undated: int = 0
    test_from: datetime | None = None
    documents_cut: int = 0  # memories left with nothing once their incident's question was cut out
    by_id: dict[str, PastIncident] = field(default_factory=dict)

    def asked(self, split: str | None = None) -> list[PastIncident]:
        return [i for i in self.incidents if i.id in self.split and split in (None, self.split[i.id])]

    def count(self, role: str, split: str | None = None) -> int:
        return sum(1 for i in self.asked(split) if self.role[i.id] == role)

    def summary(self) -> dict[str, Any]:
        """The set's counts, as `--json` prints them first."""
        roles = Counter(self.role.values())
        return {
            "set": f"{self.org} history",
            "org": self.org,
            "incidents": len(self.incidents),
            "imported": sum(1 for i in self.incidents if i.origin == "imported"),
            "native": sum(1 for i in self.incidents if i.origin == "native"),
            "unlabelled": sum(1 for i in self.incidents if not i.labels),
            "not_asked": {NO_SYMPTOMS: roles[NO_SYMPTOMS], NOTHING_LEFT: roles[NOTHING_LEFT]},
            "documents": len(self.corpus),
            "documents_cut": self.documents_cut,  # memories with nothing but the question and headings in them
            "undated": self.undated,
            "test_from": self.test_from.isoformat() if self.test_from else None,
            **{
                split: {ANSWERABLE: self.count(ANSWERABLE, split), UNANSWERABLE: self.count(UNANSWERABLE, split)}
                for split in ("dev", "test")
            },
        }

    def write(self, directory: Path) -> None:
        """corpus.jsonl, queries.jsonl (unanswerable ones marked), qrels/dev.tsv and qrels/test.tsv."""
        (directory / "qrels").mkdir(parents=True, exist_ok=True)
        with (directory / "corpus.jsonl").open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in self.corpus)
        with (directory / "queries.jsonl").open("w", encoding="utf-8") as handle:
            for incident in self.asked():
                metadata: dict[str, Any] = {"split": self.split[incident.id], "origin": incident.origin}
                if self.role[incident.id] == UNANSWERABLE:
                    metadata["answerable"] = False
                if incident.services:
                    metadata["services"] = incident.services
                if incident.severity:
                    metadata["severity"] = incident.severity
                record = {"_id": incident.id, "text": incident.question, "metadata": metadata}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        for split in ("dev", "test"):
            lines = [
                f"{incident.id}\t{entry_id}\t{grade}\n"
                for incident in self.asked(split)
                for entry_id, grade in sorted(self.qrels.get(incident.id, {}).items())
            ]
            (directory / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines), "utf-8")


def build(memory: OrgMemory) -> HistorySet:
    """The org's history set; refused, with what to do, when the org has no past incident to ask about."""
    incidents = gather(memory)
    if not incidents:
        raise InvalidInputError(
            f"Organization {memory.org!r} has no past incidents to learn from: no memory carries meta.history "
            "(import them with `grandbo import-from SOURCE PATH`) and no incident is closed.",
            detail={"org": memory.org},
        )
    documents: dict[str, list[dict[str, Any]]] = {}
    cut = 0
    for incident in incidents:
        pattern = cutter(incident.symptoms)
        documents[incident.id] = [d for d in (_document(e, pattern) for e in incident.entries) if d is not None]
        cut += len(incident.entries) - len(documents[incident.id])
    categories = Counter(i.labels for i in incidents if i.labels and documents[i.id])
    role: dict[str, str] = {}
    for incident in incidents:
        others = categories[incident.labels] - (1 if documents[incident.id] else 0)
        if len(incident.question.split()) < MIN_QUESTION_WORDS:
            role[incident.id] = NO_SYMPTOMS
        elif incident.labels and others == 0:
            role[incident.id] = UNANSWERABLE
        else:
            role[incident.id] = ANSWERABLE  # unless nothing is left to find (below)
    in_corpus = [i for i in incidents if role[i.id] != UNANSWERABLE]
    by_label: dict[str, list[PastIncident]] = defaultdict(list)
    for incident in in_corpus:
        for label in incident.labels:
            by_label[label].append(incident)
    qrels: dict[str, dict[str, int]] = {}
    for incident in incidents:
        if role[incident.id] != ANSWERABLE:
            continue
        grades = {doc["_id"]: 1 for label in incident.labels for other in by_label[label] if other is not incident
                  for doc in documents[other.id]}  # fmt: skip
        grades |= {doc["_id"]: 2 for doc in documents[incident.id]}
        if grades:
            qrels[incident.id] = grades
        else:
            role[incident.id] = NOTHING_LEFT
    asked = [i for i in incidents if role[i.id] in (ANSWERABLE, UNANSWERABLE)]
    split, test_from = _split_by_time(asked)
    return HistorySet(
        memory.org, incidents, role, split, [doc for i in in_corpus for doc in documents[i.id]], qrels,
        undated=sum(1 for i in asked if i.when is None), test_from=test_from, documents_cut=cut,
        by_id={i.id: i for i in incidents},
    )  # fmt: skip


def _split_by_time(asked: Sequence[PastIncident]) -> tuple[dict[str, str], datetime | None]:
    """The newer half of the dated incidents of `asked` is test; the older half and the undated ones are dev."""
    dated = sorted((i for i in asked if i.when is not None), key=lambda i: (i.when, i.id))
    newest = dated[len(dated) - len(dated) // 2 :]
    split = {i.id: "dev" for i in asked} | {i.id: "test" for i in newest}
    return split, (newest[0].when if newest else None)


def gather(memory: OrgMemory) -> list[PastIncident]:
    """Every past incident of the org: the imported ones (by `meta.history.incident_id`), then the closed
    native ones the importer did not file; oldest first, undated ones last."""
    everything = {entry.id: entry for entry in memory.entries(include_inactive=True)}
    records = {incident.id: incident for incident in memory.incidents.find()}
    imported: dict[str, list[Entry]] = defaultdict(list)
    for entry in everything.values():
        history = entry.meta.get("history")
        if entry.status is Status.ACTIVE and isinstance(history, dict) and history.get("incident_id"):
            imported[" ".join(str(history["incident_id"]).split())].append(entry)  # a query id: no tab, no newline
    found = [_imported(key, entries, records.get(key), everything) for key, entries in imported.items()]
    for record in records.values():
        if record.status is IncidentStatus.CLOSED and record.id not in imported:
            own = _current(everything, [*record.memory.values(), f"{record.id}-postmortem"])
            if own:
                found.append(_native(record, own))
    return sorted(found, key=lambda i: (i.when is None, i.when or datetime.min, i.id))


def _category(labels: Iterable[Any]) -> frozenset[str]:
    """An imported incident's category: the parts of its labels ("Database/Human Error": database, human error),
    folded; a `name:value` label (`team:payments`, `urgency:high`, as the PagerDuty reader writes them) says who or
    how urgent, not what broke, and is left out."""
    parts = (part for label in labels for part in str(label).split("/"))
    return frozenset(folded for part in parts if (folded := " ".join(part.split()).casefold()) and ":" not in folded)


def _imported(key: str, entries: list[Entry], record: Incident | None, everything: dict[str, Entry]) -> PastIncident:
    labels = _category(label for entry in entries for label in (entry.meta["history"].get("labels") or []))
    dates = [entry.occurred_at for entry in entries if entry.occurred_at != _first(entry, everything).created_at]
    postmortems = [entry for entry in entries if entry.kind is Kind.POSTMORTEM]
    seen = [line for entry in postmortems for line in observed(entry.body)]
    if record is not None:  # its title left out: often named after the cause, or derived from it (a generic one)
        symptoms, services, severity = [*record.symptoms, *seen], list(record.services), record.severity
    else:
        symptoms = seen
        services = _services(entries)
        severity = next((e.severity for e in [*postmortems, *entries] if e.severity), None)
    return PastIncident(key, "imported", labels, min(dates) if dates else None, symptoms, services,
                        severity.value if severity else None, entries)  # fmt: skip


def _native(record: Incident, entries: list[Entry]) -> PastIncident:
    mechanisms = (f.mechanism for f in record.findings if f.status is FindingStatus.CORROBORATED)
    labels = frozenset(" ".join(m.split()).casefold() for m in mechanisms if m.strip())
    return PastIncident(
        record.id, "native", labels, record.started_at, [record.title, *record.symptoms], list(record.services),
        record.severity.value if record.severity else None, entries,
    )  # fmt: skip


def _first(entry: Entry, everything: dict[str, Entry]) -> Entry:
    """The entry a chain of corrections started from (a correction keeps the original's occurred_at)."""
    seen = {entry.id}
    while entry.supersedes and entry.supersedes in everything and entry.supersedes not in seen:
        entry = everything[entry.supersedes]
        seen.add(entry.id)
    return entry


def _current(everything: dict[str, Entry], ids: Iterable[str]) -> list[Entry]:
    """The active entries `ids` became through corrections (retired ones and unknown ids left out)."""
    found: dict[str, Entry] = {}
    for entry_id in ids:
        seen: set[str] = set()
        entry = everything.get(entry_id)
        while entry is not None and entry.status is Status.SUPERSEDED and entry.id not in seen:
            seen.add(entry.id)
            entry = everything.get(entry.superseded_by or "")
        if entry is not None and entry.status is Status.ACTIVE:
            found[entry.id] = entry
    return list(found.values())


def _services(entries: Sequence[Entry]) -> list[str]:
    return list(dict.fromkeys(service for entry in entries for service in entry.services))


def observed(postmortem: str) -> list[str]:
    """The lines of a post-mortem that say what was seen: outside the parts that say what was learned (by heading,
    or by a `Root cause:`-style label), without headings and metadata lines (`Category:`, `Severity:`...)."""
    lines: list[str] = []
    learned = False
    for raw in postmortem.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _HEADING.match(line):
            learned = _LEARNED_HEADING.match(line) is not None
            continue
        labelled = _LABEL.match(line)
        if labelled is not None:
            label, rest = " ".join(labelled["label"].split()), labelled["rest"].strip()
            if _META_LABEL.match(label):
                continue
            if _LEARNED_LABEL.match(label):
                learned = not rest  # a label alone opens a learned part; with its text, the line is one
                continue
            if not rest:
                learned = False  # another label alone opens a part that is not learned
                continue
        if not learned and _WORD.search(line):
            lines.append(line.lstrip("-*> ").strip())
    return [line for line in lines if line]


def cutter(pieces: Sequence[str]) -> re.Pattern[str] | None:
    """What `_cut` removes: every sentence of `pieces` of two words or more, whitespace and case aside (None:
    nothing to remove)."""
    sentences = {" ".join(s.split()).strip(" -*>.!?;:,") for piece in pieces for s in _SENTENCE.split(piece)}
    wanted = sorted((s for s in sentences if len(_WORDS.findall(s)) >= 2), key=len, reverse=True)
    if not wanted:
        return None
    return re.compile("|".join(r"\s+".join(re.escape(w) for w in piece.split(" ")) for piece in wanted), re.I)


def _cut(text: str, pattern: re.Pattern[str] | None) -> str:
    """`text` without what `pattern` matches; a line it changed is dropped when no word is left in it beyond a
    label (`Symptoms: ; `)."""
    if pattern is None:
        return text.strip()
    kept = []
    for line in text.splitlines():
        changed = pattern.sub(" ", line)
        labelled = _LABEL.match(changed)
        if changed == line or _WORD.search(labelled["rest"] if labelled else changed):
            kept.append(changed.rstrip())
    return "\n".join(kept).strip()


def _document(entry: Entry, pattern: re.Pattern[str] | None) -> dict[str, Any] | None:
    """The set's copy of one of an incident's memories, what was learned only: the sentences of its question cut
    out, headings and metadata lines left out; None when no text is left in its body."""
    title = _cut(entry.title, pattern).strip(" \t:;,.-–—")
    lines = []
    for line in _cut(entry.body, pattern).splitlines():
        labelled = _LABEL.match(line)
        if not _HEADING.match(line) and not (labelled and _META_LABEL.match(" ".join(labelled["label"].split()))):
            lines.append(line)
    body = "\n".join(lines).strip()
    if not _WORD.search(body):
        return None
    metadata: dict[str, Any] = {"kind": entry.kind.value, "occurred_at": entry.occurred_at.isoformat()}
    if entry.services:
        metadata["services"] = entry.services
    if entry.severity:
        metadata["severity"] = entry.severity.value
    title = " ".join(title.split()) if _WORD.search(title) else " ".join(body.split())[:120]
    return {"_id": entry.id, "title": title, "text": body, "metadata": metadata}
