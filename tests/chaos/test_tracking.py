"""The run in a real experiment tracker through real faults: a digits run that loses two
regions is ONE MLflow run on a tracking server the test starts on 127.0.0.1 (sqlite,
a local artifact folder), with one series per metric (no step twice), its incidents and
its final checkpoint's location; a search is a parent run with one child run per trial;
W&B's offline files, read back with W&B's own reader, hold the run's series and end.
The decision of which steps are written is unit-tested step by step
(tests/unit/orchestrator/tracking/test_series.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import Run, orchestrate
from tests.support.trackers import MlflowServer, start_mlflow, wandb_records

TWO_REGIONS_LOST = "chaos.faults=[{kind:kill_region,at_step:150},{kind:kill_region,at_step:320}]"


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(mlflow_server: MlflowServer) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(mlflow_server.uri)


def tracked(home: Path, run_id: str, uri: str, *overrides: str) -> Run:
    run = orchestrate(home, run_id, "tracking=mlflow", f"tracking.uri={uri}", "tracking.flush_every_s=1", *overrides)
    assert run.returncode == 0, run.stderr[-3000:]
    assert not run.events("listener_failed"), run.events("listener_failed")
    return run


@pytest.fixture(scope="module")
def failover(orch_home: Path, mlflow_server: MlflowServer) -> Run:
    return tracked(orch_home, "tracked-failover", mlflow_server.uri, TWO_REGIONS_LOST)


@pytest.fixture(scope="module")
def search(orch_home: Path, mlflow_server: MlflowServer) -> Run:
    return tracked(orch_home, "tracked-search", mlflow_server.uri, "job=digits_hpo")


def runs_of(client: Any, run_id: str) -> list[Any]:
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, f"tags.`orchestrator.run_id` = '{run_id}'")


def test_a_run_that_fails_over_twice_is_one_mlflow_run(failover: Run, client: Any) -> None:
    r = failover.result
    assert r["status"] == "SUCCEEDED" and len(r["incidents"]) == 2, r["incidents"]
    runs = runs_of(client, "tracked-failover")
    assert len(runs) == 1, [x.info.run_id for x in runs]
    run = runs[0]
    assert run.info.status == "FINISHED"
    # Its id journaled once, by the one controller, never taken up again in this run.
    started = failover.events("tracking_started")
    assert [(e["kind"], e["tracker_run"]) for e in started] == [("mlflow", run.info.run_id)]
    tags = run.data.tags
    assert tags["orchestrator.regions"] == "local-a,local-b,local-c" and tags["orchestrator.attempts"] == "3"
    assert tags["orchestrator.status"] == "SUCCEEDED" and tags["orchestrator.final_step"] == "500"
    assert run.data.params["job.name"] == "digits" and run.data.params["tracking.kind"] == "mlflow"


def test_one_series_per_metric_with_no_step_twice_and_the_lost_steps_retrained(failover: Run, client: Any) -> None:
    run = runs_of(client, "tracked-failover")[0]
    assert "train/loss" in run.data.metrics
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), (key, sorted(steps))
    losses = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/loss")}
    # The loss series is whole, to the last step: the steps each failover lost came from the
    # attempt that trained them again (loss.jsonl keeps every attempt's: the last one's values).
    journaled: dict[int, float] = {}
    for line in (failover.run_dir / "loss.jsonl").read_text().splitlines():
        point = json.loads(line)
        journaled[point["step"]] = point["loss"]
    assert set(losses) == set(journaled) and max(losses) == 500
    assert all(losses[s] == pytest.approx(journaled[s]) for s in losses)


def test_its_incidents_and_its_final_checkpoint(failover: Run, client: Any) -> None:
    run = runs_of(client, "tracked-failover")[0]
    tags, rid = run.data.tags, run.info.run_id
    assert tags["orchestrator.incidents"] == "2"
    for n, inc in enumerate(failover.result["incidents"], 1):
        assert tags[f"orchestrator.incident.{n:03d}"].startswith(f"{inc['kind']}: {inc['from_region']} -> ")
    names = {a.path for a in client.list_artifacts(rid, "incidents")}
    assert names == {"incidents/incident_001.json", "incidents/incident_002.json"}
    final = failover.result["final_checkpoint"]
    assert final and tags["orchestrator.final_checkpoint"] == final
    local = Path(client.download_artifacts(rid, "checkpoint/final_checkpoint.json"))
    assert json.loads(local.read_text())["url"] == final
    first = json.loads(Path(client.download_artifacts(rid, "incidents/incident_001.json")).read_text())
    assert (first["from_region"], first["restored_step"]) == (
        failover.result["incidents"][0]["from_region"],
        failover.result["incidents"][0]["restored_step"],
    )


def test_a_search_is_a_parent_run_with_one_child_per_trial(search: Run, client: Any) -> None:
    runs = runs_of(client, "tracked-search")
    parents = [x for x in runs if x.data.tags.get("orchestrator.role") == "run"]
    children = [x for x in runs if x.data.tags.get("orchestrator.role") == "trial"]
    assert len(parents) == 1
    parent = parents[0].info.run_id
    trials = {t["trial_id"] for t in search.result["trials"]}
    assert {c.data.tags["orchestrator.trial"] for c in children} == trials
    assert len(children) == len(trials)
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent
        assert "accuracy" in child.data.metrics, child.data.tags["orchestrator.trial"]
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "accuracy")]
        assert len(steps) == len(set(steps))


def test_w_and_b_offline_files_hold_the_run(orch_home: Path) -> None:
    run = orchestrate(
        orch_home, "tracked-wandb", "tracking=wandb", "tracking.mode=offline", env={"WANDB_MODE": "offline"}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert not run.events("listener_failed"), run.events("listener_failed")
    started = run.events("tracking_started")
    assert len(started) == 1 and started[0]["kind"] == "wandb"
    records = wandb_records(run.run_dir)
    assert records, "no offline run files"
    ids = {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"}
    assert ids == {started[0]["tracker_run"]}
    steps: list[int] = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            if "train/loss" in items:
                steps.append(int(items["orchestrator/step"]))
    assert steps and len(steps) == len(set(steps)) and max(steps) == 500
    summary: dict[str, Any] = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            for i in r.summary.update:
                summary[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
    assert summary["orchestrator.status"] == "SUCCEEDED"
    assert summary["orchestrator.final_checkpoint"] == run.result["final_checkpoint"]
    exits = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
    assert exits == [0]
