"""The public post-mortems (`../shared/data/public-incidents.jsonl`: 200 real incidents of 103 companies) and the
mapping the jsonl reader reads them with (`grandbo demo --public`)."""

from __future__ import annotations

from pathlib import Path

from grandbo.errors import NotFoundError

# id, company, category, date ("Unknown" for most), severity, source (the URL), root_cause, postmortem; the
# category is the label (what broke), the company stays in the post-mortem and the URL
PUBLIC_MAPPING = {
    "source": "=public", "source_id": "id", "labels": "category", "started_at": "date",
    "severity": "severity", "url": "source", "cause": "root_cause", "postmortem": "postmortem",
}  # fmt: skip
PUBLIC_FILE = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "public-incidents.jsonl"


def public_file(path: Path | None = None) -> Path:
    """The public post-mortems' file: `path`, else `../shared/data/public-incidents.jsonl` beside the checkout."""
    found = (path or PUBLIC_FILE).resolve()
    if not found.is_file():
        raise NotFoundError(
            f"No public post-mortems at {found}. Give the file's path (`grandbo demo --public PATH`); it is "
            "`public-incidents.jsonl` of the shared data folder (one JSON object a line: id, company, category, "
            "date, severity, source, root_cause, postmortem).",
            detail={"path": str(found)},
        )
    return found
