"""A run's page: where each of its facts already comes from, put together.

``action=status``'s summary (``summarize``: state, region, step, controller, goodput), the
incident report's rows (``report.build``: fault, decision, RTO, lost steps per incident),
each store's newest verified checkpoint (``checkpoints``), and what neither command
shows: the standby's state, the drills asked, the objectives, and a stop or drill asked
and not yet taken by the controller. Everything is text from files someone else wrote:
each value is cut to a bounded line here, and the page escapes it.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.commands import report
from orchestrator.commands.goodput_text import goodput_lines
from orchestrator.commands.status import controller_state, controller_text, pid_running_here, resume_line, summarize
from orchestrator.console.checkpoints import StoreCheckpoint, store_checkpoints
from orchestrator.console.runs import Stamp, progress_of, run_href, stamp
from orchestrator.console.text import age, clock, cut, seconds
from orchestrator.control.stopreq import DRILL_NAME, STOP_NAME, StopRequest, peek_request
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    DrillRequested,
    Event,
    PoolJoined,
    PoolLaunched,
    PoolTaken,
    StandbyActivated,
    StandbyFailed,
    StandbyLost,
    StandbyReady,
)
from orchestrator.runstate.journal import read_typed
from orchestrator.runstate.runfiles import DamagedFile
from orchestrator.runstate.state import planned_total
from orchestrator.wire.faults import DRILL_FAULTS

# The most rows of a table on the page: the newest are kept.
MAX_ROWS = 200


@dataclass(frozen=True)
class Facts:
    """What a run's journal, result.json and loss series tell, read once while they stay
    as they were (``stamps``)."""

    stamps: tuple[Stamp, ...]
    events: tuple[Event, ...]
    report: report.Report | None
    stores: dict[str, StoreCheckpoint] = field(default_factory=dict)


def stamps_of(run_dir: str) -> tuple[Stamp, ...]:
    return tuple(
        stamp(p)
        for p in (
            rundir.journal_path(run_dir),
            rundir.result_path(run_dir),
            f"{run_dir}/{rundir.LOSS_NAME}",
        )
    )


class FactsCache:
    """Each run's facts, read again when one of its files changed: a page polled every 2 s
    reads a long run's journal once, not three times a poll."""

    def __init__(self, most: int = 64) -> None:
        self._kept: dict[str, Facts] = {}
        self._most = most
        self._lock = threading.Lock()

    def facts(self, run_dir: str) -> Facts:
        stamps = stamps_of(run_dir)
        with self._lock:
            kept = self._kept.get(run_dir)
        if kept is not None and kept.stamps == stamps:
            return kept
        events = tuple(read_typed(rundir.journal_path(run_dir)))
        facts = Facts(stamps, events, report.build(run_dir), store_checkpoints(events))
        with self._lock:
            if len(self._kept) >= self._most:
                self._kept.pop(next(iter(self._kept)))
            self._kept[run_dir] = facts
        return facts


# --- the standby, the drills, the objectives (pure) ------------------------------------------


def standby_lines(events: Iterable[Event], config: dict[str, Any]) -> list[str]:
    """The standby's story, newest last: ready, failed, lost or taken, and a pool's share;
    one line saying there is none when the run has no standby."""
    lines: list[str] = []
    for ev in events:
        at = clock(ev.ts)
        if isinstance(ev, StandbyReady):
            lines.append(
                f"{at}  ready in {cut(ev.region, 100)} (cluster {cut(ev.cluster, 100)}, attempt g{ev.generation})"
            )
        elif isinstance(ev, StandbyFailed):
            lines.append(f"{at}  failed in {cut(ev.region, 100)}: {cut(ev.error)}")
        elif isinstance(ev, StandbyLost):
            lines.append(f"{at}  lost in {cut(ev.region, 100)}")
        elif isinstance(ev, StandbyActivated):
            lines.append(f"{at}  taken over in {cut(ev.region, 100)} at a failover (attempt g{ev.generation})")
        elif isinstance(ev, PoolJoined):
            lines.append(f"{at}  waits on pool {cut(ev.pool, 100)}'s standby in {cut(ev.region, 100)}")
        elif isinstance(ev, PoolLaunched):
            how = "up" if ev.error is None else f"failed: {cut(ev.error)}"
            lines.append(f"{at}  launched pool {cut(ev.pool, 100)}'s standby in {cut(ev.region, 100)}: {how}")
        elif isinstance(ev, PoolTaken):
            how = "taken" if ev.taken else f"not taken ({cut(ev.reason)})"
            lines.append(f"{at}  pool {cut(ev.pool, 100)}'s standby in {cut(ev.region, 100)}: {how}")
    if lines:
        return lines[-10:]
    recovery = config.get("recovery") if isinstance(config.get("recovery"), dict) else {}
    if recovery.get("standby") or recovery.get("standby_pool"):
        return ["none up yet"]
    return ["none (recovery.standby=false)"]


