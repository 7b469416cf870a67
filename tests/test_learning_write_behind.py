"""An edit is stored the moment it arrives; the LLM's classification and the note's wording follow it.

Through a real server (REST, MCP) and the CLI, with the LLM faked at the HTTP layer: one that thinks for as
long as the test holds it, one that fails, one that answers nonsense, and a server killed while it thinks.
The folds stay deterministic: groups of three follow the order signals settled in, each folded once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
import structlog

from grandbo.config import Settings
from grandbo.llm import OpenAIChatClient
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite
from grandbo.service import Grandbo
from grandbo.tiers.learning import ABANDONED_AFTER, Category, Signal, classify
from tests.fakes import FakeEmbeddings
from tests.serving import free_port, serving
from tests.test_learning import EDITS

TONE = json.dumps({"category": "tone", "summary": "made it calmer"})


def _post(client: httpx.Client, draft: str, edited: str) -> httpx.Response:
    return client.post("/v1/signals", json={"draft": draft, "edited": edited, "content_type": "notice",
                                            "author": "alice"})  # fmt: skip


@pytest.fixture
def llm() -> Iterator[FakeEmbeddings]:
    """A chat model that answers only once the test sets `behaviour.hold`."""
    with FakeEmbeddings() as fake:
        fake.behaviour.hold = threading.Event()
        yield fake
        fake.behaviour.hold.set()


def _with_llm(settings: Settings, url: str) -> Settings:
    return settings.model_copy(update={"llm_base_url": url, "llm_model": "chat", "http_timeout_seconds": 60.0})


@pytest.fixture
def server(grandbo: Grandbo, settings: Settings, llm: FakeEmbeddings) -> Iterator[Grandbo]:
    """A server's Grandbo (write-behinds on background threads) with the LLM configured."""
    with Grandbo.open(_with_llm(settings, llm.url), background=True) as opened:
        yield opened
        assert llm.behaviour.hold is not None
        llm.behaviour.hold.set()  # what it still thinks about is answered before it closes


def test_a_slow_llm_never_holds_up_an_edit_and_its_classification_follows(server, llm):
    """`POST /v1/signals` waited for the LLM to classify the edit (up to a minute) before the signal was
    stored: a client that gave up, or a server that stopped meanwhile, lost the edit."""
    memory = server.org("acme", create=True)
    _, key = memory.keys.create("write")
    llm.behaviour.chat_answers = [TONE] * 3 + ["Stay calm and factual."]
    with serving(server) as served, served.client(key) as client:
        answers = [_post(client, draft, edited) for draft, edited in EDITS[Category.VOCABULARY]]
        # The LLM has answered nothing yet: each edit is stored, classified by the rules, and reads back.
        assert [answer.status_code for answer in answers] == [201, 201, 201]
        sent = [answer.json()["signal"] for answer in answers]
        assert all(s["awaiting_llm"] and s["classified_by"] == "rules" and s["category"] == "vocabulary" for s in sent)
        assert [answer.json()["note"] for answer in answers] == [None, None, None]
        assert [client.get(f"/v1/signals/{s['id']}").json() for s in sent] == sent
        assert [s.id for s in memory.learning.signals()] == [s["id"] for s in sent]
        assert client.get("/v1/notes").json()["items"] == []  # nothing folds before the LLM has classified
        assert llm.behaviour.hold is not None
        llm.behaviour.hold.set()
        server.flush()
        settled = [client.get(f"/v1/signals/{s['id']}").json() for s in sent]
        notes = client.get("/v1/notes").json()["items"]
    assert all(s["category"] == "tone" and s["classified_by"] == "openai-chat:chat" for s in settled)
    assert not any(s["awaiting_llm"] for s in settled) and settled[0]["summary"] == "made it calmer"
    assert [n["text"] for n in notes] == ["Stay calm and factual."] and notes[0]["status"] == "pending"
    assert notes[0]["signals"] == [s.id for s in memory.learning.signals(Category.TONE)]
    assert sorted(notes[0]["signals"]) == sorted(s["id"] for s in sent)


