"""A train function made exact with no change to it: seeded per rank from job.seed, its RNG
states saved with each checkpoint and put back when it resumes, its model's digest read
back from the final checkpoint; and its faults on its own clock. The worker runs in this
process as a one-worker Ray Train group (Ray's local mode utils) on file:// stores."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ray.train.v2._internal.execution.local_mode.utils import LocalTrainFnUtils

from orchestrator.runtime.loop import func_exact, func_mode
from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.schema import ChaosRequest
from orchestrator.wire.sections import FaultSpec
from orchestrator.wire.spec import RuntimeSpec
from orchestrator.wire.triggers import crossed
from tests.support import func_worker
from tests.support.func_worker import injector
from tests.support.runs import loop_spec
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit

MODULE = "unit_exact_train"

# Ray's documentation's shape, with randomness it does not seed: its model's init, a
# dropout, and a batch drawn from the global generator every epoch.
USER_CODE = """
import os
import tempfile

import torch

import ray.train
from ray.train import Checkpoint


def train_func(config):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"), weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        x = torch.randn(32, 4)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        metrics = {"loss": loss.item(), "epoch": epoch}
        if config.get("no_clock"):
            metrics.pop("epoch")
        with tempfile.TemporaryDirectory() as d:
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                os.path.join(d, "model.pt"),
            )
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        if epoch + 1 == config.get("stop_after"):
            return  # an attempt that ends here: the next one resumes from this checkpoint
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with func_worker.user_module(tmp_path / "code", monkeypatch, MODULE, USER_CODE) as module:
        yield module


def spec_of(root: Path, generation: int, params: dict[str, Any], seed: int = 0, **job: Any) -> RuntimeSpec:
    return loop_spec(
        root,
        "fn-exact",
        generation,
        {"name": "fn", "workload": "", "train_func": f"{MODULE}:train_func", "steps": 6, "seed": seed, "params": params}
        | job,
        trainer={"max_worker_restarts": 0},
        checkpoint={"interval_steps": 1, "async_upload": False},
    )


def final_of(spec: RuntimeSpec) -> dict[str, Any]:
    func_mode.train_func({"spec": spec.to_plain()})
    final = ControlChannel(spec.control_url).read_final(spec.generation)
    assert final is not None
    return final


def resumed_once(root: Path, seed: int = 0) -> dict[str, Any]:
    """Six epochs in two attempts: the first ends after its third checkpoint."""
    final_of(spec_of(root, 1, {"epochs": 6, "stop_after": 3}, seed))
    return final_of(spec_of(root, 2, {"epochs": 6}, seed))


# --- pure pieces ----------------------------------------------------------------------------


def test_each_rank_s_seed_is_its_own_and_no_two_seed_rank_pairs_share_one() -> None:
    seeds = {func_exact.rank_seed(seed, rank) for seed in range(20) for rank in range(20)}
    assert len(seeds) == 400
    assert func_exact.rank_seed(1, 0) != func_exact.rank_seed(0, 1)
    assert all(0 <= s < 2**32 for s in seeds)


def test_a_rank_takes_its_own_saved_state_or_after_a_change_of_world_that_of_rank_mod_saved() -> None:
    files = {func_exact.rng_name(0): b"r0", func_exact.rng_name(1): b"r1", "model.pt": b"m"}
    assert [func_exact.rng_for(r, files) for r in range(4)] == [b"r0", b"r1", b"r0", b"r1"]
    assert func_exact.rng_for(0, {"model.pt": b"m"}) is None
    assert func_exact.is_ours(".orchestrator/rng-rank3.pt") and not func_exact.is_ours("orchestrator/x")


def test_a_clock_that_jumps_fires_a_step_it_passes_once() -> None:
    at3 = FaultSpec.from_plain({"kind": "kill_worker", "at_step": 3}, "f")
    assert [crossed(at3, b, n, 10) for b, n in [(0, 2), (2, 5), (5, 6), (3, 3)]] == [False, True, False, False]


# --- the worker, end to end -----------------------------------------------------------------


def test_two_runs_of_an_unseeded_function_end_with_one_digest_and_another_seed_another(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    first = final_of(spec_of(tmp_path / "a", 1, {"epochs": 6}))
    again = final_of(spec_of(tmp_path / "b", 1, {"epochs": 6}))
    other = final_of(spec_of(tmp_path / "c", 1, {"epochs": 6}, seed=1))
    assert first["weights_sha256"] is not None and len(first["weights_sha256"]) == 64
    assert again["weights_sha256"] == first["weights_sha256"]
    assert again["checkpoint_sha256"] == first["checkpoint_sha256"]
    assert other["weights_sha256"] != first["weights_sha256"]


def test_a_resumed_function_ends_with_the_weights_of_one_never_stopped(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    straight = final_of(spec_of(tmp_path / "straight", 1, {"epochs": 6}))
    resumed = resumed_once(tmp_path / "resumed")
    assert resumed["final_step"] == straight["final_step"] == 6
    assert resumed["weights_sha256"] == straight["weights_sha256"]
    assert resumed["checkpoint_sha256"] == straight["checkpoint_sha256"]


def test_without_its_rng_states_put_back_the_resumed_function_would_diverge(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the states are for: the same resume with them left out draws other batches.
    straight = final_of(spec_of(tmp_path / "straight", 1, {"epochs": 6}))
    monkeypatch.setattr(func_exact, "rng_for", lambda rank, files: None)
    assert resumed_once(tmp_path / "resumed")["weights_sha256"] != straight["weights_sha256"]


def test_a_folder_of_the_function_named_like_the_orchestrator_s_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".orchestrator").mkdir()
    (tmp_path / ".orchestrator" / "x").write_text("1")
    with pytest.raises(UserCodeError, match="rename that folder"):
        func_mode.read_checkpoint_dir(str(tmp_path))


def test_an_at_step_kill_worker_meets_the_injector_at_that_report_after_its_checkpoint_is_committed(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    spec = replace(spec_of(tmp_path, 1, {"epochs": 5}), faults=[{"kind": "kill_worker", "at_step": 3}])
    control = ControlChannel(spec.control_url, keys=TEST_KEY)
    seen: list[tuple[ChaosRequest, list[int]]] = []
    from recovery.store import CheckpointStore

    store = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    with injector(control, lambda req: seen.append((req, store.committed_steps("fn-exact")))):
        func_mode.train_func({"spec": spec.to_plain()})
    ((req, committed),) = seen
    assert (req.kind, req.step, req.rank) == ("kill_worker", 3, 0)
    assert committed == [1, 2, 3]  # quiesced: the report's checkpoint first


def test_a_metric_clock_fires_at_the_first_report_whose_metric_reaches_the_step(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    # epoch is 0-based: epoch 2 is the third report.
    spec = spec_of(tmp_path, 1, {"epochs": 5}, clock="epoch")
    spec = replace(spec, faults=[{"kind": "kill_region", "at_step": 2}])
    seen: list[ChaosRequest] = []
    with injector(ControlChannel(spec.control_url, keys=TEST_KEY), seen.append):
        func_mode.train_func({"spec": spec.to_plain()})
    assert [(r.kind, r.step) for r in seen] == [("kill_region", 3)]


def test_a_metric_clock_the_function_does_not_report_is_one_clear_user_error(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    spec = spec_of(tmp_path, 1, {"epochs": 2, "no_clock": True}, clock="epoch")
    with pytest.raises(UserCodeError, match=r"job\.clock=epoch: report 1 carries no number named 'epoch'"):
        func_mode.train_func({"spec": spec.to_plain()})
