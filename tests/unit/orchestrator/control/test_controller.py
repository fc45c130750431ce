"""The controller's loop, step by step, without Ray: ``Controller.step()`` over a scripted
provider (tests/support/fakecloud.py) and real file stores and control channel in a temp folder.

Every failure kind meets the failure policy here, in order, with its budgets; a
crashed controller's journal replays to exactly the state it had live; a standby is
activated on failover; and each attempt is fenced before its cluster exists.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

import orchestrator.control.attempt as attempt
import orchestrator.control.watch as watch
import recovery.signing as signing
from orchestrator.config.compose import compose
from orchestrator.control.attempt import AttemptRunner
from orchestrator.control.controller import Controller, Launch
from orchestrator.control.listeners import RunEvents
from orchestrator.control.wiring import build_controller, context, stores_for
from orchestrator.runstate.events import RunStarted
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.replay import replay
from orchestrator.runstate.result import read_result
from orchestrator.wire.control import ControlChannel
from providers.base import ProvisionErrorKind
from recovery.fencing import FencedError
from recovery.keys import controller_keys
from recovery.policy import Budgets, FailurePolicy
from recovery.store import CheckpointStore
from tests.support.fakecloud import HEARTBEAT_TIMEOUT_S, HEARTBEATS, FakeCloud, Script

pytestmark = pytest.mark.unit
RUN = "loop"


class _Secrets:
    """``secrets`` for recovery.signing: a test's runs get distinct secrets, the same ones
    in the same order in every test. A run's key chain (TOP hashes, ~30 ms) depends only
    on its secret and run id (all runs here are RUN), so recovery.keys derives it once
    per process instead of once per test."""

    def __init__(self) -> None:
        self.made = 0

    def token_bytes(self, n: int) -> bytes:
        self.made += 1
        out = hashlib.sha512(b"test_controller run secret %d" % self.made).digest()
        assert n <= len(out)
        return out[:n]


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "POLL_S", 0.002)
    monkeypatch.setattr(watch, "HEALTH_SETTLE_S", 0.01)
    monkeypatch.setattr(signing, "secrets", _Secrets())


def _config(home: Path, *overrides: str) -> Any:
    return compose(
        [
            f"home={home}",
            f"run_id={RUN}",
            "progress=false",
            "job.steps=60",
            *HEARTBEATS,
            *overrides,
        ]
    )


def _controller(home: Path, cloud: FakeCloud, *overrides: str) -> Controller:
    return build_controller(_config(home, *overrides), cloud, RUN, out=io.StringIO())  # type: ignore[arg-type]


def _start(ctl: Controller) -> None:
    """What ``run()`` does before its loop: the run's first events; its state then calls for
    the first region (``Controller.next_step``)."""
    from orchestrator.control.controller import save_config

    save_config(ctl.run_dir, ctl.cfg)
    ctl.emit(RunStarted(run_id=RUN, pid=1, candidates=tuple(ctl.candidates)))
    ctl._start_above_fences()
    assert ctl.next_step() == Launch(ctl.candidates[0])


def _types(ctl: Controller, prefix: str = "") -> list[str]:
    return [e["type"] for e in ctl.journal.events() if e["type"].startswith(prefix)]


def _events(ctl: Controller, type_: str) -> list[dict[str, Any]]:
    return [e for e in ctl.journal.events() if e["type"] == type_]


def _live(ctl: Controller) -> dict[str, Any]:
    return {
        "state": ctl.view.state,
        "generation": ctl.generation,
        "lineage": ctl.lineage,
        "history": ctl.history,
        "attempts": ctl.record.attempts,
        "incidents": ctl.record.incidents,
    }


def _replayed(ctl: Controller) -> dict[str, Any]:
    rp = replay(ctl.journal.events())
    return {
        "state": rp.state,
        "generation": rp.generation,
        "lineage": rp.lineage,
        "history": rp.history,
        "attempts": rp.attempts,
        "incidents": rp.incidents,
    }


def test_a_run_without_failures_succeeds_in_one_step(tmp_path: Path) -> None:
    cloud = FakeCloud({})
    ctl = _controller(tmp_path, cloud)
    result = ctl.run()
    assert result["status"] == "SUCCEEDED" and result["final_step"] == 60 and result["attempts"] == 1
    assert [e["to"] for e in _events(ctl, "transition")] == ["PROVISIONING", "RUNNING", "SUCCEEDED"]
    assert cloud.torn_down == [f"{RUN}-local-a-g1"] and not cloud.clusters
    assert _live(ctl) == _replayed(ctl)


# What each failure comes to: (what happens in local-a, the failure, the policy's action, the next region).
KINDS = [
    (Script(40, "cluster_lost"), "cluster_lost", "failover", "local-b"),
    (Script(40, "hang"), "lease_expired", "failover", "local-b"),
    (Script(40, "workers_exhausted"), "workers_exhausted", "failover", "local-b"),
    (Script(40, "runtime_lost"), "runtime_lost", "restart_in_place", "local-a"),
    (Script(40, "user_error"), "user_error", "restart_in_place", "local-a"),
    (Script(40, "preempted"), "preempted", "failover", "local-b"),
    (ProvisionErrorKind.NO_CAPACITY, "no_capacity", "failover", "local-b"),
    (ProvisionErrorKind.TIMEOUT, "provision_timeout", "failover", "local-b"),
    (ProvisionErrorKind.PRECHECK, "precheck", "give_up", None),
    # Transient errors are retried twice in the attempt; the third is the region's.
    ([ProvisionErrorKind.TRANSIENT] * 3, "provision_error", "failover", "local-b"),
]


@pytest.mark.parametrize(("first", "failure", "action", "region"), KINDS, ids=[k[1] for k in KINDS])
def test_each_failure_kind_meets_the_policy_and_the_run_goes_on_where_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: Any, failure: str, action: str, region: str | None
) -> None:
    monkeypatch.setattr(attempt, "PROVISION_BACKOFF_S", 0.0)
    firsts = first if isinstance(first, list) else [first]
    cloud = FakeCloud({"local-a": [*firsts, Script()], "local-b": [Script()]})
    ctl = _controller(tmp_path, cloud)
    _start(ctl)
    assert ctl.step() is (action == "give_up")
    # One launch each: only a transient provisioning error is retried (a timeout is the region's).
    assert [n for n in cloud.launched if n.endswith("-g1")] == [f"{RUN}-local-a-g1"] * len(firsts)
    (decision,) = _events(ctl, "decision")
    assert (decision["failure"], decision["action"], decision["region"]) == (failure, action, region)
    if action == "give_up":
        assert ctl.view.state is RunState.FAILED and "precheck" in ctl.record.reason
        assert _live(ctl) == _replayed(ctl)
        return
    assert ctl.view.state is RunState.RECOVERING and ctl.next_step() == Launch(region, ctl.next_step().pending)
    # The first attempt is gone: torn down (in the background), never left running.
    ctl.runner.close(ctl.generation)
    assert not cloud.clusters
    assert _live(ctl) == _replayed(ctl)

    assert ctl.step() is True
    assert ctl.view.state is RunState.SUCCEEDED
    attempts = ctl.record.attempts
    assert [(a["region"], a["outcome"]) for a in attempts] == [("local-a", failure), (region, "succeeded")]
    (incident,) = ctl.record.incidents
    assert (incident.kind, incident.from_region, incident.to_region) == (failure, "local-a", region)
    if isinstance(first, Script):
        # Checkpoints every 20 steps and at the failure: the new attempt restores step 40, nothing lost.
        assert attempts[1]["restored_step"] == 40 and incident.lost_steps == 0
    assert _live(ctl) == _replayed(ctl)


def test_failovers_go_in_candidate_order_until_the_budget_is_spent(tmp_path: Path) -> None:
    lost = Script(20, "cluster_lost")
    cloud = FakeCloud({"local-a": [lost], "local-b": [lost], "local-c": [lost]})
    ctl = _controller(tmp_path, cloud, "recovery.max_failovers=2")
    _start(ctl)
    assert ctl.step() is False and ctl.next_step().region == "local-b"  # type: ignore[union-attr]
    assert ctl.step() is False and ctl.next_step().region == "local-c"  # type: ignore[union-attr]
    assert ctl.step() is True
    assert ctl.view.state is RunState.FAILED
    assert "recovery.max_failovers=2" in ctl.record.reason
    decisions = [(d["action"], d["region"]) for d in _events(ctl, "decision")]
    assert decisions == [("failover", "local-b"), ("failover", "local-c"), ("give_up", None)]
    assert [a["generation"] for a in ctl.record.attempts] == [1, 2, 3]
    assert _live(ctl) == _replayed(ctl)


def test_a_region_that_failed_recently_is_skipped_and_restarts_have_their_own_budget(tmp_path: Path) -> None:
    cloud = FakeCloud(
        {
            "local-a": [Script(20, "user_error"), Script(20, "user_error")],
            "local-b": [ProvisionErrorKind.NO_CAPACITY],
        }
    )
    ctl = _controller(tmp_path, cloud, "recovery.max_restarts_on_errors=1")
    _start(ctl)
    assert ctl.step() is False and ctl.next_step().region == "local-a"  # type: ignore[union-attr]
    assert ctl.step() is True
    assert ctl.view.state is RunState.FAILED and "recovery.max_restarts_on_errors=1" in ctl.record.reason
    assert ctl.record.error_traceback == "Traceback: boom"
    assert ctl.history.restarts_on_errors == 1 and ctl.history.failovers == 0


def test_a_user_error_again_in_the_same_step_after_a_restart_fails_the_run_with_restarts_left(tmp_path: Path) -> None:
    again = Script(20, "user_error_in_step")
    cloud = FakeCloud({"local-a": [again, again, again]})
    ctl = _controller(tmp_path, cloud, "recovery.max_restarts_on_errors=3")
    _start(ctl)
    assert ctl.step() is False and ctl.next_step().region == "local-a"  # type: ignore[union-attr]
    assert ctl.step() is True
    assert ctl.view.state is RunState.FAILED
    assert "ValueError: boom at /proj/model.py:46 in step 21" in ctl.record.reason
    assert "same step" in ctl.record.reason
    assert [d["action"] for d in _events(ctl, "decision")] == ["restart_in_place", "give_up"]
    assert ctl.history.restarts_on_errors == 1 and ctl.history.failovers == 0
    assert ctl.record.user_error == {"error": "ValueError: boom", "step": 21, "site": "/proj/model.py:46"}
    assert len(cloud.torn_down) == 2 and not cloud.clusters
    # A resumed controller decides with the same history: the signature is journaled.
    assert _live(ctl) == _replayed(ctl)


def test_preemptions_have_their_own_budget_and_leave_no_region_held_against(tmp_path: Path) -> None:
    notice = Script(20, "preempted")
    cloud = FakeCloud({"local-a": [notice], "local-b": [notice], "local-c": [notice]})
    ctl = _controller(tmp_path, cloud, "recovery.max_preemptions=2", "recovery.max_failovers=0")
    _start(ctl)
    # Preemptions move the run on even with no failover budget: they are counted apart.
    assert ctl.step() is False and ctl.next_step().region == "local-b"  # type: ignore[union-attr]
    assert ctl.step() is False and ctl.next_step().region == "local-c"  # type: ignore[union-attr]
    assert ctl.step() is True
    assert ctl.view.state is RunState.FAILED and "recovery.max_preemptions=2" in ctl.record.reason
    assert ctl.history.preemptions == 2 and ctl.history.failovers == 0 and not ctl.history.region_failed_at
    # Each attempt restored the step its predecessor committed on notice.
    assert [a["restored_step"] for a in ctl.record.attempts] == [0, 20, 20]
    assert _live(ctl) == _replayed(ctl)


def test_each_attempt_is_fenced_before_its_runtime_starts_and_a_zombie_cannot_commit_after(tmp_path: Path) -> None:
    cloud = FakeCloud({"local-a": [Script(40, "hang")], "local-b": [Script()]})
    ctl = _controller(tmp_path, cloud)
    _start(ctl)
    assert ctl.step() is False
    zombie = cloud.runtimes[0]
    assert ctl.step() is True
    # The cluster comes up while the stores are readied and fenced; the runtime (the
    # only reader of the new lineage) starts once both are done.
    kinds = ("fence", "provisioned", "runtime_started")
    events = [(e["type"], e.get("generation")) for e in ctl.journal.events() if e["type"] in kinds]
    for gen in (1, 2):
        mine = [kind for kind, g in events if g == gen]
        assert sorted(mine[:2]) == ["fence", "provisioned"] and mine[2:] == ["runtime_started"], events
    assert [g for _, g in events] == [1, 1, 1, 2, 2, 2]
    (fence2,) = [e for e in _events(ctl, "fence") if e["generation"] == 2]
    assert sorted(fence2["stores"]) == ["local-a", "local-b", "local-c"] and fence2["restored_step"] == 40
    # The hung attempt wakes up and tries to commit past the handover: every store refuses.
    for region in ("local-a", "local-b"):
        store = CheckpointStore(f"file://{tmp_path}/stores/{region}", region=region, key=zombie.key)
        with pytest.raises(FencedError):
            store.commit(RUN, 50, 1, [store.put(RUN, 50, "model.pt", b"late")], fenced=True)
    assert ctl.lineage.to_plain() == [[1, 0], [2, 40]]


def _failover_with_a_late_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corrupt: bool = False):  # type: ignore[no-untyped-def]
    """local-a hangs at step 40 and the run fails over; the lost attempt's upload in
    flight commits step 50 after the next attempt's scan and before its fence (a
    cancelled allocation finishing its upload in its grace period). The controller,
    run to its end, and the lost attempt's runtime."""
    cloud = FakeCloud({"local-a": [Script(40, "hang")], "local-b": [Script()]})
    ctl = _controller(tmp_path, cloud)
    _start(ctl)
    assert ctl.step() is False
    zombie = cloud.runtimes[0]
    fence = ctl.runner._fence

    def commit_then_fence(gen: int, restored: int, moved_from: int | None = None) -> None:
        if gen == 2 and moved_from is None:
            assert zombie._commit(50)
            if corrupt:
                store = Path(zombie.spec.store_url.removeprefix("file://"))
                (path,) = store.glob(f"{RUN}/checkpoints/step-50-g1/model.pt")
                path.write_bytes(b"weights at 5X")
        fence(gen, restored, moved_from)

    monkeypatch.setattr(ctl.runner, "_fence", commit_then_fence)
    assert ctl.step() is True
    return ctl, zombie


