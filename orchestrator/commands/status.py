"""``action=status``: a run's state, region, step, checkpoints and incidents, from its files."""

from __future__ import annotations

import os
import shlex
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from orchestrator.commands.goodput_text import goodput_lines
from orchestrator.errors import error
from orchestrator.hpo import progress_text as search_text
from orchestrator.runstate import rundir
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import (
    ControllerStoodDown,
    Event,
    NodeLost,
    NodeReplaced,
    RunResumed,
    RunStarted,
    RuntimeReport,
)
from orchestrator.runstate.goodput import journal_goodput
from orchestrator.runstate.journal import read_typed
from orchestrator.runstate.result import read_result, shown_total
from orchestrator.runstate.state import RunView, fold, planned_total
from orchestrator.wire.control import ControlChannel, Invalid, run_control_url
from recovery.keys import AttemptKeys, controller_keys
from recovery.signing import SigningError, run_keys_of

# A run with a journal, no result.json, and no controller holding its lock.
CONTROLLER_DIED = "CONTROLLER_DIED"
# One whose controller here stood down to another (its journal's last line says so).
TAKEN_OVER = "TAKEN_OVER"


@dataclass(frozen=True)
class FromStore:
    """A run read from the control store's mirror into a temporary folder
    (orchestrator/commands/remote.py), not a folder a controller keeps on this machine: no
    lock there says whether its controller lives, its lease in the store does; its live
    step is on the store it was found in, checked with the keys derived from the user's
    control key (never written to disk); and a run no controller drives goes on by a
    takeover, not by a resume here."""

    store: str
    options: dict[str, Any]
    secret: bytes = field(repr=False)
    alive: bool | None  # a verified lease of its controller holds now; None: the lease cannot be read
    go_on: str  # the command that takes it over
    source: str  # where it was read, as status says it


# Why it cannot be told whether a controller lives, by where the run was read.
_NO_LOCK = f"{rundir.LOCK_NAME} cannot be opened"
_NO_LEASE = "its lease in the control store cannot be read"


def _fmt_s(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}s"


def _short(url: str | None) -> str:
    return url or "none"


def summarize(run_dir: str, now: float | None = None, where: FromStore | None = None) -> dict[str, Any] | None:
    """The run as the journal (and result.json, once written) tells it; ``now``: where a
    live run's goodput ends (None: at its journal's last line); ``where``: a run read
    from the control store."""
    events = list(read_typed(rundir.journal_path(run_dir)))
    result = read_result(run_dir)
    if not events and result is None:
        return None
    view = fold(events)
    s: dict[str, Any] = {
        "state": view.status,
        "region": view.current_region,
        "generation": view.current_generation,
        "step": None,
        "total": None,
        "last_checkpoint": None,
        "replications": view.replications,
        "last_lag_s": view.last_lag_s,
        "incidents": [to_json(e) for e in view.incidents],
        "attempts": [a.as_dict() for a in view.attempt_lines],
        "skipped": [to_json(e) for e in view.skipped],
        "config": view.config,
    }
    if view.run_starts:
        s["run_id"] = view.run_starts[-1].run_id
    s["world"] = world_now(events, view.current_generation)
    s["controller"] = last_controller(events)
    if events and isinstance(events[-1], ControllerStoodDown):
        s["stood_down"] = events[-1].reason
        s["stood_down_controller"] = events[-1].controller
    prog = live_progress(run_dir, view, where)
    if where is not None:
        s["source"] = where.source
    if prog and UNVERIFIED in prog:
        s["step"], s["unverified"] = view.last_step or None, prog[UNVERIFIED]
    elif prog:
        s["step"], s["total"] = prog.get("step"), prog.get("total")
        s["last_checkpoint"] = prog.get("last_checkpoint")
        s["search"] = search_text(prog).strip()
    s["result"] = result
    s["goodput"] = run_goodput(events, result, now)
    if result is not None:
        s["state"] = result["status"]
        s["step"] = result["final_step"]
        s["total"] = shown_total(result, s["total"])
        s["last_checkpoint"] = result["final_checkpoint"]
        s["incidents"] = result["incidents"]
    return s


