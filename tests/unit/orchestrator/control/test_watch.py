"""The attempt's watch (orchestrator/control/watch.py) over a scripted runtime: how often it looks, when
it judges an exit, how it reads the control channel and writes the journal."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import orchestrator.control.watch as watch_mod
import orchestrator.metrics.board as metrics
import orchestrator.runstate.journal as journal_mod
from orchestrator.config.schema import RegionConfig, TrainerConfig
from orchestrator.control import watchstate as ws
from orchestrator.control.context import RunContext
from orchestrator.control.watch import AttemptWatch
from orchestrator.metrics.board import TensorBoardWriter
from orchestrator.runstate.journal import Journal
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle
from recovery.detection import Health
from tests.unit.orchestrator.control.test_cadence import _obs
from tests.unit.orchestrator.control.test_nodewatch import Nodes

pytestmark = pytest.mark.unit


class Script:
    """Stands in for the watch's look and the clock: which wakeups looked, and what each
    look found (new event kinds, a heartbeat's age); the runtime exits at ``exit_at``."""

    def __init__(self, w: AttemptWatch, events: dict[int, list[str]], exit_at: int, late: range = range(0)) -> None:
        self.tick, self.looked, self.fire_at = 0, [], -1
        self.w, self.events, self.exit_at, self.late = w, events, exit_at, late
        w.proc = SimpleNamespace(pid=1, poll=self.poll)  # type: ignore[assignment]

    def poll(self) -> int | None:
        return 0 if self.tick >= self.exit_at else None

    def observe(self) -> bool:
        self.looked.append(self.tick)
        self.w.new_kinds = self.events.get(self.tick, [])
        age = 3.0 if self.tick in self.late else 0.3
        self.w.last_obs = _obs(runtime_exit=self.poll(), heartbeat_age_s=age)
        return self.poll() is not None

    def faults(self) -> bool:
        return self.tick == self.fire_at

    def sleep(self, seconds: float) -> None:
        self.tick += 1


def _scripted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Script:
    recovery = SimpleNamespace(
        heartbeat_interval_s=1.0, heartbeat_timeout_s=10.0, health_failures_to_lose=3, node_replace_timeout_s=60.0
    )
    cloud = SimpleNamespace(regions={"local-a": RegionConfig(store="file:///unused")})
    ctx = RunContext(
        run_id="r",
        run_dir=str(tmp_path),
        cfg=SimpleNamespace(recovery=recovery, cloud=cloud, trainer=TrainerConfig()),  # type: ignore[arg-type]
        provider=None,  # type: ignore[arg-type]
        control=ControlChannel(f"file://{tmp_path}/control"),
        emit=lambda e: e,
    )
    cluster = ClusterHandle("c", "local-a", "local", "")
    w = AttemptWatch(ctx, None, cluster, None, generation=1, region="local-a")  # type: ignore[arg-type]
    script = Script(w, **kw)
    monkeypatch.setattr(w, "_observe", script.observe)
    monkeypatch.setattr(w, "_faults", script.faults)
    monkeypatch.setattr(watch_mod.time, "sleep", script.sleep)
    return script


def test_a_quiet_attempt_is_looked_at_less_often_up_to_once_a_heartbeat_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _scripted(tmp_path, monkeypatch, events={2: ["replicated"], 6: ["losses"]}, exit_at=30)
    s.w.run()
    # 0.2 s wakeups: looks 1, 2, 4, then 5 wakeups (1 s, the heartbeat interval) apart.
    assert s.looked == [0, 2, 6, 11, 16, 21, 26, 30]


def test_an_exit_is_judged_at_the_wakeup_that_sees_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _scripted(tmp_path, monkeypatch, events={}, exit_at=8)
    s.w.run()
    assert s.looked == [0, 2, 6, 8]


def test_an_event_a_late_heartbeat_or_a_fault_brings_the_looks_back_to_every_wakeup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _scripted(tmp_path, monkeypatch, events={11: ["train_started"]}, exit_at=40, late=range(21, 26))
    s.fire_at = 33
    s.w.run()
    # The heartbeat is late from wakeup 21: seen at the next look (23), every wakeup then
    # until it is on time again (26); the fault fired at 33 is looked at the same wakeup.
    assert s.looked == [0, 2, 6, 11, 12, 14, 18, 23, 24, 25, 26, 28, 32, 33, 34, 36, 40]


def test_a_batch_of_journal_lines_is_fsynced_once_and_every_line_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = journal_mod.os.fsync
    path = str(tmp_path / "journal.jsonl")

    def fsync(fd: int) -> None:
        # os.fsync is the process's: count the journal's alone (a thread another test left
        # running may sync a file of its own meanwhile).
        if os.readlink(f"/proc/self/fd/{fd}") == path:
            synced.append(fd)
        real(fd)

    monkeypatch.setattr(journal_mod.os, "fsync", fsync)
    j = Journal(path)
    j.append("run_started", run_id="r")
    synced.clear()  # the file's creation: its folder's fsync too
    j.append("transition", **{"from": "PENDING", "to": "PROVISIONING"})
    assert len(synced) == 1
    with j.batch():
        for step in range(5):
            j.append("replicated", step=step, to="b")
        with j.batch():  # nested: still the outer one's
            j.append("replicated", step=5, to="b")
        assert len(synced) == 1
        other = threading.Thread(target=lambda: j.append("replicated", step=6, to="c"))
        other.start()
        other.join()
        assert len(synced) == 2  # another thread's line is durable when its emit returns
    assert len(synced) == 3
    with j.batch():
        pass  # nothing written: nothing to sync
    assert len(synced) == 3
    assert [e.get("step") for e in j.events()] == [None, None, 0, 1, 2, 3, 4, 5, 6]


def test_a_local_channel_is_read_with_plain_calls_and_an_object_store_through_fsspec(tmp_path: Path) -> None:
    local = ControlChannel(f"file://{tmp_path}/control")
    remote = ControlChannel("memory://cadence-test/control")
    assert local.local and not remote.local
    for c in (local, remote):
        c.event(3, "train_started", restored_step=0, pid=1)
        c.progress(3, step=7, loss=0.5)
        c.chaos_request(0, step=7, generation=3, seq=1)
        seen: set[str] = set()
        assert [e.kind for e in c.read_events(3, seen)] == ["train_started"] and len(seen) == 1
        c.event(3, "replicated", step=5, to="b")
        assert [e.kind for e in c.read_events(3, seen)] == ["replicated"] and len(seen) == 2
        assert c.read_events(3, seen) == [] and c.read_events(4, set()) == []
        got = c.read_progress(3)
        assert got is not None and got.step == 7
        assert list(c.chaos_requests()) == [0]
    (tmp_path / "control" / "g5").mkdir()
    (tmp_path / "control" / "g5" / "events").write_text("a file where the folder goes")
    assert local.read_events(5, set()) == []


def test_the_tensorboard_writers_gathering_never_holds_its_close_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "GATHER_S", 3600.0)
    failures: list[str] = []
    writer = TensorBoardWriter(str(tmp_path / "tb"), failures.append, close_s=5.0)
    writer.progress({"step": 10, "time": 1.0, "steps_per_s": 9.0})
    writer.close()  # waits at most close_s, and says so if what was queued is not written by then
    assert failures == []
    assert list((tmp_path / "tb").iterdir())


