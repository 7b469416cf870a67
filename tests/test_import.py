import json
import os
import stat
import tracemalloc

import numpy as np
import pytest

from grandbo.errors import ImportFormatError
from grandbo.tiers.transfer import entry_from_record


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_lines_are_reported_by_number_and_the_rest_imported(tmp_path, memory):
    path = write_lines(
        tmp_path / "in.jsonl",
        [
            json.dumps({"id": "ok-1", "title": "checkout-api 503s", "body": "pool exhausted", "kind": "finding"}),
            "{not json",
            json.dumps({"title": ""}),
            json.dumps({"id": "ok-2", "title": "redis eviction storm", "severity": "P2", "tags": ["INC-044"]}),
            json.dumps({"id": "ok-1", "title": "duplicate id in the same file"}),
            json.dumps({"title": "bad severity", "severity": "sev9"}),
            "",
            json.dumps(["not", "an", "object"]),
            json.dumps({"title": "unknown field", "colour": "blue"}),
        ],
    )
    report = memory.import_file(path)
    assert report.imported == 2
    lines = dict(report.problems)
    assert sorted(lines) == [2, 3, 5, 6, 8, 9]
    assert "not valid JSON" in lines[2]
    assert "title" in lines[3]
    assert "duplicate id 'ok-1' (first on line 1)" in lines[5]
    assert "sev1..sev5" in lines[6]
    assert "JSON object" in lines[8]
    assert "colour" in lines[9]
    assert memory.get("ok-2").severity.value == "sev2"


def test_reimporting_skips_existing_ids_without_failing(tmp_path, memory):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps({"id": "a", "title": "first entry"})])
    assert memory.import_file(path).imported == 1
    again = memory.import_file(path)
    assert again.imported == 0 and again.already == 1 and again.problems == [] and again.complete
    changed = write_lines(tmp_path / "changed.jsonl", [json.dumps({"id": "a", "title": "other content"})])
    refused = memory.import_file(changed)
    assert refused.refused == {1} and "already exists with other content" in refused.problems[0][1]


def test_beir_lines_become_entries_with_their_metadata():
    entry = entry_from_record(
        {
            "_id": "D1",
            "title": "T",
            "text": "body text",
            "metadata": {"kind": "runbook", "services": ["Auth-Service"], "ignored": 1},
        }
    )
    assert (entry.id, entry.title, entry.body, entry.kind.value, entry.services) == (
        "D1",
        "T",
        "body text",
        "runbook",
        ["auth-service"],
    )
    assert entry.source.value == "import"


def test_non_object_is_a_format_error():
    with pytest.raises(ImportFormatError):
        entry_from_record("just a string")


def test_export_then_import_into_another_store_keeps_vectors_without_re_embedding(tmp_path, database_url):
    from grandbo.config import Settings
    from grandbo.service import Grandbo
    from tests.fakes import FakeEmbeddings

    def settings(home, url, db=None):
        return Settings(
            home=home,
            database_url=db,
            openai_base_url=url,
            openai_model="fake",
            openai_dimension=8,
            http_timeout_seconds=0.5,
            vector_min_similarity=-1.0,
        )

    topic = "incident 17 on checkout-api pool"
    with (
        FakeEmbeddings(dimension=8) as fake,
        Grandbo.init(settings(tmp_path / "a", fake.url), embedding="openai") as source,
    ):
        origin = source.org("acme", create=True)
        origin.remember_many(
            [{"id": f"E{n}", "title": f"incident {n} on checkout-api", "body": f"pool {n}"} for n in range(30)]
        )
        origin.retire("E3")
        assert origin.export_file(tmp_path / "out.jsonl") == 29
        expected = [h.entry.id for h in origin.recall(topic, arm="lexical").hits]
        vectors = source.org("acme").vectors([f"E{n}" for n in range(30)])
    # The target's provider is unreachable: only the exported vectors can make the entries readable.
    down = "http://127.0.0.1:9"
    with Grandbo.init(settings(tmp_path / "b", down, database_url), embedding="openai") as target:
        memory = target.org("acme", create=True)
        report = memory.import_file(tmp_path / "out.jsonl")
        stats = memory.stats()
        copied = target.org("acme").vectors([f"E{n}" for n in range(30)])
        lexical = [h.entry.id for h in memory.recall(topic, arm="lexical").hits]
    assert report.imported == 29 and report.problems == []
    assert stats.readable == 29 and stats.pending == 0
    assert set(copied) == set(vectors) - {"E3"}
    assert all(np.allclose(copied[k], vectors[k]) for k in copied)
    assert lexical == expected and lexical[0] == "E17"


