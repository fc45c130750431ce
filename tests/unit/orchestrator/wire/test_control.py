"""The control channel's trust boundary: what the runtime writes is parsed, never believed.

Schemas reject malformed objects (orchestrator.wire.schema); the channel's readers
return None for them and report each once; runtime events live under ``runtime.`` in
the journal, where replay never reads them; the fault injector refuses an old
generation's request and a pid that is not the cluster's own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config.schema import RegionConfig, TrainerConfig
from orchestrator.control.context import RunContext
from orchestrator.control.watch import AttemptWatch
from orchestrator.runstate.events import runtime_type
from orchestrator.runstate.journal import Journal, event_problem, read_events
from orchestrator.runstate.replay import replay
from orchestrator.wire import schema as wire
from orchestrator.wire.control import ControlChannel, Invalid
from providers.base import ClusterHandle

T = 1_700_000_000.0


HB = {"time": T, "generation": 2, "step": 5, "pid": 123}
EV = {"time": T, "generation": 2, "type": "workers_ready", "pid": 123}


def test_what_the_runtime_writes_reads_back_as_records(tmp_path: Path) -> None:
    c = ControlChannel(f"file://{tmp_path}/control")
    c.heartbeat(2, step=7, pid=os.getpid())
    c.progress(2, step=7, total=10, loss=0.5, last_checkpoint=None, telemetry={"gpu": None})
    c.event(2, "train_started", restored_step=0, restored_from=None, pid=os.getpid(), device="cpu")
    c.event(2, "losses", points=[[1, 0.9], [2, 0.8]])
    c.final(2, final_step=10, metrics={"eval_loss": 1.0}, weights_sha256="ab" * 32, final_checkpoint=None)
    c.exited(2, 0)
    c.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=os.getpid(), generation=2, during=None)
    c.chaos_fired(0, count=1, kind="kill_worker", step=20)
    c.preempt_notice(2, pid=os.getpid())

    hb = c.read_heartbeat(2)
    assert hb is not None and hb.step == 7 and hb.generation == 2
    prog = c.read_progress(2)
    assert prog is not None and prog.step == 7 and prog["loss"] == 0.5
    assert [e.kind for e in c.read_events(2, set())] == ["train_started", "losses"]
    final = c.read_final(2)
    assert final is not None and final.final_step == 10 and final.as_dict()["metrics"] == {"eval_loss": 1.0}
    assert c.read_exit(2) == 0
    (req,) = c.chaos_requests().values()
    assert (req.generation, req.pid, req.seq) == (2, os.getpid(), 1)
    assert c.fired_count(0) == 1 and c.fired_steps(0) == {20}
    notice = c.read_preempt(2)
    assert notice is not None and notice.pid == os.getpid()


@pytest.mark.parametrize(
    "fields",
    [
        {"step": 3, "region": "local-a", "reason": "fenced"},
        {"config": {"lr": 0.1}, "trial_id": "t1"},
        {"lag_s": 0.25, "to": "local-b", "from": "local-a", "step": 4},
        {"traceback": None, "error": "ValueError: x", "rank": 0},
    ],
)
def test_a_valid_runtime_event_never_makes_the_journal_read_as_damaged(tmp_path: Path, fields: Any) -> None:
    ev = wire.parse_event({"time": T, "generation": 2, "type": "checkpoint_skipped", **fields})
    journal = Journal(str(tmp_path / "journal.jsonl"))
    journal.append(runtime_type(ev.kind), **{**ev.fields, "time": ev.time, "generation": 2}, by="runtime")
    (line,) = read_events(journal.path)
    assert event_problem(line) is None and line["type"] == "runtime.checkpoint_skipped"


# --- the channel: invalid objects are None, reported once, never raised -----------------------------
def _channel(tmp_path: Path) -> tuple[ControlChannel, list[Invalid]]:
    seen: list[Invalid] = []
    return ControlChannel(f"file://{tmp_path}/control", on_invalid=seen.append), seen


def _put(tmp_path: Path, rel: str, data: bytes) -> None:
    path = tmp_path / "control" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.mark.parametrize(
    ("rel", "data", "read"),
    [
        ("g2/heartbeat.json", b"{torn", lambda c: c.read_heartbeat(2)),
        ("g2/heartbeat.json", b"[]", lambda c: c.read_heartbeat(2)),
        ("g2/heartbeat.json", json.dumps({**HB, "time": "x"}).encode(), lambda c: c.read_heartbeat(2)),
        ("g2/heartbeat.json", json.dumps({**HB, "generation": 1}).encode(), lambda c: c.read_heartbeat(2)),
        ("g2/exit.json", b'{"code": "zero"}', lambda c: c.read_exit(2)),
        ("g2/exit.json", b"0", lambda c: c.read_exit(2)),
        ("g2/progress.json", b"x" * (wire.MAX_BYTES + 5), lambda c: c.read_progress(2)),
        ("g2/final.json", b'{"time": 1, "generation": 2}', lambda c: c.read_final(2)),
        ("chaos/0.fired", b'{"time": 1, "count": "many"}', lambda c: c.fired_count(0) or None),
    ],
)
def test_a_malformed_file_reads_as_none_and_is_reported_once(tmp_path: Path, rel: str, data: bytes, read: Any) -> None:
    c, seen = _channel(tmp_path)
    _put(tmp_path, rel, data)
    assert read(c) is None
    assert read(c) is None
    (invalid,) = seen
    assert invalid.path == rel and "\n" not in invalid.reason and len(invalid.reason) < 200


def test_a_folder_where_a_file_should_be_is_invalid_not_a_crash(tmp_path: Path) -> None:
    c, seen = _channel(tmp_path)
    (tmp_path / "control" / "g2" / "heartbeat.json").mkdir(parents=True)
    assert c.read_heartbeat(2) is None
    assert [i.reason for i in seen] == ["a folder, not a regular file"]


def test_invalid_events_are_skipped_for_good_and_the_valid_ones_kept(tmp_path: Path) -> None:
    c, seen = _channel(tmp_path)
    c.event(2, "workers_ready", pid=123)
    _put(tmp_path, "g2/events/0000000001.000000-deadbeef.json", b"[1]")
    _put(tmp_path, "g2/events/0000000002.000000-deadbeef.json", json.dumps({**EV, "generation": 1}).encode())
    _put(tmp_path, "g2/events/evil.json", json.dumps(EV).encode())
    names: set[str] = set()
    assert [e.kind for e in c.read_events(2, names)] == ["workers_ready"]
    assert len(names) == 4 and len(seen) == 3
    assert c.read_events(2, names) == [] and len(seen) == 3


def test_reports_are_bounded(tmp_path: Path) -> None:
    c, seen = _channel(tmp_path)
    for i in range(300):
        _put(tmp_path, f"g2/events/{i:010d}.000000-deadbeef.json", b"nope")
    assert c.read_events(2, set()) == []
    assert len(seen) <= 102 and "the rest are ignored" in seen[-1].reason


# --- the watch: runtime events in their namespace, invalid ones journaled --------------------------
def _watch(tmp_path: Path, gen: int = 2) -> tuple[AttemptWatch, Journal, ControlChannel]:
    journal = Journal(str(tmp_path / "run" / "journal.jsonl"))
    control = ControlChannel(
        f"file://{tmp_path}/control",
        on_invalid=lambda inv: journal.append("control_invalid", path=inv.path, reason=inv.reason),
    )
    progress = SimpleNamespace(replication_lag=lambda lag: None, note=lambda text: None, update=lambda *a: None)
    recovery = SimpleNamespace(
        heartbeat_interval_s=1.0, heartbeat_timeout_s=5.0, health_failures_to_lose=3, node_replace_timeout_s=60.0
    )
    cloud = SimpleNamespace(regions={"local-a": RegionConfig(store="file:///unused")})
    ctx = RunContext(
        run_id="r",
        run_dir=str(tmp_path / "run"),
        cfg=SimpleNamespace(recovery=recovery, cloud=cloud, trainer=TrainerConfig()),  # type: ignore[arg-type]
        provider=None,  # type: ignore[arg-type]
        control=control,
        emit=journal.emit,
        progress=progress,  # type: ignore[arg-type]
    )
    cluster = ClusterHandle("c", "local-a", "local", "")
    proc = SimpleNamespace(pid=1, poll=lambda: None)
    watch = AttemptWatch(ctx, None, cluster, proc, generation=gen, region="local-a")  # type: ignore[arg-type]
    return watch, journal, control


def _controller_run(journal: Journal) -> None:
    journal.append("run_started", run_id="r")
    journal.append("transition", **{"from": "PENDING", "to": "PROVISIONING"})
    journal.append("attempt_started", generation=2, region="local-a")
    journal.append("provisioned", cluster="r-local-a-g2", region="local-a", generation=2)
    journal.append("fence", generation=2, restored_step=0)
    journal.append("transition", **{"from": "PROVISIONING", "to": "RUNNING"})


def test_runtime_events_are_journaled_in_their_namespace_and_replay_ignores_them(tmp_path: Path) -> None:
    watch, journal, control = _watch(tmp_path)
    _controller_run(journal)
    before = replay(journal.events())
    control.event(2, "train_started", restored_step=0, pid=123)
    control.event(2, "user_error", error="ValueError: boom", rank=0, by_hand="x", step=7, site="/proj/m.py:46")
    control.event(2, "user_error", error="ValueError: later", rank=1, step=8, site="/proj/m.py:50")
    # Forged controller events: not kinds the runtime has, so dropped and journaled as invalid.
    for kind in ("transition", "fence", "teardown", "fences_read"):
        control.event(2, kind, to="SUCCEEDED", cluster="r-local-a-g2", generation_floor=99, restored_step=5)
    watch._events()
    events = journal.events()
    runtime = [e for e in events if e["type"].startswith("runtime.")]
    assert [e["type"] for e in runtime] == ["runtime.train_started", "runtime.user_error", "runtime.user_error"]
    assert all(e["by"] == "runtime" and e["generation"] == 2 for e in runtime)
    error = watch.state.user_error
    assert error is not None and error.error == "ValueError: boom" and watch.state.train_starts == 1
    # The first rank's error, its step and the user's file and line.
    assert (error.step, error.site) == (7, "/proj/m.py:46")
    invalid = [e for e in events if e["type"] == "control_invalid"]
    assert len(invalid) == 4 and all("unknown kind" in e["reason"] for e in invalid)
    after = replay(events)
    assert (after.state, after.generation, after.lineage, after.leftover.keys()) == (
        before.state,
        before.generation,
        before.lineage,
        before.leftover.keys(),
    )


def test_a_forged_runtime_transition_fence_or_teardown_in_the_journal_changes_nothing(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    _controller_run(journal)
    before = replay(list(read_events(journal.path)))
    forged = {
        "transition": {"from": "RUNNING", "to": "SUCCEEDED"},
        "fence": {"generation": 2, "restored_step": 500},
        "teardown": {"cluster": "r-local-a-g2"},
        "fences_read": {"generation_floor": 10**6},
        "run_finished": {"status": "SUCCEEDED"},
        "attempt_ended": {"generation": 2, "region": "local-a"},
    }
    for kind, fields in forged.items():
        journal.append(runtime_type(kind), **fields, by="runtime")
        journal.append(kind, **fields, by="runtime")  # as journals before the namespace had them
        journal.append(kind, **fields, by="zombie")
    after = replay(list(read_events(journal.path)))
    assert after.state == before.state and after.state.name == "RUNNING"
    assert after.generation == before.generation == 2
    assert after.lineage == before.lineage
    assert after.leftover.keys() == before.leftover.keys() == {"r-local-a-g2"}
    assert not after.finished and after.open_attempt is not None


def test_a_malformed_heartbeat_exit_or_event_does_not_crash_the_watch(tmp_path: Path) -> None:
    watch, journal, control = _watch(tmp_path)
    _put(tmp_path, "g2/heartbeat.json", b'{"time": "soon", "generation": 2}')
    _put(tmp_path, "g2/exit.json", b"[0]")
    _put(tmp_path, "g2/progress.json", b"\x00" * 64)
    _put(tmp_path, "g2/events/0000000001.000000-deadbeef.json", b'{"type": "user_error"')
    for _ in range(3):
        watch._events()
        watch._progress()
        assert control.read_heartbeat(2) is None and control.read_exit(2) is None
    paths = sorted(e["path"] for e in journal.events() if e["type"] == "control_invalid")
    assert paths == [
        "g2/events/0000000001.000000-deadbeef.json",
        "g2/exit.json",
        "g2/heartbeat.json",
        "g2/progress.json",
    ]


# --- sealed: what opens under the run's keys, and nothing else -------------------------------------
SECRET = b"s" * 32


def _sealed_pair(tmp_path: Path, gen: int = 3) -> tuple[ControlChannel, ControlChannel, list[Invalid]]:
    """The controller's side (every generation's keys) and attempt ``gen``'s, on one channel."""
    from recovery.keys import controller_keys

    keys = controller_keys(SECRET, "r")
    seen: list[Invalid] = []
    url = f"file://{tmp_path}/control"
    return ControlChannel(url, on_invalid=seen.append, keys=keys), ControlChannel(url, keys=keys.for_attempt(gen)), seen