def test_a_commit_of_the_lost_attempt_landing_between_the_scan_and_the_fence_is_the_one_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, zombie = _failover_with_a_late_commit(tmp_path, monkeypatch)
    # The fence stopped any later commit; the stores, looked at again, held step 50, and
    # generation 2's link moved there before its runtime read the lineage.
    fences = [(e["restored_step"], e.get("moved_from")) for e in _events(ctl, "fence") if e["generation"] == 2]
    assert fences == [(40, None), (50, 40)]
    assert ctl.lineage.to_plain() == [[1, 0], [2, 50]]
    assert ctl.record.attempts[1]["restored_step"] == 50
    started = [e["restored_step"] for e in _events(ctl, "runtime.train_started") if e["generation"] == 2]
    assert started == [50]
    (incident,) = ctl.record.incidents
    assert incident.restored_step == 50 and incident.lost_steps == 0, incident
    assert _live(ctl) == _replayed(ctl)
    with pytest.raises(FencedError):
        zombie.store.commit(RUN, 60, 1, [zombie.store.put(RUN, 60, "model.pt", b"late")], fenced=True)


def test_a_late_commit_that_does_not_verify_leaves_the_handover_where_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, _ = _failover_with_a_late_commit(tmp_path, monkeypatch, corrupt=True)
    assert [e["restored_step"] for e in _events(ctl, "fence") if e["generation"] == 2] == [40]
    assert [(e["step"], e["region"]) for e in _events(ctl, "checkpoint_skipped")] == [(50, "local-a")]
    assert ctl.lineage.to_plain() == [[1, 0], [2, 40]]


