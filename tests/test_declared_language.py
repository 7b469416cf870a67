"""An organization declares the language of its text (`grandbo settings language`): its topics are stemmed in it,
its entries indexed in it, and declaring it derives the stored terms of that organization's entries again (and of
no other), on both backends."""

from __future__ import annotations

import threading

import pytest

from grandbo.errors import InvalidInputError
from grandbo.retrieval.text import index_terms
from grandbo.service import Grandbo
from tests.serving import BOUND, serving

# Post-mortems a German team wrote: detected as German (function words), so stemmed in German on `auto` too.
POOL = {"id": "DE-POOL", "title": "Verbindung zur Datenbank abgelehnt",
        "body": "Der Pool der Zahlungsdatenbank war erschöpft, jede neue Verbindung wurde vom Server abgelehnt."}  # fmt: skip
SCHEMA = {"id": "DE-SCHEMA", "title": "Schema-Migration der Datenbank abgelehnt",
          "body": "Die Datenbank hat die Migration abgelehnt, weil das Schema gesperrt war."}  # fmt: skip
# A terse entry: no function word, no umlaut, so `auto` reads it as English.
TERSE = {"id": "DE-KURZ", "title": "Zahlungen abgelehnt", "body": "Datenbankverbindungen fehlgeschlagen"}
# The short topic of the issue: two or three words, no function words -> detected as English on `auto`.
TOPIC = "Datenbank Verbindungen abgelehnt"


def _lexical(memory, topic=TOPIC):
    return [hit.entry.id for hit in memory.recall(topic, arm="lexical").hits]


def _missed_on_auto(memory) -> bool:
    """The English stemming of `auto` misses the German "verbind": DE-POOL is not first and never matches it
    (the lexical arm alone has no floor, so it may still rank DE-POOL on "datenbank" and "abgelehnt")."""
    matched = {hit.entry.id: set(hit.why.lexical.terms) for hit in memory.recall(TOPIC, arm="lexical").hits}
    return next(iter(matched), None) != "DE-POOL" and "verbind" not in matched.get("DE-POOL", set())


def _stored_terms(raw, org):
    return dict(raw("SELECT entry_id, terms FROM memory_entries", org=org))


def test_a_short_german_topic_misses_on_auto_and_matches_with_german_declared(memory):
    memory.remember_many([POOL, SCHEMA])
    assert memory.org_settings.language() == "auto"
    assert _missed_on_auto(memory)  # "verbindungen" stemmed as English misses the German "verbind"

    assert memory.org_settings.set_language("German") == {"language": "german", "rederived": 0}
    top = memory.recall(TOPIC, arm="lexical").hits[0]
    assert top.entry.id == "DE-POOL" and set(top.why.lexical.terms) == {"datenbank", "verbind", "abgelehnt"}
    assert memory.recall(TOPIC).hits[0].entry.id == "DE-POOL"  # the default (re-ranked) recall too

    assert memory.org_settings.set_language("auto")["language"] == "auto"  # back to detection, as before
    assert memory.org_settings.language() == "auto"
    assert _missed_on_auto(memory)


def test_declaring_a_language_rederives_existing_entries_so_old_and_new_match_alike(memory, raw):
    memory.remember_many([POOL, TERSE])
    before = _stored_terms(raw, "acme")
    assert before["DE-KURZ"] == " ".join(index_terms(TERSE["title"], TERSE["body"]))  # detected: English
    assert "zahlungen" in before["DE-KURZ"].split()

    assert memory.org_settings.set_language("german") == {
        "language": "german",
        "rederived": 1,
    }  # POOL was German already
    after = _stored_terms(raw, "acme")
    assert after["DE-KURZ"] == " ".join(index_terms(TERSE["title"], TERSE["body"], language="german"))
    assert after["DE-POOL"] == before["DE-POOL"]
    memory.remember({"id": "DE-NEU", "title": "Zahlungen abgelehnt", "body": "Datenbankverbindungen getrennt"})
    assert _stored_terms(raw, "acme")["DE-NEU"].split()[:2] == ["zahlung", "abgelehnt"]
    # The entry stored before the declaration and the one after it answer the same German topic.
    assert set(_lexical(memory, "Zahlung Datenbankverbindung abgelehnt")) >= {"DE-KURZ", "DE-NEU"}
    assert memory.rebuild().identical  # the log yields the same terms: every write derives them in the org's language

    assert memory.org_settings.set_language("auto")["rederived"] == 2  # detection again: the terse ones are English
    assert _stored_terms(raw, "acme")["DE-KURZ"] == before["DE-KURZ"]


