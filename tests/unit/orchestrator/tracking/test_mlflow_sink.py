"""The MLflow sink against a recording ``MlflowClient`` (a fake ``mlflow`` in sys.modules,
no server, no socket): one run per orchestrator run found again by its tags or its
journaled id, trials as child runs under ``mlflow.parentRunId``, params once and in
MLflow's batch sizes, points as log_batch calls, the incidents and the final checkpoint
as tags and JSON references, and the end of the children before the run's."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.tracking.mlflow_sink import BATCH_METRICS, BATCH_PARAMS, BATCH_TAGS, RETRIES, TIMEOUT_S, MlflowSink
from orchestrator.tracking.series import Point
from orchestrator.tracking.sinks import Started

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    timestamp: int
    step: int


@dataclass(frozen=True)
class Param:
    key: str
    value: str


@dataclass(frozen=True)
class RunTag:
    key: str
    value: str


@dataclass
class Batch:
    run_id: str
    metrics: Sequence[Metric] = ()
    params: Sequence[Param] = ()
    tags: Sequence[RunTag] = ()


@dataclass
class Client:
    """MlflowClient's calls the sink makes, each kept; runs and experiments in memory."""

    tracking_uri: str | None = None
    experiments: dict[str, str] = field(default_factory=dict)
    runs: dict[str, SimpleNamespace] = field(default_factory=dict)
    history: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)  # what search_runs answers
    race: bool = False  # create_experiment fails: another run made it meanwhile
    calls: list[tuple[str, Any]] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)

    def get_experiment_by_name(self, name: str) -> SimpleNamespace | None:
        self.calls.append(("get_experiment_by_name", name))
        eid = self.experiments.get(name)
        return None if eid is None else SimpleNamespace(experiment_id=eid)

    def create_experiment(self, name: str) -> str:
        self.calls.append(("create_experiment", name))
        if self.race:
            self.experiments[name] = "exp-theirs"
            raise RuntimeError("RESOURCE_ALREADY_EXISTS")
        self.experiments[name] = "exp-1"
        return "exp-1"

    def search_runs(self, ids: list[str], query: str, max_results: int, order_by: list[str]) -> list[Any]:
        self.calls.append(("search_runs", (ids, query, max_results, order_by)))
        return [self.runs[r] for r in self.found[:max_results]]

    def add(self, rid: str, status: str = "RUNNING", stage: str = "active", metrics: Sequence[str] = ()) -> None:
        info = SimpleNamespace(run_id=rid, status=status, lifecycle_stage=stage)
        self.runs[rid] = SimpleNamespace(info=info, data=SimpleNamespace(metrics=dict.fromkeys(metrics, 0.0)))

    def get_run(self, rid: str) -> SimpleNamespace:
        return self.runs[rid]

    def update_run(self, rid: str, status: str) -> None:
        self.calls.append(("update_run", (rid, status)))
        self.runs[rid].info.status = status

    def create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> SimpleNamespace:
        rid = f"new-{len(self.runs) + 1}"
        self.calls.append(("create_run", (experiment_id, run_name, dict(tags))))
        self.add(rid)
        return self.runs[rid]

    def log_batch(
        self, run_id: str, metrics: Sequence[Metric] = (), params: Sequence[Param] = (), tags: Sequence[RunTag] = ()
    ) -> None:
        self.batches.append(Batch(run_id, list(metrics), list(params), list(tags)))

    def get_metric_history(self, rid: str, key: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(step=s) for s in self.history.get((rid, key), [])]

    def log_dict(self, rid: str, value: dict[str, Any], path: str) -> None:
        self.calls.append(("log_dict", (rid, value, path)))

    def set_terminated(self, rid: str, status: str) -> None:
        self.calls.append(("set_terminated", (rid, status)))


@pytest.fixture
def fake_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    root, entities, tracking = (types.ModuleType(n) for n in ("mlflow", "mlflow.entities", "mlflow.tracking"))
    entities.Metric, entities.Param, entities.RunTag = Metric, Param, RunTag  # type: ignore[attr-defined]
    tracking.MlflowClient = Client  # type: ignore[attr-defined]
    for module in (root, entities, tracking):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)  # put back after the test
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)


def make(*overrides: str) -> tuple[MlflowSink, Client]:
    cfg = compose(["job=digits", "tracking=mlflow", "tracking.uri=http://127.0.0.1:5000", *overrides])
    sink = MlflowSink(cfg, "run-7")
    assert isinstance(sink.client, Client)
    return sink, sink.client


def named(client: Client, name: str) -> list[Any]:
    return [args for call, args in client.calls if call == name]


@pytest.mark.usefixtures("fake_mlflow")
def test_the_client_is_the_configured_servers_with_short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    sink, client = make("tracking.project=exp", "tracking.run_name=nightly")
    assert client.tracking_uri == "http://127.0.0.1:5000"
    assert (sink.experiment_name, sink.run_name, sink.run_id) == ("exp", "nightly", "run-7")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == RETRIES
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == TIMEOUT_S
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "99")
    make()
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "99"  # the user's setting stays


