"""job.train_func: an unchanged Ray Train function, written as Ray's documentation shows
(prepare_model, prepare_data_loader with set_epoch, a dropout, no seed of its own), from a
folder outside the repository that only PYTHONPATH names. It loses a worker at a reported
iteration (restarted in place), is preempted (both workers stop at the next report with a
checkpoint, committed, nothing lost), loses its region and finishes in the next one from
the newest verified checkpoint, which it sees through ray.train.get_checkpoint(); and it
ends with exactly the weights of the same run uninterrupted (weights_sha256)."""

from __future__ import annotations

import hashlib
import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from providers.procs import marked
from recovery.manifest import Manifest
from recovery.store import parse_step_dir
from tests.support.invariants import journal_consistent
from tests.support.runs import Run, orch, orchestrate
from tests.support.servers import MetadataServer

# kill_worker strikes the last worker at this reported iteration, in local-a, before the notice.
KILL_WORKER_AT = 2
# Each fault lands FAULT_AFTER_S into its attempt's training: after a few checkpoints
# (an epoch takes 0.5-1.5 s on a 2-core machine) and, two attempts together, well before
# the end (the sleeps alone take EPOCHS * SLEEP_S = 10 s).
EPOCHS = 40
SLEEP_S = 0.25
FAULT_AFTER_S = 6.0
# local-a's metadata server gives GCP's preemption notice once the function has reported
# this many checkpoints (a few seconds into its training, as FAULT_AFTER_S).
NOTICE_AT = 5
# Each region's cluster takes 1-2 minutes to start on a loaded 2-core machine.
RUN_TIMEOUT_S = 540

# Nothing here knows about the orchestrator: it runs as is under a plain TorchTrainer.
USER_CODE = """
import json
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import ray.train
import ray.train.torch
from ray.train import Checkpoint


def train_func(config):
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            state = torch.load(os.path.join(checkpoint_dir, "model.pt"), weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch = state["epoch"] + 1
    model = ray.train.torch.prepare_model(model)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    loader = ray.train.torch.prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
    rank = ray.train.get_context().get_world_rank()

    for epoch in range(start_epoch, config["epochs"]):
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
        time.sleep(config["sleep_s"])
        metrics = {"loss": loss.item(), "epoch": epoch, "resumed_from_epoch": start_epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            checkpoint = None
            if rank == 0:
                torch.save(
                    {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    os.path.join(temp_checkpoint_dir, "model.pt"),
                )
                checkpoint = Checkpoint.from_directory(temp_checkpoint_dir)
            ray.train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            # What the test compares result.json with: the last metrics this function reported.
            with open(config["out"] + ".tmp", "w") as fh:
                json.dump(metrics, fh)
            os.replace(config["out"] + ".tmp", config["out"])
"""


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user-train-func")
    (folder / "fn_user.py").write_text(textwrap.dedent(USER_CODE))
    return folder


