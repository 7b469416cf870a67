"""Jira: issues as the REST search returns them, one page, a JSON array of pages, or one page per line.

Jira Cloud (`GET/POST /rest/api/3/search` with `startAt`/`maxResults`/`total`, and `/rest/api/3/search/jql` with
`nextPageToken`) writes descriptions and comment bodies in Atlassian Document Format, turned into Markdown here;
Jira Server and Data Center (`/rest/api/2/search`) write them as plain strings, kept as they are. Each issue keeps
its key as the source id and its browse URL (`https://SITE/browse/KEY`, built from the issue's `self`). The status
is its name ("Done" for every status in Jira's done category), the priority is the severity word, the components
are the services, the comments are the notes, in order; a section of the description under a heading such as
"Root cause", "Resolution" or "Lessons learned" is also a finding. An issue resolved as a duplicate is skipped (the
issue it duplicates holds it); one without a key (or id) or without `fields` is refused; any other field of the
wrong type is read as absent and said in the incident's `ignored`.
"""

from __future__ import annotations

from typing import Any

from grandbo.history.record import HistoricIncident
from grandbo.history.sources._adf import to_markdown
from grandbo.history.sources._fields import Fields, Skip, Unreadable, section_findings, text, unique
from grandbo.history.sources._pages import PagedReader

EXPECTED = (
    "export Jira's search answer as it comes (`/rest/api/3/search` or `/search/jql` with "
    "`fields=*all` or at least summary,description,comment,created,resolutiondate,status,priority,labels,"
    'components`): one page `{"issues": [...]}`, a JSON array of pages, or one page per line'
)


def _incident(issue: Fields, location: str) -> HistoricIncident:
    key = text(issue.raw("key")) or text(issue.raw("id"))
    if not key:
        raise Unreadable("an issue with neither `key` nor `id`: export the search answer as Jira returns it")
    if not isinstance(issue.raw("fields"), dict):
        raise Unreadable(f"issue {key} has no `fields` object: ask the search for `fields=*all` and export again")
    fields = issue.obj("fields")
    if fields.name("resolution", "name").lower() == "duplicate":
        raise Skip(f"issue {key} is resolved as a duplicate, so the issue it duplicates holds it: left out")
    summary = _document(fields, "description")
    return HistoricIncident(
        source="jira",
        source_id=key,
        location=location,
        url=_browse_url(issue.text("self"), key),
        title=fields.text("summary"),
        summary=summary,
        started_at=fields.when("created"),
        resolved_at=fields.when("resolutiondate"),
        status=_status(fields.obj("status")),
        severity=fields.name("priority", "name"),
        services=unique([c.text("name") for c in fields.objects("components")]),
        labels=unique(fields.strings("labels")),
        findings=section_findings(summary),
        notes=_comments(fields),
    )


def _document(fields: Fields, key: str) -> str:
    """A description or comment body: Atlassian Document Format (Cloud) or a plain string (Server) as Markdown."""
    value = fields.raw(key)
    if value is not None and not isinstance(value, str | dict):
        fields.wrong(key, value, "a document or a string")
        return ""
    return to_markdown(value)


def _status(status: Fields) -> str:
    """The status's name; "Done" for any status in Jira's done category, whatever the workflow named it."""
    if status.obj("statusCategory").raw("key") == "done":
        return "Done"  # "Resolved - pending review", "Closed (won't fix)": over, which is what the import asks
    return status.text("name")


def _browse_url(api_self: str, key: str) -> str | None:
    """`https://SITE/rest/api/3/issue/10002` -> `https://SITE/browse/OPS-12` (the page people open)."""
    site, found, _ = api_self.partition("/rest/api/")
    return f"{site}/browse/{key}" if found and site.startswith(("https://", "http://")) else None


def _comments(fields: Fields) -> list[str]:
    """Each comment as `CREATED AUTHOR: BODY`, in the order Jira gives them (oldest first)."""
    comment: Any = fields.raw("comment")
    # The search answer's `{"comments": [...], "total"}`, or a list of comments an export flattened.
    listed = fields.objects("comment", wrapped=("comments",)) if comment != {} else []
    notes = []
    for each in listed:
        if not (body := _document(each, "body")):
            continue
        who = each.name("author", "displayName", "name", "emailAddress")
        stamp = each.text("created")
        head = " ".join(part for part in (stamp, who) if part)
        notes.append(f"{head}: {body}" if head else body)
    total = comment.get("total") if isinstance(comment, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > len(listed):
        # The search answer holds the first page of comments only; say so rather than drop the rest unseen.
        notes.append(f"({len(listed)} of {total} comments were in the export)")
    return notes


READER = PagedReader("jira", "issues", EXPECTED, _incident)
