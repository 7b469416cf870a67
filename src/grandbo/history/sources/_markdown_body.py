"""The body of a Markdown post-mortem cut into its parts: the title, the sections under their usual headings, the
list items and table rows inside them, and the `Key: value` lines outside them.

Parsed by markdown-it-py (CommonMark with GFM tables), so a `#` in a code block is no heading and a list item
spanning lines is one item. Headings are matched forgivingly: any level, any case, numbered (`## 3. Root causes`,
`### IV) Timeline`), singular or plural, `(s)`, a parenthesis or a colon after (`## Root cause: the cert expired`).
A recognized heading opens a section that runs to the next heading of its level or above, or to the next
recognized heading; unrecognized headings inside it stay part of it (`### Day 2` under `## Timeline`). Outside
the headed sections, a paragraph opening with a section's name as a label (`**Root cause:** ...`) opens one too.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Literal

from markdown_it import MarkdownIt
from markdown_it.token import Token

from grandbo.linear import LinearPattern

SectionKind = Literal[
    "summary", "impact", "cause", "trigger", "contributing", "remediation", "timeline", "action", "lesson", "note"
]

# The headings each kind goes by, compared by `normal` (so case, numbering, plurals and punctuation do not count).
_SYNONYMS: dict[SectionKind, str] = {
    "summary": (
        "summary, overview, tl;dr, tldr, executive summary, incident summary, synopsis, what happened, "
        "description, abstract"
    ),
    "impact": "impact, customer impact, user impact, business impact, impact assessment, who was affected",
    "cause": (
        "root cause, root causes, cause, causes, root cause analysis, rca, underlying cause, why it happened, "
        "five whys, 5 whys"
    ),
    "trigger": "trigger, triggers, triggering event, trigger event, what triggered it",
    "contributing": "contributing factors, contributing causes, contributors, contributing factors and causes",
    "remediation": (
        "resolution, remediation, mitigation, fix, fixes, recovery, resolution and recovery, "
        "mitigation and resolution, resolution and mitigation, remediation and recovery, workaround, "
        "how it was fixed, how we fixed it, mitigation steps, resolution steps"
    ),
    "timeline": "timeline, incident timeline, timeline of events, event timeline, chronology, sequence of events",
    "action": (
        "action items, actions, follow ups, followups, follow up actions, follow up items, next steps, "
        "corrective actions, preventive actions, preventative actions, remediation items, "
        "corrective and preventive actions, action plan, todo"
    ),
    "lesson": (
        "lessons learned, lessons, learnings, takeaways, key takeaways, what we learned, what went well, "
        "what went wrong, what didn t go well, what did not go well, what could have gone better, "
        "what could have gone well, where we got lucky, what was lucky"
    ),
    "note": "detection, how it was detected, response, escalation, communication",
}

_PARSER = MarkdownIt("commonmark", {"html": False}).enable("table")
_NUMBERING = re.compile(
    r"^(?:(?:section|part|chapter|step)\s+)?(?:\d+(?:\.\d+)*[.):\-–—]*\s+|[ivxlc]+[.)]\s+)", re.IGNORECASE
)
_MARKER = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])(?:\s+|$)")
_CHECKBOX = re.compile(r"^\[[ xX]\]\s*")
# The value as `(.*?)[\s*_]*$` read it (to its last character no space, `*` or `_`), in one pass: that lazy value
# tried `[\s*_]*$` after each of its characters, 0.8 s for a line of 8,000 spaces
_FIELD = re.compile(r"^[\s*_]*([A-Za-z][\w ()/&.'-]{0,40}?)[\s*_]*:(?!//)[\s*_]*((?:.*[^\s*_])?)[\s*_]*$")
_PARENS = LinearPattern(r"\([^)]*\)")  # RE2: Python's engine tried each `(` to the end (0.26 s: 8,000)
_SPLITS = (": ", " - ", " – ", " — ")
_LABEL_LEVEL = 7  # a bold label opens a section below every real heading


def normal(text: str) -> str:
    """A heading or key as it is compared: lower case, no numbering or punctuation, each word singular."""
    text = text.lower().replace("(s)", "s").replace("&", " and ").replace("'", " ")
    text = _PARENS.sub(lambda _: " ", text)
    text = re.sub(r"^[^\w]+", "", text)
    text = _NUMBERING.sub("", text)
    words = re.sub(r"[^a-z0-9;]+", " ", text).split()
    return " ".join(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words)


_HEADINGS: dict[str, SectionKind] = {
    normal(name): kind for kind, names in _SYNONYMS.items() for name in names.split(", ")
}


def section_kind(heading: str) -> tuple[SectionKind | None, str, str]:
    """The kind a heading names, the heading without its numbering, and any words after it
    (`3. Root cause: the cert expired` -> cause, 'Root cause', 'the cert expired')."""
    for split in ("", *_SPLITS):
        head, found, rest = heading.partition(split) if split else (heading, "", "")
        if (split == "" or found) and (kind := _HEADINGS.get(normal(head))):
            shown = re.sub(r"^[^\w]+", "", head.strip())
            return kind, _NUMBERING.sub("", shown, count=1).strip(), rest.strip()
    return None, heading, ""


@dataclass
class Section:
    """One recognized section: its kind, its heading as written, its Markdown, and its items in order."""

    kind: SectionKind
    heading: str
    text: str
    entries: list[str] = field(default_factory=list)
    itemized: bool = False  # the entries come from a list or a table
    level: int = 0  # its heading's level (7 for a bold label)


@dataclass
class Body:
    """What a post-mortem's body holds, in the words it uses."""

    title: str = ""
    lead: str = ""
    sections: list[Section] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class _Block:
    tokens: list[Token]
    start: int
    end: int

    @property
    def kind(self) -> str:
        return self.tokens[0].type

    @property
    def level(self) -> int:
        return int(self.tokens[0].tag[1:]) if self.kind == "heading_open" else 0