def run_goodput(events: list[Event], result: dict[str, Any] | None, now: float | None = None) -> dict[str, Any] | None:
    """The run's goodput block: its result's (an ended run), else the journal's fold up to
    ``now`` (a live run) or its last line."""
    if result is not None and isinstance(result.get("goodput"), dict):
        return result["goodput"]
    if not events:
        return None
    return journal_goodput(events, now=now).as_dict()


def last_controller(events: list[Event]) -> dict[str, Any] | None:
    """The newest controller the journal names (the last run_started or run_resumed): its
    pid, its machine (None in a journal from before it was written) and since when."""
    for ev in reversed(events):
        if isinstance(ev, RunStarted | RunResumed) and ev.pid is not None:
            return {"pid": ev.pid, "host": ev.host, "since": ev.ts}
    return None


def controller_text(
    c: dict[str, Any],
    alive: bool | None,
    running: bool | None,
    supervised: bool | None,
    where: FromStore | None = None,
) -> str:
    """The controller's line: where it runs, since when, and whether it lives. ``alive``:
    whether it holds the run's lock (None: cannot be told), or, for a run read from the
    control store (``where``), its lease there; ``running``: whether its pid runs on this
    machine (None: another machine's, or not known); ``supervised``: whether a detached
    run's supervisor lives."""
    host = c.get("host") or "an unnamed machine"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(c["since"])) if c.get("since") else "?"
    if alive:
        state = "alive" + (", detached (its supervisor restarts it)" if supervised else "")
        state += " (its lease in the control store holds)" if where is not None else ""
    elif alive is None:
        state = f"cannot tell whether it lives ({_NO_LEASE if where is not None else _NO_LOCK})"
    elif running:
        state = f"gone (pid {c['pid']} runs on this machine, but holds no lock on the run: another process now)"
    else:
        state = "gone" + (", its supervisor resuming it" if supervised else "")
    return f"pid {c['pid']} on {host}, since {since}: {state}"


def pid_running_here(c: dict[str, Any] | None) -> bool | None:
    """Whether the controller's pid runs on this machine; None when it ran on another."""
    if c is None or c.get("host") != socket.gethostname()[:100]:
        return None
    return psutil.pid_exists(int(c["pid"]))


def resume_line(home: str, run_id: str) -> str:
    """The command that takes ``run_id`` on, with the home it lives under."""
    return f"python -m orchestrator action=resume run_id={run_id} home={shlex.quote(str(home))}"


def controller_state(
    state: str, alive: bool | None, run_id: str, home: str, where: FromStore | None = None
) -> tuple[str, str | None]:
    """The status of a run without a result.json, given whether a controller holds its
    lock (or, read from the control store, its lease), and a note: its journal's last
    state while a controller runs; CONTROLLER_DIED, with the command that goes on, once
    none does (whatever the journal's last state)."""
    if alive is False:
        if where is not None:
            return CONTROLLER_DIED, f"no controller holds its lease in the control store; {where.go_on}"
        return CONTROLLER_DIED, f"its controller died; continue it with: {resume_line(home, run_id)}"
    if alive is None:
        return state, f"cannot tell whether its controller runs ({_NO_LEASE if where is not None else _NO_LOCK})"
    return state, None


def world_now(events: list[Event], generation: int | None) -> dict[str, Any]:
    """The newest attempt's worker group (its size, the run's) and its lost nodes."""
    world: dict[str, Any] = {"world_size": None, "workers": None, "lost_nodes": []}
    lost: set[int] = set()
    for ev in events:
        if getattr(ev, "generation", None) != generation and not isinstance(ev, RuntimeReport):
            continue
        if isinstance(ev, RuntimeReport) and ev.kind == "train_started":
            if ev.fields.get("generation") == generation:
                world["world_size"] = ev.fields.get("world_size")
                world["workers"] = ev.fields.get("workers")
        elif isinstance(ev, NodeLost):
            lost.add(ev.node)
        elif isinstance(ev, NodeReplaced):
            lost.discard(ev.node)
    world["lost_nodes"] = sorted(lost)
    return world


