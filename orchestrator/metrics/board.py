"""A run's numbers in TensorBoard: event files the controller writes from what it receives.

``<home>/runs/<run_id>/tensorboard/``, so ``tensorboard --logdir <home>/runs`` shows every
run (README "Metrics"). What becomes what is decided by pure functions, one per source
(the loss series, a progress report, the final report, a journaled event); the writer
puts their records in the file from a thread of its own.

Steps are the training's global step: a resumed attempt goes on along the same curve.
An attempt restored from step R (a failover, a restart in place) trains steps R+1...
again: a ``Restart`` at R+1 (a SessionLog START) tells TensorBoard to drop what the run
wrote from R+1 on, and the replayed steps are written under the same tags, so TensorBoard
shows the last written: no zigzag back to the earlier attempt's values. Incidents are
markers at the step the run went on from, and a table of every incident so far (each
table holds the ones before it, so whichever TensorBoard keeps at a step tells them all).

A writer that fails (a full disk, a folder it cannot create) stops; one that falls
behind drops what it cannot queue. Either is said once (``failed``: the controller
journals ``tensorboard_failed``) and the run goes on; offering a record never waits.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.metrics.drain import Drain
from orchestrator.metrics.tbfile import EventFile, restart_event, scalar_event, text_event
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    Event,
    IncidentFields,
    IncidentOpened,
    IncidentRecorded,
    Replicated,
    RunFinished,
    RuntimeReport,
)
from orchestrator.runstate.goodput import CATEGORIES, Goodput, journal_goodput
from orchestrator.runstate.journal import DamagedFile, read_typed
from orchestrator.runstate.losses import last_loss_step
from orchestrator.runstate.state import RunView

LOSS = "train/loss"
# A search's trial ids (orchestrator.hpo.trial_key): the one shape a trial's run folder takes.
TRIAL_ID = re.compile(r"trial_\d{5}")
# Offers waiting for the writer: beyond this (a disk that stopped answering) new ones
# are dropped, and said once (the Drain's queue).
QUEUE_MAX = 4096
# close() waits this long for what is queued to be written.
CLOSE_S = 5.0
# The writer takes what comes within this long of a first record together: one write
# and flush, and one wakeup of its thread, for a look's worth of records rather than
# one each (the controller's CPU, issue 15). close() cuts the wait short.
GATHER_S = 1.0


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float
    # A run of its own under the run's folder (a search's trial: ``trials/trial_00003``).
    run: str = ""


@dataclass(frozen=True)
class Text:
    tag: str
    step: int
    text: str


@dataclass(frozen=True)
class Restart:
    """The run goes on from ``step`` (a checkpoint at step - 1 restored): what it wrote
    at ``step`` or later is no longer the run's."""

    step: int


Record = Scalar | Text | Restart


# --- what each source becomes ----------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (true is no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _finite(value: Any) -> float | None:
    n = _number(value)
    return n if n is not None and math.isfinite(n) else None