@pytest.mark.parametrize("failure", ["down", "nonsense"])
def test_an_llm_that_fails_leaves_the_rules_classification_and_the_edits_still_fold(server, llm, failure):
    memory = server.org("acme", create=True)
    _, key = memory.keys.create("write")
    if failure == "down":
        llm.behaviour.status = 500
    else:
        llm.behaviour.chat_answers = ['{"category": "astrology", "summary": "?"}', "not JSON at all", "{}"]
    assert llm.behaviour.hold is not None
    llm.behaviour.hold.set()
    with structlog.testing.capture_logs() as logs, serving(server) as served, served.client(key) as client:
        answers = [_post(client, draft, edited) for draft, edited in EDITS[Category.VOCABULARY]]
        server.flush()
        settled = [client.get(f"/v1/signals/{answer.json()['signal']['id']}").json() for answer in answers]
        notes = client.get("/v1/notes").json()["items"]
    assert [answer.status_code for answer in answers] == [201, 201, 201]
    assert all(s["category"] == "vocabulary" and s["classified_by"] == "rules" for s in settled)
    assert not any(s["awaiting_llm"] for s in settled)
    assert [log["event"] for log in logs].count("learning.llm_classification_failed") == 3
    (note,) = notes  # the rules' own wording, as without an LLM
    assert note["text"] == "In notice drafts, write 'customers' instead of 'users'."
    assert sorted(note["signals"]) == sorted(s["id"] for s in settled)


def test_a_server_killed_while_the_llm_thinks_keeps_the_edit_and_a_later_process_settles_it(grandbo, settings, llm):
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_LLM_BASE_URL": llm.url,
           "GRANDBO_LLM_MODEL": "chat", "GRANDBO_HTTP_TIMEOUT_SECONDS": "60",
           **({"GRANDBO_DATABASE_URL": settings.database_url} if settings.database_url else {})}  # fmt: skip
    port = free_port()
    child = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", "--port", str(port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"},
                          timeout=30) as client:  # fmt: skip
            deadline = time.monotonic() + 120
            while not _answers(client):
                assert time.monotonic() < deadline and child.poll() is None, "grandbo serve did not start"
                time.sleep(0.1)
            draft, edited = EDITS[Category.VOCABULARY][0]
            answer = _post(client, draft, edited)
        assert answer.status_code == 201 and answer.json()["signal"]["awaiting_llm"]
        while not any(r["path"].endswith("/chat/completions") for r in llm.behaviour.requests):  # it thinks
            assert time.monotonic() < deadline, "the server never asked the LLM"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (kept,) = memory.learning.signals()
    assert kept.id == answer.json()["signal"]["id"] and kept.awaiting_llm and kept.classified_by == "rules"
    assert kept.category is Category.VOCABULARY and kept.edited == edited
    # A later process settles it: a later edit's write-behind once it has waited ABANDONED_AFTER; here at once.
    llm.behaviour.chat_answers = [TONE, TONE]  # the dead server's request, released too, takes one
    assert llm.behaviour.hold is not None
    llm.behaviour.hold.set()
    learning = memory.learning_with(OpenAIChatClient(llm.url, "chat", None, timeout=30))
    assert learning.settle_awaiting() == 1
    settled = learning.signal(kept.id)
    assert settled.category is Category.TONE and settled.classified_by == "openai-chat:chat"
    assert not settled.awaiting_llm and learning.settle_awaiting() == 0


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def test_signals_settled_out_of_order_fold_in_the_order_they_settled(memory):
    """A signal awaiting the LLM is in no category: an LLM that reclassifies it cannot move a signal already
    folded, and the groups of three follow the order the signals settled in, each signal folded once."""
    waiting = []
    for n, (draft, edited) in enumerate(EDITS[Category.VOCABULARY] + EDITS[Category.VOCABULARY][:1]):
        category, summary, details = classify(draft, edited)
        stored = Signal(id=f"sig-{n}", content_type="notice", author="alice", category=category, summary=summary,
                        details=details, classified_by="rules", awaiting_llm=True, draft=draft, edited=edited,
                        at=utcnow())  # fmt: skip
        memory.learning._store(stored, "a-server-that-stopped", expected=0)
        waiting.append(stored.id)
    assert memory.learning.signals(Category.VOCABULARY) == []  # awaiting: in no category's order
    with FakeEmbeddings() as fake:
        fake.behaviour.chat_answers = [TONE] * 3 + ["Stay calm.", TONE]  # the third to settle folds: the wording
        learning = memory.learning_with(OpenAIChatClient(fake.url, "chat", None, timeout=30))
        folded = [learning.settle(waiting[n], actor="test")[1] for n in (2, 0, 3, 1)]
    assert folded[:2] == [None, None] and folded[3] is None
    assert folded[2] is not None and folded[2].signals == ["sig-2", "sig-0", "sig-3"]
    assert [s.id for s in learning.signals(Category.TONE)] == ["sig-2", "sig-0", "sig-3", "sig-1"]
    assert [n.signals for n in learning.notes(include_inactive=True)] == [["sig-2", "sig-0", "sig-3"]]
    assert learning.settle("sig-0", actor="test") == (learning.signal("sig-0"), None)  # settled once only