def test_a_crashed_controller_resumes_from_exactly_the_state_its_journal_holds(tmp_path: Path) -> None:
    cloud = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script(40, "runtime_lost"), Script()]})
    ctl = _controller(tmp_path, cloud)
    _start(ctl)
    assert ctl.step() is False
    assert ctl.step() is False  # local-b: driver lost, restart in place
    live = _live(ctl)
    # The controller dies here, between a decision and the next attempt: nothing of it
    # survives but its journal, its run folder and the stores.
    ctl.runner.close(ctl.generation)
    del ctl
    resumed = _controller(tmp_path, cloud)
    result = resumed.resume()
    rp = replay(resumed.journal.events())
    assert result["status"] == "SUCCEEDED"
    assert live["generation"] == 2 and live["history"].failovers == 2
    # What the resumed controller started from is what the dead one had live.
    resumed_from = _events(resumed, "run_resumed")[0]
    assert resumed_from["state"] == str(live["state"]) == "RECOVERING"
    assert [a["generation"] for a in resumed.record.attempts] == [1, 2, 3]
    assert resumed.record.attempts[:2] == live["attempts"]
    assert [a["region"] for a in resumed.record.attempts] == ["local-a", "local-b", "local-b"]
    assert resumed.record.attempts[2]["restored_step"] == 40
    assert _live(resumed) == _replayed(resumed) and rp.finished