def _step(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def tag_name(name: str) -> str:
    """A key of the runtime's (a metric's name, a trial state) as a tag part: letters,
    digits and ``_ . -``, anything else ``_``."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in name)[:64] or "_"


def loss_records(points: Iterable[Any]) -> list[Record]:
    """The runtime's loss series (``losses`` events: [step, loss] pairs). A diverged loss
    (NaN, inf) is written as it is: TensorBoard shows it."""
    out: list[Record] = []
    for point in points:
        if isinstance(point, list | tuple) and len(point) == 2:
            step, loss = _step(point[0]), _number(point[1])
            if step is not None and loss is not None:
                out.append(Scalar(LOSS, step, loss))
    return out


def progress_records(prog: dict[str, Any]) -> list[Record]:
    """A progress report: steps/s, the workers' telemetry summed, a Ray Train function's
    reported metrics, a search's trials and best value."""
    step = _step(prog.get("step"))
    if step is None:
        return []
    values: dict[str, float | None] = {"train/steps_per_s": _finite(prog.get("steps_per_s"))}
    values.update(telemetry_values(prog.get("telemetry")))
    metrics = prog.get("metrics")
    if isinstance(metrics, dict):
        values.update({f"metrics/{tag_name(str(k))}": _number(v) for k, v in metrics.items()})
    trials = prog.get("trials")
    if isinstance(trials, dict):
        values.update({f"search/trials_{tag_name(str(k))}": _finite(v) for k, v in trials.items()})
    best = prog.get("best")
    if isinstance(best, dict) and isinstance(best.get("metric"), str):
        values[f"search/best_{tag_name(best['metric'])}"] = _number(best.get("value"))
    return [Scalar(tag, step, v) for tag, v in values.items() if v is not None]


def telemetry_values(telemetry: Any) -> dict[str, float | None]:
    """The progress line's telemetry as scalars: CPU averaged over the workers, peak RSS
    the largest, network bytes and samples/s summed, each GPU's mean utilisation and
    peak memory."""
    if not isinstance(telemetry, dict) or not isinstance(telemetry.get("workers"), list):
        return {}
    workers = [w for w in telemetry["workers"] if isinstance(w, dict)]

    def each(key: str) -> list[float]:
        return [v for v in (_finite(w.get(key)) for w in workers) if v is not None]

    cpu, rss = each("cpu_percent"), each("peak_rss_bytes")
    out: dict[str, float | None] = {
        "telemetry/cpu_percent": sum(cpu) / len(cpu) if cpu else None,
        "telemetry/peak_rss_bytes": max(rss) if rss else None,
        "telemetry/net_bytes_sent": sum(each("net_bytes_sent")) if workers else None,
        "telemetry/net_bytes_recv": sum(each("net_bytes_recv")) if workers else None,
        "telemetry/samples_per_s": sum(each("samples_per_s")) if workers else None,
    }
    gpus = telemetry.get("gpu")
    for gpu in gpus if isinstance(gpus, list) else []:
        index = _step(gpu.get("index")) if isinstance(gpu, dict) else None
        if index is not None:
            out[f"telemetry/gpu{index}_utilization_percent"] = _finite(gpu.get("utilization_mean_percent"))
            out[f"telemetry/gpu{index}_memory_peak_bytes"] = _finite(gpu.get("memory_peak_bytes"))
    return out


def final_records(final: dict[str, Any]) -> list[Record]:
    """The final report's metrics (result.json's ``metrics``) at the final step: the
    held-out evaluation of a workload, the last reported metrics of a train function."""
    step, metrics = _step(final.get("final_step")), final.get("metrics")
    if step is None or not isinstance(metrics, dict):
        return []
    values = {f"final/{tag_name(str(k))}": _number(v) for k, v in metrics.items()}
    return [Scalar(tag, step, v) for tag, v in values.items() if v is not None]


def event_records(event: Event, view: RunView) -> list[Record]:
    """A journaled event, with the run's ``view`` after it: restarts, replication lag,
    incidents and the run's end."""
    if isinstance(event, RuntimeReport):
        fields = event.fields
        if fields.get("by") != "runtime":
            return []  # a fenced older attempt's word is no part of the run's curve
        if event.kind == "train_started" and _step(fields.get("restored_step")) is not None:
            return [Restart(int(fields["restored_step"]) + 1)]
        if event.kind == "replicated":
            return _lag(fields.get("step"), fields.get("lag_s"))
        if event.kind == "trial_result":
            return trial_records(fields)
        return []
    if isinstance(event, Replicated):
        return _lag(event.step, event.lag_s)
    if isinstance(event, IncidentRecorded):
        step = marker_step(event)
        seen = len(_incidents(view))
        out: list[Record] = [Scalar("incidents/count", step, float(seen))]
        for name in ("lost_steps", "rto_s", "detected_after_s"):
            value = _finite(getattr(event, name))
            if value is not None:
                out.append(Scalar(f"incidents/{name}", step, value))
        return [*out, Text("incidents", step, incidents_table(view))]
    if isinstance(event, IncidentOpened):
        return [Text("incidents", marker_step(event), incidents_table(view))]
    if isinstance(event, RunFinished):
        step = event.final_step if _step(event.final_step) is not None else view.last_step
        status = event.status or view.status
        reason = "" if status == "SUCCEEDED" or not view.reason else f": {view.reason}"
        return [Text("run", int(step), f"**{status}** at step {step}{reason}")]
    return []


def goodput_records(g: Goodput, step: int) -> list[Record]:
    """The run's goodput at its end: the share, each category's seconds and the cost."""
    out: list[Record] = []
    if g.goodput is not None:
        out.append(Scalar("goodput/share", step, g.goodput))
    out.extend(Scalar(f"goodput/{c}_s", step, g.seconds[c]) for c in CATEGORIES)
    out.extend(Scalar(f"cost/node_hours/{tag_name(r)}", step, h) for r, h in sorted(g.node_hours.items()))
    if g.cost_usd is not None:
        out.append(Scalar("cost/usd", step, g.cost_usd))
    return out


def journal_goodput_records(source: tuple[str, int, float]) -> list[Record]:
    """``goodput_records`` of the journal at ``path`` up to ``at`` (read in the writer's
    thread: the controller never waits on it); none from a journal that cannot be read."""
    path, step, at = source
    try:
        events = list(read_typed(path))
    except (DamagedFile, OSError):
        return []
    return goodput_records(journal_goodput(events, now=at), step)


def trial_records(fields: dict[str, Any]) -> list[Record]:
    """A search trial's iteration: each of its metrics in the trial's own run (a
    TensorBoard run per trial, its iterations the steps). An id that is not a trial's
    (it names a folder) is no record."""
    trial, step, metrics = fields.get("trial_id"), _step(fields.get("iteration")), fields.get("metrics")
    if not isinstance(trial, str) or not TRIAL_ID.fullmatch(trial) or step is None or not isinstance(metrics, dict):
        return []
    values = {f"search/{tag_name(str(k))}": _number(v) for k, v in metrics.items()}
    return [Scalar(tag, step, v, run=f"trials/{trial}") for tag, v in values.items() if v is not None]


def _lag(step: Any, lag: Any) -> list[Record]:
    step, value = _step(step), _finite(lag)
    return [] if step is None or value is None else [Scalar("replication/lag_s", step, value)]


def marker_step(incident: IncidentFields) -> int:
    """Where an incident is marked: the step the run went on from (the restored one),
    else the last step done before it, else 0."""
    for step in (incident.restored_step, incident.last_step):
        if _step(step) is not None:
            return int(step)  # type: ignore[arg-type]
    return 0


def _incidents(view: RunView) -> list[IncidentFields]:
    """Every incident of the run once (the latest record of each), then the open one."""
    recorded: dict[tuple[Any, ...], IncidentFields] = {}
    for inc in view.incidents:
        recorded[(inc.kind, inc.generation, inc.failed_at)] = inc
    out = list(recorded.values())
    pending = view.pending
    if pending is not None and not any(pending.same_incident(i) for i in out):
        out.append(pending)
    return out


def _cell(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.2f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def incidents_table(view: RunView) -> str:
    """Every incident so far, as a Markdown table (TensorBoard's text tab renders it)."""
    rows = [
        "| # | kind | from | to | last step | restored step | lost steps | detected after | RTO |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, inc in enumerate(_incidents(view), 1):
        recovering = isinstance(inc, IncidentOpened)
        rto = "recovering" if recovering else _cell(inc.rto_s, " s")
        rows.append(
            f"| {n} | {inc.kind} | {inc.from_region} | {inc.to_region or '-'} | {_cell(inc.last_step)} "
            f"| {_cell(inc.restored_step)} | {_cell(inc.lost_steps)} | {_cell(inc.detected_after_s, ' s')} | {rto} |"
        )
    return "\n".join(rows)


# --- which records reach the file ------------------------------------------------------------


class Curves:
    """The last step written per tag. TensorBoard draws a tag's points in the order they
    were written: a point behind its tag's last one (a late report of an older step) is
    left out, unless a ``Restart`` at or before it made TensorBoard forget the later ones.
    The same step again is written (TensorBoard keeps the last). ``seen``: the first step
    each tag may take, for what was written before this process (a resumed controller's
    loss series)."""

    def __init__(self, seen: dict[str, int] | None = None) -> None:
        self.last: dict[str, int] = dict(seen or {})

    def admit(self, record: Record) -> bool:
        if isinstance(record, Restart):
            for tag, step in self.last.items():
                self.last[tag] = min(step, record.step - 1)
            return True
        tag = f"{record.run}/{record.tag}" if isinstance(record, Scalar) and record.run else record.tag
        last = self.last.get(tag)
        if last is not None and record.step < last:
            return False
        self.last[tag] = record.step
        return True


def encode(record: Record, wall_time: float) -> bytes:
    if isinstance(record, Scalar):
        return scalar_event(record.tag, record.value, record.step, wall_time)
    if isinstance(record, Text):
        return text_event(record.tag, record.text, record.step, wall_time)
    return restart_event(record.step, wall_time)


# --- the writer ------------------------------------------------------------------------------

Offer = tuple[Callable[[Any], list[Record]], Any, float]


class TensorBoardWriter:
    """The run's event files in ``folder``, written by a thread of its own (a ``Drain``).
    Every method but ``close`` only queues (never waits, never raises): the controller
    calls ``event`` as it journals, under its state lock. ``failed(error)`` is called at
    most once: the writer stopped (or dropped records), one line saying why."""

    def __init__(
        self,
        folder: str,
        failed: Callable[[str], object],
        seen: dict[str, int] | None = None,
        close_s: float = CLOSE_S,
        journal: str | None = None,
    ) -> None:
        self.folder = folder
        self._journal = journal
        self._curves = Curves(seen)
        # The run's own file ("") and one per run under it (a search's trials).
        self._files: dict[str, EventFile] = {}
        self._drain: Drain[Offer] = Drain(
            "tensorboard",
            self._write,
            failed,
            size=QUEUE_MAX,
            gather_s=GATHER_S,
            close_s=close_s,
            most=256,
            stopped="stopped: ",
            dropped=lambda n: f"{n} records dropped: writing fell behind (a slow or stuck disk)",
            late=lambda s: f"stopped: what was queued was not written within {s:g} s (a slow or stuck disk)",
            after_failure=self._close_files,
        )

    # --- what the controller offers ---------------------------------------------------------
    def losses(self, points: list[Any], at: float) -> None:
        self._drain.offer((loss_records, points, at))

    def progress(self, prog: dict[str, Any]) -> None:
        self._drain.offer((progress_records, prog, _finite(prog.get("time")) or time.time()))

    def final(self, final: dict[str, Any]) -> None:
        self._drain.offer((final_records, final, _finite(final.get("time")) or time.time()))

    def event(self, event: Event, view: RunView) -> None:
        self._drain.offer((lambda e: event_records(e, view), event, event.ts or time.time()))
        if isinstance(event, RunFinished) and self._journal is not None:
            step = event.final_step if _step(event.final_step) is not None else view.last_step
            at = event.ts or time.time()
            self._drain.offer((journal_goodput_records, (self._journal, int(step or 0), at), at))

    # --- the thread ---------------------------------------------------------------------
    def _write(self, batch: list[Offer], last: bool) -> None:
        out: dict[str, list[bytes]] = {}
        for records, source, at in batch:
            for r in records(source):
                if self._curves.admit(r):
                    out.setdefault(r.run if isinstance(r, Scalar) else "", []).append(encode(r, at))
        for run, encoded in out.items():
            if run not in self._files:
                self._files[run] = EventFile(os.path.join(self.folder, run) if run else self.folder, time.time())
            self._files[run].write(*encoded)
            self._files[run].flush()
        if last:
            for f in self._files.values():
                f.close()

    def _close_files(self) -> None:
        for f in self._files.values():
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        """Write what is queued (waiting at most ``close_s``) and close the file; a writer
        that stopped is waited for until it has said why."""
        self._drain.close()


def tensorboard_writer(run_dir: str, failed: Callable[[str], object]) -> TensorBoardWriter:
    """The run's writer. A resumed controller's adopted attempt reports its loss series
    again from its start: the steps loss.jsonl already has are not written twice."""
    try:
        step = last_loss_step(run_dir)
    except DamagedFile:
        step = None  # its points may be written twice, nothing worse
    return TensorBoardWriter(
        os.path.join(run_dir, rundir.TB_DIR),
        failed,
        seen=None if step is None else {LOSS: step + 1},
        journal=rundir.journal_path(run_dir),
    )


class NoMetrics:
    """metrics.tensorboard=false: nothing is written."""

    def losses(self, points: list[Any], at: float) -> None:
        pass

    def progress(self, prog: dict[str, Any]) -> None:
        pass

    def final(self, final: dict[str, Any]) -> None:
        pass

    def event(self, event: Event, view: RunView) -> None:
        pass

    def close(self) -> None:
        pass
