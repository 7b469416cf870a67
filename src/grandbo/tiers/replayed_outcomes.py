"""A replayed export's outcome documents, checked before any is filed (`eventlog.replay_log`): each as the ledger reads
it (`Outcome`, given the org: `operations._outcome_reader`). One the ledger cannot read (no or a bad `at`, a negative
or textual time to mitigate, a rating "up", a service 5: a hand-edited export's, an older release's) would be left
out of every runbook record while counting nowhere else; the replay refuses the file, or, asked to
(`--skip-bad-outcomes`), files the rest and names those it left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grandbo.errors import ImportFormatError, UnreadableRecordError
from grandbo.ports import Document
from grandbo.tiers.effectiveness import Outcome
from grandbo.tiers.operations import OUTCOMES
from grandbo.tiers.records import read_record

SHOWN = 5  # the outcomes a message names; the report's detail holds up to DETAILED
DETAILED = 100


@dataclass(frozen=True)
class LeftOut:
    """An outcome document the ledger cannot read: its line in the export, its id, the fields that fail."""

    line: int
    id: str
    fields: list[str]


def unreadable(documents: Sequence[Document], lines: Mapping[tuple[str, str], int], org: str) -> list[LeftOut]:
    """The outcome documents of `documents` that `Outcome` cannot read, in the export's order."""
    found = []
    for doc in documents:
        if doc.collection != OUTCOMES:
            continue
        try:
            read_record(Outcome, doc, "outcome", given={"org_id": org})
        except UnreadableRecordError as error:
            found.append(LeftOut(lines.get((doc.collection, doc.doc_id), 0), doc.doc_id, error.detail["fields"]))
    return sorted(found, key=lambda left: left.line)


def named(left: Sequence[LeftOut]) -> str:
    """The first SHOWN of `left`, each by line, id and failing fields, and how many more."""
    shown = "; ".join(f"line {o.line} {o.id!r} ({', '.join(o.fields[:3])})" for o in left[:SHOWN])
    return shown + (f"; and {len(left) - SHOWN} more" if len(left) > SHOWN else "")


def detail(left: Sequence[LeftOut]) -> list[dict[str, Any]]:
    return [asdict(o) for o in left[:DETAILED]]


def refusal(path: Path, org: str, left: Sequence[LeftOut]) -> ImportFormatError:
    """Why the replay of `path` filed nothing, and the two ways on."""
    return ImportFormatError(
        f"{len(left)} outcome document(s) of {path} cannot be read as outcomes: {named(left)}. Nothing was imported: "
        "the ledger would hold outcomes no runbook record counts. Correct or remove them in the file (then write "
        f"its checksum line again), or replay without them: `grandbo import-events {path} --org {org} "
        "--skip-bad-outcomes` (their history is kept).",
        detail={"outcomes_unreadable": len(left), "outcomes": detail(left)},
    )


def note(left: Sequence[LeftOut]) -> str:
    """What a replay that skipped `left` says of them."""
    return (f"{len(left)} outcome document(s) left out (--skip-bad-outcomes), the ledger cannot read them: "
            f"{named(left)}. Their history is kept; to keep them, correct them in the file and import it into a new "
            "organization.")  # fmt: skip