def drill_rows(events: Iterable[Event]) -> list[list[str]]:
    """Each drill asked of the run: when, the fault, where, who asked, from where, and
    whether the controller refused it."""
    rows = [
        [
            clock(ev.ts),
            cut(ev.kind, 64),
            cut(ev.region, 100),
            cut(ev.who),
            cut(ev.source or "cli", 16),
            f"refused: {cut(ev.refused)}" if ev.refused else "injected",
        ]
        for ev in events
        if isinstance(ev, DrillRequested)
    ]
    return rows[-MAX_ROWS:]


def objective_rows(result: dict[str, Any] | None, config: dict[str, Any]) -> tuple[list[list[str]], str]:
    """chaos.objectives as judged in result.json, or their limits while the run goes on;
    and one line saying which."""
    judged = (result or {}).get("objectives")
    if isinstance(judged, dict) and isinstance(judged.get("checked"), list):
        rows = [
            [
                cut(c.get("objective"), 64),
                cut(c.get("limit"), 100),
                cut(c.get("measured"), 100),
                "met" if c.get("met") else "missed" + (f" ({cut(c.get('why'))})" if c.get("why") else ""),
            ]
            for c in judged["checked"][:20]
            if isinstance(c, dict)
        ]
        return rows, "all met" if judged.get("met") else "missed"
    chaos = config.get("chaos") if isinstance(config.get("chaos"), dict) else {}
    limits = chaos.get("objectives") if isinstance(chaos.get("objectives"), dict) else {}
    rows = [[cut(k, 64), cut(v, 100), "-", "judged at the run's end"] for k, v in limits.items() if v is not None]
    if not rows:
        return [], "none set (chaos.objectives)"
    if result is not None:
        return rows, f"not judged: the run ended {cut(result.get('status'), 20)}"
    return rows, "judged when the run ends"


def incident_rows(rep: report.Report | None) -> list[list[str]]:
    """The incident report's rows, as ``action=report`` prints them."""
    if rep is None:
        return []
    return [
        [
            f"{r.at_s:.1f}",
            cut(r.fault, 100),
            cut(r.failure, 64),
            seconds(r.detected_after_s),
            cut(r.decision, 100),
            f"{cut(r.from_region, 100)} -> {cut(r.to_region, 100)}",
            "-" if r.restored_step is None else str(r.restored_step),
            "-" if r.lost_steps is None else str(r.lost_steps),
            seconds(r.rto_s),
        ]
        for r in rep.rows[-MAX_ROWS:]
    ]


def store_rows(stores: dict[str, StoreCheckpoint], config: dict[str, Any], now: float) -> list[list[str]]:
    """Every region's store the run's config names or its journal wrote to: its URL, its
    newest verified checkpoint and that checkpoint's age, the last copy's lag."""
    cloud = config.get("cloud") if isinstance(config.get("cloud"), dict) else {}
    regions = cloud.get("regions") if isinstance(cloud.get("regions"), dict) else {}
    names = list(dict.fromkeys([*map(str, regions), *stores]))[:50]
    rows = []
    for name in names:
        rc = regions.get(name) if isinstance(regions.get(name), dict) else {}
        s = stores.get(name, StoreCheckpoint(name))
        rows.append(
            [
                cut(name, 100),
                cut(rc.get("store"), 200),
                "-" if s.step is None else str(s.step),
                "-" if s.at is None else f"{age(s.age_s(now))} ago",
                "-" if s.lag_s is None else f"{s.lag_s:.2f}s",
                str(s.skipped) if s.skipped else "",
            ]
        )
    return rows


def pending_line(run_dir: str) -> str:
    """A stop, cancel or drill asked and not yet taken by the controller, or ""."""
    lines = []
    for name in (STOP_NAME, DRILL_NAME):
        req: StopRequest | None = peek_request(run_dir, name)
        if req is not None:
            what = req.action if req.fault is None else f"drill {cut(req.fault.get('kind'), 64)}"
            lines.append(
                f"{what} asked ({cut(req.who())}, from the {'console' if req.source == 'console' else 'command line'}) "
                f"at {clock(req.at)}; waiting for its controller"
            )
    return "; ".join(lines)