def test_what_an_attempt_seals_the_controller_opens_and_what_the_controller_seals_the_attempt_opens(
    tmp_path: Path,
) -> None:
    ctl, rt, seen = _sealed_pair(tmp_path)
    rt.heartbeat(3, step=7, pid=os.getpid())
    rt.progress(3, step=7, total=10, loss=0.5)
    rt.event(3, "user_error", rank=0, error="ValueError: x")
    rt.final(3, final_step=10, metrics={})
    rt.exited(3, 0)
    rt.preempt_notice(3, pid=os.getpid())
    rt.chaos_request(0, seq=1, kind="kill_worker", step=20, rank=0, pid=os.getpid(), generation=3)
    ctl.chaos_fired(0, count=1, kind="kill_worker", step=20)
    ctl.activate(3, lineage=[[3, 0]])
    ctl.nodes_word(3, fits=2, wait_until=T, lost=[1])
    assert ctl.read_heartbeat(3) is not None and ctl.read_progress(3) is not None
    assert [e.kind for e in ctl.read_events(3, set())] == ["user_error"]
    assert ctl.read_final(3) is not None and ctl.read_exit(3) == 0 and ctl.read_preempt(3) is not None
    assert set(ctl.chaos_requests()) == {0}
    assert rt.fired_count(0) == 1 and rt.is_active(3) and rt.read_activation(3) is not None
    word = rt.read_nodes_word(3)
    assert word is not None and word.fits == 2
    assert rt.preempt_requested(3)
    assert seen == []


