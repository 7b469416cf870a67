"""The chart of benchmarks/peers.py (matplotlib, in .peers-venv): quality per set and latency per size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from peers_report import HEADLINE


def draw(rows: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [(system, arm) for system, wanted in HEADLINE.items() for arm in wanted]
    quality = [row for row in rows if "nDCG@10" in row and (row["system"], row["arm"]) in arms]
    speed = [row for row in rows if "p50_ms" in row and (row["system"], row["arm"]) in arms]
    shown = [pair for pair in arms if any((r["system"], r["arm"]) == pair for r in quality + speed)]
    colours = plt.get_cmap("tab10")
    figure, (left, right) = plt.subplots(1, 2, figsize=(14, 6.5))
    for axis, found, key, title in (
        (left, quality, "nDCG@10", "nDCG@10 (higher is better)"),
        (right, speed, "p50_ms", "query latency p50, ms (log; lower is better)"),
    ):
        groups = list(dict.fromkeys(row["set"] for row in found))
        width = 0.8 / max(1, len(shown))
        for n, (system, arm) in enumerate(shown):
            values = [next((r[key] for r in found if r["set"] == g and (r["system"], r["arm"]) == (system, arm)), 0)
                      for g in groups]  # fmt: skip
            axis.bar([i + n * width for i in range(len(groups))], values, width, label=f"{system} {arm}",
                     color=colours(n % 10), edgecolor="black" if system.startswith("grandbo") else None)  # fmt: skip
        axis.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(groups))], groups)
        axis.set_title(title)
        if key == "p50_ms":
            axis.set_yscale("log")
    handles, labels = left.get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    figure.suptitle("Grandbo and its peers: the same data and the same vectors (benchmarks/peers.py)")
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    figure.savefig(png, dpi=110)
