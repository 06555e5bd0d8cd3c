"""The picture of a profile: an SVG bar chart of where a forward's time goes, per op (slowest
first) and per op kind, one colour per provider. Written with the standard library only."""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import NamedTuple

from tools.lower.profiling import Profile

MAX_OP_ROWS = 25  # the other ops share one row

_WIDTH = 960
_LABEL_W = 430
_BAR_W = 350
_ROW_H = 22
_BAR_H = 15
_PALETTE = ("#3b7dd8", "#e07b39", "#4caf50", "#9c27b0", "#c0392b", "#607d8b")
_MIXED = "#b0b0b0"  # a row of several providers
_LABEL_CHARS = 60  # what fits left of the bars at 12 px; the bar's tooltip has the whole label


class Bar(NamedTuple):
    label: str
    ms: float
    share: float
    provider: str  # "" for a row mixing providers


def op_bars(profile: Profile, limit: int = MAX_OP_ROWS) -> list[Bar]:
    """One bar per op, slowest first; past ``limit`` the rest share one bar."""
    bars = []
    for op in profile.ops[:limit]:
        fused = f" +{len(op.fused_with)} fused" if op.fused_with else ""
        bars.append(Bar(f"{op.node} ({op.op}){fused}", op.ms, op.share, op.provider))
    rest = profile.ops[limit:]
    if rest:
        bars.append(
            Bar(
                f"{len(rest)} more ops",
                sum(op.ms for op in rest),
                sum(op.share for op in rest),
                "",
            )
        )
    return bars


def kind_bars(profile: Profile) -> list[Bar]:
    """One bar per op kind (the event's first op: a fused group counts as its head)."""
    ms: dict[str, float] = defaultdict(float)
    share: dict[str, float] = defaultdict(float)
    providers: dict[str, set[str]] = defaultdict(set)
    for op in profile.ops:
        ms[op.op] += op.ms
        share[op.op] += op.share
        providers[op.op].add(op.provider)
    ordered = sorted(ms, key=lambda kind: (-ms[kind], kind))
    return [
        Bar(kind, ms[kind], share[kind], next(iter(providers[kind])))
        if len(providers[kind]) == 1
        else Bar(kind, ms[kind], share[kind], "")
        for kind in ordered
    ]


def render_svg(profile: Profile, title: str) -> str:
    """The chart as an SVG document."""
    providers = sorted({op.provider for op in profile.ops})
    colour = {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(providers)}
    sections = [("per op, slowest first", op_bars(profile)), ("per op kind", kind_bars(profile))]
    body: list[str] = []
    y = 30
    body.append(_text(12, y, title, size=16, weight="bold"))
    y += 22
    summary = (
        f"mean of {profile.runs} run(s) after {profile.warmup_runs} warm-up; forward "
        f"{profile.forward_ms:.3f} ms, ops {profile.ops_ms:.3f} ms "
        f"({_percent(profile.ops_ms / profile.forward_ms if profile.forward_ms else 0.0)})"
    )
    body.append(_text(12, y, summary, size=12, fill="#444"))
    y += 12
    x = 12
    for provider in providers:
        y_box = y + 6
        body.append(f'<rect x="{x}" y="{y_box}" width="12" height="12" fill="{colour[provider]}"/>')
        body.append(_text(x + 16, y_box + 11, provider, size=12))
        x += 24 + 8 * len(provider)
    y += 24
    for heading, bars in sections:
        y += 18
        body.append(_text(12, y, heading, size=14, weight="bold"))
        y += 8
        longest = max((bar.ms for bar in bars), default=0.0)
        for bar in bars:
            width = _BAR_W * bar.ms / longest if longest > 0 else 0.0
            fill = colour.get(bar.provider, _MIXED)
            label = (
                bar.label if len(bar.label) <= _LABEL_CHARS else bar.label[: _LABEL_CHARS - 1] + "…"
            )
            body.append(_text(_LABEL_W - 8, y + 12, label, size=12, anchor="end"))
            body.append(
                f'<rect class="bar" x="{_LABEL_W}" y="{y}" width="{width:.1f}" '
                f'height="{_BAR_H}" fill="{fill}"><title>{escape(bar.label)}: '
                f"{bar.ms:.4f} ms</title></rect>"
            )
            value = f"{bar.ms:.3f} ms  {_percent(bar.share)}"
            body.append(_text(_LABEL_W + width + 6, y + 12, value, size=12))
            y += _ROW_H
    height = y + 16
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
            f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif">',
            f'<rect width="{_WIDTH}" height="{height}" fill="#ffffff"/>',
            *body,
            "</svg>",
            "",
        ]
    )


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def _text(
    x: float,
    y: float,
    text: str,
    size: int,
    weight: str = "normal",
    fill: str = "#222",
    anchor: str = "start",
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y}" font-size="{size}" font-weight="{weight}" fill="{fill}" '
        f'text-anchor="{anchor}">{escape(text)}</text>'
    )