def test_forged_objects_change_nothing_and_each_kind_is_reported_once(tmp_path: Path) -> None:
    ctl, rt, seen = _sealed_pair(tmp_path)
    rt.event(3, "workers_ready", pid=123)
    for i in range(5):
        forged = {"time": T + i, "generation": 3, "type": "user_error", "rank": 0, "error": "ValueError: forged"}
        _put(tmp_path, f"g3/events/{T + i:017.6f}-deadbeef.json", json.dumps(forged).encode())
    _put(tmp_path, "g3/preempt.json", json.dumps({"time": T, "generation": 3, "pid": 1}).encode())
    _put(tmp_path, "g3/exit.json", json.dumps({"time": T, "generation": 3, "code": 3}).encode())
    _put(tmp_path, "g3/progress.json", json.dumps({"time": T, "generation": 3, "step": 2999, "total": 3000}).encode())
    _put(tmp_path, "chaos/0.fired", json.dumps({"time": T, "count": 9, "steps": [1]}).encode())
    _put(tmp_path, "g3/activate.json", json.dumps({"time": T, "generation": 3}).encode())
    assert [e.kind for e in ctl.read_events(3, set())] == ["workers_ready"]
    assert ctl.read_preempt(3) is None and ctl.read_exit(3) is None and ctl.read_progress(3) is None
    assert not rt.preempt_requested(3) and rt.fired_count(0) == 0 and not rt.is_active(3)
    by_path = {i.path: i.reason for i in seen}
    assert set(by_path) == {"g3/events/*.json", "g3/preempt.json", "g3/exit.json", "g3/progress.json"}
    assert all("not signed" in r and "dropped" in r for r in by_path.values()), by_path


