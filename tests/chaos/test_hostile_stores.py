"""Hostile stores and control channels, live: what someone with write access to a store or
to the control folder leaves there cannot hang, crash or steer a real run.

Three runs, sharing the session's baseline:
- malformed manifests (deep nesting, 1e999, FIFOs, /dev/zero and looping links) above
  the run's steps in every store, a fence of generation 99 signed by no controller of
  this run, garbage and a looping FENCE.json, special files all over the control folder,
  and a region lost meanwhile: SUCCEEDED, exactly, each plant journaled with its reason,
  the loss detected as fast as ever;
- the same stores, the controller SIGKILLed mid-run and fences planted again before
  ``action=resume``: SUCCEEDED, exactly;
- a forged ``exit.json`` (code 0) and ``final.json`` in the running generation's control
  folder, then the driver killed: never SUCCEEDED with the forged values; the run
  recovers and ends with its real, verified result.
"""

from __future__ import annotations

import json
import signal
import time

from tests.support.hostile import (
    FENCE_PLANTS,
    JOURNALED_MALFORMED,
    MALFORMED_STEPS,
    SPECIAL_EVENTS,
    kill_driver_with_a_forged_outcome,
    plant_fences,
    plant_malformed_manifests,
    plant_special_control,
)
from tests.support.invariants import INTERVAL, fired, nothing_left, survived
from tests.support.runs import orchestrate, ray_pids

FAST_FAILOVER = ("recovery.region_cooldown_s=0", "recovery.max_failovers=10")


def _skipped_steps(run) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for e in run.events("checkpoint_skipped"):
        out.setdefault(e["step"], []).append(str(e.get("reason", "")))
    return out


def _fences_ignored(run, planted: dict[str, str]) -> None:
    ignored = {e["region"]: e["reason"] for e in run.events("fence_ignored") if e.get("by") == "controller"}
    assert set(ignored) == set(planted), ignored
    why = {"forged": "does not verify", "garbage": "malformed fence", "loop": "symlink"}
    for region, kind in planted.items():
        assert why[kind] in ignored[region], (region, kind, ignored[region])
    assert not [f for f in run.events("fence") if f["generation"] >= 99], "a forged fence was taken"


def _no_planted_step_won(run) -> None:
    r = run.result
    assert not any(f"/step-{s}" in str(r["final_checkpoint"]) for s in MALFORMED_STEPS), r
    restored = [e.get("restored_step") for e in run.events("train_started")]
    assert all(s is None or s <= 500 for s in restored), restored


def test_malformed_manifests_forged_fences_and_special_files_with_a_region_lost(orch_home, baseline):
    run_id = "hostile-stores"
    run_dir = orch_home / "runs" / run_id
    plant_malformed_manifests(orch_home, run_id)
    planted = plant_fences(orch_home, run_id)
    plant_special_control(run_dir, generations=4)
    before = ray_pids()
    run = orchestrate(orch_home, run_id, "chaos.faults=[{kind:kill_region,at_step:120}]", *FAST_FAILOVER)
    r = survived(run, baseline)
    assert len(fired(run, "kill_region")) == 1
    _no_planted_step_won(run)
    # Every malformed manifest was read, refused and said so, with its reason.
    skipped = _skipped_steps(run)
    assert JOURNALED_MALFORMED <= set(skipped), skipped
    assert any("too deep" in w for w in skipped[610]), skipped[610]
    assert any("too large" in w for w in skipped[620]), skipped[620]
    assert any("FIFO" in w for w in skipped[630]), skipped[630]
    assert any("symlink" in w for w in skipped[640] + skipped[660]), (skipped[640], skipped[660])
    _fences_ignored(run, planted)
    # The control folder's special files: refused, journaled, never a hang.
    invalid = {(e["path"], e["reason"]) for e in run.events("control_invalid")}
    paths = {p for p, _ in invalid}
    assert f"g1/events/{SPECIAL_EVENTS[0]}" in paths and f"g1/events/{SPECIAL_EVENTS[1]}" in paths, invalid
    # A FIFO heartbeat (before the runtime's first one replaces it) or exit.json (read once
    # the driver is gone), whichever the watch met first: refused at once, never waited on.
    assert any(p.endswith(("/heartbeat.json", "/exit.json")) and "FIFO" in why for p, why in invalid), invalid
    # The region lost meanwhile is detected within the usual time: well inside the lease.
    lease = json.loads((run.run_dir / "config.json").read_text())["recovery"]["heartbeat_timeout_s"]
    (lost,) = [e for e in run.events("failure_detected") if e["kind"] == "cluster_lost"]
    assert 0 <= lost["detected_after_s"] < lease, (lost, lease)
    (inc,) = r["incidents"]
    assert inc["detected_after_s"] < lease, inc
    # What was planted is still there, left alone by retention (and said so, once a store).
    for region in ("local-a", "local-b", "local-c"):
        root = orch_home / "stores" / region / run_id / "checkpoints"
        assert all((root / f"step-{s}").is_symlink() or (root / f"step-{s}").is_dir() for s in MALFORMED_STEPS)
    left_alone = [e for e in run.events("checkpoint_skipped") if "left alone by retention" in str(e.get("reason"))]
    per_store = {(e["region"], e["step"], e["generation"]) for e in left_alone}
    assert len(per_store) == len(left_alone), "retention said the same thing twice"
    nothing_left(before, orch_home)