def plain(inline: Token) -> str:
    """An inline token's text without Markdown's marks (for headings and titles)."""
    parts = []
    for child in inline.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return " ".join("".join(parts).split())


def _blocks(tokens: list[Token]) -> list[_Block]:
    """The top-level blocks: each open token through its close, or a self-contained one (a fence, a rule)."""
    blocks, i = [], 0
    while i < len(tokens):
        j = i
        if tokens[i].nesting == 1:
            while not (tokens[j].level == 0 and tokens[j].nesting == -1):
                j += 1
        span = tokens[i].map or [0, 0]
        blocks.append(_Block(tokens[i : j + 1], span[0], span[1]))
        i = j + 1
    return blocks


def _source(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start:end]).strip()


def _item(lines: list[str], token: Token) -> str:
    """A list item's Markdown, its marker and checkbox taken off, its continuation lines dedented."""
    start, end = token.map or [0, 0]
    first = _CHECKBOX.sub("", _MARKER.sub("", lines[start], count=1).strip(), count=1)
    rest = textwrap.dedent("\n".join(lines[start + 1 : end]))
    return f"{first}\n{rest}".strip()


def _rows(block: _Block, header: bool) -> list[list[str]]:
    """A table's rows as cell texts (the header row too when `header`)."""
    rows: list[list[str]] = []
    inside_head = False
    for token in block.tokens:
        if token.type in ("thead_open", "thead_close"):
            inside_head = token.type == "thead_open"
        elif token.type == "tr_open":
            rows.append([])
        elif token.type == "inline" and rows and (header or not inside_head):
            rows[-1].append(token.content.strip())
        if token.type == "tr_close" and inside_head and not header:
            rows.pop()
    return rows


def _entries(section_blocks: list[_Block], lines: list[str], kind: SectionKind) -> tuple[list[str], bool]:
    """A section's items: list items, table rows (cells joined), other blocks whole; a paragraph ending in ':'
    just before a list or table is its introduction and left out. A timeline's paragraphs count line by line,
    and items under a sub-heading (`### Day 2`) carry it as a prefix."""
    entries: list[str] = []
    itemized, prefix = False, ""
    for n, block in enumerate(section_blocks):
        following = section_blocks[n + 1].kind if n + 1 < len(section_blocks) else ""
        if block.kind == "heading_open":
            prefix = plain(block.tokens[1])
            continue
        found: list[str]
        if block.kind in ("bullet_list_open", "ordered_list_open"):
            itemized = True
            found = [_item(lines, t) for t in block.tokens if t.type == "list_item_open" and t.level == 1]
        elif block.kind == "table_open":
            itemized = True
            found = [" — ".join(cell for cell in row if cell) for row in _rows(block, header=False)]
        else:
            text = _source(lines, block.start, block.end)
            is_intro = text.endswith(":") and following in ("bullet_list_open", "ordered_list_open", "table_open")
            if is_intro:
                continue
            found = text.splitlines() if kind == "timeline" and block.kind == "paragraph_open" else [text]
        entries.extend(f"{prefix}: {entry.strip()}" if prefix else entry.strip() for entry in found if entry.strip())
    return entries, itemized