@pytest.mark.usefixtures("fake_mlflow")
def test_a_new_run_is_made_in_the_jobs_experiment_with_its_params_in_batches() -> None:
    sink, client = make("tracking.tags.team=nlp")
    params = {f"p{i:03d}": str(i) for i in range(2 * BATCH_PARAMS + 50)}
    params["k" * 300] = "long"
    started = sink.start(None, params, {"team": "nlp"})
    assert started == Started("new-1", False) and sink.ids == {"": "new-1"}
    assert named(client, "create_experiment") == ["digits"]  # no project: the job's name
    ((ids, query, max_results, _),) = named(client, "search_runs")
    assert ids == ["exp-1"] and max_results == 1
    assert "tags.`orchestrator.run_id` = 'run-7'" in query and "tags.`orchestrator.role` = 'run'" in query
    assert named(client, "create_run") == [
        ("exp-1", "run-7", {"team": "nlp", "orchestrator.role": "run", "orchestrator.run_id": "run-7"})
    ]
    assert [len(b.params) for b in client.batches] == [BATCH_PARAMS, BATCH_PARAMS, 51]
    assert all(b.run_id == "new-1" and not b.metrics and not b.tags for b in client.batches)
    logged = {p.key: p.value for b in client.batches for p in b.params}
    assert logged["p042"] == "42" and logged["k" * 250] == "long" and len(logged) == len(params)


@pytest.mark.usefixtures("fake_mlflow")
def test_a_journaled_run_is_taken_up_again_running_without_params_or_a_new_run() -> None:
    sink, client = make()
    client.experiments["digits"] = "exp-0"
    client.add("known-1", status="FAILED")
    assert sink.start("known-1", {"a": "1"}, {}) == Started("known-1", True)
    assert named(client, "update_run") == [("known-1", "RUNNING")]
    assert client.runs["known-1"].info.status == "RUNNING"
    assert not named(client, "create_run") and not named(client, "search_runs") and not client.batches
    assert sink.ids == {"": "known-1"}


@pytest.mark.usefixtures("fake_mlflow")
def test_a_running_run_is_taken_up_as_it_is() -> None:
    sink, client = make()
    client.add("known-1", status="RUNNING")
    assert sink.start("known-1", {}, {}) == Started("known-1", True)
    assert not named(client, "update_run")


@pytest.mark.usefixtures("fake_mlflow")
def test_a_run_made_before_its_id_was_journaled_is_found_by_its_tags() -> None:
    sink, client = make()
    client.add("lost-1", status="KILLED")
    client.found = ["lost-1"]
    assert sink.start(None, {"a": "1"}, {}) == Started("lost-1", True)
    assert named(client, "update_run") == [("lost-1", "RUNNING")] and not named(client, "create_run")


@pytest.mark.usefixtures("fake_mlflow")
def test_a_deleted_run_is_not_written_to_a_new_one_is_made() -> None:
    sink, client = make()
    client.add("known-1", stage="deleted")
    assert sink.start("known-1", {"a": "1"}, {}) == Started("new-2", False)
    assert not named(client, "update_run") and [b.params for b in client.batches] == [[Param("a", "1")]]


@pytest.mark.usefixtures("fake_mlflow")
def test_an_experiment_made_meanwhile_by_another_run_is_used_and_looked_up_once() -> None:
    sink, client = make("tracking.project=shared")
    client.race = True
    sink.start(None, {}, {})
    sink.child("trial_00001", None, {})
    assert named(client, "create_run")[0][0] == "exp-theirs"
    assert named(client, "create_run")[1][0] == "exp-theirs"
    assert named(client, "get_experiment_by_name") == ["shared", "shared"]  # before and after the race, then kept


@pytest.mark.usefixtures("fake_mlflow")
def test_an_experiment_that_can_be_neither_made_nor_found_is_the_error() -> None:
    sink, client = make()

    def refuse(name: str) -> str:
        raise PermissionError("no")

    client.create_experiment = refuse  # type: ignore[method-assign]
    with pytest.raises(PermissionError):
        sink.start(None, {}, {})


@pytest.mark.usefixtures("fake_mlflow")
def test_a_trial_is_a_child_run_carrying_its_parents_id() -> None:
    sink, client = make()
    sink.start(None, {}, {})
    started = sink.child("trial_00003", None, {"lr": "0.1"})
    assert started == Started("new-2", False) and sink.ids == {"": "new-1", "trial_00003": "new-2"}
    _, query, _, _ = named(client, "search_runs")[1]
    assert "'trial' and tags.`orchestrator.trial` = 'trial_00003'" in query
    assert named(client, "create_run")[1] == (
        "exp-1",
        "trial_00003",
        {
            "orchestrator.role": "trial",
            "orchestrator.trial": "trial_00003",
            "mlflow.parentRunId": "new-1",
            "orchestrator.run_id": "run-7",
        },
    )
    assert client.batches[-1] == Batch("new-2", [], [Param("lr", "0.1")], [])


