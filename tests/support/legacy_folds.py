"""The three folds of the journal as they were before orchestrator.runstate: the oracle
that tests/unit/orchestrator/runstate/test_events.py holds the one fold to. Copied, not maintained."""

from __future__ import annotations

import os
from typing import Any

from orchestrator.commands.report import _DECISION_FOR, Report, Row
from orchestrator.runstate.events import runtime_kind
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.journal import read_events
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.replay import OpenAttempt, Replayed
from orchestrator.runstate.result import read_result
from recovery.detection import Failure, FailureKind
from recovery.policy import Action, Decision


def controller_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if runtime_kind(e) is None]


_INCIDENT_FIELDS = (
    "kind",
    "from_region",
    "to_region",
    "failed_at",
    "detected_at",
    "last_step",
    "restored_step",
    "first_step_at",
    "generation",
)


def incident_from(ev: dict[str, Any]) -> Incident:
    return Incident(**{k: ev.get(k) for k in _INCIDENT_FIELDS})  # type: ignore[arg-type]


def _same(a: Incident, b: Incident) -> bool:
    return (a.kind, a.generation, a.failed_at) == (b.kind, b.generation, b.failed_at)


def legacy_replay(events: list[dict[str, Any]]) -> Replayed:
    r = Replayed()
    attempts: dict[int, OpenAttempt] = {}
    ended: set[int] = set()
    provisioned_gens: set[int] = set()
    for ev in events:
        if runtime_kind(ev) is not None:
            continue  # the runtime's word: a forged transition, fence or teardown changes nothing
        t = ev.get("type")
        r.last_ts = max(r.last_ts, float(ev.get("ts", 0.0)))
        gen = ev.get("generation")
        if isinstance(gen, int):
            r.generation = max(r.generation, gen)
        step = ev.get("step", ev.get("last_step"))
        if isinstance(step, int) and t in ("fault_injected", "attempt_ended", "incident", "failure_detected"):
            r.last_step = max(r.last_step, step)
        if t == "run_started":
            r.run_id = str(ev.get("run_id", ""))
            r.started_at = float(ev.get("ts", 0.0))
        elif t == "transition":
            r.state = RunState(str(ev["to"]))
        elif t == "attempt_started":
            attempts[int(ev["generation"])] = OpenAttempt(
                int(ev["generation"]), str(ev["region"]), started_at=float(ev["ts"])
            )
        elif t == "provisioned":
            r.leftover[str(ev["cluster"])] = ev
            g = ev.get("generation")
            if ev.get("purpose", "attempt") == "attempt" and isinstance(g, int):
                provisioned_gens.add(g)
                if g in attempts:
                    attempts[g].cluster = ev
        elif t == "provision_failed" and isinstance(ev.get("generation"), int):
            provisioned_gens.add(int(ev["generation"]))
        elif t == "teardown":
            r.leftover.pop(str(ev.get("cluster")), None)
        elif t == "runtime_started" and isinstance(gen, int) and gen in attempts:
            attempts[gen].runtime_pid = int(ev["pid"])
        elif t == "fences_read":
            # The stores held a fence this high: the next attempt goes above it.
            r.generation = max(r.generation, int(ev["generation_floor"]))
        elif t == "fence" and isinstance(gen, int):
            r.lineage = r.lineage.then(gen, int(ev.get("restored_step", 0)))
            if gen in attempts:
                attempts[gen].restored_step = int(ev.get("restored_step", 0))
        elif t == "attempt_ended":
            ended.add(int(ev["generation"]))
            r.attempts.append({k: v for k, v in ev.items() if k not in ("ts", "type")})
        elif t == "decision":
            failure = Failure(FailureKind(str(ev["failure"])), str(ev.get("failed_region", "")), "")
            decision = Decision(Action(str(ev["action"])), ev.get("region"), str(ev.get("reason", "")))
            r.history = r.history.after(failure, decision, float(ev["ts"]))
            r.next_region = decision.region
        elif t == "incident_opened":
            r.pending = incident_from(ev)
        elif t == "incident":
            inc = incident_from(ev)
            r.incidents.append(inc)
            if r.pending is not None and _same(r.pending, inc):
                r.pending = None
        elif t == "run_finished":
            r.finished = True
    open_gens = [g for g in attempts if g not in ended]
    if open_gens:
        r.open_attempt = attempts[max(open_gens)]
    for g in sorted(open_gens):
        if g not in provisioned_gens:
            r.launching.append((attempts[g].region, g))
    return r


