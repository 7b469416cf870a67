"""`grandbo eval` on data as it comes: BEIR-layout folders with awkward ids, long titles, repeats; gates,
TREC run files checked against an independent implementation (ranx); the public-incident set builder."""

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from grandbo import Settings
from grandbo.errors import InvalidInputError
from grandbo.eval import beir
from grandbo.eval.public_incidents import build, split_of
from grandbo.eval.runner import evaluate, shipped_set, write_runs

SAMPLE = Path(__file__).parent / "data" / "public_incidents_sample.jsonl"


def write_set(root: Path, corpus: list[object], queries: list[dict], qrels: list[tuple[str, str, int]]) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    lines = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return root


def awkward_set(root: Path) -> Path:
    long_title = "connection pool exhausted on the checkout tier " * 20  # ~940 characters
    corpus = [
        {"_id": "doc#1", "title": "Redis eviction storm", "text": "keys evicted, logins slow on auth"},
        {"_id": "x" * 300, "title": long_title, "text": "pool size raised, retries capped"},
        {"_id": "doc#1", "title": "a repeat that must not win", "text": "tls certificate expiry"},
        {"_id": "d4", "title": "TLS certificate expired", "text": "handshake failures", "metadata": ["not", "a dict"]},
        {"_id": "d5", "title": "Disk full on kafka", "text": "broker disk at 100%", "metadata": {"services": ["a b"]}},
        {"_id": 6, "title": "Numeric id", "text": "an integer _id is read as a string"},
    ]
    queries = [
        {"_id": "q#1", "text": "redis keys evicted and logins are slow on auth"},
        {"_id": "q-2", "text": "the checkout connection pool is exhausted again", "metadata": "odd"},
        {"_id": "q3", "text": "tls handshake failures after the certificate expired"},
        {"_id": "q3", "text": "a repeated query id"},
    ]
    qrels = [("q#1", "doc#1", 2), ("q-2", "x" * 300, 1), ("q3", "d4", 2), ("q3", "missing", 1)]
    return write_set(root, corpus, queries, qrels)


def test_awkward_public_data_loads_with_every_repair_reported(tmp_path):
    dataset = beir.load(awkward_set(tmp_path / "set"))
    assert len(dataset.corpus) == 5  # the repeated id is dropped, the first kept
    by_original = {dataset.original(r["_id"]): r for r in dataset.corpus}
    assert by_original["doc#1"]["text"] == "keys evicted, logins slow on auth"
    assert len(by_original["x" * 300]["title"]) <= beir.TITLE_MAX
    assert by_original["x" * 300]["text"].startswith("connection pool exhausted")  # the whole title kept
    assert by_original["d5"]["metadata"] == {}
    assert "6" in by_original
    text = "\n".join(dataset.problems)
    for expected in (
        "duplicate id",
        "title longer",
        "metadata is a list",
        "'services' is not valid",
        "'missing', which the corpus lacks",
        "query 'q3'",
    ):
        assert expected in text, expected
    assert [q.id for q in dataset.queries] == ["q#1", "q-2", "q3"]


@pytest.fixture(scope="module")
def ranx() -> Iterator[ModuleType]:
    """ranx, its numba functions run as the Python they are written in: compiling them took 60 s of CPU on a clean
    clone (28-167 s of one worker's time under load, and ~8 s from numba's cache), and the comparison itself takes a
    third of a second uncompiled. The metrics are ranx's own code either way. Imported under the switch, as numba's
    decorators read it then, and kept on while the module's tests call ranx (its typed containers read it at each
    call); no other module imports ranx."""
    numba = pytest.importorskip("numba")
    if "ranx" in sys.modules:  # compiled already in this process: as good a check, only slower
        yield sys.modules["ranx"]
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numba.config, "DISABLE_JIT", True)
        yield pytest.importorskip("ranx")


def ranx_agrees(ranx, report, qrels_path: Path, files: list[Path]) -> None:
    """Our metrics of each arm equal ranx's on the arm's TREC run file."""
    judged: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text().splitlines()[1:]:
        query, doc, score = line.split("\t")
        if doc != "missing":
            judged.setdefault(query, {})[doc] = int(score)
    qrels = ranx.Qrels(judged)
    for path in files:
        arm = path.stem.split(".")[1]
        run = ranx.Run.from_file(str(path), kind="trec")
        theirs = ranx.evaluate(qrels, run, ["ndcg@10", "recall@5", "recall@10", "mrr@10"], make_comparable=True)
        ours = report.line(arm)
        assert ours["nDCG@10"] == pytest.approx(theirs["ndcg@10"], abs=1e-4), arm
        assert ours["R@5"] == pytest.approx(theirs["recall@5"], abs=1e-4), arm
        assert ours["R@10"] == pytest.approx(theirs["recall@10"], abs=1e-4), arm
        assert ours["MRR@10"] == pytest.approx(theirs["mrr@10"], abs=1e-4), arm