def command_lines(home: str, run_id: str) -> list[tuple[str, str]]:
    """The commands that act on the run from a terminal, as a user types them."""
    where = f"run_id={shlex.quote(run_id)} home={shlex.quote(home)}"
    return [
        ("status", f"python -m orchestrator action=status {where}"),
        ("follow", f"python -m orchestrator action=watch {where}"),
        ("resume", resume_line(home, shlex.quote(run_id))),
        ("stop", f"python -m orchestrator action=stop {where}"),
        ("cancel", f"python -m orchestrator action=cancel {where}"),
        ("drill", f"python -m orchestrator action=drill {where} fault=kill_region"),
        ("report", f"python -m orchestrator action=report {where}"),
    ]


# --- the page's data --------------------------------------------------------------------------


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def run_detail(home: str, run_id: str, now: float, cache: FactsCache) -> dict[str, Any] | None:
    """The run's page, as data: None when there is no such run. DamagedFile (a file that
    is not one of ours) goes to the caller, which says so."""
    run_dir = rundir.run_path(home, run_id)
    rundir.check_run_folder(run_dir)
    facts = cache.facts(run_dir)
    # As action=status asks: whether a controller holds the run, of a run not ended alone.
    ended = facts.stamps[1] is not None
    alive = None if ended else rundir.controller_alive(run_dir)
    s = summarize(run_dir, now if alive else None)
    if s is None:
        return None
    note = ""
    controller = ""
    if s["result"] is None:
        if ended:  # its result.json withdrawn meanwhile (a resume): ask now
            alive = rundir.controller_alive(run_dir)
        s["state"], note_or_none = controller_state(s["state"], alive, run_id, home)
        note = note_or_none or ""
        if s["controller"] is not None:
            supervised = rundir.controller_alive(run_dir, rundir.SUPERVISOR_LOCK)
            controller = controller_text(s["controller"], alive, pid_running_here(s["controller"]), supervised)
    config = s["config"] if isinstance(s["config"], dict) else {}
    job, cloud = _section(config, "job"), _section(config, "cloud")
    # As action=status shows it: the progress's total, else what the config plans.
    total = s["total"] if s["total"] is not None else planned_total(config)
    step_text = "-" if s["step"] is None else str(s["step"]) + ("" if total is None else f"/{total}")
    objectives, objectives_note = objective_rows(s["result"], config)
    result = s["result"] or {}
    regions = _section(cloud, "regions")
    return {
        "run_id": cut(run_id, 255),
        "href": run_href(run_id),
        "status": cut(s["state"], 40),
        "reason": cut(result.get("reason")) if result.get("reason") else "",
        "note": cut(note) if note else "",
        "job": cut(job.get("name"), 100),
        "cloud": cut(cloud.get("name"), 100),
        "region": cut(s["region"], 100),
        "attempt": "-" if s["generation"] is None else str(s["generation"]),
        "step": step_text,
        "progress": progress_of(s["step"], total),
        "controller": cut(controller) if controller else "",
        # action=status's two lines, without their labels (the page has its own).
        "goodput": [cut(line.split(None, 1)[-1]) for line in goodput_lines(s.get("goodput"))],
        "pending": pending_line(run_dir),
        "standby": standby_lines(facts.events, config),
        "live": s["result"] is None and alive is True,
        "drill_faults": [str(f) for f in DRILL_FAULTS],
        "regions": [cut(r, 100) for r in list(regions)[:50]],
        "commands": command_lines(home, run_id),
        "objectives_note": objectives_note,
        # Changes when the plots would: the page's script fetches them again then.
        "plot": "-".join("0" if st is None else f"{st[1]}.{st[2]}" for st in facts.stamps),
        "tables": {
            "stores": store_rows(facts.stores, config, now),
            "incidents": incident_rows(facts.report),
            "objectives": objectives,
            "drills": drill_rows(facts.events),
        },
    }


def page_fields(detail: dict[str, Any]) -> dict[str, str]:
    """The page's one-line fields by element id, as the script puts them in place."""
    return {
        "f-status": detail["status"],
        "f-reason": detail["reason"] or detail["note"],
        "f-region": detail["region"],
        "f-attempt": detail["attempt"],
        "f-step": detail["step"],
        "f-controller": detail["controller"] or "-",
        "f-pending": detail["pending"],
        "f-goodput": detail["goodput"][0] if detail["goodput"] else "-",
        "f-cost": detail["goodput"][1] if len(detail["goodput"]) > 1 else "-",
        "f-standby": "\n".join(detail["standby"]),
        "f-objectives-note": detail["objectives_note"],
    }


def detail_json(detail: dict[str, Any]) -> dict[str, Any]:
    """``/api/runs/<id>``: the detail, with the fields the page's script updates."""
    return {
        **detail,
        "commands": [{"name": n, "line": c} for n, c in detail["commands"]],
        "fields": page_fields(detail),
    }


def read_error(exc: DamagedFile) -> str:
    return cut(f"{exc}; {exc.fix}")
