"""The W&B sink against a fake ``wandb`` in sys.modules (a run object that records its
log, summary and artifact calls; wandb's own service process is never started): one
run taken up again by its journaled id, every series plotted against the training's
step, a search's trials as series of the run, incidents and the final checkpoint in
the summary, the checkpoint as a reference artifact, and the exit code of the end."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.tracking.series import Point
from orchestrator.tracking.sinks import Started
from orchestrator.tracking.wandb_sink import MAX_TAG, STEP, WandbSink

pytestmark = pytest.mark.unit


@dataclass
class Run:
    id: str
    defined: list[tuple[str, str | None]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    logged: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        self.defined.append((name, step_metric))

    def log(self, values: dict[str, Any]) -> None:
        self.logged.append(dict(values))

    def log_artifact(self, artifact: Artifact) -> None:
        self.artifacts.append(artifact)

    def finish(self, exit_code: int) -> None:
        self.exit_codes.append(exit_code)


@dataclass
class Artifact:
    name: str
    type: str
    metadata: dict[str, Any]
    references: list[tuple[str, str, bool]] = field(default_factory=list)

    def add_reference(self, uri: str, name: str, checksum: bool) -> None:
        self.references.append((uri, name, checksum))


class FakeWandb(types.ModuleType):
    """What WandbSink uses of ``wandb``: init keeps its arguments and gives a Run."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.inits: list[dict[str, Any]] = []
        self.runs: list[Run] = []
        self.util = types.SimpleNamespace(generate_id=lambda: "gen-id")
        self.Artifact = Artifact

    def Settings(self, **kw: Any) -> dict[str, Any]:
        return kw

    def init(self, **kw: Any) -> Run:
        self.inits.append(kw)
        self.runs.append(Run(kw["id"]))
        return self.runs[-1]


@pytest.fixture
def wandb(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWandb]:
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    yield fake


def make(tmp_path: Path, *overrides: str) -> WandbSink:
    cfg = compose(["job=digits", "tracking=wandb", "tracking.mode=offline", *overrides])
    return WandbSink(cfg, "run-7", str(tmp_path))


def test_the_sink_names_its_project_run_and_tags_from_the_config(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path, "tracking.tags.team=nlp", f"tracking.tags.long={'x' * 80}")
    assert sink.wandb is wandb
    assert (sink.project, sink.entity, sink.name, sink.mode) == ("digits", None, "run-7", "offline")
    assert sink.user_tags == ["team:nlp", ("long:" + "x" * 80)[:MAX_TAG]]
    assert sink.dir == os.path.join(str(tmp_path), "tracking")
    named = make(tmp_path, "tracking.project=exp", "tracking.entity=team", "tracking.run_name=nightly")
    assert (named.project, named.entity, named.name) == ("exp", "team", "nightly")


def test_a_new_run_gets_an_id_its_params_and_every_series_against_the_step(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path, "tracking.tags.team=nlp")
    started = sink.start(None, {"job.name": "digits"}, {"orchestrator.run_id": "run-7"})
    assert started == Started("gen-id", False)
    (init,) = wandb.inits
    assert init["id"] == "gen-id" and init["config"] == {"job.name": "digits"}
    assert (init["project"], init["entity"], init["name"], init["group"], init["job_type"]) == (
        "digits",
        None,
        "run-7",
        "run-7",
        "run",
    )
    assert (init["resume"], init["tags"], init["dir"]) == ("allow", ["team:nlp"], sink.dir)
    assert init["settings"]["mode"] == "offline" and init["settings"]["console"] == "off"
    assert Path(sink.dir).is_dir()
    run = wandb.runs[0]
    assert run.defined == [(STEP, None), ("*", STEP)]
    assert run.summary == {"orchestrator.run_id": "run-7"}


def test_a_journaled_run_is_resumed_by_its_id_without_config(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path)
    assert sink.start("known-1", {"job.name": "digits"}, {}) == Started("known-1", True)
    (init,) = wandb.inits
    assert init["id"] == "known-1" and init["config"] is None and init["resume"] == "allow"