def test_eval_on_awkward_data_writes_trec_runs_under_the_documents_own_ids(tmp_path, ranx):
    directory = awkward_set(tmp_path / "set")
    report = evaluate(directory, Settings(home=tmp_path / "home"), "deterministic", cache=False)
    files = write_runs(report, tmp_path / "run.trec")
    assert sorted(p.name for p in files) == [f"run.{a}.trec" for a in ("hybrid", "lexical", "reranked", "vector")]
    lexical = (tmp_path / "run.lexical.trec").read_text().splitlines()
    assert lexical[0].split() == ["q#1", "Q0", "doc#1", "1", lexical[0].split()[4], "lexical"]
    assert any(line.split()[2] == "x" * 300 for line in lexical)
    assert report.line("lexical")["nDCG@10"] > 0.5
    ranx_agrees(ranx, report, directory / "qrels" / "test.tsv", files)


def test_trec_runs_score_the_same_under_ranx_on_the_shipped_set(tmp_path, ranx):
    report = evaluate(shipped_set(), Settings(home=tmp_path / "home"), "deterministic", cache=False)
    files = write_runs(report, tmp_path / "run.trec")
    ranx_agrees(ranx, report, shipped_set() / "qrels" / "test.tsv", files)
    assert report.line("hybrid")["nDCG@10"] > 0.3  # real rankings, not empty runs


def test_splits_are_disjoint_and_cover_the_shipped_set():
    dev, test = beir.load(shipped_set(), "dev"), beir.load(shipped_set(), "test")
    both = beir.load(shipped_set(), "dev+test")
    assert not {q.id for q in dev.queries} & {q.id for q in test.queries}
    assert len(both.queries) == len(dev.queries) + len(test.queries) == 73
    assert dev.unanswerable and test.unanswerable
    assert {q.id for q in test.queries if q.metadata["type"] == "context"}


def test_the_conversation_set_holds_out_whole_conversations():
    folder = shipped_set().parent / "conversations"
    dev, test = beir.load(folder, "dev"), beir.load(folder, "test")
    ids = {str(record["_id"]) for record in dev.corpus}
    conversations = {split.split: {q.metadata["conversation"] for q in split.queries} for split in (dev, test)}
    assert len(dev.queries) == len(test.queries) == 30 and not conversations["dev"] & conversations["test"]
    for split in (dev, test):  # turn-level evidence: every judged turn exists and belongs to the question's chat
        for query in split.queries:
            judged = split.qrels[query.id]
            assert judged and all(doc in ids and doc.startswith(query.metadata["conversation"]) for doc in judged)


def test_a_missing_split_names_the_splits_there(tmp_path):
    from grandbo.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="splits here: dev, test"):
        beir.load(shipped_set(), "train")


def test_gates_and_run_files_through_the_cli(cli, tmp_path):
    ok = cli(
        "eval",
        "incidents",
        "--embedding",
        "deterministic",
        "--no-cache",
        "--min",
        "nDCG@10=0.2",
        "--min",
        "R@10=0.2",
        "--run-file",
        str(tmp_path / "r.trec"),
    )
    assert "hybrid" in ok.stdout and (tmp_path / "r.hybrid.trec").is_file()
    short = cli(
        "eval",
        "incidents",
        "--embedding",
        "deterministic",
        "--no-cache",
        "--min",
        "nDCG@10=0.99",
        "--gate-arm",
        "lexical",
        code=1,
    )
    assert "below the bar: lexical nDCG@10" in short.stderr
    bad = cli("eval", "incidents", "--embedding", "deterministic", "--min", "nDCG=high", code=2)
    assert "METRIC=VALUE" in bad.stderr
    for bar in ("5", "-inf", "inf", "nan"):  # a bar no metric can reach, or one every run meets: refused
        bad = cli("eval", "incidents", "--embedding", "deterministic", "--min", f"nDCG@10={bar}", code=2)
        assert "between 0 and 1" in bad.stderr and "loaded" not in bad.stderr


