"""Synthetic run folders for the console's tests and its benchmark: journals of typed
events (``orchestrator.runstate.events``) as a controller writes them, a loss series and,
for an ended run, result.json, made without Ray.

``journal`` emits through ``Journal.emit`` (each event stamped now, as the controller's);
``make_run`` writes its events with the times it gives them (a run started an hour ago
shows its checkpoints' real ages), as lines ``Journal.emit`` would have written then.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from orchestrator.config.compose import compose
from orchestrator.config.saved import saved_json
from orchestrator.config.schema import NotifyConfig
from orchestrator.runstate import events as E
from orchestrator.runstate import rundir
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.goodput import journal_goodput
from orchestrator.runstate.journal import Journal, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.losses import append_losses
from orchestrator.runstate.objectives import judge
from orchestrator.runstate.result import build_result, record_from
from orchestrator.runstate.state import fold
from recovery.detection import FailureKind
from recovery.policy import Action
from tests.support.sealed import sealed_progress

REGIONS = ("local-a", "local-b", "local-c")
# The shapes make_run knows: how the run went.
SHAPES = ("clean", "failover", "running", "failed", "interrupted", "recovering")


def journal(run_dir: Path, *events: E.Event) -> Journal:
    """A journal as the controller writes one: each typed event through ``Journal.emit``."""
    j = Journal(str(run_dir / rundir.JOURNAL_NAME))
    for event in events:
        j.emit(event)
    return j


def config(home: Path, job: str = "digits", steps: int = 500, **chaos: Any) -> dict[str, Any]:
    """The journal's copy of a run's config: three priced local regions, each with a store."""
    regions = {
        r: {"store": f"file://{home}/stores/{r}", "hourly_cost": round(0.2 + 0.1 * i, 2), "nodes": 1}
        for i, r in enumerate(REGIONS)
    }
    return {
        "job": {"name": job, "steps": steps},
        "cloud": {"name": "local", "regions": regions, "candidates": list(REGIONS)},
        "recovery": {"standby": False},
        "chaos": {"faults": [], "objectives": {"max_rto_s": None, "max_lost_steps": None, "exact": None}, **chaos},
    }


def rt(t: float, kind: str, gen: int, **fields: Any) -> E.RuntimeReport:
    """A runtime report journaled half a second after the runtime made it."""
    return E.RuntimeReport(ts=t + 0.5, kind=kind, fields={"time": t, "generation": gen, "by": "runtime", **fields})


def _checkpoints(t: float, gen: int, region: str, steps: range, step_s: float, t_step0: int) -> list[E.Event]:
    out: list[E.Event] = []
    for step in steps:
        at = t + (step - t_step0) * step_s
        out.append(rt(at, "checkpoint_committed", gen, step=step, region=region, bytes=90_000, stall_s=0.01))
        for other in REGIONS:
            if other != region:
                out.append(rt(at + 0.4, "replicated", gen, step=step, to=other, lag_s=0.4, **{"from": region}))
    return out


def _attempt(t: float, gen: int, region: str, restored: int) -> list[E.Event]:
    return [
        E.Transition(ts=t, to=RunState.PROVISIONING, region=region, generation=gen),
        E.AttemptStarted(ts=t, generation=gen, region=region),
        E.Provisioned(ts=t + 8.0, region=region, cluster=f"c-{region}-g{gen}", provision_s=8.0, generation=gen),
        E.Transition(ts=t + 9.0, to=RunState.RUNNING, region=region, generation=gen),
        rt(t + 15.0, "train_started", gen, restored_step=restored, world_size=1, workers=1, restore_s=0.1),
    ]


def events_of(home: Path, run_id: str, shape: str, t0: float, job: str = "digits", steps: int = 500) -> list[E.Event]:
    """The journal of a run of ``shape`` (SHAPES) that started at ``t0``: a step every 0.1 s,
    a checkpoint every 50 steps, a kill_region at step 60 for the shapes that fail over."""
    if shape not in SHAPES:
        raise ValueError(f"shape {shape!r}: one of {', '.join(SHAPES)}")
    step_s = 0.1
    fails_over = shape in ("failover", "recovering", "failed")
    chaos = {"faults": [{"kind": "kill_region", "at_step": 60}]} if fails_over else {}
    if shape == "failover":
        chaos["objectives"] = {"max_rto_s": 60.0, "max_lost_steps": 20, "exact": None}
    cfg = config(home, job, steps, **chaos)
    cfg["recovery"]["standby"] = shape == "running"
    ev: list[E.Event] = [
        E.RunStarted(ts=t0, run_id=run_id, pid=4242, host="console-test", config=cfg, candidates=REGIONS),
        E.FencesRead(ts=t0 + 0.1, generation_floor=0),
        *_attempt(t0 + 0.2, 1, "local-a", 0),
    ]
    t_train = t0 + 15.2
    if not fails_over:
        last = {"clean": steps, "running": steps // 2, "interrupted": steps // 2}[shape]
        ev += _checkpoints(t_train, 1, "local-a", range(50, last + 1, 50), step_s, 0)
        end = t_train + last * step_s
        if shape == "running":
            ev += [
                E.StandbyReady(ts=t0 + 20.0, region="local-b", generation=2, cluster="c-local-b-g2"),
                rt(end, "losses", 1, points=[]),
            ]
            return ev
        ev += [E.AttemptEnded(ts=end + 0.5, generation=1, region="local-a", restored_step=0, last_step=last)]
        ev += [E.Teardown(ts=end + 1.0, cluster="c-local-a-g1", seconds=0.5)]
        if shape == "interrupted":
            reason = "stopped by action=stop (me@here pid 7): clusters torn down, checkpoints kept"
            ev += [E.Transition(ts=end + 1.1, to=RunState.INTERRUPTED, reason=reason, region="local-a", generation=1)]
        else:
            ev += [E.Transition(ts=end + 1.1, to=RunState.SUCCEEDED, region="local-a", generation=1)]
            ev += [E.RunFinished(ts=end + 1.2, status="SUCCEEDED", final_step=last)]
        return ev
    ev += _checkpoints(t_train, 1, "local-a", range(50, 51), step_s, 0)
    t_fail = t_train + 60 * step_s
    ev += [
        E.FaultInjected(ts=t_fail, kind="kill_region", index=0, step=60, extra={"region": "local-a", "generation": 1}),
        E.FailureDetected(
            ts=t_fail + 0.3,
            kind="cluster_lost",
            region="local-a",
            detail="the cluster's processes are gone (chaos kill_region)",
            detected_after_s=0.3,
            last_step=60,
            health="DOWN",
        ),
        E.DecisionMade(
            ts=t_fail + 0.4,
            action=Action.FAILOVER,
            failure=FailureKind.CLUSTER_LOST,
            region="local-b",
            reason="region lost",
            failed_region="local-a",
        ),
    ]
    incident = {
        "kind": "cluster_lost",
        "from_region": "local-a",
        "failed_at": t_fail,
        "detected_at": t_fail + 0.3,
        "to_region": "local-b",
        "last_step": 60,
        "generation": 1,
        "detected_after_s": 0.3,
    }
    ev += [
        E.IncidentOpened(ts=t_fail + 0.5, **incident),
        E.Transition(ts=t_fail + 0.5, to=RunState.RECOVERING, failure="cluster_lost", to_region="local-b"),
        E.AttemptEnded(ts=t_fail + 1.0, generation=1, region="local-a", restored_step=0, last_step=60),
        E.Teardown(ts=t_fail + 1.5, cluster="c-local-a-g1", seconds=0.5),
    ]
    if shape == "recovering":
        return ev
    t2 = t_fail + 2.0
    ev += [E.Fence(ts=t2, generation=2, restored_step=50, stores=REGIONS), *_attempt(t2, 2, "local-b", 50)]
    ev.insert(-3, E.ProvisionRetry(ts=t2 + 4.0, region="local-b", error="no capacity (simulated)", retry=1))
    if shape == "failed":
        ev += [
            E.FailureDetected(
                ts=t2 + 20.0, kind="cluster_lost", region="local-b", detail="no heartbeat for 30s", last_step=50
            ),
            E.IncidentRecorded(ts=t2 + 21.0, **{**incident, "restored_step": 50, "lost_steps": 10, "rto_s": None}),
            E.AttemptEnded(ts=t2 + 21.0, generation=2, region="local-b", restored_step=50, last_step=50),
            E.Transition(ts=t2 + 22.0, to=RunState.FAILED, reason="cluster_lost in local-b after 1 recovery"),
            E.RunFinished(ts=t2 + 22.5, status="FAILED", final_step=50),
        ]
        return ev
    first = t2 + 15.0
    ev += [
        E.IncidentRecorded(
            ts=first + 1.0,
            **incident,
            restored_step=50,
            first_step_at=first,
            lost_steps=10,
            rto_s=round(first - t_fail, 3),
        )
    ]
    ev += _checkpoints(first, 2, "local-b", range(100, steps + 1, 50), step_s, 50)
    end = first + (steps - 50) * step_s
    ev += [
        E.AttemptEnded(ts=end + 0.5, generation=2, region="local-b", restored_step=50, last_step=steps),
        E.Teardown(ts=end + 1.0, cluster="c-local-b-g2", seconds=0.5),
        E.Transition(ts=end + 1.1, to=RunState.SUCCEEDED, region="local-b", generation=2),
        E.RunFinished(ts=end + 1.2, status="SUCCEEDED", final_step=steps),
    ]
    return ev


def live_run(home: Path, run_id: str, job: str = "digits") -> Path:
    """A run training now in local-a: its journal as the controller writes it (emitted
    now), a checkpoint in each store, and its config.json (a drill checks against it)."""
    run_dir = Path(rundir.run_path(str(home), run_id))
    now = time.time()
    journal(
        run_dir,
        E.RunStarted(run_id=run_id, pid=1, host="box", config=config(home, job)),
        E.Transition(to=RunState.PROVISIONING, region="local-a", generation=1),
        E.AttemptStarted(generation=1, region="local-a"),
        E.Provisioned(region="local-a", cluster="c1", provision_s=3.0, generation=1),
        E.Transition(to=RunState.RUNNING, region="local-a", generation=1),
        rt(now, "train_started", 1, restored_step=0, world_size=1, workers=1),
        rt(now, "checkpoint_committed", 1, step=100, region="local-a"),
        rt(now, "replicated", 1, step=100, to="local-b", lag_s=0.25, **{"from": "local-a"}),
    )
    (run_dir / rundir.CONFIG_NAME).write_bytes(saved_json(compose(["job=digits"]), NotifyConfig()))
    # Its live step, on its control channel, sealed with the attempt's keys as the runtime seals it.
    sealed_progress(run_dir, 1, step=120, total=500)
    return run_dir


def write_events(run_dir: Path, events: list[E.Event]) -> None:
    """Append ``events`` as the journal's lines, with the times they carry."""
    rundir.make_run_dir(str(run_dir))
    lines = "".join(json.dumps(to_json(e)) + "\n" for e in events)
    fd = os.open(run_dir / rundir.JOURNAL_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(lines)


def losses(run_dir: Path, events: list[E.Event]) -> None:
    """loss.jsonl for every attempt's steps, every 5th step, a loss falling with the step."""
    points = []
    for a in fold(events).attempts:
        lo, hi = a.restored_step or 0, a.last_step or 0
        points += [
            {"time": 0.0, "generation": a.generation, "region": a.region, "step": s, "loss": round(2.0 / (1 + s), 5)}
            for s in range(lo + 5, hi + 1, 5)
        ]
    append_losses(str(run_dir), points)


def write_ended_result(run_dir: Path, run_id: str, events: list[E.Event]) -> dict[str, Any] | None:
    """result.json of a run whose journal says it stopped, as the controller writes it, timed
    by the journal (finished at its last line)."""
    view = fold(events)
    if not view.state.stopped:
        return None
    finished = view.last_ts
    last = max([a.last_step or 0 for a in view.attempts], default=0)
    final = {"final_step": last, "metrics": {"accuracy": 0.9}, "weights_sha256": "ab" * 32}
    result = build_result(record_from(view, run_id, final, view.started_at), {})
    result.update(
        finished_at=finished,
        duration_s=round(finished - view.started_at, 3),
        goodput=journal_goodput(events, now=finished).as_dict(),
    )
    limits = view.config.get("chaos", {}).get("objectives", {})
    if result["status"] in ("SUCCEEDED", "FAILED"):
        # chaos.objectives, judged as the controller judges them at the end.
        result["objectives"] = judge(limits.get("max_rto_s"), limits.get("max_lost_steps"), None, result, None)
    (run_dir / rundir.RESULT_NAME).write_text(json.dumps(result, indent=2) + "\n")
    os.chmod(run_dir / rundir.RESULT_NAME, 0o600)
    return result


def make_run(
    home: Path, run_id: str, shape: str = "failover", t0: float = 0.0, job: str = "digits", steps: int = 500
) -> Path:
    """A run folder under ``home`` of ``shape``: its journal, loss series and (an ended
    run's) result.json. ``t0``: when it started (seconds since the epoch)."""
    run_dir = Path(rundir.run_path(str(home), run_id))
    events = events_of(home, run_id, shape, t0, job, steps)
    write_events(run_dir, events)
    # Read back as every reader will: the events as written.
    written = list(read_typed(str(run_dir / rundir.JOURNAL_NAME)))
    losses(run_dir, written)
    write_ended_result(run_dir, run_id, written)
    return run_dir


def make_home(home: Path, runs: int, now: float, shapes: tuple[str, ...] = SHAPES) -> list[str]:
    """``runs`` runs under ``home``, of each shape in turn, one started every 90 s back from
    ``now``; their ids."""
    ids = []
    for i in range(runs):
        shape = shapes[i % len(shapes)]
        run_id = f"digits-{i:05d}-{shape}"
        make_run(home, run_id, shape, t0=now - 90.0 * (i + 1))
        ids.append(run_id)
    return ids