def legacy_summarize(run_dir: str) -> dict[str, Any] | None:
    """The run as the journal (and result.json, once written) tells it."""
    events = list(read_events(os.path.join(run_dir, "journal.jsonl")))
    result = read_result(run_dir)
    if not events and result is None:
        return None
    s: dict[str, Any] = {
        "state": "PENDING",
        "region": None,
        "generation": 0,
        "step": None,
        "total": None,
        "last_checkpoint": None,
        "replications": 0,
        "last_lag_s": None,
        "incidents": [],
        "attempts": [],
        "skipped": [],
        "config": {},
    }
    for ev in events:
        t = ev.get("type")
        kind = runtime_kind(ev)
        if kind is not None:
            # The runtime's replications and skips count as the controller's do; nothing
            # else it says moves the state shown here.
            t = kind if kind in ("replicated", "checkpoint_skipped") else None
        if t == "run_started":
            s["config"] = ev.get("config", {})
            s["run_id"] = ev.get("run_id")
        elif t == "transition":
            s["state"] = ev.get("to")
        elif t == "attempt_started":
            s["region"], s["generation"] = ev.get("region"), ev.get("generation")
            s["attempts"].append({"generation": ev.get("generation"), "region": ev.get("region")})
        elif t == "replicated":
            s["replications"] += 1
            s["last_lag_s"] = ev.get("lag_s")
        elif t == "incident":
            s["incidents"].append(ev)
        elif t == "checkpoint_skipped":
            s["skipped"].append(ev)
        elif t == "failure_detected" and s["attempts"]:
            s["attempts"][-1]["outcome"] = ev.get("kind")
    s["result"] = result
    return s


def legacy_build(run_dir: str) -> Report | None:
    events = controller_events(list(read_events(os.path.join(run_dir, "journal.jsonl"))))
    if not events:
        return None
    result = read_result(run_dir)
    started = next((float(e["ts"]) for e in events if e["type"] == "run_started"), float(events[0]["ts"]))
    run_id = next((str(e.get("run_id")) for e in events if e["type"] == "run_started"), os.path.basename(run_dir))
    state = next((str(e["to"]) for e in reversed(events) if e["type"] == "transition"), "PENDING")
    rep = Report(run_id=run_id, status=(result or {}).get("status", state), result=result)
    rep.reason = (result or {}).get("reason", "")
    rep.traceback = (result or {}).get("error_traceback")
    rep.faults = [e for e in events if e["type"] == "fault_injected"]
    rep.attempts = [e for e in events if e["type"] == "attempt_ended"]
    decisions = [e for e in events if e["type"] == "decision"]
    incidents = [e for e in events if e["type"] == "incident"]
    for inc in incidents:
        failed_at = float(inc["failed_at"])
        fault = _fault_before(rep.faults, failed_at)
        decision = next(
            (
                d
                for d in decisions
                if float(d["ts"]) >= float(inc["detected_at"]) - 1e-3 and d.get("failure") == inc["kind"]
            ),
            None,
        )
        rep.rows.append(
            Row(
                at_s=round(failed_at - started, 3),
                fault=fault,
                failure=str(inc["kind"]),
                detected_after_s=inc.get("detected_after_s"),
                decision=str(decision["action"]) if decision else _DECISION_FOR.get(str(inc["kind"]), "-"),
                from_region=str(inc["from_region"]),
                to_region=inc.get("to_region"),
                restored_step=inc.get("restored_step"),
                lost_steps=inc.get("lost_steps"),
                rto_s=inc.get("rto_s"),
            )
        )
    rep.rows.sort(key=lambda r: r.at_s)
    return rep


def _fault_before(faults: list[dict[str, Any]], failed_at: float) -> str:
    # The fault that caused a failure fired at (or just before) the failure's time.
    near = [f for f in faults if float(f["ts"]) <= failed_at + 1.0]
    if not near:
        return "-"
    f = max(near, key=lambda f: float(f["ts"]))
    where = f.get("during") or f.get("trigger") or f"step {f.get('step')}"
    return f"{f['kind']} ({where})"


def _fault_before(faults: list[dict[str, Any]], failed_at: float) -> str:
    near = [f for f in faults if float(f["ts"]) <= failed_at + 1.0]
    if not near:
        return "-"
    f = max(near, key=lambda f: float(f["ts"]))
    where = f.get("during") or f.get("trigger") or f"step {f.get('step')}"
    return f"{f['kind']} ({where})"