def _fields(block: _Block) -> dict[str, str]:
    """The `Key: value` lines of a paragraph or list outside the sections, and two-column (or one-row) tables."""
    found: dict[str, str] = {}
    if block.kind == "heading_open":
        return found
    if block.kind == "table_open":
        rows = _rows(block, header=True)
        if all(len(row) == 2 for row in rows):
            pairs = [(row[0], row[1]) for row in rows]
        elif len(rows) == 2:
            pairs = list(zip(rows[0], rows[1], strict=False))
        else:
            pairs = []
        for key, value in pairs:
            found.setdefault(normal(key.strip("*_ :")), value.strip())
        return found
    for token in block.tokens:
        if token.type == "inline":
            for line in token.content.splitlines():
                if (match := _FIELD.match(line)) and match.group(2):
                    found.setdefault(normal(match.group(1)), match.group(2).strip())
    return found


def _is_fields(block: _Block, lines: list[str]) -> bool:
    """Whether a paragraph is only `Key: value` lines (metadata, not prose)."""
    text = _source(lines, block.start, block.end)
    return bool(text) and all(_FIELD.match(line) for line in text.splitlines())


def _label(block: _Block) -> tuple[SectionKind, str, str] | None:
    """A paragraph that opens with a section's name as a label (`**Root cause:** the cert expired`, `**Timeline**`
    alone on its line), as wiki pages and the SRE book's template write them: kind, label, the words after it."""
    first, _, more = block.tokens[1].content.partition("\n")
    bare = first.strip().strip("*_").strip()
    if bare.endswith(":"):
        key, rest = bare[:-1].strip("*_ "), ""
    elif match := _FIELD.match(first):
        key, rest = match.group(1), match.group(2)
    else:
        key, rest = bare, ""
    kind, head, _ = section_kind(key)
    return (kind, head, f"{rest}\n{more}".strip()) if kind else None


def parse(text: str) -> Body:
    """The body's title, lead, sections and fields; `text` is the document without its front matter."""
    lines = text.split("\n")
    blocks = _blocks(_PARSER.parse(text))
    body = Body()
    open_: tuple[SectionKind, str, int, str, list[_Block]] | None = None  # kind, heading, level, rest, blocks
    first_heading: tuple[str, int] | None = None
    lead: list[str] = []

    def close(end: int) -> None:
        nonlocal open_
        if open_ is None:
            return
        kind, heading, level, rest, inside = open_
        start = inside[0].end  # the heading's own block
        text = "\n\n".join(part for part in (rest, _source(lines, start, end)) if part)
        entries, itemized = _entries(inside[1:], lines, kind)
        body.sections.append(Section(kind, heading, text, ([rest] if rest else []) + entries, itemized, level))
        open_ = None

    for block in blocks:
        label = _label(block) if block.kind == "paragraph_open" and (not open_ or open_[2] == _LABEL_LEVEL) else None
        if label:
            close(block.start)
            open_ = (label[0], label[1], _LABEL_LEVEL, label[2], [block])
            continue
        if block.kind == "heading_open":
            heading = plain(block.tokens[1])
            kind, head, rest = section_kind(heading)
            if open_ is not None and (kind or block.level <= open_[2]):
                close(block.start)
            if kind:
                open_ = (kind, head, block.level, rest, [block])
                continue
            if open_ is None and not body.sections:
                first_heading = first_heading or (heading, block.level)
                if block.level == 1 and not body.title:
                    body.title = heading
                    continue
        if open_ is not None:
            open_[4].append(block)
            continue
        for key, value in _fields(block).items():
            body.fields.setdefault(key, value)
        if not body.sections and block.kind in ("paragraph_open", "blockquote_open") and not _is_fields(block, lines):
            lead.append(_source(lines, block.start, block.end))
    close(len(lines))
    body.lead = "\n\n".join(lead)
    # a wiki page titled one level above its sections (`## Checkout outage` over `### Summary`)
    if not body.title and first_heading and body.sections:
        body.title = first_heading[0] if first_heading[1] < min(s.level for s in body.sections) else ""
    return body
