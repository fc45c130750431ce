"""The journal's typed events and their one fold: every type round-trips, every type
the code base writes is declared, ``apply`` changes nothing it is given, and the fold
reads a journal exactly as replay, status and the report each did on their own."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands.report import build, render
from orchestrator.commands.status import summarize
from orchestrator.runstate import event_json as J
from orchestrator.runstate import events as E
from orchestrator.runstate.journal import DamagedFile, Journal, read_events, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.replay import replay
from recovery.detection import FailureKind
from recovery.policy import Action
from tests.support.legacy_folds import legacy_build, legacy_replay, legacy_summarize
from tests.support.paths import REPO
from tests.unit.orchestrator.runstate.test_replay import _up_to_running, ev

pytestmark = pytest.mark.unit
ROOT = REPO

INCIDENT: dict[str, Any] = {
    "kind": "cluster_lost",
    "from_region": "local-a",
    "failed_at": 110.0,
    "detected_at": 110.5,
    "to_region": "local-b",
    "last_step": 60,
    "restored_step": 50,
    "first_step_at": 125.0,
    "generation": 1,
    "detected_after_s": 0.5,
    "lost_steps": 10,
    "rto_s": 15.0,
}

# One of each: every field set, so each one's JSON form is exercised.
SAMPLES: list[E.Event] = [
    E.RunStarted(run_id="r", pid=7, config={"job": {"steps": 3}}, candidates=("a", "b")),
    E.RunResumed(pid=8, state=RunState.RUNNING, open_attempt=2, leftover=("r-a-g2",)),
    E.RunKeyCreated(reason="no run.secret"),
    E.RunFinished(status="SUCCEEDED", final_step=300),
    E.Transition(RunState.RECOVERING, RunState.RUNNING, failure="cluster_lost", to_region="b"),
    E.Transition(RunState.PROVISIONING, RunState.PENDING, region="a", generation=1, standby=False, cluster="c"),
    E.Transition(RunState.FAILED, RunState.RECOVERING, reason="no region left", region="b", generation=2),
    E.FencesRead(3, highest_fence=2, journaled=1, failed={"b": "timeout"}),
    E.AttemptStarted(1, "a", standby=True),
    E.AttemptAdopted(1, "a", "r-a-g1"),
    E.AttemptEnded(1, "a", started_at=1.0, ended_at=2.5, restored_step=None, last_step=60, outcome="cluster_lost"),
    E.Provisioned("a", "r-a-g1", address="127.0.0.1:1", provision_s=1.5, generation=1, info={"head_pid": 3}),
    E.Provisioned("a", "r-a", address="127.0.0.1:1", provision_s=0.2, generation=3, info={}, kept_from=2),
    E.ClusterKept("r-a", generation=2, failure="user_error"),
    E.ProvisionRetry("a", error="busy", retry=1, purpose="standby"),
    E.ProvisionFailed("a", kind="no_capacity", error="none", purpose="attempt", generation=2),
    E.RuntimeStarted(4242, generation=1, standby=False),
    E.Fence(1, 0, stores=("a", "b"), failed={}),
    E.Teardown("r-a-g1", seconds=0.25, reason="left running"),
    E.Teardown("r-b-g3", seconds=0.5, purpose="standby"),
    E.Teardown("r-a", seconds=0.5, runtime_kept=True),
    E.RuntimeSwept("r-a"),
    E.RuntimeSwept("r-b", error="OSError: login node unreachable"),
    E.TeardownDeferred("r-a-g1", seconds=3.0),
    E.LogsKept("r-a-g1", generation=1, ranks=(0, 1), bytes=2048, cut=0),
    E.LogsKept("r-b-g2", generation=2, ranks=(), bytes=0, cut=0, error="cluster r-b-g2 was lost"),
    E.FaultReleaseFailed("r-a-g1", "busy"),
    E.CheckpointSkipped(region="a", step=40, reason="bad digest", by="controller"),
    E.RestoreStoreSkipped(region="b", error="timeout", by="controller"),
    E.FenceIgnored(region="b", reason="unsigned fence", by="controller"),
    E.RestoreCopyFailed("gone", step=40),
    E.RestoreCopied(step=40, from_="a", to="b", copy_s=0.1),
    E.Replicated(step=40, from_="a", to="b", lag_s=0.2, copy_s=0.1, bytes=1024),
    E.ReplicationError("boom"),
    E.ControlInvalid("g2/events/x.json", "unknown kind"),
    E.DecisionMade(Action.FAILOVER, FailureKind.CLUSTER_LOST, region="b", reason="why", failed_region="a"),
    E.DecisionMade(Action.GIVE_UP, FailureKind.USER_ERROR, region=None, reason="user", failed_region="a"),
    E.IncidentOpened(**{**INCIDENT, "restored_step": None, "first_step_at": None, "rto_s": None}),
    E.IncidentRecorded(**INCIDENT),
    E.FailureDetected(
        "cluster_lost",
        region="a",
        detail="gone",
        runtime_exit=None,
        cluster_healthy=False,
        heartbeat_age_s=1.5,
        detected_after_s=0.5,
        last_step=60,
        health="gone",
        failed_checks=1,
    ),
    E.HealthGlitch("a", 1, "not_up", detail="sky.status failed", failed_checks=2, heartbeat_age_s=0.4),
    E.RuntimeReattached("a", 1, connection_exit=255, pid=4343, heartbeat_age_s=0.3),
    E.RegionSkipped("b", "1 worker(s) fit (1 node(s) of 1 CPUs), fewer than 2 (trainer.min_workers)"),
    E.Placed("a", {"policy": "cost", "table": [{"region": "a", "expected_usd": 1.5, "correlated": False}]}),
    E.CapacityChosen(
        "a", 2, False, "greedy", "3 s of slack would not absorb another loss (9 s)", slack_s=3.0, needed_s=9.0
    ),
    E.DecisionMade(
        Action.FAILOVER,
        FailureKind.CLUSTER_LOST,
        region="c",
        reason="cheapest",
        failed_region="a",
        placement={"policy": "cost", "table": [{"region": "c", "expected_hours": None}]},
    ),
    E.NodeLost("a", 1, 1, "gone", detail="its raylet exited", fits=1, world_size=2, replacing=True),
    E.NodeReplaced("a", 1, 1, replace_s=3.2),
    E.NodeReplaceFailed("a", 1, 1, "region a: node 1 not up after 60s", fits=1),
    E.FaultInjected("kill_region", index=0, step=60, extra={"seq": 1, "region": "a", "killed": 4}),
    E.FaultInjected("torn_checkpoint", index=1, extra={"torn_step": 40, "stage": "kill"}),
    E.FaultRefused(0, "stale", seq=1, request_generation=2),
    E.DrillRequested("kill_region", "ana@box pid 7", region="local-a"),
    E.ControllerRestarted("SIGKILL", 1),
    E.LeaseTaken(1, "controller 1 on m (pid 7)", 30.0),
    E.LeaseIgnored(1, "lease.json is not a lease"),
    E.ClaimIgnored("c9", "is not a claim"),
    E.LeaseTaken(2, "controller 2 on n (pid 8)", 30.0, previous="controller 1 on m (pid 7)", previous_controller=1),
    E.MirrorRestored(1, 4, 1700000000.5, ("config.json", "journal.jsonl"), skipped=("c2: does not verify",)),
    E.ControllerStoodDown(1, "taken by controller 2 on n (pid 8)"),
    E.DrillRequested("kill_worker", "ana@box pid 7", region="local-a", refused="not a drill's"),
    E.FaultRefused(0, "not a worker", kind="kill_worker", pid=12),
    E.FaultFailed(2, "disk_full", "no scratch_dir"),
    E.FaultEnded(3, "partition_region", region="a", resumed=4),
    E.FaultEnded(4, "preempt", region="a", reclaimed=2),
    E.StandbyReady("b", 3, cluster="r-b-g3"),
    E.StandbyFailed("b", 3, error="ssh"),
    E.StandbyLost("b", 3),
    E.StandbyActivated("b", 3, cluster="r-b-g3"),
    E.HedgeStarted("b", "a", "no heartbeat for 2.6 s", 1),
    E.HedgeCancelled("b", "a", "a answered again: a fresh heartbeat"),
    E.PoolJoined("team", "b"),
    E.PoolLaunched("team", "b", cluster="r-b-g4", provision_s=2.5),
    E.PoolLaunched("team", "b", error="no capacity"),
    E.PoolTaken("team", "b", cluster="r-b-g4", generation=5),
    E.PoolTaken("team", "b", cluster="r-b-g4", taken=False, reason="another run took it first"),
    E.PoolShare("team", "b", 12.5, cluster="r-b-g4", from_ts=1.0, to_ts=20.0, runs=2),
    E.Provisioned("b", "r-b-g4", purpose="attempt", generation=5, provision_s=0.0, pool="team"),
    E.MultipartAborted("a", keys=("k1", "k2")),
    E.MultipartAbortFailed("a", "denied"),
    E.NotifyFailed("webhook", "failover", "HTTP 500 Internal Server Error", endpoint="https://hooks.example.com"),
    E.NotifyOff("webhook", "no notify.secret in the run's folder", endpoint="https://hooks.example.com"),
    E.TensorBoardFailed("stopped: OSError: [Errno 28] No space left on device"),
    E.ListenerFailed("tests.support.listeners:Recorder", "OSError: disk full", event="transition"),
    E.TrackingStarted(kind="mlflow", tracker_run="0a1b2c3d", resumed=True, trial="trial_00001"),
    E.RuntimeReport("train_started", {"restored_step": 0, "generation": 1, "time": 3.0, "by": "runtime"}),
    E.RuntimeReport("transition", {"to": "SUCCEEDED", "by": "runtime"}, legacy=True),
    E.Unknown("from_the_future", {"anything": [1, 2]}),
]


def test_every_declared_type_has_a_sample() -> None:
    assert {E.type_of(e) for e in SAMPLES} >= set(E.EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: E.type_of(e))
def test_every_event_round_trips_through_a_journal_line(event: E.Event) -> None:
    line = json.loads(json.dumps(J.to_json(event)))
    assert line["type"] == E.type_of(event) and "ts" in line
    back = J.from_json(line)
    assert back == event and type(back) is type(event)
    assert J.to_json(back) == line


@pytest.mark.parametrize(
    "line",
    [
        {"ts": 1.0, "type": "attempt_ended", "generation": 1, "region": "a", "outcome": "succeeded"},
        {"ts": 1.0, "type": "attempt_ended", "generation": 1, "region": "a", "restored_step": None},
        {"ts": 1.0, "type": "run_started"},
        {"ts": 2, "type": "teardown", "cluster": "c", "reason": "why"},
        {"ts": 1.0, "type": "fault_injected", "kind": "kill_head", "step": 5, "during": "provisioning", "x": [1]},
        {"ts": 1.0, "type": "checkpoint_skipped", "by": "runtime", "step": 3, "anything": {"a": 1}},
        {"ts": 1.0, "type": "runtime.replicated", "lag_s": 0.5, "by": "runtime", "generation": 2},
        {"ts": 1.0, "type": "a_type_from_another_version", "generation": 4},
    ],
)
def test_a_line_reads_back_as_it_was_written(line: dict[str, Any]) -> None:
    # Old journals lack fields added since: such a line is written back without them.
    assert J.to_json(J.from_json(line)) == line


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ({"ts": 1.0, "type": "attempt_started", "region": "a"}, "(attempt_started) lacks 'generation'"),
        ({"ts": 1.0, "type": "attempt_started", "generation": 1, "region": "a", "zone": "z"}, "'zone'"),
        ({"ts": 1.0, "type": "attempt_started", "generation": True, "region": "a"}, "'generation' of type bool"),
        ({"ts": 1.0, "type": "fence", "generation": 1, "restored_step": 0, "stores": ["a", 1]}, "'stores'"),
        ({"ts": 1.0, "type": "transition", "to": "RUNNING", "from": "NOWHERE"}, "'from' 'NOWHERE'"),
        ({"ts": 1.0, "type": "replicated", "lag_s": float("nan")}, "'lag_s'"),
        ({"ts": 1.0, "type": "decision", "action": "failover", "failure": "bored"}, "'failure' 'bored'"),
        ({"ts": 1.0, "type": "fault_injected", "kind": "k", "lost_steps": "many"}, "'lost_steps'"),
        ({"ts": 1.0, "type": "runtime.replicated", "lag_s": "slow"}, "'lag_s'"),
        ({"ts": 1.0, "type": "run_started", "config": None}, "'config'"),
    ],
)
def test_a_known_type_with_a_wrong_or_missing_field_is_no_event(line: dict[str, Any], words: str) -> None:
    with pytest.raises(J.EventError) as err:
        J.from_json(line)
    assert words in str(err.value)


def test_the_journal_refuses_at_write_time_what_it_would_not_read(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    with pytest.raises(J.EventError, match="'no_such_event'"):
        journal.append("no_such_event", step=1)
    with pytest.raises(J.EventError, match="'zone'"):
        journal.append("attempt_started", generation=1, region="a", zone="z")
    with pytest.raises(J.EventError, match="'generation' of type str"):
        journal.emit(E.AttemptStarted("1", "a"))  # type: ignore[arg-type]
    assert list(read_events(journal.path)) == []


def test_emit_stamps_redacts_and_returns_the_event_as_written(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    written = journal.emit(E.RunStarted(run_id="r", config={"cloud": {"api_token": "s3cr3t"}}))
    assert isinstance(written, E.RunStarted) and written.ts > 0
    assert written.config == {"cloud": {"api_token": "<redacted>"}}
    assert "s3cr3t" not in (tmp_path / "journal.jsonl").read_text()
    assert list(read_typed(journal.path)) == [written]
    journal.append("teardown", cluster="c", purpose="standby")
    (line,) = [e for e in read_events(journal.path) if e["type"] == "teardown"]
    assert set(line) == {"ts", "type", "cluster", "purpose"}  # what the writer gave, no more


def test_a_damaged_line_is_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(str(path)).append("run_started", run_id="r")
    with path.open("a") as fh:
        fh.write('{"ts": 2.0, "type": "fence", "generation": 1}\n')
    with pytest.raises(DamagedFile, match=r"line 2 \(fence\) lacks 'restored_step'"):
        list(read_typed(str(path)))


# --- every type the code base writes is declared -------------------------------------------------


def _written_types() -> tuple[set[str], set[str]]:
    """(types passed to a journal's append as a literal, types of the event classes
    constructed) across the product's code."""
    literal: set[str] = set()
    built: set[str] = set()
    by_class = {cls.__name__: t for t, cls in E.EVENT_TYPES.items()}
    for package in ("orchestrator", "providers", "recovery"):
        for path in (ROOT / package).rglob("*.py"):
            if "runstate" in path.parts:
                continue
            text = path.read_text()
            # Neither an import from runstate nor a name ``journal``: nothing to find in it
            # (an identifier is in the text as written), so it is not parsed.
            if "runstate" not in text and "journal" not in text:
                continue
            tree = ast.parse(text)
            imported = {
                a.asname or a.name: a.name
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "orchestrator.runstate.events"
                for a in node.names
            }
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Name) and imported.get(f.id) in by_class:
                    built.add(by_class[imported[f.id]])
                owner = f.value if isinstance(f, ast.Attribute) else None
                owner_name = getattr(owner, "attr", None) or getattr(owner, "id", None)
                if isinstance(f, ast.Attribute) and f.attr == "append" and owner_name == "journal":
                    first = node.args[0] if node.args else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        literal.add(first.value)
    return literal, built