# --- the last step known done ------------------------------------------------------------------


def test_a_report_written_before_a_fault_does_not_lower_the_faults_step() -> None:
    # kill_region at step 170, read before the report of step 151 it overtook: 170 stands,
    # so restoring step 150 loses 20 steps, not 1.
    assert watch_mod.step_after_report(170, 151, raised_since_restart=True) == 170
    assert watch_mod.step_after_report(170, 175, raised_since_restart=True) == 175


def test_after_a_restart_the_reports_count_from_the_restored_checkpoint_again() -> None:
    assert watch_mod.step_after_report(170, 151, raised_since_restart=False) == 151


# --- a lost node that ran no worker --------------------------------------------------------------


def test_a_lost_idle_node_leaves_no_incident_and_the_next_restart_is_its_own_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.wire.schema import Event as WireEvent

    s = _scripted(tmp_path, monkeypatch, events={}, exit_at=2)
    w = s.w
    w.ctx.cfg.cloud.regions["local-a"] = RegionConfig(store="file:///unused", nodes=3, num_cpus=1)
    # Two worker nodes; node 2, where no rank runs, gone; a replacement that comes at once.
    provider = Nodes()
    provider.health = {1: Health.UP, 2: Health.GONE}
    w.ctx.provider = provider  # type: ignore[assignment]
    w.nodes = watch_mod.NodeWatch(w.ctx, w.cluster, "local-a", 1)

    def started(**fields: Any) -> None:
        w._train_started(WireEvent("train_started", 1.0, 1, {"restored_step": 0, **fields}))

    started(worker_pids=[11, 12], worker_nodes=[0, 1])
    # A kill_node struck node 2, the spare node: nothing of the group ran there.
    w._apply(ws.FaultFired("kill_node", 5.0, 100))
    w.run()
    (loss,) = w.nodes.losses.values()
    assert loss.node == 2 and loss.recorded and w.nodes.unrecorded() is None
    assert w.state.faults.kill_node is None
    # A worker killed later restarts the group: that restart is the worker's, not the node's.
    w._apply(ws.FaultFired("kill_worker", 9.0, 300))
    started(worker_pids=[11, 13], worker_nodes=[0, 1])
    (inc,) = w.state.opened
    assert (inc.kind, inc.failed_at, inc.last_step) == ("worker_lost", 9.0, 300)
