"""job=gpt, the LLM-shaped built-in, under a preemption and a lost region (its head
killed: the kill_head fault's real run): it ends with exactly the weights of its
uninterrupted run, and its held-out loss fell. The preemption is AWS's spot
interruption notice, as IMDSv2 serves it (a metadata server on 127.0.0.1 that the
region's preemption_notice_url names), heard by the runtime's own watch."""

from __future__ import annotations

import pytest

from tests.support.invariants import journal_consistent, nothing_left
from tests.support.runs import orchestrate, ray_pids
from tests.support.servers import MetadataServer

STEPS = 60
JOB = ("job=gpt", f"job.steps={STEPS}", "checkpoint.interval_steps=20")


@pytest.fixture(scope="module")
def gpt_baseline(orch_home):
    run = orchestrate(orch_home, "gpt-baseline", *JOB, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def initial_eval_loss() -> float:
    """The seeded, untrained model's held-out loss, as the loop builds it (seed, then model())."""
    import torch
    from omegaconf import OmegaConf

    from orchestrator.config.compose import CONF_DIR
    from orchestrator.workloads import validate_params
    from orchestrator.workloads.gpt import GPT

    params = dict(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "job" / "gpt.yaml").job.params))
    params["max_steps"] = STEPS
    state = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        workload = GPT(validate_params(GPT, params))
        return workload.evaluate(workload.model())["eval_loss"]
    finally:
        torch.set_rng_state(state)


def test_gpt_learns(gpt_baseline) -> None:
    r = gpt_baseline.result
    assert r["status"] == "SUCCEEDED" and r["final_step"] == STEPS
    start = initial_eval_loss()
    assert r["metrics"]["eval_loss"] < start - 1.0, (r["metrics"], start)
    names = {f["name"] for f in _manifest(r["final_checkpoint"])["files"]}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "workload.pt", "state.pt"} <= names


def _manifest(url: str) -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(url.removeprefix("file://")) / "MANIFEST.json").read_text())


def test_gpt_survives_a_preemption_and_a_lost_region_exactly(orch_home, gpt_baseline) -> None:
    before = ray_pids()
    with MetadataServer("aws") as imds:
        # The notice once the first attempt (local-a) reports step 15; the kill at 45 lands
        # in the next region. No chaos fault: only the runtime's watch of the server hears it.
        imds.notice_at_step(orch_home / "runs" / "gpt-faults" / "control" / "g1" / "progress.json", 15)
        run = orchestrate(
            orch_home,
            "gpt-faults",
            *JOB,
            "cloud.regions.local-a.preemption_notice=aws",
            f"cloud.regions.local-a.preemption_notice_url={imds.endpoint}",
            "chaos.faults=[{kind:kill_head,at_step:45}]",
            "recovery.region_cooldown_s=0",
            timeout=600,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r["status"] == "SUCCEEDED" and r["final_step"] == STEPS
    assert r["weights_sha256"] == gpt_baseline.result["weights_sha256"]
    assert r["metrics"] == gpt_baseline.result["metrics"]
    kinds = [inc["kind"] for inc in r["incidents"]]
    assert kinds == ["preempted", "cluster_lost"], r["incidents"]
    lost = [inc["lost_steps"] for inc in r["incidents"]]
    assert lost[0] == 0 and lost[1] <= 20, lost  # preempt: none; kill at 45: since the commit of 40
    # IMDSv2's way: a token, then the notice asked for with it; the runtime heard "terminate".
    methods = [(m, path) for m, path, _ in imds.requests]
    assert methods[0] == ("PUT", "/latest/api/token") and ("GET", "/latest/meta-data/spot/instance-action") in methods
    (notice,) = run.events("preemption_notice")
    assert (notice["source"], notice["action"], notice["generation"]) == ("aws", "terminate", 1), notice
    assert r["incidents"][0]["failed_at"] == notice["time"]  # the preemption began with the notice
    assert not run.events("preemption_notice_invalid")
    (preempted,) = run.events("preempted")
    assert preempted["step"] >= 15 and r["incidents"][0]["restored_step"] == preempted["step"]
    journal_consistent(run)
    nothing_left(before, orch_home)