def _nodes_line(s: dict[str, Any], cloud: dict[str, Any]) -> str | None:
    """``nodes`` per region and the worker group's size, where the run has either to show."""
    regions = cloud.get("regions") if isinstance(cloud.get("regions"), dict) else {}
    counts = {}
    for name, rc in regions.items():
        n = rc.get("nodes", 1) if isinstance(rc, dict) else 1
        n = n if isinstance(n, int) and n != 1 else (rc.get("num_nodes", 1) if isinstance(rc, dict) else 1)
        counts[name] = n if isinstance(n, int) else 1
    world = s.get("world") or {}
    size, workers, lost = world.get("world_size"), world.get("workers"), world.get("lost_nodes") or []
    if all(n == 1 for n in counts.values()) and (size is None or size == workers):
        return None
    here = s.get("region")
    shown = []
    for name, n in counts.items():
        text = f"{name} {n}"
        if name == here and lost:
            text = f"{name} {n - len(lost)}/{n} (lost: {', '.join(map(str, lost))})"
        shown.append(text)
    group = f"{size}/{workers} workers" if size is not None and workers is not None else "-"
    return f"world      {group}   nodes {', '.join(shown)}"


def _cell(value: Any) -> str:
    # None: not known (a run that failed before it restored anything has no restored step).
    return "-" if value is None else str(value)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else _cell(value)


def incident_row(i: dict[str, Any]) -> str:
    """One incident's row of the table."""
    return (
        f"  {i['kind']:<17}{i['from_region']:<10}{_cell(i.get('to_region') or None):<10}"
        f"{_fmt_s(i.get('detected_after_s')):>9}{_cell(i.get('restored_step')):>9}"
        f"{_cell(i.get('lost_steps')):>6}{_fmt_s(i.get('rto_s')):>8}{_incident_extra(i)}"
    )


def store_note(url: str | None, region: str | None, cloud: dict[str, Any]) -> str:
    """Which region's store a checkpoint is in, where that is not the region the status
    names (one kept in a region the run was lost in, newer than any the next one holds)."""
    owner = store_region(url, cloud.get("regions") if isinstance(cloud.get("regions"), dict) else {})
    return f"  (in {owner}'s store)" if owner is not None and region and owner != region else ""


def store_region(url: str | None, regions: dict[str, Any]) -> str | None:
    """The region whose store (as the journal's copy of the config names it) holds ``url``."""
    for name, rc in regions.items():
        store = rc.get("store") if isinstance(rc, dict) else None
        if url and isinstance(store, str) and store.rstrip("/") and url.startswith(store.rstrip("/") + "/"):
            return str(name)
    return None


def _incident_extra(i: dict[str, Any]) -> str:
    if i.get("kind") != "node_lost":
        return ""
    replaced = i.get("replace_s")
    how = f"replaced in {replaced:.1f}s" if isinstance(replaced, int | float) else "not replaced"
    return f"  node {i.get('node')}, {how}, world {i.get('world_size_before', '?')}->{i.get('world_size_after', '?')}"


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    # The journal's copy of the config is for display: a damaged section shows as '?'.
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def render(run_id: str, s: dict[str, Any]) -> str:
    job = _section(s["config"], "job")
    cloud = _section(s["config"], "cloud")
    total = s["total"] if s["total"] is not None else planned_total(s["config"])
    lines = [
        f"run        {run_id}",
        *([f"source     {s['source']}"] if s.get("source") else []),
        f"status     {s['state']}"
        + (f"  ({s['result']['reason']})" if s["result"] and s["result"].get("reason") else "")
        + (f"  ({s['note']})" if s.get("note") else ""),
        f"job        {job.get('name', '?')}  on cloud {cloud.get('name', '?')}",
        f"region     {s['region'] or '-'}  (attempt {s['generation']})",
        *([f"controller {s['controller_text']}"] if s.get("controller_text") else []),
        f"step       {s['step'] if s['step'] is not None else '-'}"
        + ("" if total is None else f"/{total}")
        + (f"  (from the journal; {s['unverified']}: not shown)" if s.get("unverified") else ""),
        *([nodes] if (nodes := _nodes_line(s, cloud)) else []),
        f"checkpoint {_short(s['last_checkpoint'])}{store_note(s['last_checkpoint'], s['region'], cloud)}",
        f"replicas   {s['replications']} copies"
        + (f", last lag {s['last_lag_s']:.2f}s" if s["last_lag_s"] is not None else ""),
        *goodput_lines(s.get("goodput")),
    ]
    r = s["result"]
    if r is not None:
        metrics = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in r["metrics"].items())
        lines.append(f"metrics    {metrics or '-'}")
        if r.get("weights_sha256") or not r.get("checkpoint_sha256"):
            lines.append(f"weights    sha256 {r['weights_sha256'] or '-'}")
        else:
            lines.append(f"checkpoint sha256 {r['checkpoint_sha256']}")
        lines.append(f"duration   {r['duration_s']:.1f}s over {r['attempts']} attempt(s)")
    if r is not None and r.get("trials"):
        lines.extend(trial_rows(r))
    elif s.get("search"):
        lines.append(f"search     {s['search']}")
    if s["skipped"]:
        lines.append(f"skipped    {len(s['skipped'])} checkpoint(s) that did not verify:")
        for ev in s["skipped"][:5]:
            lines.append(f"  {ev.get('region')} step {ev.get('step')}: {ev.get('reason')} (found by {ev.get('by')})")
    if s["incidents"]:
        lines.append("incidents")
        lines.append(f"  {'kind':<17}{'from':<10}{'to':<10}{'detected':>9}{'restored':>9}{'lost':>6}{'rto':>8}")
        lines.extend(incident_row(i) for i in s["incidents"])
    else:
        lines.append("incidents  none")
    return "\n".join(lines)


