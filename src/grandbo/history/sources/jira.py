"""Jira: issues as the REST search returns them, one page, a JSON array of pages, or one page per line.

Jira Cloud (`GET/POST /rest/api/3/search` with `startAt`/`maxResults`/`total`, and `/rest/api/3/search/jql` with
`nextPageToken`) writes descriptions and comment bodies in Atlassian Document Format, turned into Markdown here;
Jira Server and Data Center (`/rest/api/2/search`) write them as plain strings, kept as they are. Each issue keeps
its key as the source id and its browse URL (`https://SITE/browse/KEY`, built from the issue's `self`). The status
is its name ("Done" for every status in Jira's done category), the priority is the severity word, the components
are the services, the comments are the notes, in order; a section of the description under a heading such as
"Root cause", "Resolution" or "Lessons learned" is also a finding. An issue resolved as a duplicate is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grandbo.history.record import HistoricIncident, Refusal
from grandbo.history.sources._adf import to_markdown
from grandbo.history.sources._pages import (
    Unreadable,
    items,
    name_of,
    read_each,
    section_findings,
    text,
    unique,
    when,
)

EXPECTED = (
    "export Jira's search answer as it comes (`/rest/api/3/search` or `/search/jql` with "
    "`fields=*all` or at least summary,description,comment,created,resolutiondate,status,priority,labels,"
    'components`): one page `{"issues": [...]}`, a JSON array of pages, or one page per line'
)


class JiraReader:
    """Reads Jira search pages (Cloud API v3 with ADF, or Server/Data Center API v2 with plain text)."""

    name = "jira"

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal]:
        """Every issue of every page at `path`, in order; a Refusal for an issue without a key."""
        return read_each(path, "issues", EXPECTED, _incident)


def _incident(issue: dict[str, Any], location: str) -> HistoricIncident:
    key = text(issue.get("key")) or text(issue.get("id"))
    if not key:
        raise Unreadable("an issue with neither `key` nor `id`: export the search answer as Jira returns it")
    fields = issue.get("fields")
    if not isinstance(fields, dict):
        raise Unreadable(f"issue {key} has no `fields` object: ask the search for `fields=*all` and export again")
    if name_of(fields.get("resolution"), "name").lower() == "duplicate":
        raise Unreadable(f"issue {key} is resolved as a duplicate, so the issue it duplicates holds it: left out")
    summary = to_markdown(fields.get("description"))
    return HistoricIncident(
        source="jira",
        source_id=key,
        location=location,
        url=_browse_url(issue.get("self"), key),
        title=text(fields.get("summary")),
        summary=summary,
        started_at=when(fields.get("created")),
        resolved_at=when(fields.get("resolutiondate")),
        status=_status(fields.get("status")),
        severity=name_of(fields.get("priority"), "name"),
        services=unique([name_of(c, "name") for c in items(fields.get("components"))]),
        labels=unique([text(label) for label in items(fields.get("labels"))]),
        findings=section_findings(summary),
        notes=_comments(fields.get("comment")),
    )


def _status(status: Any) -> str:
    """The status's name; "Done" for any status in Jira's done category, whatever the workflow named it."""
    category = status.get("statusCategory") if isinstance(status, dict) else None
    if isinstance(category, dict) and category.get("key") == "done":
        return "Done"  # "Resolved - pending review", "Closed (won't fix)": over, which is what the import asks
    return name_of(status, "name")


def _browse_url(api_self: Any, key: str) -> str | None:
    """`https://SITE/rest/api/3/issue/10002` -> `https://SITE/browse/OPS-12` (the page people open)."""
    site, found, _ = text(api_self).partition("/rest/api/")
    return f"{site}/browse/{key}" if found and site.startswith(("https://", "http://")) else None


def _comments(comment: Any) -> list[str]:
    """Each comment as `CREATED AUTHOR: BODY`, in the order Jira gives them (oldest first)."""
    found = comment.get("comments") if isinstance(comment, dict) else comment
    notes = []
    for each in items(found):
        if not isinstance(each, dict) or not (body := to_markdown(each.get("body"))):
            continue
        who = name_of(each.get("author"), "displayName", "name", "emailAddress")
        stamp = text(each.get("created"))
        head = " ".join(part for part in (stamp, who) if part)
        notes.append(f"{head}: {body}" if head else body)
    total = comment.get("total") if isinstance(comment, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > len(items(found)):
        # The search answer holds the first page of comments only; say so rather than drop the rest unseen.
        notes.append(f"({len(items(found))} of {total} comments were in the export)")
    return notes


READER = JiraReader()
