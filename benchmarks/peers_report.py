"""The tables and the verdict of benchmarks/peers.py, from its rows (plain Python, no third-party import)."""

from __future__ import annotations

from typing import Any

QUALITY_KEYS = ("nDCG@10", "R@5", "R@10", "MRR@10")
# Arms that search exactly (no approximate index): the ones Grandbo's exact search is held against.
EXACT_HYBRID = {("plain-parts", "rrf"), ("lancedb", "hybrid-rrf"), ("sqlite-fts5-vec", "rrf"),
                ("postgres-handrolled", "rrf")}  # fmt: skip
EXACT_VECTOR = {("plain-parts", "numpy-exact"), ("lancedb", "vector-exact"), ("sqlite-fts5-vec", "vec0-exact"),
                ("postgres-handrolled", "pgvector-exact")}  # fmt: skip
# The arm of each system drawn in the chart and named first in the summary.
HEADLINE = {
    "grandbo-embedded": ("hybrid", "reranked"),
    "grandbo-postgres": ("hybrid",),
    "plain-parts": ("rrf",),
    "lancedb": ("hybrid-rrf",),
    "sqlite-fts5-vec": ("rrf",),
    "chroma": ("vector-hnsw",),
    "postgres-handrolled": ("rrf",),
}


def _relative(row: dict[str, Any]) -> float:
    """A row's p50 as a multiple of the yardstick scan timed in the same process (benchmarks/peers_measure.py);
    the raw p50 for rows from before the yardstick existed."""
    return float(row.get("p50_vs_reference") or row["p50_ms"])


def _latency(row: dict[str, Any]) -> str:
    if "p50_vs_reference" not in row:
        return f"{row['p50_ms']:.2f} ms"
    return f"{row['p50_ms']:.2f} ms ({row['p50_vs_reference']:.2f}x its yardstick {row['reference_p50_ms']:.2f} ms)"


def is_grandbo(row: dict[str, Any]) -> bool:
    return str(row["system"]).startswith("grandbo")


def _sets(rows: list[dict[str, Any]], key: str) -> list[str]:
    return list(dict.fromkeys(row["set"] for row in rows if key in row))