def test_an_edit_settles_the_signals_a_stopped_process_left_awaiting_the_llm(memory):
    """No LLM here (its configuration was removed, say): the rules' classification settles them, and they fold."""
    draft, edited = EDITS[Category.VOCABULARY][0]
    category, summary, details = classify(draft, edited)
    for signal_id, at in (("sig-left", utcnow() - ABANDONED_AFTER - timedelta(seconds=1)), ("sig-young", utcnow())):
        left = Signal(id=signal_id, content_type="notice", author="alice", category=category, summary=summary,
                      details=details, classified_by="rules", awaiting_llm=True, draft=draft, edited=edited, at=at)  # fmt: skip
        memory.learning._store(left, "a-server-that-stopped", expected=0)
    notes = [
        memory.learning.record_edit(d, e, content_type="notice", author="al")[1]
        for d, e in EDITS[Category.VOCABULARY][1:]
    ]
    settled, young = memory.learning.signal("sig-left"), memory.learning.signal("sig-young")
    assert not settled.awaiting_llm and settled.classified_by == "rules" and settled.category is Category.VOCABULARY
    assert young.awaiting_llm  # its own write-behind may still be at work: left to it
    assert notes[0] is None and notes[1] is not None and notes[1].signals[1] == "sig-left"


def test_a_fold_whose_process_stopped_is_done_by_the_category_s_next_one(memory):
    """The third signal of a group was stored and its process stopped before it folded (say, while the LLM
    worded the note): the group was never folded, since only its third signal's own fold could take it."""
    learning = memory.learning
    for draft, edited in EDITS[Category.STRUCTURE][:2]:
        assert learning.record_edit(draft, edited, content_type="status-update", author="alice")[1] is None
    draft, edited = EDITS[Category.STRUCTURE][2]
    category, summary, details = classify(draft, edited)
    third = Signal(id="sig-stopped", content_type="status-update", author="bob", category=category, summary=summary,
                   details=details, classified_by="rules", draft=draft, edited=edited, at=utcnow())  # fmt: skip
    learning._store(third, "a-process-that-stopped")  # stored, settled, never folded
    draft, edited = EDITS[Category.STRUCTURE][0]
    fourth, note = learning.record_edit(draft + " Again.", edited + "\n- Again", content_type="status-update",
                                        author="alice")  # fmt: skip
    assert note is None  # the fourth starts a group; the one before it was due, and is folded now
    (folded,) = learning.notes(include_inactive=True)
    assert folded.signals == [s.id for s in learning.signals(Category.STRUCTURE)[:3]]
    assert "sig-stopped" in folded.signals and fourth.id not in folded.signals


def test_groups_folded_by_the_release_before_are_not_folded_again(memory):
    """Signals stored before signals could await an LLM have no `awaiting_llm`, and no category has a fold
    cursor yet: that release folded every complete group of them, so the first fold goes on after those."""
    for n, (draft, edited) in enumerate(EDITS[Category.VOCABULARY] + EDITS[Category.VOCABULARY][:1]):
        category, summary, details = classify(draft, edited)
        data = Signal(id=f"sig-old-{n}", content_type="notice", author="alice", category=category, summary=summary,
                      details=details, classified_by="rules", draft=draft, edited=edited,
                      at=utcnow()).model_dump(mode="json", exclude={"awaiting_llm"})  # fmt: skip
        memory._documents.put([DocumentWrite("edit_signal", data["id"], data, "edit.vocabulary", ref="vocabulary")],
                              "older-release")  # fmt: skip
    notes = [memory.learning.record_edit(f"Our users waited {n} minutes.", f"Our clients waited {n} minutes.",
                                         content_type="notice", author="alice")[1] for n in (1, 2)]  # fmt: skip
    assert notes[0] is None and notes[1] is not None
    assert notes[1].signals[0] == "sig-old-3" and len(notes[1].signals) == 3
    assert [n.id for n in memory.learning.notes(include_inactive=True)] == [notes[1].id]


