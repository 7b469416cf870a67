"""Admins changing an organization's settings at once each keep their change (probe 21). The interleavings are
made exactly: another process's handle on the same store (a second Grandbo) writes between this one's read and
its write. Both backends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.errors import StaleWriteError
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.tiers.profile import Profiles
from grandbo.tiers.retry import ATTEMPTS


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