def test_ctrl_c_leaves_the_run_interrupted_and_resume_goes_on_from_its_newest_checkpoint(tmp_path: Path) -> None:
    cloud = FakeCloud({"local-a": [Script(40, "interrupt"), Script()]})
    ctl = _controller(tmp_path, cloud)
    result = ctl.run()
    assert result["status"] == "INTERRUPTED" and "action=resume" in result["reason"]
    assert result["incidents"] == [] and result["final_checkpoint"], "checkpoints are kept"
    assert cloud.torn_down == [f"{RUN}-local-a-g1"] and not cloud.clusters
    assert [e["status"] for e in _events(ctl, "run_finished")] == ["INTERRUPTED"]
    assert _live(ctl) == _replayed(ctl)
    assert read_result(ctl.run_dir)["status"] == "INTERRUPTED"  # type: ignore[index]
    del ctl
    resumed = _controller(tmp_path, cloud)
    result = resumed.resume()
    # Taken on where it stopped: no incident (nothing failed), the checkpoint at the stop restored.
    assert result["status"] == "SUCCEEDED" and result["final_step"] == 60 and result["incidents"] == []
    assert [(a["region"], a["generation"], a["restored_step"], a["outcome"]) for a in resumed.record.attempts] == [
        ("local-a", 1, 0, "interrupted"),
        ("local-a", 2, 40, "succeeded"),
    ]
    assert [e["to"] for e in _events(resumed, "transition")] == [
        "PROVISIONING",
        "RUNNING",
        "INTERRUPTED",
        "PROVISIONING",
        "RUNNING",
        "SUCCEEDED",
    ]
    assert [e["status"] for e in _events(resumed, "run_finished")] == ["INTERRUPTED", "SUCCEEDED"]
    assert _live(resumed) == _replayed(resumed) and replay(resumed.journal.events()).finished


