"""Two runs sharing a standby pool (recovery.standby_pool), live on local regions: the run
that loses its region takes the standby the other launched, ends with the uninterrupted
run's weights, the pool launches the next standby for the run still waiting, each run's
goodput carries its share of the standbys' idle time, and the last run to leave tears
the pool's standby down."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.invariants import survived
from tests.support.paths import REPO
from tests.support.runs import env_for, orchestrate, ray_pids, wait_no_new_ray

WAITER = ("job.steps=1000000",)
KEY = {"ORCHESTRATOR_CONTROL_KEY": "5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d"}


def _pool(control: Path) -> tuple[str, ...]:
    return (
        f"cloud.control_store=file://{control}",
        "recovery.standby_pool=team",
        "cloud.candidates=[local-a,local-b]",
    )


def _log(control: Path, region: str = "local-b") -> list[str]:
    """The pool's entries in ``region``, as states (the test holds the key's source, not
    the pool's key: it reads what the entries say, which the runs verify)."""
    folder = control / "_pools" / "team" / region / "log"
    if not folder.is_dir():
        return []
    entries = sorted(folder.iterdir(), key=lambda p: int(p.name[1:]))
    return [json.loads(p.read_text())["state"] for p in entries]


def _wait(what: str, ok, proc: subprocess.Popen[str], timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if proc.poll() is not None:
            raise AssertionError(f"the waiting run ended before {what}: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.5)


def _events(run_dir: Path, type_: str) -> list[dict]:
    path = run_dir / "journal.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, filter(None, lines)) if e["type"] == type_]


@pytest.mark.timeout(900)
def test_two_runs_share_a_standby_the_loser_takes_it_the_pool_refills_and_each_pays_its_share(
    orch_home, baseline, tmp_path
):
    before = ray_pids()
    control = tmp_path / "control"
    waiter_dir = orch_home / "runs" / "pool-waiter"
    # The run that keeps waiting on the pool: long enough to see the pool refill, then stopped.
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "job=digits",
            "run_id=pool-waiter",
            "progress=false",
            *WAITER,
            *_pool(control),
        ],
        cwd=REPO,
        env=env_for(orch_home, KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait("pool standby up", lambda: _log(control) == ["launching", "ready"], waiter)
        loser = orchestrate(
            orch_home,
            "pool-loser",
            *_pool(control),
            "chaos.faults=[{kind:kill_region,at_step:150}]",
            env=KEY,
        )
        r = survived(loser, baseline)
        # The refill: the waiter sees the standby taken and launches the next.
        _wait("refill", lambda: _log(control)[-3:] == ["taken", "launching", "ready"], waiter)
        waiter.send_signal(signal.SIGTERM)
        _out, err = waiter.communicate(timeout=180)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 130 and "Traceback" not in err, err[-3000:]

    # The loser took the waiter's standby: nothing provisioned for its second attempt.
    assert r["attempts"] == 2 and r["region"] == "local-b"
    assert [a["standby"] for a in loser.events("attempt_started")] == [False, True]
    [taken] = [e for e in loser.events("pool_taken") if e["taken"]]
    launched_by_waiter = [e["cluster"] for e in _events(waiter_dir, "pool_launched") if e.get("cluster")]
    assert taken["cluster"] == launched_by_waiter[0], (taken, launched_by_waiter)
    second = [e for e in loser.events("provisioned") if e.get("generation") == taken["generation"]]
    assert [(e["cluster"], e["pool"], e["provision_s"]) for e in second] == [(taken["cluster"], "team", 0.0)]
    assert not loser.events("pool_launched"), "the loser launched nothing for the pool"

    # The pool refilled for the waiter, and the waiter's end tore it down (the last run there).
    refill = launched_by_waiter[1]
    assert _log(control)[-1] == "gone"
    waiter_torn = {e["cluster"] for e in _events(waiter_dir, "teardown")}
    assert refill in waiter_torn

    # Each run paid its share of the first standby; together, its whole idle time.
    first = taken["cluster"]
    loser_shares = [e for e in loser.events("pool_share") if e["cluster"] == first]
    waiter_shares = [e for e in _events(waiter_dir, "pool_share") if e["cluster"] == first]
    assert loser_shares and waiter_shares
    assert max(e["runs"] for e in loser_shares) == 2
    idle = loser_shares[-1]["to_ts"] - min(e["from_ts"] for e in waiter_shares + loser_shares)
    paid = sum(e["share_s"] for e in loser_shares + waiter_shares)
    assert paid == pytest.approx(idle, rel=0.05), (loser_shares, waiter_shares)
    # Both runs' goodput costs it as standby idle in local-b; the loser's adds up to its wall time.
    assert r["goodput"]["standby_idle_node_hours"]["local-b"] > 0
    assert sum(r["goodput"]["seconds"].values()) == pytest.approx(r["goodput"]["wall_s"], rel=0.01)
    waited = json.loads((waiter_dir / "result.json").read_text())
    assert waited["status"] == "INTERRUPTED"
    assert waited["goodput"]["standby_idle_node_hours"]["local-b"] > 0
    assert not wait_no_new_ray(before, timeout_s=30)