def test_every_event_type_the_code_base_writes_is_declared_and_every_declared_one_written() -> None:
    literal, built = _written_types()
    assert len(built) >= 30 and {"teardown", "fault_injected", "transition", "decision"} <= built
    assert literal == set(), "journal these as typed events (orchestrator/runstate/events.py), not strings"
    assert set(E.EVENT_TYPES) - built == set(), "declared, but nothing writes them"


# --- apply is pure ---------------------------------------------------------------------------------


# --- the fold reads a journal as the three folds did -------------------------------------------------


def _journey() -> list[dict[str, Any]]:
    """A run with everything: a failover, a standby, runtime reports (namespaced and bare),
    a zombie, a type from another version, and a user error that ends it."""
    t = [100.0]

    def e(type_: str, **fields: Any) -> dict[str, Any]:
        t[0] += 1.0
        return {"ts": t[0], "type": type_, **fields}

    def rt(kind: str, gen: int, **fields: Any) -> dict[str, Any]:
        return e(f"runtime.{kind}", **{"region": "local-a", **fields}, time=t[0], generation=gen, by="runtime")

    return [
        e("run_started", run_id="r", pid=1, config={"job": {"name": "j", "steps": 300}}, candidates=["local-a"]),
        e("fences_read", generation_floor=0, highest_fence=0, journaled=0, failed={}),
        e("transition", **{"from": "PENDING", "to": "PROVISIONING"}, region="local-a", generation=1, standby=False),
        e("attempt_started", generation=1, region="local-a", standby=False),
        e("fence", generation=1, restored_step=0, stores=["local-a", "local-b"], failed={}),
        e("provisioned", region="local-a", cluster="r-local-a-g1", address="x:1", purpose="attempt", generation=1),
        e("runtime_started", generation=1, pid=4242, standby=False),
        e("transition", **{"from": "PROVISIONING", "to": "RUNNING"}, region="local-a", generation=1, cluster="c"),
        rt("train_started", 1, restored_step=0, pid=5),
        rt("replicated", 1, lag_s=0.25, step=20, to="local-b"),
        e("replicated", step=20, **{"from": "local-a", "to": "local-b"}, lag_s=0.5, copy_s=0.1, bytes=10),
        rt("checkpoint_skipped", 1, step=10, reason="digest", region="local-b"),
        e("checkpoint_skipped", by="controller", region="local-b", step=10, reason="digest"),
        e("provisioned", region="local-b", cluster="r-local-b-g2", purpose="standby", generation=2, info={}),
        e("standby_ready", region="local-b", generation=2, cluster="r-local-b-g2"),
        e("fault_injected", index=0, kind="kill_region", step=60, seq=1, region="local-a", killed=3),
        e(
            "failure_detected",
            kind="cluster_lost",
            region="local-a",
            detail="gone",
            runtime_exit=None,
            cluster_healthy=False,
            heartbeat_age_s=1.0,
            detected_after_s=0.5,
            last_step=60,
        ),
        e(
            "attempt_ended",
            generation=1,
            region="local-a",
            started_at=103.0,
            ended_at=117.0,
            restored_step=0,
            last_step=60,
            outcome="cluster_lost",
        ),
        e("decision", action="failover", region="local-b", reason="r", failure="cluster_lost", failed_region="local-a"),
        e("incident_opened", **{**INCIDENT, "restored_step": None, "first_step_at": None, "rto_s": None}),
        e("transition", **{"from": "RUNNING", "to": "RECOVERING"}, failure="cluster_lost", to_region="local-b"),
        e("transition", **{"from": "RECOVERING", "to": "PROVISIONING"}, region="local-b", generation=2, standby=True),
        e("attempt_started", generation=2, region="local-b", standby=True),
        e("fence", generation=2, restored_step=50, stores=["local-b"], failed={"local-a": "down"}),
        e("standby_activated", region="local-b", generation=2, cluster="r-local-b-g2"),
        e("teardown", cluster="r-local-a-g1", seconds=0.5),
        e("transition", **{"from": "PROVISIONING", "to": "RUNNING"}, region="local-b", generation=2, cluster="c2"),
        rt("train_started", 2, restored_step=50),
        e("incident", **INCIDENT),
        e("checkpoint_skipped", step=3, reason="old", by="runtime"),  # a bare runtime kind, before the namespace
        e("fenced_write", generation=1, step=70, by="zombie"),
        e("transition", to="SUCCEEDED", by="runtime"),  # forged: changes nothing
        e("from_another_version", generation=9),
        rt(
            "user_error",
            2,
            error="ValueError: x",
            traceback="Traceback ...\nValueError: x",
            rank=0,
            step=90,
            site="m.py:4",
        ),
        rt("user_error", 2, error="ValueError: y", traceback="second", rank=1),
        e("failure_detected", kind="user_error", region="local-b", detail="x", last_step=90),
        e(
            "attempt_ended",
            generation=2,
            region="local-b",
            started_at=123.0,
            ended_at=140.0,
            restored_step=50,
            last_step=90,
            outcome="user_error",
        ),
        e("decision", action="give_up", region=None, reason="user error", failure="user_error", failed_region="b"),
        e("transition", **{"from": "RUNNING", "to": "FAILED"}, reason="user error", region="local-b", generation=2),
        e("multipart_aborted", region="local-b", keys=["k"]),
        e("run_finished", status="FAILED", final_step=90),
    ]


