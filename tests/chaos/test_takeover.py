"""The controller's own disasters, survived by a takeover from the control store: its host
lost (a new machine, an empty home, the run's folder rebuilt from the mirror, a region
lost while no controller ran), and its process frozen while a second controller takes the
run over (the frozen one, woken, stands down and acts on nothing). Both end exactly.

Each "machine" is a home of its own; the user's control key is in the environment of
every controller, as the user would give it on each machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.invariants import INTERVAL, survived
from tests.support.paths import REPO
from tests.support.runs import Run, env_for, ray_pids, wait_no_new_ray
from tests.support.servers import scoped_env

KEY = {"ORCHESTRATOR_CONTROL_KEY": "5f1d0c2b9e8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e"}
LEASE_S = 8


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", "progress=false", *args]


def _run(home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 400) -> Run:
    proc = subprocess.run(
        _argv(*args),
        cwd=REPO,
        env=env_for(home, {**KEY, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return _as_run(home, args, proc.returncode, proc.stdout, proc.stderr)


def _as_run(home: Path, args: tuple[str, ...], code: int, out: str, err: str) -> Run:
    run_id = next(a.split("=", 1)[1] for a in args if a.startswith("run_id="))
    run_dir = home / "runs" / run_id
    path = run_dir / "result.json"
    return Run(code, out, err, run_dir, json.loads(path.read_text()) if path.exists() else None)


def _kill_cluster(home: Path, name: str) -> int:
    """kill_region by hand, with no controller to do it: every process of the cluster,
    found by its marker (from the cluster's record in ``home``, which outlives the run's
    folder) and the sessions its processes run in."""
    import psutil

    from providers.local.provider import LocalProvider, marker_of
    from providers.procs import kill_all, marked

    cluster = LocalProvider(state_dir=str(home / "clusters")).find(name)
    assert cluster is not None, f"no record of cluster {name} in {home}"
    sessions = set()
    for pid in marked(marker_of(cluster)):
        try:
            sessions.add(os.getsid(pid))
        except (ProcessLookupError, psutil.Error):
            pass
    return len(kill_all(marker_of(cluster), frozenset(sessions)))


def _lease_line(events: list[dict]) -> list[tuple[int, int | None]]:
    return [(e["controller"], e.get("previous_controller")) for e in events if e["type"] == "lease_taken"]


def test_the_controllers_host_lost_then_its_region_a_new_machine_takes_the_run_over_exactly(
    tmp_path, cloud_stores, baseline
):
    """controller_host_loss with the control store on the test S3 server: the controller is
    killed and the run's folder deleted; the region is then lost while no controller runs;
    action=resume on a new machine (an empty home), given the control store and the key,
    rebuilds the run from the mirror, fails over, and ends with the uninterrupted weights.
    The journal shows both controllers' generations and the takeover. (The checkpoints are
    on storage both machines reach, a folder outside either home.)"""
    before = ray_pids()
    home_a, home_b = tmp_path / "machine-a", tmp_path / "machine-b"
    store = ["cloud.control_store=s3://orch-b/control", "+cloud.control_options.endpoint_url=${oc.env:ORCH_LOCAL_S3_B}"]
    shared = [f"cloud.regions.{r}.store=file://{tmp_path}/shared/{r}" for r in ("local-a", "local-b", "local-c")]
    args = ("job=digits", "run_id=hostloss", *shared, f"recovery.controller_lease_s={LEASE_S}")
    lost = _run(
        home_a, *args, *store, "chaos.faults=[{kind:controller_host_loss,at_step:100}]", env=cloud_stores["env"]
    )
    assert lost.returncode == -9, lost.stderr[-2000:]
    assert not lost.run_dir.exists(), "the run's folder outlived its host"
    # No controller runs: the region goes too, while it still trains.
    assert _kill_cluster(home_a, "hostloss-local-a-g1") > 0
    # A second machine, too soon: the dead controller's lease still holds.
    early = _run(home_b, "action=resume", "run_id=hostloss", *store, env=cloud_stores["env"])
    if early.returncode == 2:
        assert "is driven by controller 1 on " in early.stderr and early.stderr.count("\n") == 1, early.stderr
        assert not (home_b / "runs" / "hostloss").exists()
        time.sleep(LEASE_S + 1)
        taken = _run(home_b, "action=resume", "run_id=hostloss", *store, env=cloud_stores["env"], timeout=600)
    else:
        taken = early  # the machine was slow enough for the lease to lapse
    # The region went while step 100's checkpoint may still have been uploading: the one
    # before it may be the newest that verifies.
    r = survived(taken, baseline, max_lost=2 * INTERVAL)
    assert r["region"] != "local-a" and r["attempts"] == 2, r
    assert r["incidents"][0]["restored_step"] >= 100 - INTERVAL, r["incidents"]
    assert "taken over from s3://orch-b/control (controller 1's mirror" in taken.stderr
    journal = taken.journal()
    assert _lease_line(journal) == [(1, None), (2, 1)]
    (restored,) = [e for e in journal if e["type"] == "mirror_restored"]
    assert restored["controller"] == 1 and "journal.jsonl" in restored["files"]
    assert [e["kind"] for e in journal if e["type"] == "fault_injected"] == ["controller_host_loss"]
    # The mirror holds nothing of the run's secret, nor of the key it comes from.
    with scoped_env(cloud_stores["env"]):
        from recovery.storage import open_fs

        fs, _ = open_fs("s3://orch-b", {"endpoint_url": cloud_stores["servers"]["local-b"].endpoint})
        blobs = b"".join(fs.cat_file(p) for p in fs.find("orch-b/control/hostloss/state"))
    secret = (taken.run_dir / "run.secret").read_bytes()
    assert blobs and secret not in blobs and secret.hex().encode() not in blobs
    assert KEY["ORCHESTRATOR_CONTROL_KEY"].encode() not in blobs
    assert not wait_no_new_ray(before)


def test_a_frozen_controller_stands_down_to_the_one_that_took_the_run_over(tmp_path, baseline):
    """controller_freeze: while the controller is stopped, a second action=resume while its
    lease holds is refused in one line and writes nothing; once the lease lapses, a second
    machine takes the run over and finishes it exactly. The frozen controller, continued,
    journals its standing down and nothing else, tears nothing down, and exits 5."""
    before = ray_pids()
    home_a, home_b = tmp_path / "machine-a", tmp_path / "machine-b"
    control = f"cloud.control_store=file://{tmp_path}/shared/control"
    args = ("job=digits", "run_id=frozen", control, f"recovery.controller_lease_s={LEASE_S}")
    frozen = subprocess.Popen(
        _argv(*args, "chaos.faults=[{kind:controller_freeze,at_step:150,duration_s:30}]"),
        cwd=REPO,
        env=env_for(home_a, KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        journal_a = home_a / "runs" / "frozen" / "journal.jsonl"
        deadline = time.monotonic() + 240
        while not _frozen(journal_a):
            assert time.monotonic() < deadline and frozen.poll() is None, "the controller never froze"
            time.sleep(0.2)
        at = time.monotonic()
        refused = _run(home_b, "action=resume", "run_id=frozen", control)
        assert time.monotonic() - at < LEASE_S - 1, "too slow to meet the lease: the test proves nothing"
        assert refused.returncode == 2 and "is driven by controller 1 on " in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and not (home_b / "runs" / "frozen").exists()
        time.sleep(max(0.0, LEASE_S + 1 - (time.monotonic() - at)))
        taken = _run(home_b, "action=resume", "run_id=frozen", control, timeout=600)
        _out, err = frozen.communicate(timeout=120)
    finally:
        if frozen.poll() is None:
            frozen.kill()
    survived(taken, baseline)
    assert _lease_line(taken.journal()) == [(1, None), (2, 1)]
    assert frozen.returncode == 5, err[-2000:]
    assert "controller 1 stands down: its lease is taken by controller 2" in err
    after = []
    for line in journal_a.read_text().splitlines():
        event = json.loads(line)
        if after or (event["type"] == "fault_injected" and event["kind"] == "controller_freeze"):
            after.append(event["type"])
    assert after == ["fault_injected", "controller_stood_down"], after
    assert not (home_a / "runs" / "frozen" / "result.json").exists()
    assert not wait_no_new_ray(before)


def _frozen(journal: Path) -> bool:
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return False
    return any('"fault_injected"' in line and '"controller_freeze"' in line for line in lines)
