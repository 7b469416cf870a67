"""The real local model (all-MiniLM-L6-v2 through fastembed), prepared by `make setup`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.local import MODEL_FILE, MODEL_NAME
from grandbo.embeddings.prepare import MANIFEST, made_from, prepare
from grandbo.errors import ModelNotPreparedError
from grandbo.eval.runner import evaluate, shipped_set
from grandbo.service import Grandbo

pytestmark = pytest.mark.model


def test_local_provider_embeds_meaning(tmp_path, model_dir):
    provider = get_provider("local", Settings(home=tmp_path, local_model_dir=model_dir))
    cache, paraphrase, other = provider.embed(
        [
            "Redis evicted session keys when it ran out of memory",
            "the cache store dropped logged-in users once RAM filled up",
            "the quarterly sales report had a typo in the title",
        ]
    )
    assert len(cache) == 384 and np.linalg.norm(cache) == pytest.approx(1.0, abs=1e-5)
    assert float(np.dot(cache, paraphrase)) > float(np.dot(cache, other)) + 0.2


@pytest.mark.parametrize("threads", [1, None])
def test_the_models_threads_wait_asleep_and_the_vectors_stay_fastembeds(tmp_path, model_dir, threads):
    from fastembed import TextEmbedding

    provider = get_provider("local", Settings(home=tmp_path, local_model_dir=model_dir, local_threads=threads))
    texts = ["redis evicted the session keys", "checkout latency after the deploy", "disk full on db-1"]
    vectors = [provider.embed(texts[:n], "query") for n in (1, 3)]
    # ONNX Runtime's threads spin between calls unless told not to (a many-threaded session burned the cores).
    session = provider._model.model.model  # type: ignore[attr-defined]
    assert session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    fastembed = TextEmbedding(MODEL_NAME, specific_model_path=str(model_dir), local_files_only=True, threads=threads)
    assert all(np.array_equal(np.array(got), np.array(list(fastembed.embed(texts[: len(got)]))))
               for got in vectors)  # fmt: skip


def test_the_tokenizer_runs_on_the_callers_thread_unless_the_operator_says(tmp_path):
    script = "import os, grandbo.embeddings.local; print(os.environ.get('TOKENIZERS_PARALLELISM'))"
    env = {key: value for key, value in os.environ.items() if key != "TOKENIZERS_PARALLELISM"}
    unset = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    chosen = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**env, "TOKENIZERS_PARALLELISM": "true"})  # fmt: skip
    assert (unset.stdout.strip(), chosen.stdout.strip()) == ("false", "true")


def test_missing_model_names_the_command_that_prepares_it(tmp_path):
    with pytest.raises(ModelNotPreparedError, match="grandbo models prepare"):
        get_provider("local", Settings(home=tmp_path, local_model_dir=tmp_path / "nowhere"))


def test_recall_with_the_local_model_never_imports_torch(tmp_path, model_dir):
    script = f"""
import json, sys
from grandbo import Grandbo, Settings
settings = Settings(home={str(tmp_path)!r}, local_model_dir={str(model_dir)!r})
with Grandbo.init(settings, embedding="local") as g:
    m = g.org("acme", create=True)
    m.remember({{"title": "Eviction storm on redis-sessions", "body": "keys evicted, logins slow"}})
    hits = m.recall("the cache kept throwing away sessions and sign-in got slow").hits
print(json.dumps({{"torch": "torch" in sys.modules, "hits": len(hits)}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": False, "hits": 1}


def test_hybrid_beats_each_arm_on_the_shipped_incident_set(tmp_path, model_dir, embedding_cache, shipped_vectors):
    settings = Settings(home=tmp_path, local_model_dir=model_dir)
    (tmp_path / "cache").symlink_to(embedding_cache)  # where `evaluate` keeps the vectors of the documents
    report = evaluate(shipped_set(), settings, "local")
    scores = {line["arm"]: line for line in report.lines}
    # On the held-out test split: hybrid above each arm on nDCG@10 and re-ranked at least hybrid. (MRR@10 on
    # test is below the vector arm's, 0.776 against 0.783: reported in docs/evaluation.md, not asserted away.)
    assert scores["hybrid"]["nDCG@10"] > scores["vector"]["nDCG@10"]
    assert scores["hybrid"]["nDCG@10"] > scores["lexical"]["nDCG@10"]
    assert scores["reranked"]["nDCG@10"] >= scores["hybrid"]["nDCG@10"]
    assert all(line["refused"] == 0 for line in report.lines)


def test_paraphrase_with_no_shared_word_is_found_by_meaning(tmp_path, model_dir, local_model, shipped_vectors):
    with Grandbo.init(Settings(home=tmp_path, local_model_dir=model_dir), provider=local_model) as grandbo:
        memory = grandbo.org("acme", create=True)
        rows = [json.loads(line) for line in (shipped_set() / "corpus.jsonl").read_text().splitlines()]
        from grandbo.tiers.transfer import entry_from_record

        memory.remember_many([entry_from_record(row) for row in rows], strict=True)
        result = memory.recall(
            "Our RAM-backed cache holding account state keeps purging entries once full, "
            "and credential lookups became painfully slow.",
            5,
        )
    assert {"INC-044-F1", "INC-044-F2"} <= {hit.entry.id for hit in result.hits}
    assert all(hit.why.lexical is None for hit in result.hits)  # no shared word: meaning alone


def test_a_prepared_model_is_kept_while_made_from_what_is_installed(tmp_path):
    """`grandbo models prepare` (make setup's step) keeps a model its manifest says was made from the installed
    model package by this export script."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / MODEL_FILE).write_bytes(b"an export")
    (folder / MANIFEST).write_text(json.dumps({"model": "m", "method": "export", "made_from": made_from()}))
    assert prepare(folder)["already_prepared"] and (folder / MODEL_FILE).read_bytes() == b"an export"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's about its exporter, which prepare uses on purpose
def test_a_model_made_from_another_package_version_or_export_script_is_exported_again(tmp_path):
    """The step left a model as it was whatever it had been made from: a new model package or export script never
    reached a prepared machine."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / MODEL_FILE).write_bytes(b"an export")
    (folder / MANIFEST).write_text(json.dumps({"model": "m", "method": "export"}))  # made before they were recorded
    manifest = prepare(folder)
    assert not manifest.get("already_prepared") and manifest["made_from"] == made_from()
    assert (folder / MODEL_FILE).stat().st_size > 1_000_000 and manifest["agreement_with_torch"] >= 0.9999
