"""What the terminal shows while a run goes on: one live progress line (region, step/total,
steps/s, ETA, last checkpoint, replication lag) and, before it and during each failover,
one status line per start-up phase, so that nobody waits in silence."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from typing import Any, TextIO

from orchestrator.chaos.injector import fault_text
from orchestrator.hpo import progress_text as search_text
from orchestrator.runstate.events import (
    AttemptAdopted,
    AttemptStarted,
    DecisionMade,
    Event,
    FailureDetected,
    FaultInjected,
    Fence,
    HealthGlitch,
    NodeLost,
    NodeReplaced,
    NodeReplaceFailed,
    NotifyFailed,
    Provisioned,
    ProvisionRetry,
    RestoreCopied,
    RuntimeReattached,
    RuntimeReport,
    RuntimeStarted,
    StandbyActivated,
    TensorBoardFailed,
)
from recovery.policy import Action

NON_TTY_EVERY_S = 5.0
# A progress line older than this belongs to a phase that has ended (the attempt failed, a
# failover began): a status line does not reprint it under itself.
STALE_S = 3.0


def eta_text(step: int, total: Any, rate: float) -> str:
    """Time left at the current rate, as h:mm:ss or m:ss; empty while it cannot be told."""
    if not isinstance(total, int) or rate <= 0 or step >= total:
        return ""
    left = round((total - step) / rate)
    h, rest = divmod(left, 3600)
    m, s = divmod(rest, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"


def line_text(region: str, generation: int, prog: dict[str, Any], lag: float | None, width: int | None) -> str:
    """The progress line, cut to ``width`` columns by dropping its least useful parts first
    (telemetry, the search, replication lag, the checkpoint, the loss, the ETA): a line
    that wraps leaves a stale row behind each redraw. ``None``: no limit (a log file)."""
    ckpt = prog.get("last_checkpoint")
    ckpt_name = ckpt.rstrip("/").rsplit("/", 1)[-1] if ckpt else "none"
    rate = float(prog.get("steps_per_s") or 0.0)
    loss = prog.get("loss")
    unit, done, total = counted(prog)
    eta = eta_text(done, total, rate)
    # (text, rank): the lowest rank goes first when the line must be cut.
    parts = [
        (f"[{region} g{generation}] {unit} {done}" + (f"/{total}" if total is not None else ""), 9),
        (f"  {rate:6.1f} {unit}s/s", 8),
        (f"  {eta}" if eta else "", 7),
        (f"  loss {float(loss):.4f}" if loss is not None else "", 6),
        (metrics_text(prog.get("metrics")), 4),
        (world_text(prog), 5),
        (f"  ckpt {ckpt_name}", 5),
        (f"  repl lag {lag:.2f}s" if lag is not None else "", 3),
        (search_text(prog), 4),
        (telemetry_text(prog.get("telemetry")), 1),
    ]
    kept = [p for p in parts if p[0]]
    while width is not None and len(kept) > 1 and sum(len(t) for t, _ in kept) > width:
        kept.remove(min(kept, key=lambda p: p[1]))
    text = "".join(t for t, _ in kept)
    return text if width is None else text[:width]


def counted(prog: dict[str, Any]) -> tuple[str, int, int | None]:
    """What the line counts, how many are done, and of how many (None: not known). A train
    function's progress counts its reports, of the number its config declares if it does
    (no total otherwise: no made-up ETA); the built-in loop and a search count steps."""
    if "reports" in prog:
        unit, done = "report", prog.get("reports")
    else:
        unit, done = "step", prog.get("step")
    total = prog.get("total")
    done = done if isinstance(done, int) and not isinstance(done, bool) else 0
    return unit, done, total if isinstance(total, int) and not isinstance(total, bool) else None


def metrics_text(metrics: Any, most: int = 4) -> str:
    """A train function's own metrics (its latest report's), the numbers among them; the
    loss has its own part of the line."""
    if not isinstance(metrics, dict):
        return ""
    shown = [
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in metrics.items()
        if k != "loss" and isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return "  " + "  ".join(shown[:most]) if shown else ""


def world_text(prog: dict[str, Any]) -> str:
    """The worker group's size against the run's, and the region's live nodes, where
    either can change (a multi-node region, an elastic run); empty otherwise."""
    world, workers, nodes = prog.get("world_size"), prog.get("workers"), prog.get("nodes")
    parts = []
    if isinstance(world, int) and isinstance(workers, int) and (world != workers or nodes):
        parts.append(f"{world}/{workers} workers")
    if nodes:
        parts.append(f"{nodes} nodes")
    return "  " + ", ".join(parts) if parts else ""


def startup_text(ev: Event) -> str | None:
    """The status line a start-up phase or a restore prints, or None for events that have
    their own line elsewhere (failures, decisions, chaos) or none at all."""
    if isinstance(ev, AttemptStarted):
        if ev.standby:
            return f"attempt {ev.generation} in {ev.region}: activating the warm standby"
        return f"attempt {ev.generation} in {ev.region}: provisioning a cluster"
    if isinstance(ev, AttemptAdopted):
        return f"attempt {ev.generation} in {ev.region}: adopted (cluster {ev.cluster} still running)"
    if isinstance(ev, ProvisionRetry):
        return f"provisioning in {ev.region} failed ({ev.error}); retry {ev.retry}"
    if isinstance(ev, Provisioned) and ev.purpose == "attempt":
        took = f" in {ev.provision_s:.1f}s" if ev.provision_s is not None else ""
        return f"cluster {ev.cluster} up{took}; starting the runtime"
    if isinstance(ev, StandbyActivated):
        return f"standby {ev.cluster} activated in {ev.region}"
    if isinstance(ev, RestoreCopied):
        return f"restoring step {ev.step}: copied from {ev.from_}'s store to {ev.to}'s"
    if isinstance(ev, Fence) and ev.moved_from is not None:
        return (
            f"the lost attempt committed step {ev.restored_step} after the scan found step {ev.moved_from}; "
            "this attempt restores it"
        )
    if isinstance(ev, Fence) and ev.restored_step > 0:
        return f"newest checkpoint that verifies: step {ev.restored_step}; this attempt restores it"
    if isinstance(ev, RuntimeStarted) and not ev.standby:
        return "runtime started; connecting to Ray"
    if isinstance(ev, RuntimeReport):
        return _runtime_text(ev.kind, ev.fields)
    return None


def decision_text(action: Action, region: str | None, placement: Mapping[str, Any] | None = None) -> str:
    """The line a recovery decision prints (the controller's, and action=watch's from the
    journal); a failover placed by cost says what the chosen region is expected to cost."""
    if action is Action.FAILOVER:
        return f"failing over to {region}{_placed_note(placement, region)}"
    if action is Action.RESTART_IN_PLACE:
        return f"restarting in {region}"
    return "giving up"


def _placed_note(placement: Mapping[str, Any] | None, region: str | None) -> str:
    table = placement.get("table") if isinstance(placement, Mapping) else None
    row = (
        next((r for r in table if isinstance(r, Mapping) and r.get("region") == region), None)
        if isinstance(table, list)
        else None
    )
    if row is None:
        return ""
    usd, hours = row.get("expected_usd"), row.get("expected_hours")
    cost = f"${usd:.4g}" if isinstance(usd, int | float) and not isinstance(usd, bool) else "unpriced"
    time_ = f", {hours:.3g} h" if isinstance(hours, int | float) and not isinstance(hours, bool) else ""
    return f" (placement=cost: lowest expected cost to finish, {cost}{time_})"


# --- the notes the controller prints as it journals an event, and action=watch from the journal ---


def chaos_text(kind: str, step: int | None, detail: Mapping[str, object]) -> str:
    return f"chaos: {fault_text(kind, step, detail)}"


def failure_text(region: str | None, kind: str, detail: str | None) -> str:
    return f"failure in {region}: {kind}" + (f" ({detail})" if detail else "")


def node_lost_text(
    node: int, region: str, health: str, replacing: bool, held: bool | None, wait_s: float, goes_on: bool
) -> str:
    """A lost node: whether it is replaced (and for how long the group may wait), and
    whether training goes on meanwhile (it ran no worker; the nodes left fit the group)."""
    how = f"replacing it (up to {wait_s:g}s)" if replacing else "not replaced (recovery.node_replace_timeout_s=0)"
    if held is False:
        how += "; it ran no worker: training goes on"
    elif replacing and goes_on:
        how += "; the group goes on at once on the nodes left"
    return f"node {node} of {region} lost ({health}): {how}"


def node_replaced_text(node: int, region: str, replace_s: float) -> str:
    return f"node {node} of {region} replaced in {replace_s:.1f}s"


def node_not_replaced_text(node: int, region: str, error: str) -> str:
    return f"node {node} of {region} not replaced: {error}"


def glitch_text(region: str, detail: str | None) -> str:
    return f"health check of {region} not UP ({detail or ''}); heartbeats fresh: going on"


def reattached_text(region: str, code: int | None) -> str:
    return f"connection to the runtime in {region} lost (status {code}): re-attached"


def store_fallback_text(from_: Any, to: Any) -> str:
    return f"store of {from_} failing: committing to {to}'s store"


def notify_failed_text(target: str, endpoint: str | None, error: str) -> str:
    return f"notify: {target} {endpoint} failed ({error})"


def tensorboard_failed_text(error: str) -> str:
    return f"tensorboard: {error}; the run goes on without it"


def journal_note(ev: Event, config: Mapping[str, Any]) -> str | None:
    """The note the foreground run printed when it journaled ``ev``, made from the journal
    (action=watch's), or None for an event with no note (or a start-up line: startup_text).
    ``config``: the journal's copy of the run's config (what a lost node's note needs)."""
    if isinstance(ev, FaultInjected):
        return chaos_text(ev.kind, ev.step, ev.extra)
    if isinstance(ev, FailureDetected):
        return failure_text(ev.region, ev.kind, ev.detail)
    if isinstance(ev, DecisionMade):
        return decision_text(ev.action, ev.region, ev.placement)
    if isinstance(ev, NodeLost):
        wait_s, workers = _node_keys(config)
        replacing = ev.replacing if ev.replacing is not None else wait_s > 0
        goes_on = ev.fits is not None and workers is not None and ev.fits >= workers
        return node_lost_text(ev.node, ev.region, ev.health, replacing, ev.held_workers, wait_s, goes_on)
    if isinstance(ev, NodeReplaced):
        return node_replaced_text(ev.node, ev.region, ev.replace_s)
    if isinstance(ev, NodeReplaceFailed):
        return node_not_replaced_text(ev.node, ev.region, ev.error)
    if isinstance(ev, HealthGlitch):
        # Said once per streak; the journal has each look of it up to the count that loses a cluster.
        return glitch_text(ev.region, ev.detail) if ev.failed_checks in (None, 1) else None
    if isinstance(ev, RuntimeReattached):
        return reattached_text(ev.region, ev.connection_exit)
    if isinstance(ev, NotifyFailed):
        return notify_failed_text(ev.target, ev.endpoint, ev.error)
    if isinstance(ev, TensorBoardFailed):
        return tensorboard_failed_text(ev.error)
    if isinstance(ev, RuntimeReport) and ev.kind == "store_fallback" and ev.fields.get("by") == "runtime":
        # Said where the store it commits to is one of the run's (the controller follows it there).
        cloud = config.get("cloud")
        regions = cloud.get("regions") if isinstance(cloud, Mapping) else None
        to = ev.fields.get("to")
        if not isinstance(regions, Mapping) or to in regions:
            return store_fallback_text(ev.fields.get("from"), to)
    return None


def _node_keys(config: Mapping[str, Any]) -> tuple[float, int | None]:
    """recovery.node_replace_timeout_s and trainer.workers from the journal's copy of the
    config (for display: a damaged one reads as the defaults' 60 s and unknown)."""
    recovery, trainer = config.get("recovery"), config.get("trainer")
    wait = recovery.get("node_replace_timeout_s") if isinstance(recovery, Mapping) else None
    workers = trainer.get("workers") if isinstance(trainer, Mapping) else None
    wait_s = float(wait) if isinstance(wait, int | float) and not isinstance(wait, bool) else 60.0
    return wait_s, workers if isinstance(workers, int) and not isinstance(workers, bool) else None


def _runtime_text(kind: str, fields: dict[str, Any]) -> str | None:
    if kind == "driver_connected":
        return "connected to Ray; starting the workers"
    if kind == "workers_started":
        return "workers started; loading data and the checkpoint"
    if kind == "train_started":
        restored = fields.get("restored_step")
        if isinstance(restored, int) and restored > 0:
            return f"training from step {restored}"
        return "training from step 0"
    return None


class ProgressLine:
    def __init__(self, stream: TextIO, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._lag: float | None = None
        self._last_text = ""
        self._last_update = 0.0
        self._last_print = 0.0
        self._last_ckpt: str | None = None
        self._drawn = False
        self._attempt_t0: float | None = None

    def replication_lag(self, lag_s: float) -> None:
        self._lag = lag_s

    def width(self) -> int | None:
        if not self.tty:
            return None
        # One column short: a line that fills the last column wraps on some terminals.
        return max(20, shutil.get_terminal_size((120, 24)).columns - 1)

    def update(self, region: str, generation: int, prog: dict[str, Any]) -> None:
        if not self.enabled:
            return
        ckpt = prog.get("last_checkpoint")
        text = line_text(region, generation, prog, self._lag, self.width())
        now = time.time()
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self._drawn = True
            self.stream.flush()
        elif ckpt != self._last_ckpt or now - self._last_print >= NON_TTY_EVERY_S:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_print = now
        self._last_ckpt = ckpt
        self._last_text = text
        self._last_update = now

    def event(self, ev: Event) -> None:
        """A journaled event: its status line, if it has one."""
        text = startup_text(ev)
        if isinstance(ev, AttemptStarted | AttemptAdopted | FailureDetected | DecisionMade):
            self._last_text = ""  # that attempt's line is history now: never reprinted
        # The event's own time (the journal's stamp): a watcher catching up reads it late.
        now = ev.ts or time.time()
        if isinstance(ev, AttemptStarted | AttemptAdopted):
            self._attempt_t0 = now
        elif text is not None and self._attempt_t0 is not None:
            text += f"  (+{now - self._attempt_t0:.1f}s)"
        if text is not None:
            self.note(text)

    def note(self, message: str) -> None:
        if not self.enabled:
            return
        if self.tty and self._drawn:
            self.stream.write("\r\033[K")
            self._drawn = False
        self.stream.write(f"-- {message}\n")
        if self.tty and self._last_text and time.time() - self._last_update < STALE_S:
            self.stream.write(self._last_text)
            self._drawn = True
        self.stream.flush()

    def log(self, line: str) -> None:
        """A line of the job's own output (show_logs=true), above the progress line;
        printed with the progress line off too (show_logs asked for it)."""
        if self.tty and self._drawn and self.enabled:
            self.stream.write("\r\033[K")
        self.stream.write(line + "\n")
        if self.tty and self._last_text and self.enabled:
            self.stream.write(self._last_text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}MB"


def telemetry_text(telemetry: dict[str, Any] | None) -> str:
    """The telemetry part of the progress line, over all workers."""
    if not telemetry or not telemetry.get("workers"):
        return ""
    ws = telemetry["workers"]
    cpu = sum(float(w["cpu_percent"]) for w in ws) / len(ws)
    rss = max(int(w["peak_rss_bytes"]) for w in ws)
    sent = sum(int(w["net_bytes_sent"]) for w in ws)
    recv = sum(int(w["net_bytes_recv"]) for w in ws)
    rate = sum(float(w["samples_per_s"]) for w in ws)
    gpu = telemetry.get("gpu")
    gpu_text = "gpu " + ",".join(f"{d['utilization_mean_percent']:.0f}%" for d in gpu) if gpu else "gpu absent"
    return (
        f"  {len(ws)}w cpu {cpu:.0f}% rss {_mb(rss)} net {_mb(sent)} out/{_mb(recv)} in"
        f"  {rate:.0f} samples/s  {gpu_text}"
    )