def test_grandbo_edit_stores_the_edit_then_asks_the_llm(cli, monkeypatch, tmp_path):
    """A command has no background thread: the LLM's classification runs right after the signal is stored."""
    draft, edited = tmp_path / "draft.txt", tmp_path / "edited.txt"
    draft.write_text(EDITS[Category.VOCABULARY][0][0])
    edited.write_text(EDITS[Category.VOCABULARY][0][1])
    with FakeEmbeddings() as fake:
        fake.behaviour.chat_answers = [TONE]
        monkeypatch.setenv("GRANDBO_LLM_BASE_URL", fake.url)
        monkeypatch.setenv("GRANDBO_LLM_MODEL", "chat")
        said = cli("edit", "--draft", str(draft), "--edited", str(edited), "--type", "notice", "--author", "al")
    assert "tone: made it calmer (by openai-chat:chat)" in said.stdout
    with Grandbo.open(Settings()) as grandbo:
        documents = grandbo.org("default")._documents
        (stored,) = documents.find("edit_signal")
        assert [event["type"] for event in documents.history("edit_signal", stored.doc_id)] == [
            "edit.received",  # stored before the LLM was asked
            "edit.tone",
        ]


def test_an_agent_s_record_edit_over_stdio_mcp_answers_before_the_llm(grandbo, settings, llm):
    """`grandbo mcp` ran its write-behinds inline: the agent's `record_edit` waited for the LLM."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    env = {**os.environ, "GRANDBO_HOME": str(settings.home), "GRANDBO_API_KEY": key, "GRANDBO_LLM_BASE_URL": llm.url,
           "GRANDBO_LLM_MODEL": "chat", **({"GRANDBO_DATABASE_URL": settings.database_url} if settings.database_url
                                           else {})}  # fmt: skip
    draft, edited = EDITS[Category.VOCABULARY][0]

    async def record() -> dict[str, object]:
        async with Client(StdioServerParameters(command=sys.executable, args=["-m", "grandbo", "mcp"], env=env)) as c:
            answer = await c.call_tool("record_edit", {"draft": draft, "edited": edited, "content_type": "notice",
                                                       "author": "alice"})  # fmt: skip
            assert llm.behaviour.hold is not None
            llm.behaviour.hold.set()  # the LLM answers only once the tool has
            return dict(answer.structured_content or json.loads(answer.content[0].text))

    answer = anyio.run(record)
    assert answer["signal"]["awaiting_llm"] is True and answer["signal"]["classified_by"] == "rules"
    assert [s.id for s in memory.learning.signals()] == [answer["signal"]["id"]]


def test_an_erasure_while_the_llm_thinks_is_not_undone_by_the_settled_signal(server, llm):
    """The write-behind wrote back the whole signal the LLM had read: text erased meanwhile (purge-text
    rewrites in place, without a new version) came back, with the erasure reported done."""
    memory = server.org("acme", create=True)
    llm.behaviour.chat_answers = [json.dumps({"category": "tone", "summary": "calmer words for Jane Roe"})]
    signal_, _ = memory.learning.record_edit("Tell Jane Roe the users waited.", "Tell Jane Roe the clients waited.",
                                             content_type="notice", author="alice")  # fmt: skip
    deadline = time.monotonic() + 30
    while not any(r["path"].endswith("/chat/completions") for r in llm.behaviour.requests):
        assert time.monotonic() < deadline, "the LLM was never asked"
        time.sleep(0.05)
    report = memory.erasure.purge_text("Jane Roe", reason="a person's request", actor="admin")
    assert report.to_dict()["documents"] >= 1
    assert llm.behaviour.hold is not None
    llm.behaviour.hold.set()
    server.flush(timeout=60)
    settled = memory.learning.signal(signal_.id)
    assert not settled.awaiting_llm and "Jane Roe" not in settled.model_dump_json()
    assert settled.classified_by == "rules"  # the LLM's summary was of the text before the erasure


def test_edits_waiting_on_a_slow_llm_never_hold_up_an_incident_close(server, llm):
    """The LLM's classifications shared the two write-behind threads with the store's own work: two edits
    waiting on a slow LLM left an incident's close unsynced (its findings not memories) until the LLM answered."""
    from tests.test_incidents import investigate

    memory = server.org("acme", create=True)
    llm.behaviour.hold_s = 600.0  # the LLM thinks past the client's own timeout (60 s here)
    for draft, edited in EDITS[Category.VOCABULARY][:2]:
        memory.learning.record_edit(draft, edited, content_type="notice", author="alice")
    investigate(memory.incidents)
    memory.incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True)
    deadline = time.monotonic() + 30  # half the LLM client's timeout: long before the held calls give up
    while memory.incidents.get("INC-100").memory_sync != "done":
        assert time.monotonic() < deadline, "the close's write-behind waited for the LLM"
        time.sleep(0.1)
    assert llm.behaviour.hold is not None and not llm.behaviour.hold.is_set()  # the LLM is still thinking
    assert memory.get("INC-100-f1").title
