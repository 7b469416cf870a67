"""An edit signal of any size is classified with bounded work and always kept: through POST /v1/signals on a
real server, what the answer says and what the store holds."""

from __future__ import annotations

import random

from tests.serving import serving

COLOURS = "red green blue amber violet".split()


def _words(rng: random.Random, count: int, vocabulary: list[str]) -> list[str]:
    return [rng.choice(vocabulary) for _ in range(count)]


def test_huge_edits_are_kept_and_classified_within_the_bound(grandbo):
    rng = random.Random(7)
    memory = grandbo.org("acme", create=True)
    _, key = memory.keys.create("write")
    many = [f"w{n}x" for n in range(5000)]
    draft = " ".join(_words(rng, 14_000, many))[:100_000]
    rewrite = " ".join(_words(rng, 14_000, many))[:100_000]  # another text of the same size: no diff can be vocabulary
    colours = _words(rng, 16_000, COLOURS)
    shuffled = colours[:]
    rng.shuffle(shuffled)  # the same words in another order: the costliest diff there is
    long_text = _words(rng, 12_000, many)  # about 80,000 characters
    swapped = [*long_text[:6_000], "customers", *long_text[6_001:]]  # one word swapped in the middle
    sent = [(draft, rewrite), *[(" ".join(colours), " ".join(shuffled))] * 3, (" ".join(long_text), " ".join(swapped))]
    with serving(grandbo) as served, served.client(key) as client:
        answers = [
            client.post("/v1/signals", json={"draft": a, "edited": b, "content_type": "post-mortem", "author": "bo"})
            for a, b in sent
        ]
    assert [a.status_code for a in answers] == [201] * 5
    categories = [a.json()["signal"]["category"] for a in answers]
    assert categories == ["style", "unclassified", "unclassified", "unclassified", "vocabulary"]
    assert "kept unclassified" in answers[1].json()["signal"]["summary"]
    assert all(a.json()["note"] is None for a in answers)  # three unclassified signals fold no note
    stored = memory.learning.signals()
    assert [s.category.value for s in stored] == categories and stored[1].edited == " ".join(shuffled)
    assert answers[4].json()["signal"]["details"]["swaps"] == [[long_text[6_000], "customers"]]
