"""The run in MLflow: one run per orchestrator run (tags ``orchestrator.run_id`` and
``orchestrator.role``), a search's trials as its child runs (``mlflow.parentRunId``).

Through ``MlflowClient`` rather than MLflow's fluent API: nothing of the controller's
process state (an active run, an environment variable) is touched. A token reaches the
server as MLflow reads it, from MLFLOW_TRACKING_TOKEN (or _USERNAME and _PASSWORD).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.tracking.series import Point
from orchestrator.tracking.sinks import Started, missing

# MLflow's own limits on one log_batch call.
BATCH_METRICS = 1000
BATCH_PARAMS = 100
BATCH_TAGS = 100
# A server that does not answer costs the listener's thread this long, not minutes of
# MLflow's default retries; the run never waits on it either way.
RETRIES = "2"
TIMEOUT_S = "20"
TERMINAL = ("FINISHED", "FAILED", "KILLED")


class MlflowSink:
    def __init__(self, cfg: Config, run_id: str) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", RETRIES)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", TIMEOUT_S)
        try:
            from mlflow.entities import Metric, Param, RunTag
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing("mlflow-skinny", exc) from exc
        self._metric, self._param, self._tag = Metric, Param, RunTag
        self.client = MlflowClient(tracking_uri=cfg.tracking.uri)
        self.experiment_name = cfg.tracking.project or cfg.job.name
        self.run_name = cfg.tracking.run_name or run_id
        self.run_id = run_id
        self.ids: dict[str, str] = {}  # "" the run, else a trial id: the MLflow run's id
        self._experiment_id: str | None = None

    def _experiment(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment_name)
            if found is None:
                try:
                    self._experiment_id = self.client.create_experiment(self.experiment_name)
                except Exception:
                    # Another run made it meanwhile: that one is as good.
                    found = self.client.get_experiment_by_name(self.experiment_name)
                    if found is None:
                        raise
                    self._experiment_id = found.experiment_id
            else:
                self._experiment_id = found.experiment_id
        return self._experiment_id

    def _find(self, trial: str) -> str | None:
        """The run this orchestrator run made before its id was journaled (a controller
        lost between the two), by its tags."""
        query = f"tags.`orchestrator.run_id` = '{self.run_id}' and tags.`orchestrator.role` = "
        query += "'run'" if not trial else f"'trial' and tags.`orchestrator.trial` = '{trial}'"
        runs = self.client.search_runs(
            [self._experiment()], query, max_results=1, order_by=["attributes.start_time ASC"]
        )
        return runs[0].info.run_id if runs else None

    def _take(self, trial: str, known: str | None) -> str | None:
        """``known`` (else the one the tracker has) set running again; None when there is none."""
        found = known or self._find(trial)
        if found is None:
            return None
        run = self.client.get_run(found)
        if run.info.lifecycle_stage == "deleted":
            return None  # deleted by someone: a new run, rather than logs to the bin
        if run.info.status in TERMINAL:
            self.client.update_run(found, status="RUNNING")
        return found

    def start(self, known: str | None, params: Mapping[str, str], tags: Mapping[str, str]) -> Started:
        return self._open("", known, params, {**tags, "orchestrator.role": "run"}, self.run_name)

    def child(self, trial: str, known: str | None, params: Mapping[str, str]) -> Started:
        tags = {"orchestrator.role": "trial", "orchestrator.trial": trial, "mlflow.parentRunId": self.ids[""]}
        return self._open(trial, known, params, tags, trial)

    def _open(
        self, trial: str, known: str | None, params: Mapping[str, str], tags: Mapping[str, str], name: str
    ) -> Started:
        taken = self._take(trial, known)
        if taken is not None:
            self.ids[trial] = taken
            return Started(taken, True)
        run = self.client.create_run(
            self._experiment(), run_name=name, tags={**tags, "orchestrator.run_id": self.run_id}
        )
        rid = run.info.run_id
        self.ids[trial] = rid
        # Params once, when the run is made: MLflow refuses a param logged again with
        # another value (a resume's overrides), and the first attempt's config is the run's.
        items = [self._param(k[:250], v) for k, v in params.items()]
        for i in range(0, len(items), BATCH_PARAMS):
            self.client.log_batch(rid, params=items[i : i + BATCH_PARAMS])
        return Started(rid, False)

    def written(self, child: str) -> dict[str, int]:
        rid = self.ids[child]
        out: dict[str, int] = {}
        for key in self.client.get_run(rid).data.metrics:
            steps = [m.step for m in self.client.get_metric_history(rid, key)]
            if steps:
                out[key] = max(steps)
        return out

    def metrics(self, child: str, points: Sequence[Point]) -> None:
        now = int(time.time() * 1000)
        items = [self._metric(p.key, p.value, int(p.at * 1000) if p.at else now, p.step) for p in points]
        for i in range(0, len(items), BATCH_METRICS):
            self.client.log_batch(self.ids[child], metrics=items[i : i + BATCH_METRICS])

    def tags(self, tags: Mapping[str, str]) -> None:
        items = [self._tag(k, v) for k, v in tags.items()]
        for i in range(0, len(items), BATCH_TAGS):
            self.client.log_batch(self.ids[""], tags=items[i : i + BATCH_TAGS])

    def incident(self, number: int, record: Mapping[str, Any], line: str) -> None:
        rid = self.ids[""]
        self.tags({f"orchestrator.incident.{number:03d}": line, "orchestrator.incidents": str(number)})
        self.client.log_dict(rid, dict(record), f"incidents/incident_{number:03d}.json")

    def checkpoint(self, url: str, step: int | None, sha256: str | None) -> None:
        self.tags({"orchestrator.final_checkpoint": url})
        reference = {"url": url, "step": step, "checkpoint_sha256": sha256}
        self.client.log_dict(self.ids[""], reference, "checkpoint/final_checkpoint.json")

    def finish(self, status: str) -> None:
        for trial, rid in self.ids.items():
            if trial:
                self.client.set_terminated(rid, status="FINISHED" if status != "KILLED" else status)
        if "" in self.ids:
            self.client.set_terminated(self.ids[""], status=status)