def test_a_resumed_run_meets_the_same_stores_and_fences_planted_again(orch_home, baseline):
    run_id = "hostile-resume"
    plant_malformed_manifests(orch_home, run_id)
    plant_fences(orch_home, run_id)
    before = ray_pids()
    crashed = orchestrate(
        orch_home, run_id, "chaos.supervise=false", "chaos.faults=[{kind:controller_crash,at_step:150}]"
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert crashed.result is None
    # While no controller watches, the stores' fences are forged again (the other way round).
    planted = plant_fences(orch_home, run_id, order=tuple(reversed(FENCE_PLANTS)))
    resumed_at = time.time()
    run = orchestrate(orch_home, run_id, "action=resume")
    survived(run, baseline)
    _no_planted_step_won(run)
    after = [e for e in run.journal() if e["ts"] >= resumed_at]
    ignored = {e["region"]: e["reason"] for e in after if e["type"] == "fence_ignored" and e.get("by") == "controller"}
    assert set(ignored) == set(planted), ignored
    assert run.events("run_resumed")
    assert JOURNALED_MALFORMED <= set(_skipped_steps(run)), _skipped_steps(run)
    nothing_left(before, orch_home)


def test_a_forged_outcome_then_a_dead_driver_never_succeeds_with_the_forgery(orch_home, baseline):
    run_id = "hostile-outcome"
    before = ray_pids()
    run, forged = kill_driver_with_a_forged_outcome(orch_home, run_id, *FAST_FAILOVER, at_step=120)
    # The driver is killed from outside, as soon as it is seen past step 120: step 100's
    # checkpoint may still have been uploading, and died with it (CI saw 133 -> 50).
    r = survived(run, baseline, max_lost=2 * INTERVAL)
    assert r["incidents"][0]["restored_step"] >= 100 - INTERVAL, r["incidents"]
    assert r["final_step"] != forged["final_step"] and r["weights_sha256"] != forged["weights_sha256"]
    assert "/etc/passwd" not in str(r["final_checkpoint"])
    assert str(r["final_checkpoint"]).startswith("file://") and "/step-500" in r["final_checkpoint"]
    # The forged generation failed (its outcome unproven: the forged exit.json is the
    # runtime's word), and the run went on from its own checkpoint; the incident holds
    # the steps the runtime reported, never the claim.
    kinds = [e["kind"] for e in run.events("failure_detected")]
    assert kinds and kinds[0] in ("outcome_unproven", "runtime_lost"), kinds
    assert all(0 <= inc["last_step"] <= 500 and inc["detected_at"] > 0 for inc in r["incidents"]), r["incidents"]
    assert [e["to"] for e in run.events("transition")].count("SUCCEEDED") == 1
    nothing_left(before, orch_home)
