"""How often alert grouping puts an outage's alerts together, on the changes scenario's seeds (`eval/changes_scenario`:
about 50 services, injected outages whose alerts carry their true outage id, and noise alerts all week).

    PYTHONPATH=src python benchmarks/alert_grouping.py [--seeds 100-129] [--dev 0-9] [--windows 15 30 60]

Each seed's alerts go through `tiers.grouping.group_alerts` (what `Alerts.receive` runs delivery by delivery, here
in one pass, no store) with the scenario's topology. Reported per window, over the held-out seeds (`--seeds`; the
window and GROUP_HOPS were chosen before looking at them, `--dev` shows the seeds one may tune on):

* `together`: the share of outages (two or more alerts) whose alerts all land in one group;
* `pair_precision` / `pair_recall`: over pairs of alerts put in one group, the share that are one outage's; over
  pairs of one outage's alerts, the share put in one group (noise alerts are nobody's pair: two noise alerts on
  related services grouped count against precision); `outage_pair_precision`: the same over the grouped pairs
  that hold at least one outage's alert (how clean an outage's group is);
* `mixed_groups`: groups holding alerts of two or more outages; `noise_joined`: noise alerts put in a group with
  an outage's alerts, as a share of the noise alerts; `groups`, `alerts`.

Prints one JSON object a line (dev, then held out) and a table.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from datetime import timedelta
from itertools import combinations
from typing import Any

from grandbo.eval.changes_scenario import Scenario, generate, grouped_together
from grandbo.ingest.alert import Alert
from grandbo.tiers.grouping import group_alerts


def alerts_of(scenario: Scenario) -> list[Alert]:
    """The scenario's alerts as normalized alerts (each with its start, service, summary and fingerprint)."""
    return [
        Alert(source="manual", event_id=a.id, fingerprint=a.fingerprint, service=a.service, summary=a.summary,
              started_at=a.at, received_at=a.at)
        for a in scenario.alerts
    ]  # fmt: skip


def _pairs(groups: list[list[str]]) -> set[tuple[str, str]]:
    return {pair for group in groups for pair in combinations(sorted(group), 2)}


def score(scenario: Scenario, window_minutes: float) -> dict[str, int | float | None]:
    alerts = alerts_of(scenario)
    back = {alert.id: original.id for alert, original in zip(alerts, scenario.alerts, strict=True)}
    formed = group_alerts(alerts, scenario.topology, timedelta(minutes=window_minutes))
    groups = [[back[alert_id] for alert_id in group.alerts] for group in formed]
    outage = {a.id: a.outage for a in scenario.alerts}
    grouped = _pairs(groups)
    same = _pairs([list(o.alerts) for o in scenario.outages])
    true_grouped = len(grouped & same)
    touching = {pair for pair in grouped if outage[pair[0]] or outage[pair[1]]}  # an outage's alert in the pair
    mixed = sum(len({outage[a] for a in g if outage[a]}) > 1 for g in groups)
    noise = [a for a in outage if outage[a] is None]
    joined = sum(any(outage[b] for b in g) for g in groups for a in g if outage[a] is None)
    return {"together": grouped_together(scenario, groups), "true_pairs": true_grouped, "grouped_pairs": len(grouped),
            "same_pairs": len(same), "outage_pairs": len(touching), "mixed_groups": mixed, "noise_joined": joined,
            "noise": len(noise), "groups": len(groups), "alerts": len(outage)}  # fmt: skip


def report(seeds: list[int], window: float) -> dict[str, Any]:
    rows = [score(generate(seed), window) for seed in seeds]
    total: Counter[str] = Counter()
    for row in rows:
        total.update({k: v for k, v in row.items() if k != "together" and isinstance(v, int)})
    together = [float(r["together"]) for r in rows if r["together"] is not None]
    share = lambda n, of: round(n / of, 4) if of else None  # noqa: E731
    return {
        "window_minutes": window, "seeds": f"{seeds[0]}-{seeds[-1]}",
        "together": round(sum(together) / len(together), 4) if together else None,
        "pair_precision": share(total["true_pairs"], total["grouped_pairs"]),
        "pair_recall": share(total["true_pairs"], total["same_pairs"]),
        "outage_pair_precision": share(total["true_pairs"], total["outage_pairs"]),
        "mixed_groups": total["mixed_groups"], "noise_joined": share(total["noise_joined"], total["noise"]),
        "groups": total["groups"], "alerts": total["alerts"],
    }  # fmt: skip


def _span(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="100-129", help="held-out seeds (a range)")
    parser.add_argument("--dev", default="0-9", help="seeds one may tune on (a range); '' for none")
    parser.add_argument("--windows", type=float, nargs="+", default=[15.0, 30.0, 60.0])
    args = parser.parse_args()
    results = []
    for split, text in (("dev", args.dev), ("held_out", args.seeds)):
        if not text:
            continue
        for window in args.windows:
            row = {"split": split, **report(_span(text), window)}
            results.append(row)
            print(json.dumps(row))
    print(f"\n{'split':9} {'window':>6} {'together':>8} {'pair P':>7} {'pair R':>7} {'outage P':>8} {'mixed':>6} "
          f"{'noise in':>8}")  # fmt: skip
    for row in results:
        print(f"{row['split']:9} {row['window_minutes']:>6.0f} {row['together']!s:>8} {row['pair_precision']!s:>7} "
              f"{row['pair_recall']!s:>7} {row['outage_pair_precision']!s:>8} {row['mixed_groups']:>6} "
              f"{row['noise_joined']!s:>8}")  # fmt: skip


if __name__ == "__main__":
    main()
