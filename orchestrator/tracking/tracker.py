"""The listener that keeps the run's tracker run (tracking.kind): told every event, and,
beside the TensorBoard writer, the loss series, the progress reports and the final report.

Every call from the controller only queues (never waits, never raises); a thread of its
own gathers what came for tracking.flush_every_s and hands it to the sink in one go. The
tracker run's id comes back from the journal (``tracking_started``: the run's folder here,
or the control store's mirror after a takeover), so the run has one tracker run whatever
the attempts and controllers. What the tracker already has of each series is kept in the
run folder (``tracking/written.json``), else asked of the tracker, so that a resumed
controller gives no step twice.

A tracker that fails (unreachable, a refused call, its SDK missing) or falls behind is
said once (``failed``: the controller journals ``listener_failed``) and left; the run goes on.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from orchestrator.config.schema import Config, TrackerKind
from orchestrator.metrics.board import TRIAL_ID
from orchestrator.metrics.drain import Drain
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptStarted,
    Event,
    IncidentFields,
    RunFinished,
    RuntimeReport,
    TrackingStarted,
    Transition,
)
from orchestrator.runstate.journal import DamagedFile, load_json, read_typed
from orchestrator.runstate.state import RunView
from orchestrator.tracking import records
from orchestrator.tracking.records import RUN
from orchestrator.tracking.series import Committed, Ended, Happening, Offered, Point, Restored, Series, advance, resumed
from orchestrator.tracking.sinks import Sink

# Offers waiting for the thread: beyond this (a tracker that stopped answering) new ones
# are dropped, and said once.
QUEUE_MAX = 4096
# close() waits this long for what is due to reach the tracker.
CLOSE_S = 30.0
WRITTEN = "written.json"

Offer = tuple[str, Any, float]


def make_sink(cfg: Config, run_id: str, run_dir: str) -> Sink:
    """The sink tracking.kind names; ImportError, saying how to install, without its SDK."""
    if cfg.tracking.kind is TrackerKind.mlflow:
        from orchestrator.tracking.mlflow_sink import MlflowSink

        return MlflowSink(cfg, run_id)
    if cfg.tracking.kind is TrackerKind.wandb:
        from orchestrator.tracking.wandb_sink import WandbSink

        return WandbSink(cfg, run_id, run_dir)
    raise ValueError(f"tracking.kind={cfg.tracking.kind} has no sink")


# The SDK each tracker's sink imports: about 1.5 s of a core for MLflow's client.
SDKS = {TrackerKind.mlflow: "mlflow.tracking", TrackerKind.wandb: "wandb"}


def lowest_priority() -> None:
    """This thread at the lowest CPU priority (Linux: a thread's nice value is its own):
    where the controller shares its cores with the cluster (cloud=local), the workers
    come first."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass  # not Linux, or not allowed: the same work at the usual priority


def preload(kind: TrackerKind) -> threading.Thread | None:
    """Import the tracker's SDK on a thread of its own now, while the controller provisions
    (mostly waiting on the cluster), rather than at the first batch, when the workers start
    and a 2-core machine has no core to spare: what is missing is said at the first batch."""
    module = SDKS.get(kind)
    if module is None:
        return None

    def load() -> None:
        lowest_priority()
        try:
            importlib.import_module(module)
        except Exception:  # the first batch says what is missing, once (make_sink)
            pass

    thread = threading.Thread(target=load, name="tracking-sdk", daemon=True)
    thread.start()
    return thread


class Tracker:
    """The run's tracker run, fed from a thread of its own. ``emit``: journals an event (the
    tracker run's id, ``tracking_started``); ``failed(error)``: called at most once."""

    name = "tracking"

    def __init__(
        self,
        cfg: Config,
        run_id: str,
        run_dir: str,
        *,
        emit: Callable[[Event], object],
        failed: Callable[[str], object],
        make: Callable[[Config, str, str], Sink] = make_sink,
        close_s: float = CLOSE_S,
    ) -> None:
        self.cfg, self.run_id, self.run_dir = cfg, run_id, run_dir
        self._emit, self._make = emit, make
        if make is make_sink:
            preload(cfg.tracking.kind)
        # Only the thread touches what follows.
        self.sink: Sink | None = None
        self.series: dict[str, Series] = {}
        self._journaled: dict[str, str] = {}
        self._incidents: dict[tuple[Any, ...], int] = {}
        self._regions: list[str] = []
        self._drain: Drain[Offer] = Drain(
            "tracking",
            self._write,
            failed,
            size=QUEUE_MAX,
            gather_s=cfg.tracking.flush_every_s,
            close_s=close_s,
            dropped=lambda n: f"{n} reports dropped: the tracker fell behind (a slow or stuck server)",
            late=lambda s: f"what was due did not reach the tracker within {s:g} s (a slow or stuck server)",
        )

    # --- what the controller offers (the TensorBoard writer's calls, and on_event) ---------
    def losses(self, points: list[Any], at: float) -> None:
        self._drain.offer(("losses", points, at))

    def progress(self, prog: dict[str, Any]) -> None:
        self._drain.offer(("progress", prog, time.time()))

    def final(self, final: dict[str, Any]) -> None:
        self._drain.offer(("final", final, time.time()))

    def on_event(self, event: Event, view: RunView) -> None:
        self._drain.offer(("event", event, event.ts or time.time()))

    # --- the thread -----------------------------------------------------------------------
    def _write(self, items: list[Offer], last: bool) -> None:
        if not items:
            return
        sink = self._started()
        batch = _Batch()
        for kind, source, at in items:
            if kind == "losses":
                self._advance(batch, RUN, Offered(records.loss_points(source, at)))
            elif kind == "progress":
                self._advance(batch, RUN, Offered(records.progress_points(source, at)))
            elif kind == "final":
                self._advance(batch, RUN, Offered(records.final_points(source, at)))
            else:
                self._event(batch, source, at)
        for child, points in batch.points.items():
            if points:
                sink.metrics(child, points)
        if batch.tags:
            sink.tags(batch.tags)
        for number in sorted(batch.incidents):
            sink.incident(number, *batch.incidents[number])
        if batch.points:
            self._keep_written()
        if batch.result is not None:
            self._end(sink, batch.result)

    def _event(self, batch: _Batch, event: Event, at: float) -> None:
        if isinstance(event, RuntimeReport):
            if event.fields.get("by") == "runtime":  # a fenced older attempt's word is no part of the run's curves
                self._runtime(batch, event.kind, event.fields, at)
        elif isinstance(event, IncidentFields):
            number = self._incidents.setdefault(records.incident_key(event), len(self._incidents) + 1)
            batch.incidents[number] = (records.incident_record(event), records.incident_line(event))
        elif isinstance(event, AttemptStarted):
            self._regions.append(event.region)
            batch.tags["orchestrator.regions"] = ",".join(self._regions)
            batch.tags["orchestrator.attempts"] = str(len(self._regions))
        elif isinstance(event, Transition):
            batch.tags["orchestrator.state"] = str(event.to)
        elif isinstance(event, RunFinished):
            for child in list(self.series):
                self._advance(batch, child, Ended())
            batch.result = event

    def _runtime(self, batch: _Batch, kind: str, fields: dict[str, Any], at: float) -> None:
        step = _step(fields.get("step"))
        if kind == "checkpoint_committed" and step is not None:
            self._advance(batch, RUN, Committed(step))
        elif kind == "train_started":
            self._advance(batch, RUN, Restored(_step(fields.get("restored_step")) or 0))
        elif kind in ("trial_started", "trial_restored", "trial_checkpointed"):
            trial = fields.get("trial_id")
            if not isinstance(trial, str) or not TRIAL_ID.fullmatch(trial):
                return
            config = fields.get("config")
            self._child(trial, _flat(config) if isinstance(config, dict) else {})
            iteration = _step(fields.get("iteration")) or 0
            what: Happening = Committed(iteration) if kind == "trial_checkpointed" else Restored(iteration)
            self._advance(batch, trial, what)
        elif kind == "trial_result":
            found = records.trial_points(fields, at)
            if found is not None:
                self._child(found[0], {})
                self._advance(batch, found[0], Offered(found[1]))

    def _advance(self, batch: _Batch, child: str, what: Happening) -> None:
        series, out = advance(self.series.get(child, Series()), what)
        self.series[child] = series
        if out:
            batch.points.setdefault(child, []).extend(out)

    # --- the tracker run and its children ------------------------------------------------------
    def _started(self) -> Sink:
        if self.sink is not None:
            return self.sink
        lowest_priority()  # this thread's: everything it sends can wait for a free core
        self._journaled = journaled_runs(rundir.journal_path(self.run_dir), str(self.cfg.tracking.kind))
        sink = self._make(self.cfg, self.run_id, self.run_dir)
        tags = {"orchestrator.run_id": self.run_id, "orchestrator.job": self.cfg.job.name, **self.cfg.tracking.tags}
        started = sink.start(self._journaled.get(RUN), records.params(self.cfg), tags)
        self.sink = sink
        self._emit(
            TrackingStarted(kind=str(self.cfg.tracking.kind), tracker_run=started.tracker_run, resumed=started.resumed)
        )
        self.series[RUN] = resumed(self._written(RUN)) if started.resumed else Series()
        return sink

    def _child(self, trial: str, params: dict[str, str]) -> None:
        if trial in self.series:
            return
        assert self.sink is not None
        started = self.sink.child(trial, self._journaled.get(trial), params)
        self._emit(
            TrackingStarted(
                kind=str(self.cfg.tracking.kind), tracker_run=started.tracker_run, resumed=started.resumed, trial=trial
            )
        )
        self.series[trial] = resumed(self._written(trial)) if started.resumed else Series()

    def _written(self, child: str) -> dict[str, int]:
        kept = _read_written(self._written_path())
        if child in kept:
            return kept[child]
        assert self.sink is not None
        return self.sink.written(child)

    def _written_path(self) -> str:
        return os.path.join(self.run_dir, "tracking", WRITTEN)

    def _keep_written(self) -> None:
        path = self._written_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump({child: dict(s.written) for child, s in self.series.items()}, f)
        os.replace(path + ".tmp", path)

    def _end(self, sink: Sink, finished: RunFinished) -> None:
        """The run's end: result.json's fields, the final checkpoint's location, the status."""
        try:
            result = load_json(rundir.result_path(self.run_dir))
        except (FileNotFoundError, DamagedFile):
            result = {}
        if not isinstance(result, dict):
            result = {}
        sink.tags(records.result_summary({"status": finished.status, "final_step": finished.final_step, **result}))
        url = result.get("final_checkpoint")
        if isinstance(url, str) and url:
            sha = result.get("checkpoint_sha256") or result.get("weights_sha256")
            sink.checkpoint(url, _step(result.get("final_step")), sha if isinstance(sha, str) else None)
        sink.finish(records.end_status(finished.status or result.get("status")))

    def close(self) -> None:
        """Send what is due (waiting at most ``close_s``) and end the tracker run's part here."""
        self._drain.close()


class _Batch:
    """What one gathering of reports sends: points by child, tags, incidents, the run's end."""

    def __init__(self) -> None:
        self.points: dict[str, list[Point]] = {}
        self.tags: dict[str, str] = {}
        self.incidents: dict[int, tuple[dict[str, Any], str]] = {}
        self.result: RunFinished | None = None


class Both:
    """The run's reports (losses, progress, the final report) to the TensorBoard writer
    and the tracker: what the watch and the controller feed as ``ctx.metrics``."""

    def __init__(self, *sinks: Any) -> None:
        self.sinks = sinks

    def losses(self, points: list[Any], at: float) -> None:
        for s in self.sinks:
            s.losses(points, at)

    def progress(self, prog: dict[str, Any]) -> None:
        for s in self.sinks:
            s.progress(prog)

    def final(self, final: dict[str, Any]) -> None:
        for s in self.sinks:
            s.final(final)


def tracker_for(
    cfg: Config, run_id: str, run_dir: str, emit: Callable[[Event], object], failed: Callable[[str], object]
) -> Tracker | None:
    """The run's tracker listener; None with tracking.kind=none (nothing imported, no thread)."""
    if cfg.tracking.kind is TrackerKind.none:
        return None
    return Tracker(cfg, run_id, run_dir, emit=emit, failed=failed)


def journaled_runs(journal: str, kind: str) -> dict[str, str]:
    """The tracker runs the journal names (``tracking_started`` of ``kind``): "" the run's,
    else a trial's, the last of each. What can be read of a damaged journal counts."""
    out: dict[str, str] = {}
    try:
        for event in read_typed(journal):
            if isinstance(event, TrackingStarted) and event.kind == kind:
                out[event.trial or RUN] = event.tracker_run
    except (DamagedFile, OSError):
        pass  # a torn last line: what came before it stands
    return out


def _read_written(path: str) -> dict[str, dict[str, int]]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(child): {str(k): v for k, v in steps.items() if isinstance(v, int)}
        for child, steps in data.items()
        if isinstance(steps, dict)
    }


def _step(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _flat(config: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    records._flatten(config, "", out)
    return out