def _replay_fixtures() -> list[list[dict[str, Any]]]:
    incident = {**INCIDENT, "restored_step": None, "first_step_at": None}
    failover = [
        ev("run_started", run_id="r"),
        *_up_to_running(),
        ev("attempt_ended", generation=1, region="local-a", last_step=60, outcome="cluster_lost"),
        ev("decision", action="failover", region="local-b", failure="cluster_lost", failed_region="local-a"),
        ev("incident_opened", **incident),
        ev("transition", **{"from": "RUNNING", "to": "RECOVERING"}),
    ]
    return [
        [ev("run_started", run_id="r"), *_up_to_running(), ev("fault_injected", kind="controller_crash", step=150)],
        [ev("run_started", run_id="r"), ev("attempt_started", generation=1, region="local-a")],
        failover,
        [*failover, *_up_to_running(2, "local-b", 50), ev("incident", **{**incident, "restored_step": 50})],
        [
            *_up_to_running(),
            ev("teardown", cluster="r-local-a-g1"),
            ev("attempt_ended", generation=1, region="local-a", last_step=500, outcome="succeeded"),
            ev("run_finished", status="SUCCEEDED"),
        ],
        _journey(),
    ]


@pytest.mark.parametrize("n", range(len(_replay_fixtures())))
def test_replay_is_what_it_was_at_every_point_a_controller_could_die(n: int) -> None:
    events = _replay_fixtures()[n]
    for i in range(len(events) + 1):
        assert replay(events[:i]) == legacy_replay(events[:i]), f"after {i} events"


