"""What alert grouping's text test costs is bounded whatever the alerts say (`tiers.grouping`: WORD_MARKS,
TEXT_TESTS, the `Groups` index), and the index places every alert where testing every open group did."""

from __future__ import annotations

import random
from collections.abc import Set
from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from grandbo.ingest.alert import Alert, words_alike
from grandbo.tiers import grouping
from grandbo.tiers.grouping import (
    GROUP_HOPS,
    TEXT_TESTS,
    WORD_MARKS,
    AlertGroup,
    Groups,
    Member,
    in_order,
    member_of,
    place,
    related_services,
    word_marks,
)
from grandbo.tiers.topology import Topology, parse_catalog

T0 = datetime(2026, 12, 6, 5, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=30)


def _alert(n: int, service: str | None, summary: str, minutes: float = 0, fingerprint: str = "") -> Alert:
    return Alert(source="alertmanager", event_id=f"e{n}", fingerprint=fingerprint or f"fp{n}", service=service,
                 summary=summary, started_at=T0 + timedelta(minutes=minutes))  # fmt: skip


def test_a_delivery_of_long_random_summaries_is_tested_by_text_at_most_text_tests_times_an_alert(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Probe 18a: one delivery of 500 resolved alerts, each on a service the catalog does not know with 2,000
    characters of random words, took 19.4 s of CPU: each alert was tested against every group before it (124,750
    tests of sets of up to 666 words, each set made again for every test). Each alert is tested at most TEXT_TESTS
    times, with at most WORD_MARKS words a side. (Fails on the commit before: 124,750 tests of 100 words.)"""
    tested: list[int] = []

    def counted(ours: Set[str], theirs: Set[str]) -> bool:
        tested.append(max(len(ours), len(theirs)))
        return words_alike(ours, theirs)

    monkeypatch.setattr(grouping, "words_alike", counted)
    rng, vocabulary = random.Random(18), [f"w{n}" for n in range(200)]
    alerts = [_alert(n, f"unknown-{n}", " ".join(rng.sample(vocabulary, 100))) for n in range(500)]
    placing = Groups((), Topology(), WINDOW)
    for alert in in_order(alerts):
        place(placing, alert)
    assert sum(group.size for group in placing.groups) == 500
    assert 0 < len(tested) <= len(alerts) * TEXT_TESTS and max(tested) <= WORD_MARKS
    assert 0 < placing.untested < 500  # those the bound stopped, counted for the log line `Alerts.receive` writes


def test_a_delivery_whose_alerts_the_bound_stopped_says_so_in_the_log(memory) -> None:
    """An alert placed after TEXT_TESTS tests may start a group it would not have: the delivery says how many."""
    rng, vocabulary = random.Random(18), [f"w{n}" for n in range(200)]
    alerts = [_alert(n, f"unknown-{n}", " ".join(rng.sample(vocabulary, 100)), n / 100, f"f{n}") for n in range(500)]
    with capture_logs() as logs:
        memory.alerts.receive(alerts)
    (said,) = [line for line in logs if line["event"] == "alerts.grouping_bounded"]
    assert said["alerts"] > 0 and said["text_tests"] == TEXT_TESTS and said["org_id"] == memory.org


def test_a_long_summary_keeps_the_same_sample_of_its_words_and_joins_a_group_that_kept_them_all() -> None:
    """A member keeps its summary's lowest WORD_MARKS marks: the same words keep the same ones, whatever their
    order, so an alert saying again what a group's alert said is alike it; a group stored before (its members kept
    every word) takes it too."""
    words = [f"w{n}" for n in range(300)]  # 1,389 characters
    kept = word_marks(" ".join(words))
    assert len(kept) == WORD_MARKS and kept == word_marks(" ".join(reversed(words)))
    every = sorted(set().union(*(word_marks(" ".join(words[n : n + 50])) for n in range(0, 300, 50))))
    assert len(every) == 300 and every[:WORD_MARKS] == kept  # fifty at a time: each part's marks all kept
    stored = AlertGroup(id="grp-before", services=["unknown-a"], first_seen=T0, last_seen=T0,
                        members=[Member(id="a", service="unknown-a", at=T0, fingerprint="0" * 10, words=every)])  # fmt: skip
    groups = Groups([stored], Topology(), WINDOW)
    assert place(groups, _alert(1, "unknown-b", " ".join(reversed(words)), 5)).id == "grp-before"
    assert len(stored.members[1].words) == WORD_MARKS


def _exhaustive(groups: Groups, member: Member) -> int | None:
    """The group an alert joins, every open group of the window tested (grouping before its index)."""
    best: tuple[int, float, str] | None = None
    chosen: int | None = None
    related = related_services(groups.topology, member.service)
    known = member.service in groups.topology
    for at, group in enumerate(groups.groups):
        if group.status != "open" or not group.first_seen - WINDOW <= member.at <= group.last_seen + WINDOW:
            continue
        hops = [related[service] for service in group.services if service in related]
        near = min(hops) if hops else None
        if near is None and any(
            (not known or other.service not in groups.topology) and member.service != other.service
            and (member.fingerprint == other.fingerprint
                 or (bool(member.words) and words_alike(set(member.words), set(other.words[:WORD_MARKS]))))
            for other in group.members
        ):  # fmt: skip
            near = GROUP_HOPS + 1
        key = (near, -group.last_seen.timestamp(), group.id) if near is not None else None
        if key is not None and (best is None or key < best):
            best, chosen = key, at
    return chosen


@pytest.mark.parametrize("seed", range(12))
def test_the_index_places_each_alert_where_testing_every_open_group_does(seed: int) -> None:
    """Alerts on catalog services, unknown ones and none, sharing fingerprints and words, over hours: each joins
    the group that testing every open group (topology, then text) chose."""
    rng = random.Random(seed)
    names = [f"s{n}" for n in range(10)]
    catalog = "services:\n" + "".join(f"  - name: {name}\n    depends_on: [{rng.choice(names)}]\n" for name in names)
    topology = Topology(parse_catalog(catalog))
    vocabulary = "pool exhausted latency above p99 errors 5xx disk full on the primary replica lag queue".split()
    services = [None, *names, "u1", "u2", "u3", "u4"]
    alerts = [_alert(n, rng.choice(services), " ".join(rng.choices(vocabulary, k=rng.randint(1, 9))),
                     rng.uniform(0, 240), f"fp{rng.randrange(40)}") for n in range(160)]  # fmt: skip
    groups = Groups((), topology, WINDOW)
    for alert in in_order(alerts):
        expected = _exhaustive(groups, member_of(alert))
        count = len(groups.groups)
        group = place(groups, alert)
        assert groups.groups.index(group) == (count if expected is None else expected)
    assert 1 < len(groups.groups) < len(alerts)
