"""A soak run as a small SVG: Redis memory per primary, keys, stream lengths, worker RSS.

Plain SVG written by hand, so the benchmark needs no plotting library: four
panels sharing the time axis, one polyline per series, each panel scaled to its
own maximum and labelled with it.
"""

from __future__ import annotations

from html import escape
from typing import Any

__all__ = ["plot"]

_WIDTH, _PANEL, _GAP, _LEFT, _RIGHT = 760, 130, 36, 70, 20
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _panel(
    top: int, title: str, unit: str, seconds: list[float], series: dict[str, list[float]]
) -> list[str]:
    span = max(seconds[-1], 1.0)
    peak = max((max(values) for values in series.values() if values), default=0.0) or 1.0
    inner = _WIDTH - _LEFT - _RIGHT
    out = [
        f'<text x="{_LEFT}" y="{top - 8}" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{top}" width="{inner}" height="{_PANEL}" '
        'fill="none" stroke="#999"/>',
        f'<text x="{_LEFT - 6}" y="{top + 10}" font-size="11" text-anchor="end">'
        f"{peak:,.1f} {escape(unit)}</text>",
        f'<text x="{_LEFT - 6}" y="{top + _PANEL}" font-size="11" text-anchor="end">0</text>',
    ]
    for n, (name, values) in enumerate(series.items()):
        colour = _COLOURS[n % len(_COLOURS)]
        points = " ".join(
            f"{_LEFT + inner * t / span:.1f},{top + _PANEL - _PANEL * v / peak:.1f}"
            for t, v in zip(seconds, values, strict=True)
        )
        out.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
        )
        out.append(
            f'<text x="{_LEFT + 8 + 150 * n}" y="{top + _PANEL + 14}" font-size="11" '
            f'fill="{colour}">{escape(name)}</text>'
        )
    return out


def plot(result: dict[str, Any], topology: str) -> str:
    """The SVG of a soak ``result`` (as ``benchmarks.soak`` returns it)."""
    seconds = [s / 60 for s in result["seconds"]]
    by_primary = result["used_memory_mib_by_primary"]
    keys = result["keys_by_primary"]
    rss = result["worker_rss_mib"]
    panels = [
        (
            "Redis used_memory per primary",
            "MiB",
            {f"primary {i}": [row[i] for row in by_primary] for i in range(len(by_primary[0]))},
        ),
        (
            "Keys per primary",
            "keys",
            {f"primary {i}": [row[i] for row in keys] for i in range(len(keys[0]))},
        ),
        (
            "Stream lengths (sum over partitions)",
            "entries",
            {"events": result["events_length"], "work": result["work_length"]},
        ),
        ("Worker RSS", "MiB", {f"worker {i}": [row[i] for row in rss] for i in range(len(rss[0]))}),
    ]
    height = 60 + len(panels) * (_PANEL + _GAP + 14) + 20
    body = [
        f'<text x="{_LEFT}" y="22" font-size="15" font-weight="bold">Soak on {escape(topology)}: '
        f"{result['minutes']} min at {result['rate']} tasks/s, {result['created']:,} created "
        "(x: minutes)</text>"
    ]
    for n, (title, unit, series) in enumerate(panels):
        body += _panel(60 + n * (_PANEL + _GAP + 14), title, unit, seconds, series)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
        + "".join(body)
        + "</svg>\n"
    )