def test_an_interrupted_failover_goes_on_to_the_region_it_was_failing_over_to(tmp_path: Path) -> None:
    cloud = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script(0, "interrupt"), Script()]})
    ctl = _controller(tmp_path, cloud)
    assert ctl.run()["status"] == "INTERRUPTED"
    assert replay(ctl.journal.events()).pending is not None, "the failover's incident is still open"
    del ctl
    resumed = _controller(tmp_path, cloud)
    result = resumed.resume()
    assert result["status"] == "SUCCEEDED"
    assert [(a["region"], a["outcome"]) for a in resumed.record.attempts] == [
        ("local-a", "cluster_lost"),
        ("local-b", "interrupted"),
        ("local-b", "succeeded"),
    ]
    (incident,) = result["incidents"]
    assert (incident["kind"], incident["from_region"], incident["to_region"]) == ("cluster_lost", "local-a", "local-b")
    assert incident["restored_step"] == 40
    assert _live(resumed) == _replayed(resumed)


def test_an_interrupted_run_is_not_reused_by_a_new_run_and_resumes_only_once(tmp_path: Path) -> None:
    cloud = FakeCloud({"local-a": [Script(20, "interrupt"), Script()]})
    assert _controller(tmp_path, cloud).run()["status"] == "INTERRUPTED"
    from orchestrator.commands.run import refuse_finished as _refuse_finished
    from orchestrator.errors import ConfigError

    cfg = compose([f"home={tmp_path}", f"run_id={RUN}"])
    with pytest.raises(ConfigError, match=f"interrupted; go on with it: .* action=resume run_id={RUN}"):
        _refuse_finished(cfg)
    assert _controller(tmp_path, cloud).resume()["status"] == "SUCCEEDED"
    with pytest.raises(ConfigError, match="already finished \\(SUCCEEDED\\)"):
        _refuse_finished(cfg)


