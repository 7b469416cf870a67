"""A landed migration is never edited: its statements are pinned here by hash (a new migration adds its line).

Databases that ran a migration never run it again, so an edit would leave them and new databases apart; code that
builds a landed migration's text from shared pieces must build the same text."""

from __future__ import annotations

import hashlib
import json

import pytest

from grandbo.store.postgres.migrations import MIGRATIONS as POSTGRES
from grandbo.store.sqlite.migrations import MIGRATIONS as SQLITE

LANDED = {
    "postgres": {
        1: "f1521157632a8df3", 2: "24a52d6f20adef01", 3: "7beb756b7f75b011", 4: "a04da9002b0a5f35",
        5: "4d88e24ba558db08", 7: "30a02d5780f74a2f", 8: "dd5f84b21d3ed1b0", 9: "6426633d1a8cbab0",
        10: "892163956f8c56ed", 11: "4fb36f646986f89a", 12: "7e531fcb2847d474", 13: "2467b011ec531ca7",
        14: "6cae417ce098a3a4", 15: "3818ad99c6d12b67", 16: "56e3a2a85c7cd7dc", 17: "6fffe7aafdfe4531",
        18: "0ea1d00f33f7903b", 19: "ae63e5f38d2325d3", 20: "e34bf99972cbb073", 24: "5815fa99a5907977",
        25: "895b6ea4ce4ee08a", 26: "19ab8506fc2e00d8", 27: "71ce8d5edb7845c6", 28: "76e0934aca3d9175",
        29: "6423607f801fcba2", 30: "5901a97ad89798a7", 31: "ac5be38106f6da57",
        33: "0a311f97fe699d6f", 34: "3681b3f8e37df417",
    },
    "sqlite": {
        1: "db329b4285c7c64f", 2: "39c42068d8d1ab10", 3: "e26b114acdd30b3f", 4: "123339af50759320",
        5: "4d88e24ba558db08", 8: "ad2d5d65d27f449f", 9: "6426633d1a8cbab0", 10: "6c4974c7a0b91d08",
        12: "92969f57aa57dc3e", 13: "7dfb662f365bd446", 14: "1df12cd733a23be9", 15: "828b9d736399f32f",
        16: "3a91bf9f44179faa", 17: "7641dcba26f278ea", 19: "ae63e5f38d2325d3", 20: "0777889e4d0b34dd",
        24: "5815fa99a5907977", 25: "ba4b0c09e57a780b", 26: "a5d8123324ce575d", 27: "e95712baa1a74422", 28: "76e0934aca3d9175",
        29: "df3b80e57fad8ec0", 30: "5901a97ad89798a7", 31: "d4430bbfa836994f", 32: "33fcc468282dac62",
        33: "de0a10c0608df5f6", 34: "80184bfcff156813",
    },
}  # fmt: skip


@pytest.mark.parametrize(("backend", "migrations"), [("postgres", POSTGRES), ("sqlite", SQLITE)])
def test_no_landed_migration_was_edited(backend, migrations):
    hashes = {number: hashlib.sha256(json.dumps(statements).encode()).hexdigest()[:16]
              for number, _, statements in migrations}  # fmt: skip
    edited = [number for number, pinned in LANDED[backend].items() if hashes.get(number) != pinned]
    assert not edited, f"{backend} migrations {edited} changed after they landed: add a new migration instead"