def test_vectors_of_another_space_are_ignored_and_the_entry_embedded(tmp_path, memory):
    line = {
        "id": "V1",
        "title": "checkout-api pool exhausted",
        "embedding": {"provider": "other", "model": "m", "dimension": 3, "vector": [1, 0, 0]},
    }
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(line)])
    report = memory.import_file(path)
    assert report.imported == 1 and "another embedding space ignored" in report.problems[0][1]
    assert memory.stats().readable == 1


def test_precomputed_vectors_of_the_wrong_shape_are_refused(memory):
    from grandbo.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="384 finite numbers"):
        memory.remember_many([{"title": "one"}], vectors=[[0.1, 0.2]])
    good = [0.05] * 384
    bad = {
        "ragged": [0.1, 0.2],
        "not numbers": ["a"] * 384,
        "a hole": [*good[:-1], None],
        "infinite": [*good[:-1], float("inf")],
        "nested": [good],
    }
    for name, vector in bad.items():
        with pytest.raises(InvalidInputError, match=r"^Vector 2 has shape") as caught:
            memory.remember_many([{"title": f"{name} {n}"} for n in range(4)], vectors=[good, None, vector, good])
        assert caught.value.detail["position"] == 2, name
    assert memory.stats().total == 0


def test_a_bad_vector_is_reported_and_its_entry_embedded_again(tmp_path, memory):
    space = memory.space
    good = {"provider": space.provider, "model": space.model, "dimension": space.dimension}
    lines = [
        json.dumps({"id": "A", "title": "first entry", "embedding": {**good, "vector": [0.1] * space.dimension}}),
        json.dumps({"id": "B", "title": "second entry", "embedding": {**good, "vector": [0.1, "x"]}}),
        json.dumps({"id": "C", "title": "third entry", "embedding": {**good, "vector": [float("nan")] * 3}}),
    ]
    report = memory.import_file(write_lines(tmp_path / "in.jsonl", [line.replace("NaN", "NaN") for line in lines]))
    assert report.imported == 3
    assert [line for line, _ in report.problems] == [2, 3]
    assert all("finite numbers" in message for _, message in report.problems)
    assert memory.stats().readable == 3


def test_every_storable_line_is_stored_and_every_refused_one_reported_with_its_reason(tmp_path, memory):
    """The issue's cases, each once among good lines: none stops the import, each is named by its line."""
    deep = "[" * 200_000 + "]" * 200_000
    bad = {
        3: json.dumps({"title": "lone surrogate in meta", "meta": {"k": "\udfff"}}),
        5: json.dumps({"title": "nul in a tag", "tags": ["a\u0000b"]}),
        6: json.dumps({"title": "nul in a service", "services": ["checkout\u0000"]}),
        8: json.dumps({"_id": "beir-1", "title": "beir line", "text": "t", "metadata": "oops"}),
        9: '{"title": "deep", "meta": {"k": ' + deep + "}}",
        10: json.dumps(
            {"id": "past-1", "title": "far past redis eviction storm", "occurred_at": "0001-01-01T00:00:00+05:00"}
        ),
    }
    lines = [json.dumps({"title": f"good line {n}", "body": "text"}).encode() for n in range(12)]
    for number, line in bad.items():
        lines[number - 1] = line.encode()
    lines[10] = b'{"title": "invalid utf-8 \xff\xfe here"}'
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = memory.import_file(path)
    reasons = dict(report.problems)
    assert sorted(report.refused) == [3, 5, 6, 8, 9, 10, 11]
    assert "surrogate" in reasons[3] and "tag" in reasons[5] and "service" in reasons[6]
    assert "metadata must be a JSON object" in reasons[8] and "nested" in reasons[9]
    assert "occurred_at" in reasons[10] and "UTF-8" in reasons[11]
    assert report.imported == 5 and memory.stats().total == 5 and not report.complete


