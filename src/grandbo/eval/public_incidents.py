"""A BEIR-layout evaluation set derived from public incident post-mortems (`public-incidents.jsonl`).

    python -m grandbo.eval.public_incidents ../shared/data/public-incidents.jsonl OUT_DIR [--by-category]

The source file is third-party text and is not copied into the repository; this module derives the set
from it wherever it is. Each incident gives one document and at most one query:

* the document is the **finding**: the root cause as its title, the root-cause material of the write-up
  as its text (what the responders learned);
* the query is **what was observed**: the rest of the write-up (description, direct cause, impact,
  timeline) with the company's name masked, the source links dropped, and every sentence that restates
  the root cause removed (most of its words in the root cause), so that a query does not contain its
  answer verbatim. Incidents left with fewer than `MIN_QUERY_WORDS` words get no query, only a document
  (a distractor).

The relevant document of a query is its own incident's finding (grade 2); with `--by-category` the
findings of the other incidents of its category (the part before a "/": `Database/Locking` is
`Database`) are relevant too, at grade 1: "has something like this happened before" asked of a whole
class of failure. Queries are split by a hash of their id: `dev` (tune on it) and `test` (held out from
all tuning, reported).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

MIN_QUERY_WORDS = 12
RESTATES = 0.6  # a sentence with this share of its words in the root cause restates it
_WORD = re.compile(r"\w+")
_LINK = re.compile(r"\(?https?://\S+\)?|\[([^\]]*)\]\([^)]*\)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_META = re.compile(r"^\s*(\*\*)?(category|severity|source|date)(\*\*)?\s*:", re.IGNORECASE)
_ROOT = re.compile(r"^\s*(#+\s*)?(\*\*)?root cause(\*\*)?\s*:?", re.IGNORECASE)


def split_of(incident_id: str) -> str:
    return "dev" if int(hashlib.sha256(incident_id.encode()).hexdigest(), 16) % 2 == 0 else "test"


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _sections(postmortem: str) -> tuple[list[str], list[str]]:
    """The write-up's lines outside and inside its root-cause parts (metadata and headings dropped)."""
    observed: list[str] = []
    found: list[str] = []
    in_root = False
    for line in postmortem.splitlines():
        if line.startswith("# "):
            continue
        if line.startswith("##"):
            in_root = _ROOT.match(line) is not None
            continue
        if _META.match(line):
            continue
        if _ROOT.match(line):
            found.append(_ROOT.sub("", line, count=1).strip())
            continue
        (found if in_root else observed).append(line.strip())
    return [line for line in observed if line], [line for line in found if line]


def _mask(text: str, company: str) -> str:
    text = _LINK.sub(lambda m: m.group(1) or "", text)
    for name in {company, company.split(" ")[0]}:
        if len(name) >= 3:
            text = re.sub(rf"\b{re.escape(name)}(?:'s)?\b", "the provider", text, flags=re.IGNORECASE)
    return text


Judgment = tuple[str, str, int]  # query id, document id, grade


def derive(
    rows: list[dict[str, Any]], *, by_category: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Judgment]]:
    """(corpus, queries, judgments) of the set."""
    corpus, queries, qrels = [], [], []
    for row in rows:
        incident, root = str(row["id"]), " ".join(str(row.get("root_cause") or "").split())
        observed, found = _sections(str(row.get("postmortem") or ""))
        finding = " ".join(dict.fromkeys([root, *found]))
        corpus.append({
            "_id": f"{incident}-finding", "title": root[:200] or f"{row.get('category')} incident",
            "text": _mask(finding, str(row.get("company") or "")),
            "metadata": {"kind": "finding", "tags": [], "occurred_at": _date(row.get("date"))},
        })  # fmt: skip
        cause = set(_words(root + " " + " ".join(found)))
        kept = []
        for sentence in _SENTENCE.split(" \n".join(observed)):
            words = _words(sentence)
            if words and sum(w in cause for w in words) / len(words) < RESTATES:
                kept.append(sentence.strip(" -*"))
        topic = _mask(" ".join(s for s in kept if s), str(row.get("company") or ""))
        topic = " ".join(topic.split())
        if len(topic.split()) >= MIN_QUERY_WORDS:
            queries.append({"_id": incident, "text": topic,
                            "metadata": {"type": "observed", "split": split_of(incident)}})  # fmt: skip
            qrels.append((incident, f"{incident}-finding", 2))
    if by_category:
        qrels += _same_category(rows, {q for q, _, _ in qrels})
    return corpus, queries, qrels


def _category(row: dict[str, Any]) -> str:
    return str(row.get("category") or "").split("/")[0].strip().lower()


def _same_category(rows: list[dict[str, Any]], asked: set[str]) -> list[Judgment]:
    """Grade 1 for the findings of the other incidents of each asked incident's category."""
    by_id = {str(row["id"]): row for row in rows}
    return [
        (query, f"{other}-finding", 1)
        for query in sorted(asked)
        for other, row in by_id.items()
        if other != query and _category(row) and _category(row) == _category(by_id[query])
    ]


def _date(value: Any) -> str | None:
    text = str(value or "")
    return text if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else None


def build(source: Path, out: Path, *, by_category: bool = False) -> dict[str, int]:
    """Write the set in BEIR layout under `out` (corpus, queries, qrels/dev.tsv, qrels/test.tsv)."""
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus, queries, qrels = derive(rows, by_category=by_category)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    for name, records in (("corpus", corpus), ("queries", queries)):
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    counts = {"documents": len(corpus), "queries": len(queries)}
    for split in ("dev", "test"):
        lines = [f"{q}\t{d}\t{grade}\n" for q, d, grade in qrels if split_of(q) == split]
        (out / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines), encoding="utf-8")
        counts[split] = len({q for q, _, _ in qrels if split_of(q) == split})
    counts["judgments"] = len(qrels)
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grandbo.eval.public_incidents", description="Derive a BEIR-layout set from public post-mortems."
    )
    parser.add_argument("source", type=Path, help="public-incidents.jsonl")
    parser.add_argument("out", type=Path, help="the folder to write the set to")
    parser.add_argument("--by-category", action="store_true", help="judge the findings of the same category grade 1")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.source, args.out, by_category=args.by_category)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