def test_the_public_incident_set_is_derived_without_leaking_its_answer(tmp_path):
    counts = build(SAMPLE, tmp_path / "pub")
    assert counts["documents"] == 3 and counts["queries"] == 2  # smp-003 is too short for a query
    dataset = beir.load(tmp_path / "pub", "dev+test")
    queries = {q.id: q.text for q in dataset.queries}
    assert "Examplecorp" not in queries["smp-001"] and "the provider" in queries["smp-002"]
    assert "exclusive lock" not in queries["smp-001"]  # the root cause is not restated in the topic
    assert "https://" not in queries["smp-002"]
    assert dataset.qrels["smp-001"] == {"smp-001-finding": 2}
    assert {split_of("smp-001"), split_of("smp-002")} <= {"dev", "test"}


def test_public_incident_set_by_category_judges_the_same_class_of_failure(tmp_path):
    """`--by-category`: a query's own finding stays grade 2, the other findings of its category (the part
    before "/") are grade 1, and findings of another category are not judged."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    twin = {**rows[0], "id": "smp-004", "category": "Database/Locking", "company": "Othercorp"}
    source = tmp_path / "source.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in [*rows, twin]))
    from grandbo.eval.public_incidents import main

    assert main([str(source), str(tmp_path / "pub"), "--by-category"]) == 0
    dataset = beir.load(tmp_path / "pub", "dev+test")
    assert dataset.qrels["smp-001"] == {"smp-001-finding": 2, "smp-004-finding": 1}
    assert dataset.qrels["smp-004"] == {"smp-004-finding": 2, "smp-001-finding": 1}
    assert dataset.qrels["smp-002"] == {"smp-002-finding": 2}  # Network: no other in its category
    plain = build(source, tmp_path / "plain")
    assert plain["judgments"] == 3 and beir.load(tmp_path / "plain", "dev+test").qrels["smp-001"] == {
        "smp-001-finding": 2
    }


def test_dates_as_the_write_seam_takes_them_set_the_evaluation_s_now(tmp_path):
    """An `occurred_at` with an offset is read as the write seam reads it (an offset was once taken for UTC); one
    given as epoch seconds is refused there (ISO 8601 only: 99999999999 was read as milliseconds, 1973), so the
    loader reports it and leaves it out rather than let it set the evaluation's "now"."""
    from datetime import UTC, datetime

    from grandbo.eval.runner import reference_time

    corpus = [
        {"_id": "d1", "title": "Disk full", "text": "logs", "metadata": {"occurred_at": 1_700_000_000}},
        {
            "_id": "d2",
            "title": "Pool exhausted",
            "text": "retries",
            "metadata": {"occurred_at": "2023-11-14T23:00:00+02:00"},
        },
    ]
    dataset = beir.load(
        write_set(tmp_path / "set", corpus, [{"_id": "q1", "text": "the disk filled up"}], [("q1", "d1", 1)])
    )
    assert reference_time(dataset) == datetime(2023, 11, 14, 21, 0, tzinfo=UTC)
    assert dataset.problems == ["document 'd1': metadata field 'occurred_at' is not valid; ignored"]


def test_a_split_with_nothing_to_score_is_refused_with_the_qrels_format_not_scored_zero(tmp_path, cli):
    """Space-separated (TREC-style) qrels, or qrels naming documents the corpus lacks, judged nothing: every
    metric printed 0.0000 and the exit status was 0."""
    corpus = [{"_id": "d1", "title": "Disk full on the logging node", "text": "ingestion stopped"}]
    queries = [{"_id": "q1", "text": "logs stopped because the disk filled"}, {"_id": "q2", "text": "a b c d"}]
    folder = write_set(tmp_path / "trec", corpus, queries, [])
    (folder / "qrels" / "test.tsv").write_text("q1 0 d1 1\n")
    refused = cli("eval", str(folder), "--embedding", "deterministic", code=2)
    assert "nothing to score" in refused.stderr and "separated by tabs" in refused.stderr
    assert "qrels/test.tsv line 1" in refused.stderr and "0.0000" not in refused.stdout
    missing = write_set(tmp_path / "missing", corpus, queries, [("q1", "d9", 1), ("q7", "d1", 1)])
    with pytest.raises(InvalidInputError, match="nothing to score") as raised:
        beir.load(missing)
    assert "'d9', which the corpus lacks" in raised.value.message
    assert "query 'q7' is judged but queries.jsonl lacks it" in raised.value.message


