"""action=status on a multi-node or elastic run: the world size and the nodes per region."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.commands.status import (
    CONTROLLER_DIED,
    _incident_extra,
    _nodes_line,
    controller_state,
    incident_row,
    store_note,
    trial_rows,
    world_now,
)
from orchestrator.commands.status import main as status_main
from orchestrator.runstate.events import NodeLost, NodeReplaced, RunStarted, RuntimeReport, Transition
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.rundir import lock_controller

CLOUD = {"regions": {"local-a": {"nodes": 2}, "local-b": {"nodes": 1}}}


def started(gen: int, world: int) -> RuntimeReport:
    return RuntimeReport(
        kind="train_started", fields={"generation": gen, "world_size": world, "workers": 2, "by": "runtime"}
    )


def test_the_newest_attempts_world_and_its_lost_nodes() -> None:
    events = [started(1, 2), NodeLost("local-a", 1, 1, "gone"), started(1, 1)]
    world = world_now(events, 1)
    assert world == {"world_size": 1, "workers": 2, "lost_nodes": [1]}
    line = _nodes_line({"world": world, "region": "local-a"}, CLOUD)
    assert line == "world      1/2 workers   nodes local-a 1/2 (lost: 1), local-b 1"
    replaced = world_now([*events, NodeReplaced("local-a", 1, 1, 3.2), started(1, 2)], 1)
    assert replaced["lost_nodes"] == [] and replaced["world_size"] == 2
    # Another attempt's losses are not this one's.
    assert world_now(events, 2)["lost_nodes"] == []


def test_single_node_fixed_runs_show_no_world_line() -> None:
    assert _nodes_line({"world": world_now([started(1, 2)], 1), "region": "a"}, {"regions": {"a": {}}}) is None


def test_a_node_lost_incident_names_the_node_the_replacement_and_the_world() -> None:
    row = {"kind": "node_lost", "node": 1, "replace_s": 3.25, "world_size_before": 2, "world_size_after": 2}
    assert _incident_extra(row) == "  node 1, replaced in 3.2s, world 2->2"
    row = {"kind": "node_lost", "node": 1, "replace_s": None, "world_size_before": 2, "world_size_after": 1}
    assert _incident_extra(row) == "  node 1, not replaced, world 2->1"
    assert _incident_extra({"kind": "cluster_lost"}) == ""


def test_an_incident_with_nothing_restored_shows_dashes_not_none() -> None:
    # A user_error ends the run: nothing restored, nothing lost to count, no other region.
    row = incident_row(
        {"kind": "user_error", "from_region": "local-a", "to_region": None, "detected_after_s": 0.2,
         "restored_step": None, "lost_steps": None, "rto_s": None}
    )  # fmt: skip
    assert "None" not in row and row.split() == ["user_error", "local-a", "-", "0.2s", "-", "-", "-"]
    row = incident_row({"kind": "kill_region", "from_region": "a", "to_region": "b", "restored_step": 150,
                        "lost_steps": 20})  # fmt: skip
    assert row.split() == ["kill_region", "a", "b", "-", "150", "20", "-"]


# --- is its controller alive -------------------------------------------------------------------


def test_a_run_without_a_live_controller_shows_as_dead_with_the_resume_command() -> None:
    state, note = controller_state("RUNNING", False, "r1", "/h o")
    assert state == CONTROLLER_DIED
    assert note == "its controller died; continue it with: python -m orchestrator action=resume run_id=r1 home='/h o'"
    assert controller_state("RUNNING", True, "r1", "/h") == ("RUNNING", None)
    state, note = controller_state("RECOVERING", None, "r1", "/h")
    assert state == "RECOVERING" and note is not None and "cannot tell" in note


def test_status_tells_a_dead_controller_from_a_live_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    run_dir = home / "runs" / "r1"
    j = Journal(str(run_dir / "journal.jsonl"))
    j.emit(RunStarted(run_id="r1", config={"job": {"name": "digits", "steps": 10}}))
    j.emit(Transition(RunState.PROVISIONING, RunState.PENDING))
    held = lock_controller(str(run_dir))
    assert held is not None
    assert status_main(str(home), "r1") == 0
    assert "status     PROVISIONING\n" in capsys.readouterr().out
    held.close()  # the controller is gone, SIGKILL or not: the lock goes with it
    assert status_main(str(home), "r1") == 0
    out = capsys.readouterr().out
    assert f"status     {CONTROLLER_DIED}  (its controller died; continue it with: " in out
    assert "action=resume run_id=r1" in out


def test_a_finished_search_shows_a_line_per_trial_the_best_first_and_the_stopped_marked() -> None:
    result = {
        "best_trial": {"trial_id": "trial_00002", "metric": "accuracy"},
        "search": {"max_t": 4},
        "trials": [
            {
                "trial_id": "trial_00000",
                "status": "TERMINATED",
                "iteration": 4,
                "config": {"job.lr": 0.0123456},
                "metrics": {"accuracy": 0.5},
            },
            {
                "trial_id": "trial_00001",
                "status": "TERMINATED",
                "iteration": 1,
                "config": {"job.lr": 0.2},
                "metrics": {"accuracy": 0.25},
            },
            {
                "trial_id": "trial_00002",
                "status": "TERMINATED",
                "iteration": 4,
                "config": {"job.lr": 0.1},
                "metrics": {"accuracy": 0.875},
            },
            {"trial_id": "trial_00003", "status": "ERROR", "iteration": 0, "config": {"job.lr": 0.3}, "metrics": {}},
        ],
    }
    lines = trial_rows(result)
    assert lines[0] == "trials" and lines[1].split() == ["trial", "status", "iter", "accuracy", "config"]
    rows = [line.split() for line in lines[2:]]
    assert rows == [
        ["*", "trial_00002", "done", "4", "0.875", "job.lr=0.1"],
        ["trial_00000", "done", "4", "0.5", "job.lr=0.01235"],
        ["trial_00001", "stopped", "1", "0.25", "job.lr=0.2"],
        ["trial_00003", "error", "0", "-", "job.lr=0.3"],
    ]
    many = {**result, "trials": [dict(result["trials"][0], trial_id=f"trial_{i:05d}") for i in range(60)]}
    assert trial_rows(many)[-1] == "  ... 10 more in result.json's trials" and len(trial_rows(many)) == 2 + 50 + 1


def _lease_of(run_dir: Path, controller: int) -> bytes:
    import time

    from orchestrator.control.lease import LeaseRecord, encode
    from recovery.signing import derive_state_key, secret_of

    now = time.time()
    rec = LeaseRecord("r1", controller, "t" * 32, "m2", 7, now, now + 60)
    return encode(rec, derive_state_key(secret_of(str(run_dir)), "r1"))


@pytest.mark.parametrize("lease", ["verified", "forged", "earlier", "none"])
def test_a_controller_that_stood_down_shows_taken_over_only_for_a_verified_later_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lease: str
) -> None:
    import json
    import time

    from orchestrator.runstate.events import ControllerStoodDown
    from recovery.signing import load_or_create_secret

    home = tmp_path / "home"
    run_dir = home / "runs" / "r1"
    store = tmp_path / "control"
    j = Journal(str(run_dir / "journal.jsonl"))
    cloud = {"control_store": f"file://{store}"}
    j.emit(RunStarted(run_id="r1", config={"job": {"name": "digits", "steps": 10}, "cloud": cloud}))
    j.emit(ControllerStoodDown(controller=1, reason="taken by controller 2 on m2 (pid 7)"))
    load_or_create_secret(str(run_dir))
    (store / "r1").mkdir(parents=True)
    if lease == "verified":
        (store / "r1" / "lease.json").write_bytes(_lease_of(run_dir, 2))
    elif lease == "earlier":
        (store / "r1" / "lease.json").write_bytes(_lease_of(run_dir, 1))
    elif lease == "forged":
        now = time.time()
        forged = {"run_id": "r1", "controller": 2, "token": "x", "host": "m2", "pid": 7, "renewed_at": now}
        (store / "r1" / "lease.json").write_text(json.dumps({**forged, "expires_at": now + 1e9, "released": False}))
    assert status_main(str(home), "r1") == 0
    out = capsys.readouterr().out
    if lease == "verified":
        assert "status     TAKEN_OVER  (its controller here stood down to controller 2 on m2 (pid 7)" in out
    else:
        assert "status     CONTROLLER_DIED" in out and "no verified lease of a later controller" in out
        assert "action=resume run_id=r1" in out


def test_the_controller_line_says_where_it_runs_since_when_and_whether_it_lives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import socket

    from orchestrator.commands.status import controller_text, last_controller
    from orchestrator.runstate.events import RunResumed
    from orchestrator.runstate.rundir import lock_controller

    home = tmp_path / "home"
    run_dir = home / "runs" / "r1"
    j = Journal(str(run_dir / "journal.jsonl"))
    here = socket.gethostname()
    j.emit(RunStarted(run_id="r1", pid=11, host="vm-a", config={"job": {"name": "digits", "steps": 10}}))
    j.emit(RunResumed(pid=os.getpid(), host=here))
    lock = lock_controller(str(run_dir))
    assert lock is not None
    try:
        assert status_main(str(home), "r1") == 0
        out = capsys.readouterr().out
    finally:
        lock.close()
    (line,) = [x for x in out.splitlines() if x.startswith("controller ")]
    assert f"pid {os.getpid()} on {here}, since " in line and " UTC: alive" in line, line
    assert status_main(str(home), "r1") == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("controller ")]
    assert line.endswith("another process now)"), line  # this test's pid runs, holding no lock
    c = last_controller([RunStarted(run_id="r1", pid=11, host="vm-a", ts=0.0)])
    assert c == {"pid": 11, "host": "vm-a", "since": 0.0}
    assert controller_text(c, False, None, False).endswith(": gone")
    assert controller_text(c, True, None, True).endswith("alive, detached (its supervisor restarts it)")
    assert "cannot tell whether it lives" in controller_text(c, None, None, False)


def test_a_checkpoint_in_another_regions_store_says_whose_it_is() -> None:
    cloud = {
        "regions": {
            "local-a": {"store": "file:///h/stores/local-a"},
            "local-ab": {"store": "file:///h/stores/local-ab/"},
            "local-b": {"store": "file:///h/stores/local-b"},
        }
    }
    url = "file:///h/stores/local-a/dr/checkpoints/step-2650-g2"
    assert store_note(url, "local-b", cloud) == "  (in local-a's store)"
    assert store_note(url, "local-a", cloud) == ""
    assert (
        store_note("file:///h/stores/local-ab/dr/checkpoints/step-1-g1", "local-a", cloud) == "  (in local-ab's store)"
    )
    # Nothing to say: no checkpoint, no region, a store the config does not name, a damaged copy.
    assert store_note(None, "local-b", cloud) == store_note(url, None, cloud) == ""
    assert store_note("s3://elsewhere/dr/checkpoints/step-1-g1", "local-b", cloud) == ""
    assert store_note(url, "local-b", {"regions": {"local-a": "?"}}) == store_note(url, "local-b", {}) == ""
