"""job=gpt under trainer.strategy=fsdp at two workers: its checkpoints are sharded (one
file of shards per rank, one signed manifest), and a lost region whose newest
checkpoint then has one rank's shard corrupted ends with exactly the weights of its
uninterrupted run: the corrupted step skipped by a reason naming the file, the one
before it restored with each rank reading its own file of shards alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.invariants import fired, nothing_left
from tests.support.runs import orchestrate, ray_pids

STEPS = 60
JOB = ("job=gpt", f"job.steps={STEPS}", "checkpoint.interval_steps=10", "trainer.strategy=fsdp", "trainer.workers=2")


@pytest.fixture(scope="module")
def fsdp_baseline(orch_home):
    run = orchestrate(orch_home, "fsdp-baseline", *JOB, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def _files(url: str) -> set[str]:
    return {f["name"] for f in json.loads((Path(url.removeprefix("file://")) / "MANIFEST.json").read_text())["files"]}


def test_a_lost_region_and_a_corrupt_shard_end_with_the_uninterrupted_weights(orch_home, fsdp_baseline) -> None:
    base = fsdp_baseline.result
    assert base["status"] == "SUCCEEDED" and base["final_step"] == STEPS
    assert {"shard-r0.pt", "shard-r1.pt", "shards.json"} <= _files(base["final_checkpoint"])
    assert "model.pt" not in _files(base["final_checkpoint"])
    before = ray_pids()
    run = orchestrate(
        orch_home,
        "fsdp-faults",
        *JOB,
        "chaos.faults=[{kind:kill_region,at_step:35},{kind:corrupt_checkpoint,during:restore}]",
        "recovery.region_cooldown_s=0",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["final_step"] == STEPS
    assert r["weights_sha256"] == base["weights_sha256"]
    (corrupt,) = fired(run, "corrupt_checkpoint")
    (step,) = set(corrupt["corrupted"].values())
    skipped = [e for e in run.events("checkpoint_skipped") if e["step"] == step]
    assert skipped and all("shard-r1.pt" in e["reason"] for e in skipped), skipped
    restored = [e for e in run.events("restore_shards") if e["step"] < step]
    assert sorted((e["rank"], tuple(e["read"])) for e in restored) == [(0, ("shard-r0.pt",)), (1, ("shard-r1.pt",))]
    nothing_left(before, orch_home)
