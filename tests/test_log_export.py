"""`grandbo export` writes an organization's log a page of the store at a time: what it holds does not grow with the
organization. It read every event, entry and document at once before (286 MB at 10,000 entries and 10,000
documents; the Python heap's peak 28 MB at 5,000 of each, 110 MB at 20,000)."""

from __future__ import annotations

import json
import tracemalloc

from grandbo.ports import DocumentWrite
from grandbo.tiers import log_export

WORDS = "redis evicted the session keys when maxmemory was reached on the checkout pool during the sale".split()


def _add(memory, start: int, count: int) -> None:
    for at in range(start, start + count, 250):
        upto = min(start + count, at + 250)
        memory.remember_many([{"title": f"{' '.join(WORDS[i % 5 :])} {i}", "body": " ".join(WORDS * 4)}
                              for i in range(at, upto)])  # fmt: skip
        memory._documents.put([DocumentWrite("note", f"n{i}", {"text": " ".join(WORDS * 4)}, "note.written")
                               for i in range(at, upto)], "test")  # fmt: skip


def _peak(memory, path) -> tuple[int, dict[str, int]]:
    tracemalloc.start()
    try:
        counts = memory.export_log(path)
        return tracemalloc.get_traced_memory()[1], counts
    finally:
        tracemalloc.stop()


def test_an_export_holds_a_page_of_the_org_whatever_its_size(memory, tmp_path, monkeypatch):
    # Failed before: the peak grew with the org (4 times the entries and documents: about 4 times the peak).
    monkeypatch.setattr(log_export, "EXPORT_PAGE", 100)
    _add(memory, 0, 500)
    small, counts = _peak(memory, tmp_path / "small.jsonl")
    assert (counts["events"], counts["documents"]) == (500, 500)
    _add(memory, 500, 1500)
    large, counts = _peak(memory, tmp_path / "large.jsonl")
    assert (counts["events"], counts["document_events"], counts["documents"]) == (2000, 2000, 2000)
    assert large < small * 1.5, (small, large)


def test_an_export_writes_the_vectors_in_sequence_order(memory, tmp_path, monkeypatch):
    # Failed before: a page of the store at a time, the vectors came newest first (older releases wrote them by
    # sequence). One batch shares its creation time, and a correction moves an entry to the end of the log.
    monkeypatch.setattr(log_export, "EXPORT_PAGE", 2)
    first, *_ = memory.remember_many([{"title": f"checkout pool {i}", "body": " ".join(WORDS)} for i in range(5)])
    memory.remember_many([{"title": f"session keys {i}", "body": " ".join(WORDS)} for i in range(3)])
    memory.correct(first.id, {"body": "redis maxmemory reached"}, reason="clearer", actor="test")
    memory.export_log(path := tmp_path / "log.jsonl")
    written = [record["vector"]["entry_id"] for text in path.read_text().splitlines()
               if "vector" in (record := json.loads(text))]  # fmt: skip
    in_sequence = [entry.id for entry in sorted(memory.entries(), key=lambda entry: entry.seq)]
    assert written == in_sequence and len(written) == 8