def test_a_zombie_cannot_seal_for_its_successor_nor_an_event_be_taken_twice(tmp_path: Path) -> None:
    ctl, rt, seen = _sealed_pair(tmp_path)
    _, zombie, _ = _sealed_pair(tmp_path, gen=2)
    with pytest.raises(ValueError, match="beyond"):
        zombie.event(3, "user_error", rank=0, error="x")
    zombie.preempt_notice(2, pid=1)
    (tmp_path / "control" / "g3").mkdir(parents=True, exist_ok=True)
    os.replace(tmp_path / "control" / "g2" / "preempt.json", tmp_path / "control" / "g3" / "preempt.json")
    assert ctl.read_preempt(3) is None and not rt.preempt_requested(3)
    rt.event(3, "preempted", step=5)
    (name,) = os.listdir(tmp_path / "control" / "g3" / "events")
    copy = f"{T:017.6f}-0badc0de.json"
    (tmp_path / "control" / "g3" / "events" / copy).write_bytes(
        (tmp_path / "control" / "g3" / "events" / name).read_bytes()
    )
    assert [e.kind for e in ctl.read_events(3, set())] == ["preempted"]
    assert any("another name" in i.reason for i in seen), seen


def test_a_sealed_objects_altered_field_does_not_open(tmp_path: Path) -> None:
    ctl, rt, seen = _sealed_pair(tmp_path)
    rt.exited(3, 0)
    path = tmp_path / "control" / "g3" / "exit.json"
    obj = json.loads(path.read_bytes())
    obj["code"] = 3
    path.write_text(json.dumps(obj))
    assert ctl.read_exit(3) is None
    assert [i.path for i in seen] == ["g3/exit.json"] and "does not verify" in seen[0].reason


def test_every_channel_the_product_opens_is_given_the_runs_keys() -> None:
    # A channel without keys writes unsealed and believes what it reads: for tests alone.
    import ast

    from tests.support.paths import REPO

    unkeyed = []
    for folder in ("orchestrator", "providers", "recovery", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                func = getattr(node, "func", None)
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                if isinstance(node, ast.Call) and name == "ControlChannel":
                    if not any(k.arg == "keys" for k in node.keywords):
                        unkeyed.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert unkeyed == []