def nothing_left_of(run: Run, home: Path, timeout_s: float = 10.0) -> None:
    """invariants.nothing_left narrowed to this run, as other runs may start Ray on a shared
    machine meanwhile: no process of its clusters (found as the provider finds them) or of
    its runtimes, and no cluster record."""
    clusters = [
        (e["info"].get("marker", e["cluster"]), frozenset([e["info"]["head_pid"]])) for e in run.events("provisioned")
    ]

    def ours() -> list[int]:
        pids = [pid for name, sessions in clusters for pid in marked(name, sessions)]
        for p in psutil.process_iter(["cmdline"]):
            if str(run.run_dir) in " ".join(p.info["cmdline"] or []):
                pids.append(p.pid)
        return [pid for pid in pids if _alive(pid)]

    deadline = time.monotonic() + timeout_s
    while (left := ours()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes of this run left behind: {left}"
    records = home / "clusters"
    assert not (list(records.glob("*.json")) if records.exists() else []), "cluster records left"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_function(home: Path, run_id: str, code: Path, out: Path, fault: str, *overrides: str) -> Run:
    return orchestrate(
        home,
        run_id,
        "job.train_func=fn_user:train_func",
        f"job.steps={EPOCHS}",
        f"job.params.epochs={EPOCHS}",
        f"job.params.sleep_s={SLEEP_S}",
        f"job.params.out={out}",
        "trainer.workers=2",
        f"chaos.faults=[{fault}]",
        *overrides,
        env={"PYTHONPATH": str(code)},
        timeout=RUN_TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def straight(orch_home: Path, user_code: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same run with no fault: the weights every faulted run must end with."""
    out = tmp_path_factory.mktemp("straight") / "last_metrics.json"
    run = run_function(orch_home, "train-func-straight", user_code, out, "")
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED" and r["attempts"] == 1 and not r["incidents"], r
    return r


def test_a_lost_worker_a_preemption_and_a_lost_region_resume_the_function_exactly(
    orch_home, user_code, tmp_path, straight
):
    """One run, three attempts: a worker killed at a reported iteration in local-a (the
    group restarted in place from that iteration's checkpoint), then preempted there
    (stopped after its next checkpoint, nothing lost), then local-b killed outright
    (resumed from the newest verified one); and the weights of the run that never failed.
    The preemption is GCP's: local-a's metadata server (on 127.0.0.1, as GCP's answers)
    turns instance/preempted TRUE once the function has reported NOTICE_AT iterations,
    and only the runtime's own watch of it hears that."""
    out = tmp_path / "last_metrics.json"
    faults = (
        f"{{kind:kill_worker,at_step:{KILL_WORKER_AT},region:local-a}},"
        f"{{kind:kill_region,after_s:{FAULT_AFTER_S},region:local-b}}"
    )
    with MetadataServer("gcp") as metadata:
        progress = orch_home / "runs" / "train-func-faults" / "control" / "g1" / "progress.json"
        metadata.notice_at_step(progress, NOTICE_AT)
        run = run_function(
            orch_home,
            "train-func-faults",
            user_code,
            out,
            faults,
            "cloud.regions.local-a.preemption_notice=gcp",
            f"cloud.regions.local-a.preemption_notice_url={metadata.endpoint}",
        )
    assert run.returncode == 0, run.stderr[-3000:]
    r = run.result
    assert r is not None and r["status"] == "SUCCEEDED", r
    assert r["region"] == "local-c" and r["attempts"] == 3
    # One step per report, numbered on across the restart and both failovers.
    assert r["final_step"] == EPOCHS
    started = run.events("train_started")
    assert [(e["region"], e["generation"]) for e in started] == [
        ("local-a", 1),
        ("local-a", 1),
        ("local-b", 2),
        ("local-c", 3),
    ]
    assert started[0]["restored_step"] == 0

    # The lost worker: the last rank's process, killed once the iteration's checkpoint was
    # committed; Ray Train restarted the group in place, which resumed from that checkpoint.
    (killed,) = [e for e in run.events("fault_injected") if e["kind"] == "kill_worker"]
    assert killed["step"] == KILL_WORKER_AT and killed["rank"] == 1, killed
    assert killed["killed"] == 1 and not killed.get("refused"), killed
    assert started[1]["restored_step"] == KILL_WORKER_AT
    assert started[1]["worker_pids"] != started[0]["worker_pids"]
    # Restarted in place, each rank took that checkpoint from its node's copies of what the
    # ranks put (checked against its manifest), not from the store; a new cluster has none.
    from_node = run.events("restored_from_scratch")
    assert sorted((e["generation"], e["rank"], e["step"]) for e in from_node) == [
        (1, 0, KILL_WORKER_AT),
        (1, 1, KILL_WORKER_AT),
    ], from_node
    assert all(e["files"] > 0 and e["bytes"] > 0 for e in from_node), from_node
    started = [started[0], *started[2:]]

    # The preemption: both workers stopped together at the report after the notice, its
    # checkpoint committed, and the next attempt restored exactly that one.
    (preempted,) = run.events("preempted")
    step = preempted["step"]
    assert NOTICE_AT <= step < EPOCHS and parse_step_dir(preempted["checkpoint"]) == step
    (notice,) = run.events("preemption_notice")
    assert (notice["source"], notice["action"], notice["generation"]) == ("gcp", "preempted", 1), notice
    assert {h["metadata-flavor"] for _, _, h in metadata.requests} == {"Google"}
    assert not run.events("preemption_notice_invalid")
    ended = next(e for e in run.events("attempt_ended") if e["generation"] == 1)
    assert ended["outcome"] == "preempted", ended
    assert started[1]["restored_step"] == step
    worker, first, second = r["incidents"]
    assert worker["kind"] == "worker_lost" and worker["restored_step"] == KILL_WORKER_AT, worker
    assert worker["lost_steps"] == 0, worker
    assert first["kind"] == "preempted" and first["lost_steps"] == 0, first

    # The lost region: the newest verified checkpoint, the one the controller fenced on.
    restored = started[2]["restored_step"]
    assert step < restored < EPOCHS, started
    fence = [e for e in run.events("fence") if e["generation"] == 3]
    assert fence and fence[-1]["restored_step"] == restored, fence
    assert "/train-func-faults/checkpoints/" in started[2]["restored_from"]
    assert parse_step_dir(started[2]["restored_from"]) == restored
    assert second["kind"] == "cluster_lost" and second["restored_step"] == restored

    # The function saw that checkpoint through ray.train.get_checkpoint(): step N holds epoch N-1.
    assert r["metrics"]["resumed_from_epoch"] == restored
    assert r["metrics"]["epoch"] == EPOCHS - 1
    # result.json's metrics are the last ones the function reported.
    assert r["metrics"] == json.loads(out.read_text())

    # Exactly the weights of the run that never failed, and the same checkpoint: the model,
    # and each rank's RNG states beside it (put back on the resume: the dropout's draws).
    assert r["weights_sha256"] is not None and r["weights_sha256"] == straight["weights_sha256"]
    assert r["checkpoint_sha256"] == straight["checkpoint_sha256"]
    folder = Path(r["final_checkpoint"].removeprefix("file://"))
    manifest = Manifest.from_json((folder / "MANIFEST.json").read_bytes())
    assert sorted(f.name for f in manifest.files) == [
        ".orchestrator/rng-rank0.pt",
        ".orchestrator/rng-rank1.pt",
        "model.pt",
    ]
    assert manifest.step == EPOCHS
    listing = "".join(f"{f.name} {f.sha256}\n" for f in sorted(manifest.files, key=lambda f: f.name))
    assert r["checkpoint_sha256"] == hashlib.sha256(listing.encode()).hexdigest()

    assert not run.events("user_error")
    journal_consistent(run)
    nothing_left_of(run, orch_home)


def _journal(run_dir: Path) -> list[dict]:
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def _until(run_dir: Path, what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"waited {RUN_TIMEOUT_S}s for {what}"
        assert not (run_dir / "result.json").exists(), f"the run ended before {what}"
        time.sleep(0.1)


def _step(progress: Path) -> int:
    try:
        step = json.loads(progress.read_text()).get("step", 0)
    except (OSError, ValueError):
        return 0
    return step if isinstance(step, int) else 0


def test_kill_worker_and_kill_node_drills_on_a_running_function_restart_its_group_in_place_exactly(
    orch_home, user_code, tmp_path, straight
):
    """``action=drill fault=kill_worker``, then ``fault=kill_node``, on a detached function
    run whose region has two nodes (one worker each): the controller kills the last rank
    its train_started named, then every process of the worker node (replaced); Ray Train
    restarts the group in place from the newest checkpoint each time, and the run ends
    with the weights of the run that never failed."""
    out = tmp_path / "last_metrics.json"
    two_nodes = ("cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1")
    # chaos.objectives.exact: the run's own gate, judged from the functions' weights digests.
    gate = f"chaos.objectives.exact={straight['run_id']}"
    started = run_function(orch_home, "train-func-drill", user_code, out, "", "detach=true", gate, *two_nodes)
    assert started.returncode == 0, started.stderr[-2000:]
    progress = started.run_dir / "control" / "g1" / "progress.json"
    _until(started.run_dir, "three reports", lambda: _step(progress) >= 3)
    drilled = orch(orch_home, "action=drill", "run_id=train-func-drill", "fault=kill_worker")
    assert drilled.returncode == 0, drilled.stderr[-2000:]
    assert "kill_worker injected at step" in drilled.stdout, drilled.stdout

    def restarted_and_past(count: int) -> Callable[[], bool]:
        def done() -> bool:
            starts = [e for e in _journal(started.run_dir) if e["type"] == "runtime.train_started"]
            return len(starts) >= count and _step(progress) >= starts[-1]["restored_step"] + 2

        return done

    _until(started.run_dir, "the group restarted and two reports past its restore", restarted_and_past(2))
    drilled = orch(orch_home, "action=drill", "run_id=train-func-drill", "fault=kill_node")
    assert drilled.returncode == 0, drilled.stderr[-2000:]
    assert "kill_node injected at step" in drilled.stdout, drilled.stdout
    watched = orch(orch_home, "action=watch", "run_id=train-func-drill", timeout=RUN_TIMEOUT_S)
    assert watched.returncode == 0, watched.stderr[-2000:]
    result = json.loads((started.run_dir / "result.json").read_text())
    assert result["status"] == "SUCCEEDED" and result["attempts"] == 1, result
    worker, node = result["incidents"]
    assert worker["kind"] == "worker_lost" and worker["from_region"] == worker["to_region"] == "local-a", worker
    assert node["kind"] == "node_lost" and node["to_region"] == "local-a", node
    assert result["weights_sha256"] == straight["weights_sha256"]
    (exact,) = result["objectives"]["checked"]
    assert result["objectives"]["met"] and exact["objective"] == "exact", result["objectives"]
    assert exact["measured"] == straight["weights_sha256"]
    journal = _journal(started.run_dir)
    assert [(e["kind"], bool(e.get("refused"))) for e in journal if e["type"] == "drill_requested"] == [
        ("kill_worker", False),
        ("kill_node", False),
    ]
    (killed,) = [e for e in journal if e["type"] == "fault_injected" and e["kind"] == "kill_worker"]
    assert killed["trigger"] == "drill" and killed["rank"] == 1 and killed["killed"] == 1, killed
