"""The handle an API key or a console session opens: of the incarnation of the org the key was read in, whichever way
the key was checked (review 22: M1, M2, L6, M4)."""

from __future__ import annotations

from grandbo.service import Grandbo


def test_a_key_checked_through_keys_verify_still_authenticates(grandbo: Grandbo):
    """`OrgMemory.keys.verify` keeps the key in the process's cache without its org's incarnation: `authenticate`
    took that for "the org was dropped" and refused the valid key (401) until the cache let it go."""
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write", name="verified first")
    assert memory.keys.verify(key) is not None
    for _ in range(2):  # the first reads the store again, the second is answered from the cache
        opened, record = grandbo.authenticate(key)
        assert (opened.org, record.scope.value) == ("acme", "write")
    held = grandbo.held(key)
    assert held is not None and held[0].org == "acme"