def test_a_file_that_is_not_utf8_names_its_line_and_a_byte_order_mark_is_read_past(tmp_path):
    """Latin-1 bytes in corpus.jsonl ended in a UnicodeDecodeError traceback; a BOM made line 1 'not JSON'."""
    corpus = [{"_id": "d1", "title": "Disk full on the logging node", "text": "ingestion stopped"}]
    folder = write_set(tmp_path / "set", corpus, [{"_id": "q1", "text": "the disk filled up"}], [("q1", "d1", 1)])
    lines = (folder / "corpus.jsonl").read_bytes()
    (folder / "corpus.jsonl").write_bytes(b"\xef\xbb\xbf" + lines)
    (folder / "qrels" / "test.tsv").write_bytes(b"\xef\xbb\xbf" + (folder / "qrels" / "test.tsv").read_bytes())
    dataset = beir.load(folder)
    assert [q.id for q in dataset.judged] == ["q1"] and not dataset.problems
    (folder / "corpus.jsonl").write_bytes(lines + '{"_id": "d2", "title": "Störung", "text": "x"}\n'.encode("latin-1"))
    with pytest.raises(InvalidInputError, match=r"corpus.jsonl:2: not UTF-8 text .* save the file as UTF-8"):
        beir.load(folder)


def test_a_run_file_that_cannot_be_written_is_refused_before_the_evaluation(cli, tmp_path):
    """It failed only after the whole evaluation, and the metrics were never printed; a folder given as the
    run file had the runs written beside it (folder.lexical.trec ...)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused = cli("eval", "incidents", "--embedding", "deterministic", "--run-file", str(blocker / "r.trec"), code=2)
    assert "a-file" in refused.stderr and "loaded" not in refused.stderr
    folder = tmp_path / "runs"
    folder.mkdir()
    refused = cli("eval", "incidents", "--embedding", "deterministic", "--run-file", str(folder), code=2)
    assert "is a folder" in refused.stderr and "loaded" not in refused.stderr
    assert not list(tmp_path.glob("runs.*"))


def test_eval_in_a_configured_store_of_another_space_says_how_to_evaluate_not_to_reembed(cli, tmp_path, monkeypatch):
    """The refusal told an evaluator to `grandbo reembed` the configured store (every entry re-embedded) just
    to try another provider."""
    monkeypatch.setenv("GRANDBO_DATABASE_URL", f"sqlite:///{tmp_path / 'configured.db'}")
    monkeypatch.setenv("GRANDBO_OPENAI_API_KEY", "not-used")
    cli("init", "--embedding", "deterministic")
    refused = cli("eval", "incidents", "--embedding", "openai", code=2)
    assert "without GRANDBO_DATABASE_URL" in refused.stderr and "deterministic" in refused.stderr
    assert "reembed --embedding" not in refused.stderr and "loaded" not in refused.stderr


def test_a_document_longer_than_an_entry_body_is_cut_and_reported_not_fatal(tmp_path):
    """One document over 200,000 characters stopped the whole evaluation with "Invalid entry: body: String
    should have at most 200000 characters", naming no document."""
    from grandbo.model import MAX_BODY_CHARS
    from grandbo.tiers.transfer import entry_from_record

    corpus = [{"_id": "d1", "title": "Disk full", "text": "ingestion stopped " * 20_000}]
    folder = write_set(tmp_path / "set", corpus, [{"_id": "q1", "text": "the disk filled up"}], [("q1", "d1", 1)])
    dataset = beir.load(folder)
    assert any("'d1': text longer than 200,000 characters; cut there" in p for p in dataset.problems)
    assert len(entry_from_record(dataset.corpus[0]).body) == MAX_BODY_CHARS


def test_a_document_with_a_nul_or_a_lone_surrogate_is_repaired_and_reported_not_fatal(tmp_path):
    """A NUL character in one document's text stopped the whole evaluation ("Invalid entry: body: ... contains
    a NUL character"), naming no document; so did a lone surrogate."""
    from grandbo.tiers.transfer import entry_from_record

    corpus = [
        {"_id": "d1", "title": "Disk full", "text": "ingestion\u0000 stopped"},
        {"_id": "d2", "title": "Pool \ud800 exhausted", "text": "checkout retries"},
    ]
    folder = write_set(tmp_path / "set", corpus, [{"_id": "q1", "text": "the disk filled up"}], [("q1", "d1", 1)])
    dataset = beir.load(folder)
    assert sum("NUL characters or lone surrogates" in p for p in dataset.problems) == 2
    entries = [entry_from_record(record) for record in dataset.corpus]
    assert entries[0].body == "ingestion stopped" and entries[1].title == "Pool \ufffd exhausted"