def test_a_standby_is_activated_on_failover_and_restores_the_newest_checkpoint(tmp_path: Path) -> None:
    cloud = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    ctl = _controller(tmp_path, cloud, "recovery.standby=true")
    _start(ctl)
    assert ctl.step() is False
    assert ctl.step() is True
    ready = _events(ctl, "standby_ready")
    assert [(e["region"], e["generation"]) for e in ready][:1] == [("local-b", 2)]
    assert _types(ctl, "standby_activated") == ["standby_activated"]
    assert [(a["region"], a["generation"], a["restored_step"]) for a in ctl.record.attempts] == [
        ("local-a", 1, 0),
        ("local-b", 2, 40),
    ]
    # The failover launched nothing: local-b's one cluster is the standby; once the run
    # is RUNNING there, the next standby stands up in local-c.
    assert cloud.launched == [f"{RUN}-local-a-g1", f"{RUN}-local-b-g2", f"{RUN}-local-c-g3"]
    ctl.standby.close()
    ctl.runner.close(ctl.generation)
    assert not cloud.clusters


# --- hysteresis: glitches pass, losses are still found within the lease ---------------------


def test_a_flapping_health_check_with_fresh_heartbeats_is_one_attempt_and_glitches_journaled(tmp_path: Path) -> None:
    # A few steps a poll: training lasts while the flap's checks are answered.
    cloud = FakeCloud({}, steps_per_poll=3)
    ctl = _controller(tmp_path, cloud, "chaos.faults=[{kind:status_flap,after_s:0.01,count:4}]")
    result = ctl.run()
    assert result["status"] == "SUCCEEDED" and result["attempts"] == 1 and result["incidents"] == []
    assert not _events(ctl, "failure_detected") and not _events(ctl, "decision")
    glitches = _events(ctl, "health_glitch")
    # Not UP, then raising, in turn; counted in a row; the fourth is past the count that
    # could lose a cluster (recovery.health_failures_to_lose=3), so not journaled again.
    assert [(g["failed_checks"], g["health"]) for g in glitches] == [(1, "not_up"), (2, "not_up"), (3, "not_up")]
    assert "not UP" in glitches[0]["detail"] and "raised FlappedCheck" in glitches[1]["detail"]
    assert all(g["heartbeat_age_s"] < HEARTBEAT_TIMEOUT_S for g in glitches)
    assert [e["kind"] for e in _events(ctl, "fault_ended")] == ["status_flap"]
    assert _live(ctl) == _replayed(ctl)


