"""A run's figures as SVG, drawn here with matplotlib: the incident report's loss curve
(``orchestrator.commands.report.figure``, the same figure as ``report.png``) and a timeline
of its attempts by region and wall time, with its faults, incidents and restores.

pyplot keeps global state, and the server draws in several threads: one figure at a
time (``_DRAWING``). Text from a journal is drawn as text, never parsed as mathtext (a
region named ``$x$`` is just that) and cut to a bounded length; matplotlib escapes it
into the SVG, which the page loads as an image (no script in an image ever runs).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from orchestrator.commands import report
from orchestrator.console.text import cut
from orchestrator.runstate.events import (
    AttemptEnded,
    AttemptStarted,
    Event,
    FaultInjected,
    Fence,
    IncidentRecorded,
    RunStarted,
)

_DRAWING = threading.Lock()
# The figures' text stays text in the SVG (small, and sharp at any zoom). (Mathtext stays
# on for matplotlib's own labels, a log axis's 10^-2: what a journal says goes through ``plain``.)
_RC = {"svg.fonttype": "none", "svg.hashsalt": "orchestrator-console"}
# The most bars and marks a timeline draws: the newest (a journal may name thousands).
MAX_MARKS = 200


def plain(text: object, most: int = 40) -> str:
    """Text from a journal as matplotlib draws it literally: cut, each '$' escaped (a '$'
    pair is mathtext to matplotlib: drawn as math, or raising when it is none)."""
    return cut(text, most).replace("$", r"\$")


def plain_report(rep: report.Report, points: list[dict[str, Any]]) -> tuple[report.Report, list[dict[str, Any]]]:
    """The report and loss series with every name from the journal made ``plain``: the
    report's figure draws the run id, regions and faults as its labels."""
    rows = [
        replace(r, from_region=plain(r.from_region), to_region=r.to_region and plain(r.to_region)) for r in rep.rows
    ]
    safe = replace(
        rep,
        run_id=plain(rep.run_id, 100),
        rows=rows,
        attempts=[{**a, "region": plain(a.get("region"))} for a in rep.attempts],
        faults=[{**f, "kind": plain(f.get("kind"))} for f in rep.faults],
        search={plain(t, 64): v for t, v in rep.search.items()},
        search_metric=plain(rep.search_metric),
    )
    return safe, [{**p, "region": plain(p.get("region"))} for p in points]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here
    import matplotlib.pyplot as plt

    return plt


def _svg(fig: Any, plt: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="svg")
    plt.close(fig)
    return out.getvalue()


def message_svg(text: str) -> bytes:
    """A figure that says why there is none (no loss series yet, a journal unreadable)."""
    plt = _pyplot()
    import matplotlib

    with _DRAWING, matplotlib.rc_context(_RC):
        fig = plt.figure(figsize=(8, 1.2))
        fig.text(0.5, 0.5, plain(text, 120), ha="center", va="center", fontsize=11, color="dimgrey")
        return _svg(fig, plt)


def loss_svg(rep: report.Report | None, points: list[dict[str, Any]]) -> bytes:
    """The incident report's figure (a search's when the run is one) as SVG."""
    if rep is None:
        return message_svg("no journal yet")
    if not points and not rep.search:
        return message_svg("no loss series yet (loss.jsonl)")
    plt = _pyplot()
    import matplotlib

    rep, points = plain_report(rep, points)
    with _DRAWING, matplotlib.rc_context(_RC):
        fig = report.search_figure(rep, plt) if rep.search else report.figure(rep, points, plt)
        return _svg(fig, plt)


def _spans(events: list[Event], end: float) -> list[tuple[int, str, float, float]]:
    """(generation, region, start, end) of every attempt, an open one to ``end``."""
    started: dict[int, tuple[str, float]] = {}
    ended: dict[int, float] = {}
    for ev in events:
        if isinstance(ev, AttemptStarted):
            started[ev.generation] = (plain(ev.region), ev.ts)
        elif isinstance(ev, AttemptEnded):
            ended[ev.generation] = ev.ended_at if isinstance(ev.ended_at, int | float) else ev.ts
    spans = [(g, region, t0, max(t0, ended.get(g, end))) for g, (region, t0) in sorted(started.items())]
    return spans[-MAX_MARKS:]


def timeline_svg(events: Iterable[Event], now: float, live: bool) -> bytes:
    """Attempts as bars on their region's row over the run's wall time (seconds since it
    started); each fault a red line, each incident's outage shaded to its first step after
    the restore (its RTO), each restore (fence) a green mark with the step it restored.
    ``live``: an open attempt runs to ``now``, else to the journal's last line."""
    evs = list(events)
    if not evs:
        return message_svg("no journal yet")
    t0 = next((e.ts for e in evs if isinstance(e, RunStarted)), evs[0].ts)
    end = now if live else max(e.ts for e in evs)
    spans = _spans(evs, end)
    if not spans:
        return message_svg("no attempt started yet")
    plt = _pyplot()
    import matplotlib

    with _DRAWING, matplotlib.rc_context(_RC):
        regions = sorted({region for _, region, _, _ in spans})
        colours = report.region_colours(regions)
        row = {r: i for i, r in enumerate(regions)}
        fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * len(regions)), constrained_layout=True)
        for gen, region, a, b in spans:
            ax.broken_barh([(a - t0, max(b - a, 1e-3))], (row[region] - 0.35, 0.7), color=colours[region], alpha=0.85)
            ax.text((a + b) / 2 - t0, row[region], f"g{gen}", ha="center", va="center", fontsize=7, color="white")
        for ev in [e for e in evs if isinstance(e, FaultInjected)][-MAX_MARKS:]:
            ax.axvline(ev.ts - t0, color="red", ls="--", lw=0.9)
            ax.annotate(
                plain(ev.kind, 30),
                (ev.ts - t0, 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
                color="red",
            )
        for ev in [e for e in evs if isinstance(e, IncidentRecorded)][-MAX_MARKS:]:
            back = ev.first_step_at if isinstance(ev.first_step_at, int | float) else None
            if back is not None and back > ev.failed_at:
                ax.axvspan(ev.failed_at - t0, back - t0, color="red", alpha=0.12)
        for ev in [e for e in evs if isinstance(e, Fence)][-MAX_MARKS:]:
            ax.plot([ev.ts - t0], [len(regions) - 0.5], marker="v", color="green")
            ax.annotate(
                f"restore {ev.restored_step}",
                (ev.ts - t0, len(regions) - 0.5),
                fontsize=7,
                color="green",
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
            )
        ax.set_yticks(range(len(regions)), labels=regions)
        ax.set_ylim(-0.6, len(regions) - 0.2)
        ax.set_xlim(0, max(end - t0, 1.0))
        ax.set_xlabel("seconds since the run started")
        ax.grid(axis="x", alpha=0.3)
        return _svg(fig, plt)
