"""Charts drawn on the server as SVG: no script, readable at a glance, each with a title and a description for
screen readers (the page puts the same numbers in a table beside it).

Every function takes plain numbers and the page it is drawn on (`Page`: the charts' ids) and returns markup; text
is escaped here, so callers pass raw labels.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

INK, MUTED, GRID = "#1f2933", "#52606d", "#d9e2ec"
# Distinguishable on white and for the common colour-vision deficiencies (Okabe-Ito, darkened for contrast).
PALETTE = ("#0060a8", "#b35900", "#00755e", "#a3306b", "#5a4a9f", "#8a6d00", "#3f6f8f")


@dataclass(frozen=True)
class Interval:
    label: str
    mean: float
    low: float
    high: float
    note: str


class Page:
    """The charts of one page, named for their ids: by their own words (a digest of title and description), and a
    second of the same words on the page by its place among them (`-2`, `-3`: two charts of one title and
    description shared an id, and a screen reader read the first's for both). Named by nothing beyond the page:
    a count of the charts this process drew moved with every other organization's page, and showed how often
    they looked."""

    def __init__(self) -> None:
        self._named: dict[str, int] = {}

    def name(self, title: str, desc: str) -> str:
        digest = hashlib.blake2s(f"{title}\x1f{desc}".encode(), digest_size=6).hexdigest()
        place = self._named[digest] = self._named.get(digest, 0) + 1
        return digest if place == 1 else f"{digest}-{place}"


def _frame(width: int, height: int, title: str, desc: str, body: list[str], page: Page) -> Markup:
    n = page.name(title, desc)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-labelledby="chart{n}-t chart{n}-d" preserveAspectRatio="xMinYMin meet">'
        f'<title id="chart{n}-t">{escape(title)}</title><desc id="chart{n}-d">{escape(desc)}</desc>'
    )
    # Every label and number in `body` went through `escape` (`_text`) or is a number we formatted.
    return Markup(head + "".join(body) + "</svg>")  # noqa: S704


def _text(
    x: float, y: float, text: str, *, anchor: str = "start", size: int = 12, fill: str = INK, weight: str = "normal"
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
        f'font-weight="{weight}">{escape(text)}</text>'
    )


def _short(label: str, limit: int = 28) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def empty(title: str, message: str, *, page: Page) -> Markup:
    return _frame(640, 60, title, message, [_text(12, 35, message, fill=MUTED, size=13)], page)


def intervals(rows: Sequence[Interval], title: str, *, page: Page) -> Markup:
    """Each row a dot at its mean and a whisker across its credible interval, on a 0-100% axis."""
    if not rows:
        return empty(title, "No runbook has an outcome yet.", page=page)
    left, right, row_h, top = 230, 250, 26, 30
    width = 900
    plot = width - left - right
    height = top + row_h * len(rows) + 10
    body = [
        _text(left, 16, "0%", anchor="middle", fill=MUTED),
        _text(left + plot, 16, "100%", anchor="middle", fill=MUTED),
        _text(left + plot / 2, 16, "50%", anchor="middle", fill=MUTED),
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + plot * tick
        body.append(f'<line x1="{x:.1f}" y1="22" x2="{x:.1f}" y2="{height - 8}" stroke="{GRID}"/>')
    for i, row in enumerate(rows):
        y = top + i * row_h + row_h / 2
        x_low, x_high, x_mean = (left + plot * v for v in (row.low, row.high, row.mean))
        body.append(_text(left - 10, y + 4, _short(row.label, 32), anchor="end"))
        body.append(
            f'<line x1="{x_low:.1f}" y1="{y:.1f}" x2="{x_high:.1f}" y2="{y:.1f}" stroke="{PALETTE[0]}" '
            'stroke-width="3" stroke-linecap="round"/>'
        )
        body.append(f'<circle cx="{x_mean:.1f}" cy="{y:.1f}" r="5.5" fill="{PALETTE[1]}" stroke="white"/>')
        body.append(_text(left + plot + 12, y + 4, row.note, fill=MUTED))
    desc = "; ".join(f"{r.label}: {r.mean:.0%} ({r.low:.0%} to {r.high:.0%}), {r.note}" for r in rows)
    return _frame(width, height, title, desc, body, page)


def hbars(rows: Sequence[tuple[str, float]], title: str, unit: str = "", *, page: Page) -> Markup:
    """Horizontal bars, longest first as given, each labelled with its value."""
    if not rows:
        return empty(title, "Nothing to count yet.", page=page)
    left, row_h, top, width = 200, 24, 8, 900
    plot = width - left - 90
    top_value = max(value for _, value in rows) or 1.0
    height = top + row_h * len(rows) + 8
    body = []
    for i, (label, value) in enumerate(rows):
        y = top + i * row_h
        length = max(2.0, plot * value / top_value)
        body.append(_text(left - 10, y + 16, _short(label), anchor="end"))
        body.append(
            f'<rect x="{left}" y="{y + 4}" width="{length:.1f}" height="{row_h - 8}" rx="2" fill="{PALETTE[0]}"/>'
        )
        body.append(_text(left + length + 8, y + 16, f"{value:g}{unit}"))
    desc = "; ".join(f"{label}: {value:g}{unit}" for label, value in rows)
    return _frame(width, height, title, desc, body, page)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 or 10 times a power of ten that is at least `value` (an axis's top)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value))


def _ticks(low: datetime, high: datetime, count: int = 5) -> list[datetime]:
    if high <= low:
        return [low]
    step = (high - low) / (count - 1)
    return [low + step * i for i in range(count)]


def lines(series: dict[str, list[tuple[datetime, float]]], title: str, unit: str, *, page: Page) -> Markup:
    """One line per series over time (points marked), a shared y axis from 0, and a legend."""
    points = [p for values in series.values() for p in values]
    if not points:
        return empty(title, "No data points yet.", page=page)
    width, height, left, right, top, bottom = 900, 300, 70, 20, 20, 60
    plot_w, plot_h = width - left - right, height - top - bottom
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    span = (t1 - t0).total_seconds() or 1.0
    y_max = nice_ceiling(max(p[1] for p in points))

    def xy(at: datetime, value: float) -> tuple[float, float]:
        x = left + plot_w * ((at - t0).total_seconds() / span if t1 > t0 else 0.5)
        return x, top + plot_h * (1 - value / y_max)

    body = []
    for i in range(5):
        value = y_max * i / 4
        _, y = xy(t0, value)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(_text(left - 8, y + 4, f"{value:g}{unit}", anchor="end", fill=MUTED, size=11))
    ticks = _ticks(t0, t1)
    for n, at in enumerate(ticks):
        x, _ = xy(at, 0)
        anchor = "start" if n == 0 and len(ticks) > 1 else "end" if n == len(ticks) - 1 and n else "middle"
        body.append(_text(x, top + plot_h + 18, at.strftime("%Y-%m-%d"), anchor=anchor, fill=MUTED, size=11))
    for n, (name, values) in enumerate(series.items()):
        color = PALETTE[n % len(PALETTE)]
        coords = [xy(at, value) for at, value in sorted(values)]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        body.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>' for x, y in coords)
        lx = left + (n % 4) * 205
        ly = height - 24 + (n // 4) * 16
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="12" fill="{color}"/>')
        body.append(_text(lx + 17, ly + 1, _short(name, 30), size=12))
    desc = "; ".join(
        f"{name}: {len(values)} points, latest {sorted(values)[-1][1]:.0f}{unit}" for name, values in series.items()
    )
    return _frame(width, height + 16 * ((len(series) - 1) // 4), title, desc, body, page)


def split(parts: Sequence[tuple[str, int]], title: str, *, page: Page) -> Markup:
    """One bar split into its parts (e.g. embedded and unembedded entries), each part labelled."""
    total = sum(value for _, value in parts)
    if total == 0:
        return empty(title, "No entries yet.", page=page)
    width, left, bar_w = 900, 10, 880
    body, x = [], float(left)
    for n, (label, value) in enumerate(parts):
        length = bar_w * value / total
        if length > 0:
            body.append(f'<rect x="{x:.1f}" y="8" width="{length:.1f}" height="26" fill="{PALETTE[n * 2 % 7]}"/>')
        body.append(f'<rect x="{left + n * 260}" y="46" width="12" height="12" fill="{PALETTE[n * 2 % 7]}"/>')
        body.append(_text(left + n * 260 + 17, 57, f"{label}: {value:,} ({value / total:.0%})", size=12))
        x += length
    desc = "; ".join(f"{label}: {value}" for label, value in parts)
    return _frame(width, 68, title, desc, body, page)