# A search's table shows this many trials (the best first, then by id); the rest are counted.
MAX_TRIAL_ROWS = 50


def trial_rows(result: dict[str, Any]) -> list[str]:
    """A finished search's trials, one line each: id, status (``stopped`` for a trial ASHA
    ended before max_t), last iteration, the searched metric and the trial's values;
    the best trial marked ``*`` and listed first."""
    best = result.get("best_trial") or {}
    metric = str(best.get("metric") or "")
    max_t = (result.get("search") or {}).get("max_t")
    trials = sorted(result["trials"], key=lambda t: (t.get("trial_id") != best.get("trial_id"), str(t.get("trial_id"))))
    lines = ["trials", f"  {'':2}{'trial':<13}{'status':<11}{'iter':>5}{metric[:12]:>13}  config"]
    for t in trials[:MAX_TRIAL_ROWS]:
        status = str(t.get("status", "?"))
        if status == "TERMINATED":
            status = "stopped" if max_t is not None and t.get("iteration", 0) < max_t else "done"
        value = (t.get("metrics") or {}).get(metric)
        values = "  ".join(f"{k}={_num(v)}" for k, v in (t.get("config") or {}).items())
        mark = "*" if t.get("trial_id") == best.get("trial_id") else ""
        lines.append(
            f"  {mark:<2}{t.get('trial_id')!s:<13}{status.lower():<11}{t.get('iteration', 0):>5}"
            f"{_num(value):>13}  {values}"
        )
    if len(trials) > MAX_TRIAL_ROWS:
        lines.append(f"  ... {len(trials) - MAX_TRIAL_ROWS} more in result.json's trials")
    return lines


# In what live_progress returns, instead of a step: why the progress there does not count.
UNVERIFIED = "unverified"


def live_progress(run_dir: str, view: RunView, where: FromStore | None = None) -> dict[str, Any] | None:
    """The live step of the run's newest attempt, from its control channel (wherever
    cloud.control_store put it; for a run read from the control store, ``where``, the
    store it was found in), once it opens under the run's keys; None before an attempt
    started or when it cannot be read; ``{UNVERIFIED: why}`` when what is there is not
    the attempt's own (anyone who can write the control store could write it)."""
    if not view.current_generation:
        return None
    cloud = _section(view.config, "cloud")
    try:
        keys: AttemptKeys | None
        if where is not None:
            # Its id as the store names it: the one its keys were derived for.
            run_id = os.path.basename(os.path.normpath(run_dir))
            url = run_control_url(where.store, run_id, run_dir)
            options = where.options
            keys = controller_keys(where.secret, run_id)
        else:
            url = run_control_url(cloud.get("control_store"), view.run_id or os.path.basename(run_dir), run_dir)
            options = cloud.get("control_options") or {}
            try:
                keys = run_keys_of(run_dir)
            except SigningError:
                keys = None  # read as it is, to say that it cannot be checked
        channel = ControlChannel(url, options, keys=keys)
        prog = channel.progress_or_invalid(view.current_generation)
    # An unreachable control store, or one the journal's copy of the config names
    # wrongly (it is for display): status still shows what the journal says.
    except Exception:
        return None
    if prog is not None and keys is None:
        return {UNVERIFIED: "the run's secret cannot be read here to check progress.json"}
    if isinstance(prog, Invalid):
        return {UNVERIFIED: f"progress.json {prog.reason}"}
    return None if prog is None else prog.as_dict()