def test_a_trial_is_series_of_the_run_against_its_own_iterations(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path)
    sink.start("known-1", {}, {})
    assert sink.child("trial_00003", None, {"lr": "0.1"}) == Started("known-1/trial_00003", False)
    assert sink.child("trial_00004", "known-1/trial_00004", {}) == Started("known-1/trial_00004", True)
    run = wandb.runs[0]
    assert run.defined[2:4] == [
        ("trials/trial_00003/iteration", None),
        ("trials/trial_00003/*", "trials/trial_00003/iteration"),
    ]
    assert run.summary["trials/trial_00003/config"] == {"lr": "0.1"}
    assert len(wandb.inits) == 1  # no run of its own


def test_points_are_one_log_call_per_step_in_step_order(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path)
    sink.start(None, {}, {})
    sink.child("trial_00001", None, {})
    sink.metrics(
        "",
        [Point("train/loss", 2, 0.5), Point("train/loss", 1, 0.9), Point("train/steps_per_s", 2, 3.0)],
    )
    sink.metrics("trial_00001", [Point("loss", 4, 0.25)])
    assert wandb.runs[0].logged == [
        {"train/loss": 0.9, STEP: 1},
        {"train/loss": 0.5, "train/steps_per_s": 3.0, STEP: 2},
        {"trials/trial_00001/loss": 0.25, "trials/trial_00001/iteration": 4},
    ]


def test_written_says_nothing_back(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path)
    sink.start("known-1", {}, {})
    assert sink.written("") == {}


def test_tags_are_the_runs_summary(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path)
    sink.start(None, {}, {"a": "1"})
    sink.tags({"orchestrator.status": "SUCCEEDED", "a": "2"})
    assert wandb.runs[0].summary == {"a": "2", "orchestrator.status": "SUCCEEDED"}


def test_incidents_are_numbered_in_the_summary_with_their_records_once_each(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = make(tmp_path)
    sink.start(None, {}, {})
    sink.incident(1, {"kind": "kill_region"}, "kill_region: a -> ?")
    sink.incident(2, {"kind": "node_lost"}, "node_lost: b -> ?")
    sink.incident(1, {"kind": "kill_region", "rto_s": 21.3}, "kill_region: a -> b, RTO 21.3 s")  # told again
    summary = wandb.runs[0].summary
    assert summary["orchestrator.incident.001"] == "kill_region: a -> b, RTO 21.3 s"
    assert summary["orchestrator.incident.002"] == "node_lost: b -> ?"
    assert summary["orchestrator.incidents"] == 2
    assert summary["orchestrator.incident_records"] == [{"kind": "kill_region", "rto_s": 21.3}, {"kind": "node_lost"}]


def test_the_final_checkpoint_is_a_reference_artifact_never_uploaded(wandb: FakeWandb, tmp_path: Path) -> None:
    sink = WandbSink(compose(["job=digits", "tracking=wandb"]), "run/7:x", str(tmp_path))
    sink.start(None, {}, {})
    sink.checkpoint("s3://bucket/run/step_40", 40, "ab" * 32)
    run = wandb.runs[0]
    assert run.summary["orchestrator.final_checkpoint"] == "s3://bucket/run/step_40"
    (artifact,) = run.artifacts
    assert (artifact.name, artifact.type) == ("run_7_x-final-checkpoint", "checkpoint")
    assert artifact.metadata == {"url": "s3://bucket/run/step_40", "step": 40, "sha256": "ab" * 32}
    assert artifact.references == [("s3://bucket/run/step_40", "checkpoint", False)]


@pytest.mark.parametrize(("status", "code"), [("FINISHED", 0), ("FAILED", 1), ("KILLED", 1)])
def test_the_end_is_the_runs_exit_code(wandb: FakeWandb, tmp_path: Path, status: str, code: int) -> None:
    sink = make(tmp_path)
    sink.start(None, {}, {})
    sink.finish(status)
    assert wandb.runs[0].exit_codes == [code]


def test_an_end_before_the_run_started_does_nothing(wandb: FakeWandb, tmp_path: Path) -> None:
    make(tmp_path).finish("FAILED")
    assert not wandb.inits and not wandb.runs