def _run_dir(tmp_path: Path, events: list[dict[str, Any]]) -> str:
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(run_dir)


@pytest.mark.parametrize("n", range(len(_replay_fixtures())))
def test_status_and_report_are_what_they_were_at_every_point(tmp_path: Path, n: int) -> None:
    events = _replay_fixtures()[n]
    for i in range(len(events) + 1):
        run_dir = _run_dir(tmp_path, events[:i])
        now, then = summarize(run_dir), legacy_summarize(run_dir)
        # Newer than the legacy fold: the worker group's size (none of these runs reports one),
        # and the controller the journal names (these journals name a pid, no machine).
        if now is not None:
            assert now.pop("world") == {"world_size": None, "workers": None, "lost_nodes": []}
            controller = now.pop("controller")
            assert controller is None or controller["host"] is None, controller
            # And where its time went (the goodput block: a fold of its own, tested there).
            goodput = now.pop("goodput")
            assert goodput is None or sum(goodput["seconds"].values()) == pytest.approx(goodput["wall_s"], abs=1e-2)
        assert now == then and list(now or {}) == list(then or {}), f"after {i} events"
        rep, old = build(run_dir), legacy_build(run_dir)
        if rep is not None and old is not None:
            # Newer than the legacy fold: the user error that failed the run (the plot marks it).
            assert rep.user_error is None or rep.status == "FAILED", f"after {i} events"
            old.user_error = rep.user_error
            old.goodput = rep.goodput
        assert rep == old, f"after {i} events"
        assert rep is None or old is None or render(rep) == render(old)
