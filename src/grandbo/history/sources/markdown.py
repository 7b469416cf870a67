"""The `markdown` reader: a folder of post-mortems as teams keep them in a repository or a wiki export.

PATH is a folder, walked recursively for `.md` and `.markdown` files in sorted order (hidden folders such as
`.git` skipped), or one file. Each file is one incident, read one at a time:

- front matter (YAML between `---` lines) when present: id, title, date or started_at, resolved_at, severity,
  status, services or service, tags or labels, runbook or runbooks, url (authors and anything else ignored);
- otherwise the title is the first `#` heading, and `Key: value` lines outside the sections (`Date:`, `Severity:`,
  `Services:`, `Affected services:`, ...) or a two-column table of them fill the rest;
- the date comes from the front matter, a `Date:` line or the file name (`2023-04-12-db-failover.md`), else it
  stays unknown (never guessed);
- the usual sections (`_markdown_body.py`) become the summary, findings and timeline notes; the whole document,
  front matter stripped, is the post-mortem.

The source id is the front matter's `id`, else the path below PATH without its extension, so a re-import finds
the same incidents. An empty file, one that is not UTF-8, broken front matter or a file over `MAX_BYTES` is a
`Refusal` saying what to fix, as is a page with neither front matter nor any post-mortem heading (a README, an
index) and a template. Words are kept as written: the importer maps severities and replaces generic titles.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricFinding, HistoricIncident, Refusal, Skipped
from grandbo.history.sources._fields import Unreadable, kind, on_calendar, refuse_mapping
from grandbo.history.sources._markdown_body import Body, normal, parse
from grandbo.linear import LinearPattern

MAX_BYTES = 5 * 1024 * 1024
SUFFIXES = (".md", ".markdown")

# Where each field is looked for: front matter keys (lower case, `-` as `_`), then `Key: value` lines (normalized).
_STARTED = ("started_at", "started", "start", "start_time", "date", "incident_date", "occurred_at")
_STARTED_LINES = ("date", "started", "started at", "start", "start time", "incident date", "occurred", "occurred at")
_RESOLVED = ("resolved_at", "resolved", "ended_at", "ended", "end", "end_time")
_RESOLVED_LINES = ("resolved", "resolved at", "ended", "ended at", "end", "end time")
_SEVERITY = ("severity", "sev", "priority")
_SERVICES = ("services", "service", "affected_services", "impacted_services")
_SERVICES_LINES = ("service", "affected service", "impacted service", "affected system")
_LABELS = ("tags", "labels")
_RUNBOOKS = ("runbooks", "runbook")
_URL = ("url", "link", "permalink")
# Lessons whose heading says more than "lesson": the heading stays with the item.
_LESSON_HEADINGS = {normal(h) for h in ("lessons learned", "lessons", "learnings", "takeaways", "key takeaways")}

# `[_.-]*` before it said nothing `[\w.-]*[_.-]` did not, and split a run of `._` every way: 29 ms for a name of
# 255 bytes (every file of an import)
_TEMPLATE = re.compile(r"(?:[\w.-]*[_.-])?template")  # template.md, _template.md, postmortem-template.md
_FILE_DATE = re.compile(r"(?<!\d)(\d{4})[-_.](\d{2})[-_.](\d{2})(?!\d)")
_LEADING_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2}(?::\d{2})?))?\s*(Z|UTC|GMT|[+-]\d{2}:?\d{2})?\b")
# Not `\s*\b(UTC|GMT)$`, which tried each space of a run against the rest of it (6.6 s for 8,000 of them)
_ZONE_NAME = re.compile(r"\b(UTC|GMT)$")
_WEEKDAY = re.compile(r"^(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+", re.IGNORECASE)
_FORMATS = "%B %d, %Y|%b %d, %Y|%B %d %Y|%b %d %Y|%d %B %Y|%d %b %Y|%Y/%m/%d|%B %d, %Y %H:%M|%d %B %Y %H:%M".split("|")
# RE2: Python's engine tried every `[` against the rest of the text (a `[` with no `]`: 1.3 s for 8,000 of them)
_LINK = LinearPattern(r"\[([^\]]*)\]\(([^)\s]+)[^)]*\)|<(https?://[^>]+)>")


class MarkdownReader:
    """Post-mortems in Markdown, one incident per file; `max_bytes` bounds what one file may hold."""

    name = "markdown"

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes

    def check(self, mapping: dict[str, str] | None) -> None:
        refuse_mapping(self.name, "the headings and front matter", mapping)

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal | Skipped]:
        """Each post-mortem under `path` (a folder, walked in sorted order, or one file) as an incident or a
        refusal, one file at a time. A missing path, or a folder holding no Markdown, is an ImportFormatError."""
        self.check(mapping)
        path = Path(path)
        if path.is_file():
            yield self.read_file(path, path.name)
            return
        if not path.is_dir():
            problem = f"{path} is not a regular file or folder" if path.exists() else f"No such file or folder: {path}"
            raise ImportFormatError(
                f"{problem}. Give a folder of post-mortems (.md, .markdown) or one file.",
                detail={"path": str(path)},
            )
        found = False
        for file in _walk(path):
            found = True
            yield self.read_file(file, file.relative_to(path).as_posix())
        if not found:
            raise ImportFormatError(
                f"No .md or .markdown file under {path}. Point at the folder that holds the post-mortems.",
                detail={"path": str(path)},
            )

    def read_file(self, file: Path, location: str) -> HistoricIncident | Refusal | Skipped:
        """One post-mortem; `location` is its path below the folder read (its id when the front matter has none)."""
        try:
            size = file.stat().st_size
            if size > self.max_bytes:
                return Refusal(
                    location=location,
                    reason=f"The file is {_size(size)}, over the {_size(self.max_bytes)} a post-mortem may hold; "
                    "split it or move attachments out",
                )
            text = file.read_bytes().decode("utf-8-sig")
        except OSError as error:  # gone since the walk, a dangling link, no permission
            return Refusal(location=location, reason=f"The file cannot be read ({error.strerror}): check it exists")
        except UnicodeDecodeError as error:
            return Refusal(
                location=location,
                reason=f"The file is not UTF-8 (byte {error.start} is 0x{error.object[error.start]:02x}); "
                "save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) and import again",
            )
        if not text.strip():
            return Refusal(location=location, reason="The file is empty: remove it or write the post-mortem")
        if "\x00" in text:
            return Refusal(location=location, reason="The file holds NUL characters, so it is not text: remove it")
        if _TEMPLATE.fullmatch(Path(location).stem.lower()):
            return Skipped(location=location, reason="The file is a template (its name says so): rename it if not")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        front, body_text = _front_matter(text)
        if isinstance(front, str):
            return Refusal(location=location, reason=front)
        body = parse(body_text)
        if not front and not body.sections:
            return Refusal(
                location=location,
                reason="The file has no front matter and none of the post-mortem headings (Summary, Impact, "
                "Root cause, Timeline, Action items, ...); add them if it is a post-mortem",
            )
        if isinstance(front.get("id"), dict | list | bool):
            return Refusal(
                location=location,
                reason=f"The front matter's `id` is {kind(front['id'])}, not one value: write the incident's id "
                "(or remove it, and the file's path is the id)",
            )
        try:
            return _incident(_Front(front), body, body_text, location, self.name)
        except Unreadable as error:  # a time off the calendar in UTC
            return Refusal(location=location, reason=str(error))


READER = MarkdownReader()


def _size(count: int) -> str:
    return f"{count / 1024 / 1024:.1f} MB" if count >= 1024 * 1024 else f"{count / 1024:.0f} KB"


def _walk(root: Path) -> Iterator[Path]:
    """The Markdown files below `root` in sorted order, hidden folders and files left out; symlinks not followed."""
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and name.lower().endswith(SUFFIXES):
                yield Path(folder) / name


def _front_matter(text: str) -> tuple[dict[str, Any] | str, str]:
    """The front matter as a dict (keys lower case, `-` as `_`) and the body; a reason in place of the dict when
    it cannot be read. No front matter is an empty dict."""
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return {}, text
    end = next((n for n in range(1, len(lines)) if lines[n].rstrip() in ("---", "...")), None)
    if end is None:
        return "The front matter opened by `---` on line 1 is never closed: end it with a line `---`", text
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "cannot be read"
        return f"The front matter is not valid YAML{where} ({problem}): fix it or remove it", text
    except RecursionError:
        return "The front matter is nested too deeply to read: flatten it or remove it", text
    except (ValueError, OverflowError) as error:  # a date YAML reads but Python cannot hold: 0000-00-00, year 0
        return f"The front matter holds a value that cannot be read ({error}): quote it or correct it", text
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return f"The front matter is a {type(data).__name__}, not `key: value` lines: fix it or remove it", text
    front = {str(key).strip().lower().replace("-", "_"): value for key, value in data.items()}
    return front, "\n".join(lines[end + 1 :])


class _Front:
    """The front matter's fields; a value of the wrong shape is read as absent and said in `ignored`."""

    def __init__(self, front: dict[str, Any]) -> None:
        self.front, self.ignored = front, list[str]()

    def _pick(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        """The first of `keys` with a value, and that value (None when none has one)."""
        return next(((key, self.front[key]) for key in keys if self.front.get(key) not in (None, "", [])), ("", None))

    def one(self, *keys: str) -> Any:
        """One value (text, a number, a date); a list, an object or true/false is said and read as absent."""
        key, value = self._pick(keys)
        if isinstance(value, dict | list | bool):
            self.ignored.append(f"{key}: {kind(value)[:60]}, not one value")
            return None
        return value

    def many(self, keys: tuple[str, ...]) -> Any:
        """A list or a comma-separated string; an object is said and read as absent, as is a list's object."""
        key, value = self._pick(keys)
        if isinstance(value, dict | bool):
            self.ignored.append(f"{key}: {kind(value)[:60]}, not a list or a string")
            return None
        if not isinstance(value, list):
            return value
        kept = []
        for number, item in enumerate(value):
            if isinstance(item, dict | list | bool) or item is None:
                self.ignored.append(f"{key}[{number}]: {kind(item)[:60]}, not one value")
            else:
                kept.append(item)
        return kept

    def time(self, keys: tuple[str, ...]) -> datetime | None:
        """A date or time; one that cannot be read ('TBD', 'Unknown') stays unknown and is said."""
        key, _ = self._pick(keys)
        value = self.one(*keys)
        if value is None:
            return None
        if (at := _when(value)) is None:
            self.ignored.append(f"{key}: {str(value)[:40]!r}, not a date")
        return on_calendar(at, f"the front matter's {key}")


def _words(value: Any) -> list[str]:
    """A list or a comma-separated string as its items, as written (backticks and links' brackets off)."""
    items = value if isinstance(value, list) else re.split(r"[,;]", str(value)) if value is not None else []
    words = [_LINK.sub(lambda m: m.group(1) or m.group(3), str(item)).strip().strip("`").strip() for item in items]
    return list(dict.fromkeys(word for word in words if word))


def _runbooks(value: Any) -> list[str]:
    """Runbook references: a link's URL when there is one, else the text."""
    items = value if isinstance(value, list) else re.split(r"[,;]", str(value)) if value is not None else []
    found = []
    for item in map(str, items):
        links = [m.group(2) or m.group(3) for m in _LINK.finditer(item)]
        found.extend(links or [item.strip().strip("`").strip()])
    return list(dict.fromkeys(ref for ref in found if ref))


def _when(value: Any) -> datetime | None:
    """A date or time as written in front matter or a `Date:` line, UTC when it names no zone; None when it
    cannot be read ('TBD', 'Unknown'): a date is never guessed."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    text = _WEEKDAY.sub("", value.strip().strip("`*_ ")).strip()
    if named := _ZONE_NAME.search(text):  # its spaces before it too, as `\s*\b(UTC|GMT)$` took them
        text = text[: named.start()].rstrip() + "+00:00" + text[named.end() :]
    found: datetime | None = None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        for layout in _FORMATS:
            try:
                found = datetime.strptime(text, layout)
                break
            except ValueError:
                continue
    if found is None and (match := _LEADING_DATE.match(text)):
        day, clock, zone = match.groups()
        stamp = f"{day}T{clock}" if clock and zone else day  # a time in an unnamed zone is not taken
        zone = "+00:00" if zone in ("Z", "UTC", "GMT") else zone
        try:
            found = datetime.fromisoformat(stamp + (zone if clock and zone else ""))
        except ValueError:
            found = None
    if found is None:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _file_date(location: str) -> datetime | None:
    """The date a file's name starts or ends with (`2023-04-12-db-failover.md`, `db-failover_2023_04_12.md`)."""
    match = _FILE_DATE.search(Path(location).name)
    if not match:
        return None
    try:
        year, month, day = map(int, match.groups())
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None


def _line(body: Body, keys: tuple[str, ...]) -> str:
    return next((body.fields[normal(key)] for key in keys if body.fields.get(normal(key))), "")


def _incident(front: _Front, body: Body, body_text: str, location: str, source: str) -> HistoricIncident:
    """The incident a post-mortem describes, its words kept as written."""
    summaries = [s.text for s in body.sections if s.kind == "summary" and s.text]
    impacts = [s.text for s in body.sections if s.kind == "impact" and s.text]
    summary = "\n\n".join(summaries) or body.lead or "\n\n".join(impacts)
    impact_is_summary = not (summaries or body.lead)
    notes: list[str] = []
    findings: list[HistoricFinding] = []
    for section in (s for s in body.sections if s.text):
        if section.kind == "timeline":
            notes.extend(section.entries)
        elif section.kind in ("note", "impact"):
            if section.kind == "note" or not impact_is_summary:
                notes.append(f"{section.heading}:{chr(10) if chr(10) in section.text else ' '}{section.text}")
        elif section.kind != "summary":
            itemized = section.kind in ("action", "contributing", "lesson") and section.itemized
            texts = section.entries if itemized else [section.text]
            if section.kind == "lesson" and normal(section.heading) not in _LESSON_HEADINGS:
                texts = [f"{section.heading}: {text}" for text in texts]
            findings.extend(HistoricFinding(kind=section.kind, text=text) for text in texts if text.strip())
    own_id = "" if front.front.get("id") is None else str(front.front["id"]).strip()
    source_id = own_id or Path(location).with_suffix("").as_posix()
    started = front.time(_STARTED) or on_calendar(_when(_line(body, _STARTED_LINES)), "its date line")
    started = started or _file_date(location)
    services = front.many(_SERVICES) or _line(body, _SERVICES_LINES)
    return HistoricIncident(
        source=source,
        source_id=source_id,
        location=location,
        url=str(front.one(*_URL) or "").strip() or None,
        title=str(front.one("title") or "").strip() or body.title,
        summary=summary,
        postmortem=body_text.strip(),
        started_at=started,
        resolved_at=front.time(_RESOLVED) or on_calendar(_when(_line(body, _RESOLVED_LINES)), "its resolved line"),
        status=str(front.one("status") or _line(body, ("status",))).strip(),
        severity=str(front.one(*_SEVERITY) or _line(body, _SEVERITY)).strip(),
        services=_words(services),
        labels=_words(front.many(_LABELS) or _line(body, ("tags", "labels"))),
        findings=findings,
        notes=[note for note in notes if note],
        runbooks=_runbooks(front.many(_RUNBOOKS) or _line(body, ("runbook", "runbooks"))),
        ignored=front.ignored,
    )
