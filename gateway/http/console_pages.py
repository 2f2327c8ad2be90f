"""The console's HTML: Jinja2 templates (package data in console_assets/, autoescaped:
keys, values and names come from clients) and the lag chart as inline SVG, so the pages
need no JavaScript and no asset of their own beyond one stylesheet, inlined."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from .lag_history import KEEP_MINUTES, SAMPLE_INTERVAL_S, Sample

ASSETS = Path(__file__).parent / "console_assets"
CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 640, 160, 36
LEGEND_WIDTH = 220  # right of the plot: "topic-partition lag" per line
MAX_LINES = 12  # partitions drawn in one chart; the rest are summed into one line
PALETTE = (
    "#2b6cb0", "#c05621", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f",
    "#2c7a7b", "#97266d", "#4a5568", "#276749", "#744210", "#553c9a",
)  # fmt: skip


def iso(ms: int | None) -> str:
    if ms is None or ms < 0:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def age(ms: int) -> str:
    """A duration as people read it: 4 s, 2 min 5 s, 3 h 10 min, 2 d 4 h."""
    s = max(0, ms) // 1000
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return ""


def lag_chart(series: dict[tuple[str, int], list[Sample]], now_ms: int) -> Markup:
    """Lag per partition over the last KEEP_MINUTES, one line each, as an SVG element."""
    window = KEEP_MINUTES * 60_000
    since = now_ms - window
    lines = sorted(series.items())
    if len(lines) > MAX_LINES:
        lines = [
            *lines[: MAX_LINES - 1],
            (("other partitions", -1), _summed(lines[MAX_LINES - 1 :])),
        ]
    points = [(k, [(ms, lag) for ms, lag in s if ms >= since]) for k, s in lines]
    points = [(k, s) for k, s in points if s]
    w, h, pad = CHART_WIDTH, CHART_HEIGHT, CHART_PAD
    top = max((lag for _, s in points for _, lag in s), default=0) or 1
    out = [
        f'<svg class="chart" viewBox="0 0 {w + pad + LEGEND_WIDTH} {h + 2 * pad}" role="img" '
        f'aria-label="consumer lag over the last {KEEP_MINUTES} minutes">',
        f'<rect x="{pad}" y="{pad}" width="{w}" height="{h}" class="plot"/>',
        f'<text x="{pad - 4}" y="{pad + 4}" class="axis" text-anchor="end">{top}</text>',
        f'<text x="{pad - 4}" y="{pad + h}" class="axis" text-anchor="end">0</text>',
        f'<text x="{pad}" y="{pad + h + 16}" class="axis">-{KEEP_MINUTES} min</text>',
        f'<text x="{pad + w}" y="{pad + h + 16}" class="axis" text-anchor="end">now</text>',
    ]
    if not points:
        out.append(
            f'<text x="{pad + w / 2}" y="{pad + h / 2}" class="axis" text-anchor="middle">'
            f"no samples yet (one every {SAMPLE_INTERVAL_S:g} s)</text>"
        )
    for n, ((topic, partition), samples) in enumerate(points):
        color = PALETTE[n % len(PALETTE)]
        xy = " ".join(
            f"{pad + (ms - since) * w / window:.1f},{pad + h - lag * h / top:.1f}"
            for ms, lag in samples
        )
        label = escape(topic if partition < 0 else f"{topic}-{partition}")
        last = samples[-1][1]
        out.append(
            f'<polyline points="{xy}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{label}: lag {last}</title></polyline>"
        )
        ms, lag = samples[-1]
        cx, cy = pad + (ms - since) * w / window, pad + h - lag * h / top
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{color}"/>')
        out.append(
            f'<text x="{pad + w + 6}" y="{pad + 12 + 13 * n}" class="legend" fill="{color}">'
            f"{label} {last}</text>"
        )
    out.append("</svg>")
    return Markup("".join(out))


def _summed(lines: list[tuple[tuple[str, int], list[Sample]]]) -> list[Sample]:
    total: dict[int, int] = {}
    for _, samples in lines:
        for ms, lag in samples:
            total[ms] = total.get(ms, 0) + lag
    return sorted(total.items())


class Pages:
    """Renders the console's pages; ``common`` holds what every page shows (the principal,
    the namespace)."""

    def __init__(self, namespace: str) -> None:
        self.env = Environment(
            loader=FileSystemLoader(ASSETS / "templates"),
            autoescape=select_autoescape(default=True),
            undefined=StrictUndefined,  # a misspelt name fails the page, not shows blank
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(iso=iso, age=age, size=size)
        self.env.globals.update(
            css=Markup((ASSETS / "console.css").read_text()), namespace=namespace
        )

    def render(self, template: str, **context: Any) -> str:
        context.setdefault("refresh", None)
        return self.env.get_template(template).render(**context)
