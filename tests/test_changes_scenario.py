"""The scenario generator behind `benchmarks/changes.py`: deterministic per seed, about 50 services, each outage's
cause among the changes and before its alerts, noise alerts without an outage."""

from __future__ import annotations

from grandbo.eval import changes_scenario


def test_the_same_seed_gives_the_same_scenario_and_another_seed_another():
    first, again, other = changes_scenario.generate(7), changes_scenario.generate(7), changes_scenario.generate(8)
    assert first.changes == again.changes and first.alerts == again.alerts and first.outages == again.outages
    assert [s.name for s in first.services] == [s.name for s in again.services]
    assert [s.depends_on for s in first.services] == [s.depends_on for s in again.services]
    assert first.changes != other.changes and first.alerts != other.alerts


def test_each_outage_s_cause_is_a_change_on_its_origin_before_its_alerts():
    scenario = changes_scenario.generate(3)
    assert len(scenario.services) == 50
    by_id = {c.id: c for c in scenario.changes}
    alerts = {a.id: a for a in scenario.alerts}
    assert {o.cause for o in scenario.outages} == set(changes_scenario.CAUSES)
    for outage in scenario.outages:
        cause = by_id[outage.change_id]
        assert cause.service == outage.origin and outage.alerts
        fired = [alerts[a] for a in outage.alerts]
        assert all(a.outage == outage.id and a.at > cause.at for a in fired)
        assert all(outage.origin in scenario.topology.upstream(a.service) for a in fired)  # the origin or its callers
    noise = [a for a in scenario.alerts if a.outage is None]
    assert len(noise) > 100 and len(scenario.changes) > 1000


def test_grouping_is_measured_against_the_true_outage_ids():
    scenario = changes_scenario.generate(1)
    perfect = [list(o.alerts) for o in scenario.outages]
    one_by_one = [[a.id] for a in scenario.alerts]
    assert changes_scenario.grouped_together(scenario, perfect) == 1.0
    assert changes_scenario.grouped_together(scenario, one_by_one) == 0.0
