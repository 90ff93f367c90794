"""Server-rendered SVG charts: their geometry, and the marks of a stacked chart as markup. Drawn
with SVG attributes and CSS classes (the CSP forbids inline styles), a ``<title>`` per mark for
screen readers and hover, and a table with the same figures beside each chart. A month's chart
has hundreds of marks and cells: built here (numbers as they are, every text escaped), the page
spends a fraction of what a template loop over them cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import ROUND_CEILING, Decimal
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from agentsite.templatetags.agentsite import usd

WIDTH = 800
HEIGHT = 260
LEFT = 64
RIGHT = 12
TOP = 12
BOTTOM = 40
SERIES_CLASSES = 8


@dataclass
class Segment:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass
class Bar:
    day: date
    total: Decimal
    segments: list[Segment]
    label: str = ""
    label_x: float = 0.0
    # Each series' amount this day, in the legend's order (the table beside the chart).
    amounts: list[Decimal] = field(default_factory=list)


@dataclass
class Series:
    key: Any
    label: str
    css: str
    total: Decimal


@dataclass
class Tick:
    y: float
    value: Decimal


@dataclass
class StackedChart:
    bars: list[Bar] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    plot_bottom: int = HEIGHT - BOTTOM
    plot_right: int = WIDTH - RIGHT
    empty: bool = True

    @property
    def days(self) -> list[date]:
        return [b.day for b in self.bars]

    def marks_html(self) -> SafeString:
        """Each day's stacked rectangles (with their titles) and its axis label. Numbers and the
        fixed CSS classes are written as they are; every text is escaped."""
        label_y = self.plot_bottom + 18
        days = []
        for bar in self.bars:
            marks = "".join(f'<rect class="{s.css}" x="{s.x}" y="{s.y}" width="{s.width}" '
                            f'height="{s.height}"><title>{escape(s.title)}</title></rect>'
                            for s in bar.segments)
            if bar.label:
                marks += (f'<text class="axis-label" x="{bar.label_x}" y="{label_y}" '
                          f'text-anchor="middle">{escape(bar.label)}</text>')
            days.append(f'<g class="bar-day">{marks}</g>')
        return mark_safe("\n".join(days))  # noqa: S308 - built above from numbers and escaped text

    def rows_html(self) -> SafeString:
        """The table's rows: each day, its amount per series and its total."""
        rows = []
        for bar in self.bars:
            cells = "".join(f'<td class="num">{escape(usd(a))}</td>' for a in bar.amounts)
            rows.append(f'<tr><th scope="row">{bar.day:%a %b} {bar.day.day}</th>{cells}'
                        f'<td class="num">{escape(usd(bar.total))}</td></tr>')
        return mark_safe("".join(rows))  # noqa: S308 - built above from dates and escaped text


def nice_ceiling(value: Decimal) -> Decimal:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``value``."""
    if value <= 0:
        return Decimal(1)
    exponent = value.adjusted()
    for _ in range(2):
        base = Decimal(1).scaleb(exponent)
        for step in (Decimal(1), Decimal(2), Decimal("2.5"), Decimal(5), Decimal(10)):
            if base * step >= value:
                return (base * step).normalize()
        exponent += 1
    return value.to_integral_value(ROUND_CEILING)


def _money(value: Decimal) -> str:
    if value == 0:
        return "$0"
    if value < Decimal("0.01"):
        return f"${value:.6f}".rstrip("0")
    return f"${value:,.2f}"


def stacked_by_day(*, days: list[date], series: list[tuple[Any, str]],
                   values: dict[Any, dict[date, Decimal]]) -> StackedChart:
    """Bars per day stacked by series (in the order given; an "other" key is drawn last)."""
    chart = StackedChart()
    chart.plot_bottom = HEIGHT - BOTTOM
    plot_height = chart.plot_bottom - TOP
    plot_width = WIDTH - LEFT - RIGHT
    totals = {d: sum((values.get(k, {}).get(d, Decimal(0)) for k, _ in series), Decimal(0)) for d in days}
    top = nice_ceiling(max(totals.values(), default=Decimal(0)))
    chart.empty = not any(totals.values())
    chart.ticks = [Tick(round(chart.plot_bottom - plot_height * i / 4, 2), (top * i / 4).normalize())
                   for i in range(5)]
    slot = plot_width / max(len(days), 1)
    width = max(min(slot * 0.7, 48), 1)
    label_every = max(1, round(len(days) / 12))
    for index, key_label in enumerate(series):
        key, label = key_label
        css = "series-other" if key == "other" else f"series-{index % SERIES_CLASSES}"
        total = sum(values.get(key, {}).values(), Decimal(0))
        chart.series.append(Series(key, label, css, total))
    for i, day in enumerate(days):
        x = LEFT + slot * i + (slot - width) / 2
        y = float(chart.plot_bottom)
        segments = []
        for s in chart.series:
            amount = values.get(s.key, {}).get(day, Decimal(0))
            if amount <= 0:
                continue
            h = float(amount / top) * plot_height
            y -= h
            segments.append(Segment(round(x, 2), round(y, 2), round(width, 2), round(max(h, 0.5), 2),
                                    s.css, f"{day:%b %-d}: {s.label} {_money(amount)}"))
        label = f"{day:%b %-d}" if i % label_every == 0 else ""
        amounts = [values.get(s.key, {}).get(day, Decimal(0)) for s in chart.series]
        chart.bars.append(Bar(day, totals[day], segments, label, round(x + width / 2, 2), amounts))
    return chart


@dataclass
class Part:
    label: str
    value: int
    css: str
    x: float = 0.0
    width: float = 0.0

    @property
    def share(self) -> float:
        return self.width / 100


def shares(parts: list[tuple[str, int, str]]) -> list[Part]:
    """One 100-wide horizontal bar split in proportion to ``parts`` (label, value, class)."""
    total = sum(v for _, v, _ in parts)
    result, x = [], 0.0
    for label, value, css in parts:
        width = (value / total * 100) if total else 0.0
        result.append(Part(label, value, css, round(x, 3), round(width, 3)))
        x += width
    return result
