"""`grandbo eval|calibrate --from-history` measured on the 200 public post-mortems (public-incidents.jsonl).

Each row is filed as the importer files a post-mortem (`grandbo import-from`): one post-mortem memory carrying
`meta.history` = {source, source_id, url, incident_id, labels}, its labels the parts of its category
("Database/Human Error": Database, Human Error), its heading as the title, the rest of the write-up as the body,
its date only when it is one (140 rows say "Unknown": undated). They go into an org of a temporary embedded store;
then every arm is scored on the org's history set and the verdict is fit on its dev split and reported on its test
split. Prints one JSON line each: the set, the eval lines and separations, the calibration's dev and test scores.

    python benchmarks/history_public.py [../shared/data/public-incidents.jsonl] [--embedding local]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.eval.history import build
from grandbo.eval.history_runs import calibrate_history, evaluate_history
from grandbo.service import Grandbo

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "public-incidents.jsonl"
SEVERITY = {"critical": "sev1", "high": "sev2", "medium": "sev3", "low": "sev4"}


def entry(row: dict[str, Any]) -> dict[str, Any]:
    """One row as the post-mortem memory the importer writes for it."""
    lines = str(row.get("postmortem") or "").strip().splitlines()
    heading = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else ""
    body = "\n".join(lines[1:] if heading else lines).strip() or str(row.get("root_cause") or "")
    date = str(row.get("date") or "")
    labels = [part.strip() for part in str(row.get("category") or "").split("/") if part.strip()]
    return {
        "id": f"pm-{row['id']}", "title": heading or f"{row.get('company')} incident", "body": body,
        "kind": "post-mortem", "severity": SEVERITY.get(str(row.get("severity") or "").lower()),
        "occurred_at": date if re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) else None,
        "meta": {"history": {"source": "jsonl", "source_id": row["id"], "url": row.get("source"),
                             "incident_id": f"jsonl:{row['id']}", "labels": labels}},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--embedding", default="local")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.path.read_text(encoding="utf-8").splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="grandbo-history-public-") as home:
        settings = Settings(home=Path(home), local_model_dir=Settings().model_dir)
        with Grandbo.init(settings, embedding=args.embedding) as grandbo:
            memory = grandbo.org("public", create=True)
            memory.remember_many([entry(row) for row in rows], actor="import")
            built = build(memory)
        print(json.dumps(built.summary()))
        report = evaluate_history(built, settings, args.embedding, cache=False)
        for line in [*report.lines, *report.separations]:
            print(json.dumps(line))
        fitted = calibrate_history(built, settings, args.embedding, cache=False)
        print(json.dumps({"split": "dev", **fitted.dev}))
        print(json.dumps({"split": "test", **fitted.test}))
        print(json.dumps(fitted.calibration.model_dump()))


if __name__ == "__main__":
    main()