def _fmt(value: Any, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def quality_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for name in _sets(rows, "nDCG@10"):
        found = [row for row in rows if row["set"] == name and "nDCG@10" in row]
        best = {key: max(row[key] for row in found) for key in QUALITY_KEYS}
        queries = found[0].get("queries", "?")
        lines += [f"**{name}** ({queries} judged queries)", "", "| system | arm | " + " | ".join(QUALITY_KEYS) + " |",
                  "|---|---|" + "---|" * len(QUALITY_KEYS)]  # fmt: skip
        for row in found:
            cells = [f"**{row[k]:.4f}**" if row[k] == best[k] else f"{row[k]:.4f}" for k in QUALITY_KEYS]
            lines.append(f"| {row['system']} | {row['arm']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def speed_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for name in _sets(rows, "p50_ms"):
        found = [row for row in rows if row["set"] == name and "p50_ms" in row]
        lines += [
            f"**{name}** ({found[0]['entries']:,} entries, {found[0].get('queries', '?')} timed queries)", "",
            "| system | arm | p50 ms | p95 ms | p50 / yardstick (its p50 ms) | ingest entries/s | peak RSS MB |",
            "|---|---|---|---|---|---|---|",
        ]  # fmt: skip
        for row in sorted(found, key=_relative):
            exact = "" if (row["system"], row["arm"]) not in EXACT_HYBRID | EXACT_VECTOR else " (exact)"
            yardstick = (f"{row['p50_vs_reference']:.2f}x ({row['reference_p50_ms']:.2f})"
                         if "p50_vs_reference" in row else "-")  # fmt: skip
            lines.append(
                f"| {row['system']} | {row['arm']}{exact} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | {yardstick} | "
                f"{_fmt(row['ingest_per_s'], 0)} | {_fmt(row['peak_rss_mb'], 0)} |"
            )
        lines.append("")
    return lines


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's numbers to reach, each met or not, with the gap to the peer that is ahead."""
    lines = ["| target | set | Grandbo | best peer | result |", "|---|---|---|---|---|"]
    for name in _sets(rows, "nDCG@10"):
        found = [row for row in rows if row["set"] == name and "nDCG@10" in row]
        ours = {row["arm"]: row for row in found if row["system"] == "grandbo-embedded"}
        peers = [row for row in found if not is_grandbo(row)]
        if not peers:
            continue
        for arm in ("hybrid", "reranked"):
            if arm not in ours:
                continue
            for key in QUALITY_KEYS:
                top = max(peers, key=lambda row, key=key: row[key])
                gap = ours[arm][key] - top[key]
                result = "met" if gap >= 0 else f"**behind by {-gap:.4f}**"
                lines.append(f"| {arm} {key} >= best peer | {name} | {ours[arm][key]:.4f} | "
                             f"{top[key]:.4f} ({top['system']} {top['arm']}) | {result} |")  # fmt: skip
    for name in _sets(rows, "p50_ms"):
        found = [row for row in rows if row["set"] == name and "p50_ms" in row]
        entries = found[0]["entries"]
        allowed = 1.0 if entries <= 10_000 else 1.2
        for arm, exact in (("hybrid", EXACT_HYBRID), ("vector", EXACT_VECTOR)):
            ours = next((r for r in found if r["system"] == "grandbo-embedded" and r["arm"] == arm), None)
            peers = [r for r in found if (r["system"], r["arm"]) in exact]
            if ours is None or not peers:
                continue
            fastest = min(peers, key=_relative)
            ratio = _relative(ours) / _relative(fastest)
            result = "met" if ratio <= allowed else f"**{ratio:.2f}x the peer**"
            lines.append(
                f"| {arm} p50 <= {allowed}x fastest exact peer | {name} | {_latency(ours)} | "
                f"{_latency(fastest)} ({fastest['system']} {fastest['arm']}) | {result} ({ratio:.2f}x; raw p50s "
                f"{ours['p50_ms'] / fastest['p50_ms']:.2f}x) |"
            )
    return lines


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """One line per system's headline arm: nDCG@10 per quality set, then p50 and ingest per speed set."""
    quality, speed = _sets(rows, "nDCG@10"), _sets(rows, "p50_ms")

    def cell(system: str, arm: str, name: str, key: str, digits: int) -> str:
        found = next((r for r in rows if (r["system"], r["arm"], r["set"]) == (system, arm, name) and key in r), None)
        return "-" if found is None or found[key] is None else f"{found[key]:,.{digits}f}"

    head = ["system", "arm", *(f"{name} nDCG@10" for name in quality)]
    head += [f"{key} {name.removeprefix('synthetic-')}" for name in speed for key in ("p50 ms", "ingest/s")]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for system, arms in HEADLINE.items():
        for arm in arms:
            if not any((r["system"], r["arm"]) == (system, arm) for r in rows):
                continue
            cells = [cell(system, arm, name, "nDCG@10", 4) for name in quality]
            for name in speed:
                cells += [cell(system, arm, name, "p50_ms", 2), cell(system, arm, name, "ingest_per_s", 0)]
            lines.append(f"| {system} | {arm} | " + " | ".join(cells) + " |")
    return lines


def markdown(rows: list[dict[str, Any]], machine: dict[str, Any], errors: list[str], notes: list[str]) -> str:
    peers = ", ".join(f"{name} {version}" for name, version in machine.get("peers", {}).items())
    load = ", ".join(f"{x:.1f}" for x in machine["load_average"])
    if "load_average_end" in machine:
        load += f"; at the end ({machine['ended']}) " + ", ".join(f"{x:.1f}" for x in machine["load_average_end"])
    head = [
        "# Grandbo and its peers: the same data, the same vectors, one run",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, {machine['os']}, "
        f"Python {machine['python']}; load average at the start {load}"
        f" (the machine is shared). Commit {machine['commit']}, {machine['date']}. Peers: {peers}.",
        "",
        "Regenerate: `make bench-peers` (or `python benchmarks/peers.py`); rows in peers.json, chart in peers.png.",
        "",
        *notes,
        "",
        "## Summary (each system's hybrid, or its only search)",
        "",
        *summary(rows),
        "",
        "## Numbers to reach",
        "",
        *verdict(rows),
        "",
        "## Quality (best of each column in bold)",
        "",
        *quality_table(rows),
        "## Speed (query embedding excluded; fastest first)",
        "",
        *speed_table(rows),
    ]
    if errors:
        head += ["## Runs that failed", "", *(f"* {error}" for error in errors), ""]
    return "\n".join(head) + "\n"