def test_one_organizations_language_changes_no_other_organizations_terms_or_results(grandbo, raw):
    acme, beta = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
    for memory in (acme, beta):
        memory.remember_many([POOL, SCHEMA, TERSE])
    beta_terms, beta_found = _stored_terms(raw, "beta"), _lexical(beta)
    beta_terse = _lexical(beta, "Zahlung Datenbankverbindung abgelehnt")

    assert acme.org_settings.set_language("german")["rederived"] == 1
    assert _lexical(acme)[0] == "DE-POOL"
    assert beta.org_settings.language() == "auto"
    assert _stored_terms(raw, "beta") == beta_terms
    assert _lexical(beta) == beta_found
    matched = {hit.entry.id: set(hit.why.lexical.terms) for hit in beta.recall(TOPIC, arm="lexical").hits}
    assert "verbind" not in matched.get("DE-POOL", set())  # beta's topic is still stemmed as English
    assert _lexical(beta, "Zahlung Datenbankverbindung abgelehnt") == beta_terse


def test_another_open_store_sees_the_declared_language_at_its_next_recall(grandbo, settings):
    writer = grandbo.org("acme", create=True)
    writer.remember_many([POOL, SCHEMA])
    with Grandbo.open(settings) as other:  # its own connection and in-process index, built before the declaration
        reader = other.org("acme")
        assert _missed_on_auto(reader)
        writer.org_settings.set_language("german")
        assert _lexical(reader)[0] == "DE-POOL"


def test_an_unknown_language_is_refused_with_the_languages_to_choose_from(memory):
    memory.remember(TERSE)
    with pytest.raises(InvalidInputError) as refused:
        memory.org_settings.set_language("klingon")
    assert "'klingon'" in refused.value.message
    assert all(name in refused.value.message for name in ("auto", "english", "german", "french", "dutch"))
    with pytest.raises(InvalidInputError, match="stemmed by their script"):
        memory.org_settings.set_language("russian")  # Cyrillic is stemmed as Russian whatever is declared
    assert memory.org_settings.language() == "auto"


def test_the_declaration_is_in_the_settings_history(memory):
    memory.org_settings.set_language("french", actor="ops")
    memory.org_settings.set_language("french", actor="ops")  # the same again: nothing to derive, nothing recorded
    memory.org_settings.set_language("auto", actor="ops")
    history = memory.org_settings.documents.history("settings", "language")
    assert [(event["data"], event["actor"]) for event in history] == [
        ({"language": "french"}, "ops"),
        ({"language": "auto"}, "ops"),
    ]


def test_cli_shows_declares_and_refuses_languages(cli):
    assert cli("settings", "language").stdout.strip() == "language: auto"
    assert "language: german" in cli("settings", "language", "german").stdout
    assert cli("settings", "language").stdout.strip() == "language: german"
    refused = cli("settings", "language", "klingon", code=2)
    assert "Unknown language 'klingon'" in refused.stderr and "portuguese" in refused.stderr


def test_api_reads_with_any_key_declares_with_an_admin_key_and_refuses_bad_languages(grandbo):
    from tests.test_api import assert_error

    memory = grandbo.org("alpha", create=True)
    memory.remember_many([POOL, SCHEMA])
    (_, reader), (_, admin) = memory.keys.create("read"), memory.keys.create("admin")
    with serving(grandbo) as served:
        with served.client(reader) as client:
            assert client.get("/v1/settings/language").json() == {"language": "auto"}
            assert_error(client.put("/v1/settings/language", json={"language": "german"}), 403, "forbidden")
        with served.client(admin) as client:
            declared = client.put("/v1/settings/language", json={"language": "german"})
            assert declared.status_code == 200 and declared.json() == {"language": "german", "rederived": 0}
            assert client.get("/v1/settings/language").json() == {"language": "german"}
            refused = client.put("/v1/settings/language", json={"language": "klingon"})
            assert_error(refused, 422, "invalid_input")
            assert "german" in refused.json()["error"]["message"]
            assert_error(client.put("/v1/settings/language", json={}), 422, "invalid_input")
            found = client.post("/v1/recall", json={"topic": TOPIC}).json()
    assert found["hits"][0]["entry"]["id"] == "DE-POOL"
    assert memory.org_settings.language() == "german"