def test_a_cluster_that_stops_answering_is_lost_within_the_lease_not_at_its_first_failed_check(
    tmp_path: Path,
) -> None:
    cloud = FakeCloud({"local-a": [Script(40, "unreachable")], "local-b": [Script()]})
    ctl = _controller(tmp_path, cloud)
    _start(ctl)
    assert ctl.step() is False
    (failure,) = _events(ctl, "failure_detected")
    assert (failure["kind"], failure["health"]) == ("cluster_lost", "not_up")
    # (The journal rounds the age to milliseconds: just past the timeout can read it.)
    assert failure["failed_checks"] >= 3 and failure["heartbeat_age_s"] >= HEARTBEAT_TIMEOUT_S
    assert "health checks in a row not UP" in failure["detail"]
    # Found once the lease ran out, not before; and at it, not at a later deadline (the
    # bound is loose: a loaded machine is slow to look).
    assert HEARTBEAT_TIMEOUT_S <= failure["detected_after_s"] < 4 * HEARTBEAT_TIMEOUT_S
    # While the heartbeats were fresh the failed checks were glitches (the first three journaled).
    assert [g["failed_checks"] for g in _events(ctl, "health_glitch")] == [1, 2, 3]
    (decision,) = _events(ctl, "decision")
    assert (decision["action"], decision["region"]) == ("failover", "local-b")
    assert ctl.step() is True and ctl.view.state is RunState.SUCCEEDED
    assert ctl.record.attempts[1]["restored_step"] == 40
    assert _live(ctl) == _replayed(ctl)


def test_a_dropped_connection_to_the_runtime_is_reattached_and_the_run_goes_on(tmp_path: Path) -> None:
    cloud = FakeCloud({}, steps_per_poll=3)
    ctl = _controller(tmp_path, cloud, "chaos.faults=[{kind:ssh_drop,after_s:0.01}]")
    result = ctl.run()
    assert result["status"] == "SUCCEEDED" and result["attempts"] == 1 and result["incidents"] == []
    assert result["final_step"] == 60
    assert not _events(ctl, "failure_detected") and not _events(ctl, "decision")
    (fault,) = _events(ctl, "fault_injected")
    assert (fault["kind"], fault["cut"]) == ("ssh_drop", 1)
    (again,) = _events(ctl, "runtime_reattached")
    assert (again["generation"], again["connection_exit"], again["pid"]) == (1, 255, cloud.runtimes[0].pid)
    # One runtime, followed by a second connection: nothing was restarted.
    assert len(cloud.runtimes) == 1 and len(cloud.connections) == 2 and cloud.connections[0].cut
    assert _live(ctl) == _replayed(ctl)


# --- wired from outside: the controller is handed its collaborators -------------------------------


