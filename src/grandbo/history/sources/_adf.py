"""Atlassian Document Format (Jira Cloud's rich text: descriptions, comments) to plain Markdown.

An ADF document is a tree of block nodes (paragraph, heading, bulletList, orderedList, codeBlock, blockquote, panel,
table, ...) holding inline nodes (text with marks, hardBreak, mention, emoji, date, status, inlineCard). Each block
becomes the Markdown a reader expects (`## Heading`, `- item`, fenced code); a node this module does not know keeps
its text, so nothing the team wrote is lost.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

_MARKS = {"strong": "**", "em": "*", "strike": "~~", "code": "`"}


def to_markdown(document: Any) -> str:
    """The document as Markdown; a plain string (Jira Server, API v2) is returned as it is, stripped."""
    if isinstance(document, str):
        return document.strip()
    if not isinstance(document, dict):
        return ""
    return _blocks(document.get("content"), "").strip()


def _blocks(nodes: Any, indent: str, between: str = "\n\n") -> str:
    parts = [_block(node, indent) for node in nodes] if isinstance(nodes, list) else []
    return between.join(part for part in parts if part.strip())


def _block(node: Any, indent: str) -> str:
    if not isinstance(node, dict):
        return ""
    kind = node.get("type")
    attrs = _attrs(node)
    content = node.get("content")
    if kind in ("paragraph", "caption"):
        return indent + _inline(content).replace("\n", "\n" + indent)
    if kind == "heading":
        level = _int(attrs.get("level"), 2)
        return indent + "#" * max(1, min(level, 6)) + " " + _inline(content)
    if kind in ("bulletList", "orderedList", "taskList", "decisionList"):
        return _list(kind, attrs, content, indent)
    if kind == "codeBlock":
        language = attrs.get("language") if isinstance(attrs.get("language"), str) else ""
        code = (
            "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            if isinstance(content, list)
            else ""
        )
        return f"{indent}```{language}\n{code}\n{indent}```"
    if kind == "blockquote":
        return "\n".join(indent + "> " + line for line in _blocks(content, "").splitlines())
    if kind == "rule":
        return indent + "---"
    if kind in ("expand", "nestedExpand"):
        title = attrs.get("title") if isinstance(attrs.get("title"), str) else ""
        inner = _blocks(content, indent)
        return f"{indent}**{title}**\n\n{inner}" if title else inner
    if kind == "table":
        return _table(content, indent)
    if kind in ("mediaSingle", "mediaGroup", "media"):
        return ""
    if kind in ("blockCard", "embedCard"):
        return indent + str(attrs.get("url", ""))
    if isinstance(content, list) and any(isinstance(n, dict) and n.get("type") == "text" for n in content):
        return indent + _inline(content)
    return _blocks(content, indent) if content else indent + _inline([node])


def _list(kind: str, attrs: dict[str, Any], items: Any, indent: str) -> str:
    start = _int(attrs.get("order"), 1)
    lines = []
    for number, item in enumerate(items if isinstance(items, list) else [], start=start):
        if not isinstance(item, dict):
            continue
        if kind == "orderedList":
            bullet = f"{number}. "
        elif kind == "taskList":
            bullet = "- [x] " if _attrs(item).get("state") == "DONE" else "- [ ] "
        else:
            bullet = "- "
        inner = item.get("content") or []
        if item.get("type") in ("taskItem", "decisionItem"):
            body = _inline(inner)
        else:
            body = _blocks(inner, indent + "  ", "\n").lstrip()
        lines.append(indent + bullet + body)
    return "\n".join(lines)


def _table(rows: Any, indent: str) -> str:
    lines = []
    for number, row in enumerate(rows if isinstance(rows, list) else []):
        cells = row.get("content") if isinstance(row, dict) else None
        cells = cells if isinstance(cells, list) else []  # a row of another shape: a row without cells
        texts = [_blocks(cell.get("content"), "").replace("\n", " ") for cell in cells if isinstance(cell, dict)]
        lines.append(indent + "| " + " | ".join(texts) + " |")
        if number == 0 and cells and all(isinstance(c, dict) and c.get("type") == "tableHeader" for c in cells):
            lines.append(indent + "|" + " --- |" * len(texts))
    return "\n".join(lines)


def _inline(nodes: Any) -> str:
    out = []
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        attrs = _attrs(node)
        if kind == "text":
            out.append(_marked(str(node.get("text", "")), node.get("marks")))
        elif kind == "hardBreak":
            out.append("\n")
        elif kind == "mention":
            out.append(str(attrs.get("text") or "@" + str(attrs.get("id", ""))))
        elif kind == "emoji":
            out.append(str(attrs.get("text") or attrs.get("shortName") or ""))
        elif kind == "date":
            out.append(_date(attrs.get("timestamp")))
        elif kind == "status":
            out.append(f"[{attrs.get('text', '')}]")
        elif kind == "inlineCard":
            out.append(str(attrs.get("url", "")))
        elif isinstance(node.get("content"), list):
            out.append(_inline(node["content"]))
        elif isinstance(node.get("text"), str):
            out.append(node["text"])
    return "".join(out)


def _marked(value: str, marks: Any) -> str:
    if not value.strip():
        return value
    for mark in marks if isinstance(marks, list) else []:
        kind = mark.get("type") if isinstance(mark, dict) else None
        if not isinstance(kind, str):
            continue
        if kind in _MARKS:
            value = _MARKS[kind] + value + _MARKS[kind]
        elif kind == "link":
            href = _attrs(mark).get("href")
            if isinstance(href, str) and href and href != value:
                value = f"[{value}]({href})"
    return value


def _attrs(node: dict[str, Any]) -> dict[str, Any]:
    found = node.get("attrs")
    return found if isinstance(found, dict) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _date(timestamp: Any) -> str:
    """ADF's date node holds milliseconds since the epoch, as a string."""
    try:
        return datetime.fromtimestamp(int(str(timestamp)) / 1000, tz=UTC).date().isoformat()
    except (ValueError, OverflowError, OSError):
        return str(timestamp or "")