def test_an_exported_log_replays_with_its_declared_language(grandbo, raw, tmp_path):
    source = grandbo.org("acme", create=True)
    source.org_settings.set_language("german")
    source.remember_many([POOL, TERSE])
    source.export_log(tmp_path / "acme.jsonl")
    copy = grandbo.org("copy", create=True)
    copy.import_log(tmp_path / "acme.jsonl")
    assert copy.org_settings.language() == "german"
    assert _stored_terms(raw, "copy") == _stored_terms(raw, "acme")
    assert _lexical(copy)[0] == "DE-POOL"


def test_a_record_left_behind_is_written_again_and_the_export_carries_the_store_s_language(grandbo, raw, tmp_path):
    """The store was set (a crash came before the settings record was written): declaring the same language again
    writes the record, and an export made meanwhile still carries the language the terms were derived in."""
    source = grandbo.org("acme", create=True)
    source.remember_many([POOL, TERSE])
    source._entries.set_language("german")  # the store's half of a declaration, alone
    assert source.org_settings.documents.get("settings", "language") is None
    source.export_log(tmp_path / "before.jsonl")
    copy = grandbo.org("copy", create=True)
    copy.import_log(tmp_path / "before.jsonl")
    assert copy.org_settings.language() == "german" and _stored_terms(raw, "copy") == _stored_terms(raw, "acme")
    assert source.org_settings.set_language("german") == {"language": "german", "rederived": 0}
    assert source.org_settings.documents.get("settings", "language").data == {"language": "german"}