def test_a_controller_wired_from_fakes_steps_through_a_region_loss(tmp_path: Path) -> None:
    cfg, keys = _config(tmp_path), controller_keys(b"k" * 32, RUN)
    cloud = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    events = RunEvents(Journal(str(tmp_path / "journal.jsonl")))
    control = ControlChannel(f"file://{tmp_path}/control", keys=keys)
    ctx = context(events, cfg, cloud, RUN, str(tmp_path), control, stores=stores_for(cfg, {}, keys), run_key=keys)
    policy = FailurePolicy(ctx.candidates, Budgets(max_failovers=1, max_restarts_on_errors=0, region_cooldown_s=60.0))
    ctl = Controller(ctx, events, policy, AttemptRunner(ctx))
    events.emit(RunStarted(run_id=RUN))
    assert ctl.step() is False and ctl.view.state is RunState.RECOVERING
    assert ctl.next_step() == Launch("local-b", ctl.next_step().pending)  # type: ignore[union-attr]
    assert ctl.step() is True and ctl.view.state is RunState.SUCCEEDED
    (incident,) = ctl.record.incidents
    assert (incident.kind, incident.to_region, incident.restored_step) == ("cluster_lost", "local-b", 40)
    assert _live(ctl) == _replayed(ctl)


KEY = b"c0ffee" * 11


# Each controller's lease, kept by its renewals.
LEASE = "recovery.controller_lease_s=10"


def _crashed(home: Path, cloud: FakeCloud) -> None:
    """A run with a control store whose controller died once local-a was lost and the policy
    had chosen local-b (its lease freed, its mirror written last)."""
    cfg = _config(home, f"cloud.control_store=file://{home.parent}/ctl", LEASE)
    ctl = build_controller(cfg, cloud, RUN, out=io.StringIO(), control_key=KEY)
    _start(ctl)
    ctl._hold_run()  # its lease renewed, its mirror written, as a run's
    assert ctl.step() is False and ctl.next_step().region == "local-b"  # type: ignore[union-attr]
    ctl.runner.close(ctl.generation)
    ctl.close()


def test_a_resume_on_the_runs_machine_and_a_takeover_on_another_go_through_the_same_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.control.controller as controller_mod
    import orchestrator.control.lease as lease_mod
    from orchestrator.config.saved import config_from_plain
    from orchestrator.control.resume import Restart
    from orchestrator.control.takeover import rebuild
    from orchestrator.runstate.journal import load_object

    # No controller races another for the lease here: its take need not settle (a tenth of the lease).
    take = lease_mod.ControllerLease.take
    monkeypatch.setattr(lease_mod.ControllerLease, "take", lambda self, floor=0: take(self, floor, settle_s=0.0))
    planned: list[Any] = []
    real = controller_mod.plan
    monkeypatch.setattr(controller_mod, "plan", lambda *a: planned.append(real(*a)) or planned[-1])
    # Here: the run's own folder.
    here = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    _crashed(tmp_path / "here" / "home", here)
    cfg = _config(tmp_path / "here" / "home", f"cloud.control_store=file://{tmp_path}/here/ctl", LEASE)
    assert build_controller(cfg, here, RUN, out=io.StringIO(), control_key=KEY).resume()["status"] == "SUCCEEDED"
    # Elsewhere: a machine with no folder for the run rebuilds it from the mirror, then resumes.
    there = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    _crashed(tmp_path / "there" / "home", there)
    cli = _config(tmp_path / "there" / "other", f"cloud.control_store=file://{tmp_path}/there/ctl", LEASE)
    run_dir = tmp_path / "there" / "other" / "runs" / RUN
    restored = rebuild(cli, RUN, str(run_dir), KEY)
    taken = config_from_plain(load_object(str(run_dir / "config.json")))
    taken.home, taken.cloud.control_store = cli.home, cli.cloud.control_store
    ctl = build_controller(taken, there, RUN, out=io.StringIO(), control_key=KEY)
    assert ctl.resume(said=[restored])["status"] == "SUCCEEDED"
    assert [e["type"] for e in ctl.journal.events()].count("mirror_restored") == 1
    # One plan function, the same outcome: a new attempt in local-b, recovering from local-a's loss.
    assert [type(p) for p in planned] == [Restart, Restart]
    assert [(p.region, p.pending.kind, p.pending.from_region, p.stopped) for p in planned] == [
        ("local-b", "cluster_lost", "local-a", False)
    ] * 2
