"""The invariant matrix: each fault kind at the trigger points that matter for it.

One run per row, several trigger points per run where the kind allows (the run
goes on from each failure to the next): before the first checkpoint (step 20),
during an upload, just after a commit (step 101: the commit of step 100 is done),
during a restore, and twice in a row (a repeat: the replayed step fires again).
Every run must end SUCCEEDED (or FAILED where that is the expected outcome) with
the uninterrupted run's weights, bounded loss, a consistent journal and nothing
left running.
"""

from __future__ import annotations

import re

import pytest

from tests.support.hostile import assert_nothing_planted_won, assert_private, plant_checkpoints, plant_control
from tests.support.invariants import INTERVAL, fired, journal_consistent, nothing_left, survived
from tests.support.runs import orchestrate, ray_pids, skip_unless_strict

FAST_FAILOVER = ("recovery.region_cooldown_s=0", "recovery.max_failovers=10")


def _faults(*faults: str) -> str:
    return "chaos.faults=[" + ",".join(faults) + "]"


MATRIX = {
    # The big one: a whole region lost at every point, ending in whichever region is left.
    "kill_region": (
        _faults(
            "{kind:kill_region,at_step:20}",
            "{kind:kill_region,during:checkpoint_upload}",
            "{kind:kill_region,at_step:101}",
            "{kind:kill_region,during:restore}",
            # Between checkpoints, so the replay is certain: at the last step (300) the
            # step's own checkpoint may reach the next region before the kill, and a
            # restore of step 300 replays nothing.
            "{kind:kill_region,at_step:290,repeat:2}",
        ),
        6,
    ),
    # kill_worker at every trigger point runs in a region of two nodes, beside the loss of
    # a node: tests/chaos/test_nodes.py (one run for both).
    # A timed trigger: a second into the attempt's training, wherever it is.
    "hang_region": (_faults("{kind:hang_region,after_s:1}"), 1),
    # A notice during an upload, then one during the restore that follows, one region
    # each: nothing lost. (Notices at a step: test_gpt, test_train_func, test_user_workload.)
    "preempt": (
        _faults(
            "{kind:preempt,during:checkpoint_upload,region:local-a,grace_s:15}",
            "{kind:preempt,during:restore,region:local-b,grace_s:15}",
        ),
        2,
    ),
}


@pytest.mark.parametrize("kind", sorted(MATRIX))
def test_fault_at_every_trigger_point_ends_exactly(kind, orch_home, baseline, tmp_path):
    faults, count = MATRIX[kind]
    before = ray_pids()
    if kind == "kill_region":
        # The run that restores most often, in every region, also meets what a hostile
        # store or control channel holds: checkpoints planted above its own (another
        # run's, unsigned, a pickle payload) and forged events, none of which may win.
        marker = tmp_path / "payload-ran"
        plant_checkpoints(orch_home, f"matrix-{kind}", baseline.run_dir, marker)
        plant_control(orch_home / "runs" / f"matrix-{kind}", generations=8)
    extra = ("recovery.heartbeat_timeout_s=3",) if kind == "hang_region" else ()
    run = orchestrate(orch_home, f"matrix-{kind}", faults, *FAST_FAILOVER, *extra, timeout=600)
    # A timed hang can freeze the region while a checkpoint is still on its way up (step 50's
    # at step 53, seen once in CI): then the one before it is the newest, two intervals back.
    # So can a kill during an upload: training goes on while a checkpoint uploads (async), so
    # the steps it lost are an interval and those trained during the upload (51, seen here).
    r = survived(run, baseline, max_lost=INTERVAL if kind == "preempt" else 2 * INTERVAL)
    injected = fired(run, kind)
    assert len(injected) == count, injected
    # A fault can strike a recovery still under way (a kill during the restore that
    # follows a kill): then one incident covers both.
    assert 1 <= len(r["incidents"]) <= count, r["incidents"]
    assert set(re.findall(r"during:(\w+)", faults)) <= {e.get("during") for e in injected}
    assert all(inc["kind"] != "worker_lost" for inc in r["incidents"])
    if kind == "kill_region":
        # A lost region is noticed in seconds (the provider's health check, not a timeout)
        # and the run trains again in the next one after that; an incident whose recovery
        # was itself cut short (a kill during the restore) has no recovery time of its own.
        for inc in r["incidents"]:
            assert 0 <= inc["detected_after_s"] < 5, inc
            assert inc["rto_s"] is None or inc["rto_s"] >= inc["detected_after_s"], inc
        assert_nothing_planted_won(run, marker)
        assert_private(run, orch_home)
        # Re-trained work: the steps the incidents lost, trained again at their attempt's step
        # time. An incident counts from the last step the controller saw; the goodput from the
        # furthest the attempt is known to have reached (a checkpoint it committed after that
        # look, up to one interval on).
        g = r["goodput"]
        lost = sum(inc["lost_steps"] or 0 for inc in r["incidents"])
        assert lost <= g["retrained_steps"] <= lost + INTERVAL * len(r["incidents"]), (g, r["incidents"])
        assert (g["seconds"]["retrained"] > 0) == (g["retrained_steps"] > 0), g
        assert g["seconds"]["provisioning"] > 0 and g["seconds"]["startup"] > 0 and g["seconds"]["restore"] > 0, g
        assert sorted(g["node_hours"]) == sorted({a["region"] for a in r["attempt_history"]}), g
    nothing_left(before, orch_home)


