"""Admins changing an organization's settings at once each keep their change (probe 21, F6): a redaction pattern,
a webhook secret, a re-ranking weight, the language's record. Each was read, changed and written whole without
the version read, so a change that landed between another's read and its write was silently written over: 10
admins adding a pattern at once were all answered 200 and 2-5 patterns were kept, text they were told is masked
stored in clear. The interleavings are made exactly: another process's handle on the same store (a second
Grandbo) writes between this one's read and its write. Both backends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.errors import StaleWriteError
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.tiers.keys import WebhookSecrets
from grandbo.tiers.org_settings import OrgSettings
from grandbo.tiers.profile import Profiles
from grandbo.tiers.retry import ATTEMPTS
from tests.serving import serving


class OtherWriteFirst:
    """An organization's real documents, where another writer's change lands between this writer's reads and
    each of its next `times` writes (the moment two admins changing one setting collide)."""

    def __init__(self, documents: Any, other: Callable[[], object], times: int = 1) -> None:
        self._documents, self._other, self._times = documents, other, times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._documents, name)

    def put(self, writes: Any, actor: str) -> Any:
        if self._times:
            self._times -= 1
            self._other()
        return self._documents.put(writes, actor)


@pytest.fixture
def other(settings: Settings, memory: OrgMemory) -> Iterator[OrgMemory]:
    """The same organization through a second Grandbo on the same store: another server process."""
    with Grandbo.open(settings) as opened:
        yield opened.org(memory.org)


def test_a_pattern_added_while_another_admin_adds_one_keeps_both_and_masks_both(
    memory: OrgMemory, other: OrgMemory
) -> None:
    def bob() -> None:
        other.org_settings.set_redaction(add={"bob": "BOB-[0-9]{6}"}, actor="bob")

    alice = OrgSettings(OtherWriteFirst(memory._documents, bob), memory._entries)
    answered = alice.set_redaction(add={"alice": "ALI-[0-9]{6}"}, actor="alice")
    assert answered["extra"] == {"alice": "ALI-[0-9]{6}", "bob": "BOB-[0-9]{6}"}
    assert memory.org_settings.redaction()["extra"] == answered["extra"]
    stored = memory.remember({"title": "customers ALI-123456 and BOB-123456 cannot pay"})
    assert stored.title == "customers [REDACTED:alice] and [REDACTED:bob] cannot pay"
    assert [event["actor"] for event in memory._documents.history("settings", "redaction")] == ["bob", "alice"]


def test_a_default_switched_off_while_a_pattern_is_added_stays_off(memory: OrgMemory, other: OrgMemory) -> None:
    def bob() -> None:
        other.org_settings.set_redaction(disable=["ipv4"], actor="bob")

    OrgSettings(OtherWriteFirst(memory._documents, bob), memory._entries).set_redaction(add={"t": "TKT-[0-9]{6}"})
    assert memory.org_settings.redaction() == {"extra": {"t": "TKT-[0-9]{6}"}, "disabled": ["ipv4"]}


def test_a_webhook_secret_added_while_another_is_added_keeps_both(memory: OrgMemory, other: OrgMemory) -> None:
    memory.webhook_secrets.add("pagerduty", "first-secret")

    def bob() -> None:
        other.webhook_secrets.add("pagerduty", "bobs-secret", actor="bob")

    count = WebhookSecrets(OtherWriteFirst(memory._documents, bob)).add("pagerduty", "alices-secret")
    assert count == 3  # it counts bob's: the answer says how many are held
    assert memory.webhook_secrets.secrets("pagerduty") == ["first-secret", "bobs-secret", "alices-secret"]


def test_ending_a_rotation_keeps_a_secret_added_while_it_ran(memory: OrgMemory, other: OrgMemory) -> None:
    """rotate-done drops what was older than the newest secret it read; it wrote [newest] over a secret another
    admin added meanwhile, so the sender given that one had each delivery refused."""
    memory.webhook_secrets.add("pagerduty", "old-secret")
    memory.webhook_secrets.add("pagerduty", "new-secret")

    def bob() -> None:
        other.webhook_secrets.add("pagerduty", "newest-secret", actor="bob")

    dropped = WebhookSecrets(OtherWriteFirst(memory._documents, bob)).remove_all_but_newest("pagerduty")
    assert dropped == 1
    assert memory.webhook_secrets.secrets("pagerduty") == ["new-secret", "newest-secret"]
    assert memory.webhook_secrets.remove_all_but_newest("pagerduty") == 1  # the next rotation's end
    assert memory.webhook_secrets.secrets("pagerduty") == ["newest-secret"]


def test_two_admins_changing_two_weights_at_once_both_keep_theirs(memory: OrgMemory, other: OrgMemory) -> None:
    """`grandbo settings rerank --age 0.1` read the weights and wrote them whole with its one change."""

    def bob() -> None:
        other.org_settings.change_rerank({"similarity": 0.7}, actor="bob")

    alice = OrgSettings(OtherWriteFirst(memory._documents, bob), memory._entries)
    assert alice.change_rerank({"age": 0.1}, actor="alice").similarity == 0.7
    weights = memory.org_settings.rerank()
    assert (weights.similarity, weights.age, weights.service) == (0.7, 0.1, 0.25)


def test_the_language_record_says_what_the_store_holds_after_two_declarations_at_once(
    memory: OrgMemory, other: OrgMemory
) -> None:
    """The first declaration's record was written after the second had changed the store and written its own:
    the record (history, exports) said german, the store french."""
    memory.remember({"title": "Datenbank Verbindungen abgelehnt nach dem Deployment"})

    def bob() -> None:
        other.org_settings.set_language("french", actor="bob")

    OrgSettings(OtherWriteFirst(memory._documents, bob), memory._entries).set_language("german", actor="alice")
    assert memory.org_settings.language() == "french"
    record = memory._documents.get("settings", "language")
    assert record is not None and record.data == {"language": "french"}


def test_a_change_that_keeps_losing_says_to_send_it_again_without_a_version_it_was_never_given(
    memory: OrgMemory, other: OrgMemory
) -> None:
    """After its merges lost to other writes every time, an unguarded profile change (and any other read-modify-
    write) was refused with "changed meanwhile (version 36, expected 35)", a version the caller never sent (L1)."""
    memory.profile.update({"facts": {"name": "Quillroute"}})
    changes = iter(range(ATTEMPTS + 1))

    def bob() -> None:
        other.profile.update({"facts": {"products": f"parcels {next(changes)}"}}, actor="bob")

    alice = Profiles(OtherWriteFirst(memory._documents, bob, times=ATTEMPTS))
    with pytest.raises(StaleWriteError) as refused:
        alice.update({"facts": {"owner": "alice"}}, actor="alice")
    message = refused.value.message
    assert "kept changing" in message and "Send the change again" in message and "expected" not in message
    assert message.startswith("The profile")
    assert refused.value.detail["attempts"] == ATTEMPTS
    assert memory.profile.get().facts == {"name": "Quillroute", "products": f"parcels {ATTEMPTS - 1}"}
    # One writer fewer than the attempts: it is merged in and kept.
    alice = Profiles(OtherWriteFirst(memory._documents, bob, times=1))
    assert alice.update({"facts": {"owner": "alice"}}, actor="alice").facts["owner"] == "alice"
    assert memory.profile.get().facts["products"] == f"parcels {ATTEMPTS}"


ADMINS = 10


def test_admins_adding_patterns_and_secrets_at_once_over_rest_each_keep_theirs(grandbo: Grandbo) -> None:
    """Probe 21's run on one process: 10 PATCHes answered 200 and 5 patterns kept; 6 secret adds answered 200
    with counts 3, 1, 3, 1, 3, 2 and 3 secrets kept."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("admin", name="ops")
    with serving(grandbo) as served:

        def send(method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
            with served.client(key) as client:
                answer = client.request(method, path, json=body)
                return answer.status_code, answer.json()

        with ThreadPoolExecutor(ADMINS) as pool:
            patched = list(pool.map(lambda n: send("PATCH", "/v1/settings/redaction",
                                                   {"add": {f"pat{n}": f"CUST{n}-[0-9]{{6}}"}}), range(ADMINS)))  # fmt: skip
            added = list(pool.map(lambda n: send("POST", "/v1/webhooks/pagerduty/secrets",
                                                 {"secret": f"secret-number-{n}"}), range(6)))  # fmt: skip
    assert Counter(status for status, _ in patched) == Counter({200: ADMINS})
    assert all(f"pat{n}" in body["own"] for n, (_, body) in enumerate(patched))
    assert sorted(memory.org_settings.redaction()["extra"]) == sorted(f"pat{n}" for n in range(ADMINS))
    text = " ".join(f"CUST{n}-123456" for n in range(ADMINS))
    assert (
        memory.remember({"title": f"customers {text} cannot pay"}).title
        == "customers " + " ".join(f"[REDACTED:pat{n}]" for n in range(ADMINS)) + " cannot pay"
    )
    assert [status for status, _ in added] == [200] * 6
    assert sorted(body["secrets"] for _, body in added) == [1, 2, 3, 4, 5, 6]  # each add saw the ones before it
    assert sorted(memory.webhook_secrets.secrets("pagerduty")) == sorted(f"secret-number-{n}" for n in range(6))