def test_an_export_naming_an_unknown_language_is_refused_before_anything_is_written(grandbo, tmp_path):
    import hashlib
    import json

    from grandbo.errors import InvalidInputError

    source = grandbo.org("acme", create=True)
    source.remember_many([POOL])
    path = tmp_path / "acme.jsonl"
    source.export_log(path)
    lines = path.read_bytes().splitlines(keepends=True)[:-1]
    header = json.loads(lines[0]) | {"language": "klingon"}  # a hand-edited export, its checksum made again
    lines[0] = (json.dumps(header, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    checksum = {"checksum": {"sha256": hashlib.sha256(b"".join(lines)).hexdigest(), "lines": len(lines)}}
    path.write_bytes(b"".join(lines) + (json.dumps(checksum, separators=(",", ":")) + "\n").encode())
    copy = grandbo.org("copy", create=True)
    with pytest.raises(InvalidInputError, match="klingon"):
        copy.import_log(path)
    assert copy.entries(include_inactive=True) == [] and copy._documents.version() == 0


def _declare_while(grandbo, memory, language, elsewhere) -> bool:
    """Declare `language` on SQLite, running `elsewhere` on another thread once the declaration is working out its
    first entry's terms (the only hook inside the store's work); whether `elsewhere` finished within 10 s."""
    import threading

    store = grandbo._store
    derive, started, finished = store._terms_of, [], []

    def terms_of(*args, **kwargs):
        if not started:  # once: `elsewhere` may derive terms itself
            started.append(True)
            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join(BOUND)  # held up, it would wait for this declaration, which goes on after the join
            finished.append(not thread.is_alive())
        return derive(*args, **kwargs)

    store._terms_of = terms_of
    try:
        memory.org_settings.set_language(language)
    finally:
        store._terms_of = derive
    return finished == [True]


def test_on_sqlite_a_declaration_holds_up_neither_reads_nor_writes_while_it_works(tmp_path):
    """The terms are worked out outside the store's one connection: a recall and a write from other threads go
    through while it works (each would wait for the whole re-derive otherwise, and the test would time out),
    and the entry written meanwhile ends up with terms of the declared language."""
    from grandbo.config import Settings

    with Grandbo.init(Settings(home=tmp_path), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many([POOL, SCHEMA])
        meanwhile = {}

        def elsewhere() -> None:
            other = grandbo.org("acme")
            meanwhile["hits"] = [hit.entry.id for hit in other.recall("Verbindung zur Datenbank abgelehnt").hits]
            meanwhile["written"] = other.remember(TERSE).id

        assert _declare_while(grandbo, memory, "german", elsewhere)  # the other thread got through meanwhile
        assert "DE-POOL" in meanwhile["hits"] and meanwhile["written"] == "DE-KURZ"
        (terms,) = [t for i, t in grandbo._store._db.execute(
            "SELECT entry_id, terms FROM memory_entries WHERE org_id = 'acme' AND entry_id = 'DE-KURZ'")]  # fmt: skip
        assert terms == " ".join(index_terms(TERSE["title"], TERSE["body"], (), (), "german"))
        assert _lexical(memory)[0] == "DE-POOL"


def test_on_sqlite_a_declaration_overtaken_by_another_ends_with_every_term_in_its_own_language(tmp_path):
    """A second declaration (or a rebuild) rewrites terms in place while the first works out its own: the first
    must not apply a diff against terms that are no longer stored (entries were left in the other language)."""
    from grandbo.config import Settings

    with Grandbo.init(Settings(home=tmp_path), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many([POOL, SCHEMA, TERSE])
        assert _declare_while(
            grandbo, memory, "german", lambda: grandbo.org("acme").org_settings.set_language("french")
        )
        assert memory.org_settings.language() == "german"
        stored = dict(grandbo._store._db.execute("SELECT entry_id, terms FROM memory_entries WHERE org_id = 'acme'"))
        for entry in (POOL, SCHEMA, TERSE):
            assert stored[entry["id"]] == " ".join(index_terms(entry["title"], entry["body"], (), (), "german"))
        assert memory.rebuild().identical


def test_a_language_change_works_its_terms_out_again_outside_the_lock_when_its_org_moved_meanwhile(tmp_path):
    """Embedded store, probe 18: a language change works the new terms out from a read, without the store's lock;
    when another change of the org committed meanwhile, it derived every entry again under the lock, which every
    org's writes wait for (four changes of a large org at once held another org's writes 7-23 s). It now reads and
    works them out again, outside the lock, and after LANGUAGE_ATTEMPTS such races refuses (409), changing nothing."""
    from grandbo.config import Settings
    from grandbo.errors import ConflictError
    from grandbo.store import projection
    from grandbo.store.sqlite.orgs import LANGUAGE_ATTEMPTS

    with Grandbo.init(Settings(home=tmp_path / "home"), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember_many([POOL, TERSE, SCHEMA])
        store, derived, real = grandbo._store, [], projection.rederived

        def under_lock() -> bool:
            return store._lock._owner == threading.get_ident()

        def racing(rows, *args):  # another change of the org commits while this one works its terms out
            derived.append((len(rows), under_lock()))
            if len(derived) == 1:
                store.set_language("acme", "french")
            return real(rows, *args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(projection, "rederived", racing)
            assert memory.org_settings.set_language("german")["language"] == "german"
        assert all(not locked for count, locked in derived if count)  # every entry worked out outside the lock
        assert [count for count, _ in derived if count] == [3, 3, 3]  # this one, the other, this one again
        assert store.language("acme") == "german" and memory.rebuild().identical

        inside: list[bool] = []

        def always(rows, *args):  # another change commits during every attempt
            if not inside:
                inside.append(True)
                try:
                    store.set_language("acme", "french" if store.language("acme") != "french" else "dutch")
                finally:
                    inside.pop()
            return real(rows, *args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(projection, "rederived", always)
            with pytest.raises(ConflictError, match=f"rewritten {LANGUAGE_ATTEMPTS} times"):
                store.set_language("acme", "german")
        assert store.language("acme") != "german" and memory.rebuild().identical
