"""`grandbo demo`: the shipped incident memories loaded into an org, and recall answering with reasons."""

from __future__ import annotations

from collections.abc import Callable

from grandbo.config import Settings
from grandbo.embeddings.prepare import is_prepared
from grandbo.errors import ConflictError, ModelNotPreparedError
from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, run_queries, score_arm, shipped_set
from grandbo.model import Arm, RecallResult
from grandbo.retrieval.text import words_of
from grandbo.service import Grandbo

QUESTIONS = [
    ("an exact identifier", "Have we seen ERR_CONN_RESET from payments-gateway during a deploy before?"),
    (
        "the same problem in other words",
        "Our RAM-backed cache holding account state keeps purging entries once full, "
        "and credential lookups became painfully slow.",
    ),
    ("a mix of both", "Redis connection reset during key eviction spike; auth-service latency > 1200ms"),
    ("something that never happened", "Has a GPU driver crash ever taken down the address recognition model servers?"),
]

Echo = Callable[[str], None]
DEMO_ACTOR = "eval"  # the actor of everything load_corpus writes


def _show(result: RecallResult, echo: Echo, k: int = 3) -> None:
    words = words_of(result.topic)
    for hit in result.hits[:k]:
        why = hit.why
        lexical = "lexical -"
        if why.lexical:  # the four terms that weigh most, as `recall` lists them, in the question's words
            shares = why.lexical.terms  # ties: the longer term (a whole identifier before its parts)
            strongest = sorted(shares, key=lambda term: (-shares[term], -len(term)))[:4]
            lexical = f"lexical #{why.lexical.rank} ({', '.join(dict.fromkeys(words.get(t, t) for t in strongest))})"
        vector = f"vector #{why.vector.rank} (cos {why.vector.similarity:.2f})" if why.vector else "vector -"
        echo(f"   {hit.rank}. {hit.entry.id:<28} {hit.entry.title[:70]}")
        fused = why.fused if why.fused is not None else hit.sort_score
        echo(f"      rrf {fused:.4f} = {lexical} + {vector}")
    if result.seen_before is not None:
        verdict = "seen before" if result.seen_before else "no similar past incident"
        echo(f"   answer: {verdict} (calibrated probability {result.evidence:.2f})")
    if not result.hits:
        echo("   (no memory close enough)")
    for note in result.notes:
        echo(f"   note: {note}")


def _judged(result: RecallResult, query: beir.Query, grades: dict[str, int], echo: Echo) -> None:
    """Where the set's judged answer landed (the demo's questions come from the shipped evaluation set), so a
    miss shows as a miss."""
    wanted = sorted((entry for entry, grade in grades.items() if grade > 0), key=lambda entry: -grades[entry])
    if not wanted:
        said = "no similar past incident" if result.seen_before is False else "seen before"
        echo(f"   judged: nothing in memory answers this (recall said: {said})")
        return
    ranks = {hit.entry.id: hit.rank for hit in result.hits}
    found = [f"{entry} #{ranks[entry]}" if entry in ranks else f"{entry} not in the top 5" for entry in wanted]
    echo(f"   judged answer ({query.id}): {', '.join(found)}")


def demo_store(settings: Settings) -> Grandbo:
    """The store a demo loads into: the configured one, made with the local model (or the configured provider) on
    a machine where none is yet, so a demo is one command on a fresh machine."""
    if Grandbo.initialized(settings):
        return Grandbo.open(settings)
    if not is_prepared(settings.model_dir) and settings.embedding_provider in (None, "local"):
        raise ModelNotPreparedError(
            f"The demo uses the local model, which is not prepared in {settings.model_dir}. "
            "Run `make setup` or `grandbo models prepare` first.",
            detail={"model_dir": str(settings.model_dir)},
        )
    return Grandbo.init(settings, embedding=settings.embedding_provider or "local")


def run_demo(settings: Settings, org_id: str, echo: Echo, *, replace: bool = False) -> None:
    """Load the shipped set into `org_id`, ask four questions, score the set. The org is replaced when
    it holds nothing but the shipped memories (or with `replace`); an org holding other memories is refused."""
    with demo_store(settings) as grandbo:
        dataset = beir.load(shipped_set(), "dev+test")
        if org_id in grandbo.orgs() and not replace:
            existing = grandbo.org(org_id)
            held = {entry.id for entry in existing.entries(include_inactive=True)}
            # Keys, a profile, incidents... are documents: the demo writes only entries, services and outcomes,
            # all as "eval" (load_corpus), so anything another actor wrote is someone's and is not dropped.
            others = existing.writers() - {DEMO_ACTOR}
            if held - {str(record["_id"]) for record in dataset.corpus} or others:
                raise ConflictError(
                    f"Organization {org_id!r} holds memories or documents (keys, profile, incidents, ...) the demo "
                    f"did not write (written by {', '.join(sorted(others)) or 'others'}); the demo would replace "
                    "them. Pick another org (--org NAME) or pass --replace (`make demo DEMO_ARGS=--replace`).",
                    detail={"org_id": org_id},
                )
        if org_id in grandbo.orgs():
            grandbo.drop_org(org_id)
        memory = grandbo.org(org_id, create=True)
        echo(f"Grandbo demo: store {grandbo.url}, embedding {grandbo.space}, org {org_id!r}")
        load_corpus(memory, dataset, lambda message: None)
        stats = memory.stats()
        echo(f"Loaded {stats.total} incident memories of a fictional parcel company ({stats.readable} embedded).\n")
        by_text = {query.text: query for query in dataset.queries}
        for label, question in QUESTIONS:
            echo(f"? {question}\n  ({label})")
            result = memory.recall(question, 5)
            _show(result, echo)
            if question in by_text:
                _judged(result, by_text[question], dataset.qrels.get(by_text[question].id, {}), echo)
            echo("")
        echo(f"The shipped evaluation set ({len(dataset.judged)} answerable queries) through each arm of recall:")
        runs = run_queries(memory, dataset, [Arm.LEXICAL, Arm.VECTOR, Arm.HYBRID])
        for arm, run in runs.items():
            line = score_arm(dataset.name, arm, run, dataset)
            echo(
                f"   {arm:<8} nDCG@10 {line['nDCG@10']:.3f}  R@10 {line['R@10']:.3f}  MRR@10 {line['MRR@10']:.3f}"
                f"  recall p50 {line['recall_p50_ms']:.2f} ms"
            )
        echo(f'\nTry it: grandbo recall --org {org_id} "<what you see, in a sentence>"')