def test_a_query_s_situation_in_a_shape_recall_cannot_take_is_repaired_or_reported(tmp_path):
    """A query's metadata severity 'urgent' stopped the whole evaluation after the corpus was loaded (naming no
    query), services [1, 2] ended in an AttributeError traceback, and services "auth-service" was read
    letter by letter."""
    corpus = [{"_id": "d1", "title": "Eviction storm on redis-sessions", "text": "keys evicted under maxmemory"}]
    queries = [
        {"_id": "q1", "text": "session keys evicted under memory pressure", "metadata": {"services": "auth-service"}},
        {"_id": "q2", "text": "redis keys evicted again today", "metadata": {"severity": "urgent", "services": [1]}},
        {"_id": "q3", "text": "redis keys evicted once more", "metadata": {"severity": "P2"}},
    ]
    folder = write_set(tmp_path / "set", corpus, queries, [("q1", "d1", 1), ("q2", "d1", 1), ("q3", "d1", 1)])
    dataset = beir.load(folder)
    situations = {q.id: q.metadata for q in dataset.queries}
    assert situations == {"q1": {"services": ["auth-service"]}, "q2": {}, "q3": {"severity": "sev2"}}
    text = "\n".join(dataset.problems)
    assert "query 'q2': metadata severity: unknown severity 'urgent'" in text
    assert "query 'q2': metadata services is not a list of names" in text
    report = evaluate(folder, Settings(home=tmp_path / "home"), "deterministic", cache=False)
    assert report.line("reranked")["refused"] == 0 and report.queries == 3


def test_a_document_id_with_whitespace_is_reported_as_unfit_for_trec_run_files(tmp_path):
    """A run file's columns are whitespace-separated: "d 1" wrote a line trec_eval reads as docid "d", rank
    "1"; it was written without a word."""
    corpus = [{"_id": "d 1", "title": "Disk full", "text": "logs"}, {"_id": "d2", "title": "Pool", "text": "x"}]
    folder = write_set(tmp_path / "set", corpus, [{"_id": "q1", "text": "the disk filled up"}], [("q1", "d 1", 1)])
    problems = beir.load(folder).problems
    assert len(problems) == 1 and "'d 1': its id holds whitespace, which TREC run files" in problems[0]


def test_a_split_of_unanswerable_queries_only_is_refused_by_eval_not_scored_zero(tmp_path):
    """Every metric printed 0.0000 (they score judged queries only) and the exit status was 0."""
    corpus = [{"_id": "d1", "title": "Disk full on the logging node", "text": "ingestion stopped"}]
    queries = [{"_id": f"u{n}", "text": f"a question number {n} nobody answers", "metadata": {"answerable": False,
                "split": "test"}} for n in range(3)]  # fmt: skip
    folder = write_set(tmp_path / "set", corpus, queries, [])
    with pytest.raises(InvalidInputError, match="3 unanswerable queries and none with a relevant document"):
        evaluate(folder, Settings(home=tmp_path / "home"), "deterministic", cache=False)


def test_a_negative_grade_gains_nothing_and_ndcg_stays_within_0_and_1():
    """A qrels score of -1 (TREC's "judged not relevant") counted as a negative gain: nDCG@10 came out -0.37."""
    from grandbo.eval.metrics import ndcg_at

    assert ndcg_at(["a", "b"], {"a": -1, "b": 1}) == pytest.approx(1 / math.log2(3))
    assert ndcg_at(["a"], {"a": -2}) == 0.0


def test_a_bad_outcomes_or_topology_file_is_one_clear_error_before_the_corpus_is_loaded(cli, tmp_path):
    """An outcomes.jsonl record that is not an outcome was a pydantic traceback, after the whole corpus was
    embedded; a topology.yaml that is not YAML was refused after it too."""
    corpus = [{"_id": "d1", "title": "Disk full on the logging node", "text": "ingestion stopped"}]
    folder = write_set(tmp_path / "set", corpus, [{"_id": "q1", "text": "the disk filled up"}], [("q1", "d1", 1)])
    (folder / "outcomes.jsonl").write_text('{"runbook_id": "RB-1", "kind": "won"}\n')
    refused = cli("eval", str(folder), "--embedding", "deterministic", code=2)
    assert "Outcome record 1 is not an outcome (kind:" in refused.stderr and "Traceback" not in refused.stderr
    assert "loaded 1/1 documents" not in refused.stderr
    (folder / "outcomes.jsonl").unlink()
    (folder / "topology.yaml").write_text("services:\n  - name: a\n    depends_on: [b\n")
    refused = cli("eval", str(folder), "--embedding", "deterministic", code=2)
    assert "not valid YAML" in refused.stderr and "loaded 1/1 documents" not in refused.stderr