def test_lines_without_ids_get_ids_from_their_content_so_a_rerun_never_duplicates(tmp_path, memory):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps({"title": f"memory {n}", "body": "b"}) for n in range(50)])
    first = memory.import_file(path)
    assert first.imported == 50 and all(e.id.startswith("imp-") for e in memory.entries())
    again = memory.import_file(path)
    assert again.imported == 0 and again.already == 50 and memory.stats().total == 50


def test_an_interrupted_import_resumes_where_it_stopped(tmp_path, memory):
    lines = [json.dumps({"title": f"memory {n}", "body": "b"}) for n in range(30)]
    write_lines(tmp_path / "part.jsonl", lines[:12])  # what an import killed after its first batches stored
    memory.import_file(tmp_path / "part.jsonl")
    seen = []
    report = memory.import_file(write_lines(tmp_path / "all.jsonl", lines), progress=lambda d, t: seen.append((d, t)))
    assert (report.imported, report.already, report.complete) == (18, 12, True)
    assert memory.stats().total == 30 and seen[-1] == (30, 30)


def test_a_line_the_store_refuses_costs_only_itself(tmp_path, memory, monkeypatch):
    """A batch the store refuses (here a line whose id another writer took meanwhile) is split until the
    refused line is found; the rest of the batch is stored."""
    from grandbo.tiers import transfer

    monkeypatch.setattr(transfer, "BATCH", 8)
    path = write_lines(tmp_path / "in.jsonl", [json.dumps({"id": f"e{n}", "title": f"memory {n}"}) for n in range(8)])
    real = memory.get_many
    monkeypatch.setattr(memory, "get_many", lambda ids: {})  # the check ran before the other writer wrote
    memory.remember({"id": "e5", "title": "written meanwhile by another writer"})
    report = memory.import_file(path)
    monkeypatch.setattr(memory, "get_many", real)
    assert report.refused == {6} and "already exists" in report.problems[0][1]
    assert report.imported == 7 and memory.stats().total == 8


def test_an_entries_export_is_readable_by_its_owner_only_as_the_log_export_is(memory, tmp_path):
    memory.remember({"title": "orders db failover", "body": "what every user of the machine could read"})
    previous = os.umask(0o022)
    try:
        memory.export_file(tmp_path / "entries.jsonl")
        memory.export_log(tmp_path / "log.jsonl")
        (tmp_path / "old.jsonl").write_text("")  # a file left readable by others, exported over
        os.chmod(tmp_path / "old.jsonl", 0o644)
        memory.export_file(tmp_path / "old.jsonl")
    finally:
        os.umask(previous)
    names = ("entries.jsonl", "log.jsonl", "old.jsonl")
    assert {name: stat.S_IMODE((tmp_path / name).stat().st_mode) for name in names} == dict.fromkeys(names, 0o600)
    assert "orders db failover" in (tmp_path / "entries.jsonl").read_text()


def test_an_entries_export_reads_a_page_at_a_time_and_writes_what_one_read_would(tmp_path, memory):
    """`grandbo export --entries` reads the active entries a page at a time (by seq, in one snapshot), so what it holds
    is a page, not the org: exporting 300 entries of 8,000 characters (2.4 MB of text) 10 at a time peaks at a small
    part of that. Before, it read every entry at once. The file is the same whatever the page."""
    body = "x" * 7_990
    memory.remember_many([{"id": f"E{n:03}", "title": f"incident {n}", "body": f"{n:05} {body}"} for n in range(300)])
    memory.retire("E007")
    assert memory.export_file(tmp_path / "whole.jsonl", page=1_000) == 299
    tracemalloc.start()
    try:
        assert memory.export_file(tmp_path / "paged.jsonl", page=10) == 299
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "paged.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert peak < 1_000_000, peak  # 0.25-0.43 MB; 3.9-5.8 MB read whole
