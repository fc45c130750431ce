"""The invariants every chaos run is held to (the README's promise: exact weights, bounded
loss, a consistent journal, nothing left running), checked from a run's own records."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.runs import Run, describe, wait_no_new_ray

INTERVAL = 50  # conf/job/digits.yaml checkpoint.interval_steps


def journal_consistent(run: Run) -> None:
    """Every attempt ends, attempts never overlap, transitions chain, clusters are torn down."""
    events = run.journal()
    started = [e for e in events if e["type"] == "attempt_started"]
    ended = {e["generation"]: e for e in events if e["type"] == "attempt_ended"}
    assert {e["generation"] for e in started} == set(ended), "an attempt never ended"
    running_since = None
    for e in events:
        if e["type"] in ("attempt_started", "attempt_adopted"):
            assert running_since is None or e["type"] == "attempt_adopted", f"two attempts at once: {e}"
            running_since = e
        elif e["type"] == "attempt_ended":
            running_since = None
    state = "PENDING"
    for e in events:
        if e["type"] == "transition":
            assert e["from"] == state or e["from"] == _resumed_state(events, e), (state, e)
            state = e["to"]
    assert state in ("SUCCEEDED", "FAILED")
    assert events[-1]["type"] == "run_finished"
    provisioned = {e["cluster"] for e in events if e["type"] == "provisioned"}
    torn_down = {e["cluster"] for e in events if e["type"] == "teardown"}
    assert provisioned <= torn_down, f"clusters never torn down: {provisioned - torn_down}"


def _resumed_state(events: list[dict], transition: dict) -> str | None:
    # After a resume the chain goes on from the state the journal held.
    resumed = [e for e in events if e["type"] == "run_resumed" and e["ts"] <= transition["ts"]]
    return resumed[-1]["state"] if resumed else None


def nothing_left(before: set[int], home: Path) -> None:
    left = wait_no_new_ray(before)
    assert not left, f"Ray or runtime processes left behind: {describe(left)}"
    records = home / "clusters"
    left = [p.name for p in records.glob("*.json")] if records.exists() else []
    assert not left, f"cluster records left: {left}"
    with open("/proc/mounts", encoding="utf-8") as fh:
        assert "orch-disk-full" not in fh.read(), "a disk_full tmpfs is still mounted"


def survived(run: Run, baseline: Run, max_lost: int = INTERVAL) -> dict:
    """SUCCEEDED with the uninterrupted run's weights, within the loss bounds."""
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED", r
    assert r["final_step"] == 500
    assert r["weights_sha256"] == baseline.result["weights_sha256"]
    incidents = r["incidents"]
    for i, inc in enumerate(incidents):
        if inc["lost_steps"] is None:
            # Its recovery attempt failed before a step: the next incident carries on from it.
            assert i + 1 < len(incidents), inc
            continue
        bound = 0 if inc["kind"] == "preempted" else max_lost
        assert inc["lost_steps"] <= bound, inc
    journal_consistent(run)
    goodput_consistent(run)
    assert os.path.exists(run.run_dir / "report.png") or not r["incidents"]
    return r


def goodput_consistent(run: Run) -> dict:
    """The run's goodput block: its categories sum to its wall time within 1%, and the
    wall time of a run one controller drove start to end is its duration within 1%."""
    r = run.result
    assert r is not None
    g = r["goodput"]
    assert g is not None, "an ended run says where its time went"
    parts = sum(g["seconds"].values())
    assert abs(parts - g["wall_s"]) <= 0.01 * g["wall_s"], g
    assert all(v >= 0 for v in g["seconds"].values()), g
    if not run.events("run_resumed"):
        assert abs(g["wall_s"] - r["duration_s"]) <= 0.01 * r["duration_s"] + 0.05, (g["wall_s"], r["duration_s"])
    assert 0 < g["goodput"] <= 1 and g["seconds"]["productive"] > 0, g
    return g


def fired(run: Run, kind: str) -> list[dict]:
    return [e for e in run.events("fault_injected") if e["kind"] == kind]