def test_corrupt_checkpoint_during_restore_is_skipped_for_the_previous_good_one(orch_home, baseline):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "matrix-corrupt-restore",
        _faults("{kind:kill_region,at_step:120}", "{kind:corrupt_checkpoint,during:restore}"),
    )
    r = survived(run, baseline, max_lost=2 * INTERVAL)
    (corrupt,) = fired(run, "corrupt_checkpoint")
    assert corrupt["during"] == "restore"
    assert set(corrupt["corrupted"].values()) == {100}
    skipped = [e for e in run.events("checkpoint_skipped") if e["step"] == 100]
    assert any("verification" in e["reason"] for e in skipped), skipped
    (inc,) = r["incidents"]
    assert inc["restored_step"] == 50
    nothing_left(before, orch_home)


def test_disk_full_costs_the_local_copy_not_the_checkpoint(orch_home, baseline):
    if not _can_mount_tmpfs(orch_home):
        skip_unless_strict("mounting a tmpfs is not allowed here (needs root or CAP_SYS_ADMIN)")
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "matrix-disk-full",
        _faults("{kind:disk_full,at_step:60,duration_s:30}", "{kind:kill_worker,at_step:120}"),
        # The whole group restarts and reads its checkpoint back (survivors would hold it).
        "recovery.survivors=off",
    )
    survived(run, baseline)
    (full,) = fired(run, "disk_full")
    assert "failed" not in full, full
    assert run.events("scratch_full"), "the runtime never noticed its full disk"
    # Restarted in place with no local copy: restored from the store, exactly.
    assert not run.events("restored_from_scratch")
    nothing_left(before, orch_home)


def test_user_error_twice_in_a_row_fails_with_the_workload_traceback(orch_home):
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "matrix-user-error",
        "recovery.max_restarts_on_errors=1",
        _faults("{kind:user_error,at_step:60,repeat:2}"),
    )
    # The workload's bug: exit 3. Raised again in the same step after the restart, it ends
    # the run as deterministic (with or without restarts left), naming the step.
    assert run.returncode == 3
    r = run.result
    assert r["status"] == "FAILED"
    assert "same step" in r["reason"] and "in step 60" in r["reason"]
    assert r["user_error"]["step"] == 60 and r["user_error"]["error"].startswith("InjectedUserError")
    assert "InjectedUserError" in r["error_traceback"] and "Traceback" in r["error_traceback"]
    # Retried in place once, from the checkpoint before the error, never failed over.
    assert {a["region"] for a in r["attempt_history"]} == {"local-a"}
    assert [a["restored_step"] for a in r["attempt_history"]] == [0, 50]
    assert [d["action"] for d in run.events("decision")] == ["restart_in_place", "give_up"]
    assert [e["to"] for e in run.events("transition")][-1] == "FAILED"
    assert "InjectedUserError" in (run.run_dir / "report.txt").read_text()
    journal_consistent(run)
    nothing_left(before, orch_home)


def _can_mount_tmpfs(tmp) -> bool:
    import subprocess

    probe = tmp / "mount-probe"
    probe.mkdir(exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "probe", str(probe)], capture_output=True)
    if ok.returncode == 0:
        subprocess.run(["umount", str(probe)], capture_output=True)
    return ok.returncode == 0