@pytest.mark.usefixtures("fake_mlflow")
def test_a_trials_journaled_child_is_taken_up_again() -> None:
    sink, client = make()
    client.add("parent")
    client.add("child-1", status="FINISHED")
    sink.start("parent", {}, {})
    assert sink.child("trial_00001", "child-1", {"lr": "0.1"}) == Started("child-1", True)
    assert sink.ids["trial_00001"] == "child-1" and not client.batches


@pytest.mark.usefixtures("fake_mlflow")
def test_points_are_log_batch_calls_of_at_most_mlflows_limit_to_their_run(monkeypatch: pytest.MonkeyPatch) -> None:
    sink, client = make()
    sink.start(None, {}, {})
    sink.child("trial_00001", None, {})
    client.batches.clear()
    monkeypatch.setattr("orchestrator.tracking.mlflow_sink.time.time", lambda: 1000.0)
    points = [Point("train/loss", s, 1.0 / (s + 1), 1.5 if s else 0.0) for s in range(BATCH_METRICS * 2 + 5)]
    sink.metrics("", points)
    sink.metrics("trial_00001", [Point("loss", 3, 0.25, 2.0)])
    assert [(b.run_id, len(b.metrics)) for b in client.batches] == [
        ("new-1", BATCH_METRICS),
        ("new-1", BATCH_METRICS),
        ("new-1", 5),
        ("new-2", 1),
    ]
    first, second = client.batches[0].metrics[:2]
    assert first == Metric("train/loss", 1.0, 1_000_000, 0)  # no time known: now, in milliseconds
    assert second == Metric("train/loss", 0.5, 1500, 1)
    assert [m.step for b in client.batches[:3] for m in b.metrics] == list(range(BATCH_METRICS * 2 + 5))
    assert client.batches[3].metrics == [Metric("loss", 0.25, 2000, 3)]


@pytest.mark.usefixtures("fake_mlflow")
def test_tags_go_to_the_run_in_batches() -> None:
    sink, client = make()
    sink.start(None, {}, {})
    client.batches.clear()
    sink.tags({f"t{i}": str(i) for i in range(BATCH_TAGS + 1)})
    assert [(b.run_id, len(b.tags)) for b in client.batches] == [("new-1", BATCH_TAGS), ("new-1", 1)]
    assert client.batches[1].tags == [RunTag(f"t{BATCH_TAGS}", str(BATCH_TAGS))]


@pytest.mark.usefixtures("fake_mlflow")
def test_written_is_the_highest_step_of_each_metric_the_run_has() -> None:
    sink, client = make()
    client.add("known-1", metrics=("train/loss", "train/steps_per_s", "empty"))
    client.history = {("known-1", "train/loss"): [3, 40, 12], ("known-1", "train/steps_per_s"): [7]}
    sink.start("known-1", {}, {})
    assert sink.written("") == {"train/loss": 40, "train/steps_per_s": 7}


@pytest.mark.usefixtures("fake_mlflow")
def test_an_incident_is_a_numbered_tag_the_count_and_its_record_as_json() -> None:
    sink, client = make()
    sink.start(None, {}, {})
    client.batches.clear()
    sink.incident(2, {"kind": "kill_region", "rto_s": 21.3}, "kill_region: a -> b")
    assert client.batches == [
        Batch(
            "new-1",
            [],
            [],
            [RunTag("orchestrator.incident.002", "kill_region: a -> b"), RunTag("orchestrator.incidents", "2")],
        )
    ]
    assert named(client, "log_dict") == [
        ("new-1", {"kind": "kill_region", "rto_s": 21.3}, "incidents/incident_002.json")
    ]


@pytest.mark.usefixtures("fake_mlflow")
def test_the_final_checkpoint_is_a_tag_and_a_json_reference_never_its_bytes() -> None:
    sink, client = make()
    sink.start(None, {}, {})
    client.batches.clear()
    sink.checkpoint("s3://bucket/run-7/step_40", 40, "ab" * 32)
    assert client.batches == [
        Batch("new-1", [], [], [RunTag("orchestrator.final_checkpoint", "s3://bucket/run-7/step_40")])
    ]
    assert named(client, "log_dict") == [
        (
            "new-1",
            {"url": "s3://bucket/run-7/step_40", "step": 40, "checkpoint_sha256": "ab" * 32},
            "checkpoint/final_checkpoint.json",
        )
    ]


@pytest.mark.usefixtures("fake_mlflow")
@pytest.mark.parametrize(
    ("status", "children"), [("FINISHED", "FINISHED"), ("FAILED", "FINISHED"), ("KILLED", "KILLED")]
)
def test_the_end_terminates_the_trials_then_the_run(status: str, children: str) -> None:
    sink, client = make()
    sink.start(None, {}, {})
    sink.child("trial_00001", None, {})
    sink.child("trial_00002", None, {})
    sink.finish(status)
    assert named(client, "set_terminated") == [("new-2", children), ("new-3", children), ("new-1", status)]


@pytest.mark.usefixtures("fake_mlflow")
def test_an_end_before_any_run_terminates_nothing() -> None:
    sink, client = make()
    sink.finish("FAILED")
    assert not named(client, "set_terminated")