def later_lease(run_dir: str, s: dict[str, Any], where: FromStore | None = None) -> str | None:
    """Who holds the run's lease in the control store, when that is a verified lease of a
    controller later than the last one here (one line); None otherwise, or when it cannot
    be read: a lease that does not verify under the run's key is nobody's."""
    from orchestrator.control.lease import ControllerLease, LeaseRecord
    from recovery.signing import derive_state_key, secret_of
    from recovery.storage import open_fs

    cloud = _section(s["config"], "cloud")
    store, run_id, ours = cloud.get("control_store"), s.get("run_id"), s.get("stood_down_controller")
    options = cloud.get("control_options") or {}
    if where is not None:  # read from the store: asked there, with the keys it was read with
        store, options = where.store, where.options
    if not isinstance(store, str) or not store or not isinstance(run_id, str) or not isinstance(ours, int):
        return None
    try:
        key = derive_state_key(where.secret if where is not None else secret_of(run_dir), run_id)
        fs, root = open_fs(f"{store.rstrip('/')}/{run_id}", dict(options))
        current = ControllerLease(fs, root, key, run_id, 1.0).read()
    except Exception:  # the store out of reach, the secret unreadable: not news of a takeover
        return None
    if isinstance(current, LeaseRecord) and current.controller > ours:
        return current.holder
    return None


def run_ids(home: str) -> list[str]:
    try:
        return sorted(os.listdir(rundir.runs_path(home)))
    except (FileNotFoundError, NotADirectoryError):
        return []


def main(home: str, run_id: str, where: FromStore | None = None) -> int:
    """``action=status``: the run's table, or one line naming the runs there are.
    ``where``: the run was read from the control store into ``home``, a temporary one."""
    s = describe(home, run_id, where)
    if s is None:
        known = run_ids(home)
        hint = f"; runs under {home}: {', '.join(known[-5:])}" if known else f"; no runs under {home}"
        return error(f"run_id: no run named {run_id!r}{hint}")
    print(render(run_id, s))
    return 0


def describe(home: str, run_id: str, where: FromStore | None = None) -> dict[str, Any] | None:
    """The run as ``action=status`` shows it (``summarize``, with whether its controller
    lives and what to do when it does not); None when there is no such run. What the
    command line and the Python API (``orchestrator.api``) both read."""
    run_dir = rundir.run_path(home, run_id)
    # Whether a controller still holds the run is news the journal cannot tell; asked only
    # of a run that has not ended, whose time then runs on to now.
    ended = os.path.lexists(rundir.result_path(run_dir))
    alive = None if ended else (where.alive if where is not None else rundir.controller_alive(run_dir))
    s = summarize(run_dir, time.time() if alive else None, where)
    if s is None:
        return None
    if s["result"] is None:
        if ended and where is None:  # its result.json withdrawn meanwhile (a resume): ask now
            alive = rundir.controller_alive(run_dir)
        s["state"], s["note"] = controller_state(s["state"], alive, run_id, home, where)
        if s["controller"] is not None:
            # A supervisor is a process on the run's own machine, which a store does not know of.
            supervised = None if where is not None else rundir.controller_alive(run_dir, rundir.SUPERVISOR_LOCK)
            s["controller_text"] = controller_text(
                s["controller"], alive, pid_running_here(s["controller"]), supervised, where
            )
        if s.get("stood_down") and s["state"] == CONTROLLER_DIED:
            taker = later_lease(run_dir, s, where)
            if taker is not None:
                s["state"] = TAKEN_OVER
                s["note"] = f"its controller here stood down to {taker}, which drives the run now: follow it there"
            else:
                go_on = where.go_on if where is not None else f"continue it with: {resume_line(home, run_id)}"
                s["note"] = (
                    f"its controller here stood down (its lease {s['stood_down']}), yet the control store holds no "
                    f"verified lease of a later controller; {go_on}"
                )
    return s
