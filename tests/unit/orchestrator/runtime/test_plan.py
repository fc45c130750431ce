"""The attempt's plan, one branch at a time: what runs, the group's size and placement,
survivors and spares, each with its reason; and the driver's exit once fit() is done."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.plan import (
    Entry,
    Plan,
    RayOffers,
    exit_after_fit,
    plan_attempt,
    why_no_spares,
    why_not_survivors,
)
from orchestrator.wire.spec import RuntimeSpec
from recovery.detection import EXIT_INFRA, EXIT_OK, EXIT_PREEMPTED, EXIT_USER_ERROR, EXIT_WORKERS_EXHAUSTED

pytestmark = pytest.mark.unit

FULL = RayOffers(replicas=True, hooks=True)
TRAIN_FUNC = {"name": "f", "workload": "", "train_func": "m:f"}


def spec(tmp_path: Path, **over: Any) -> RuntimeSpec:
    trainer = {"workers": 2, **over.pop("trainer", {})}
    return RuntimeSpec(
        run_id="run-1",
        generation=1,
        region="local-a",
        store_url=f"file://{tmp_path}/store",
        control_url=f"file://{tmp_path}/control",
        ray_address="127.0.0.1:1",
        ray_storage_path=str(tmp_path / "ray"),
        job=over.pop("job", {"name": "digits", "workload": "digits"}),
        trainer=trainer,
        checkpoint={},
        **over,
    )


def plan(tmp_path: Path, ray: RayOffers = FULL, **over: Any) -> Plan:
    return plan_attempt(spec(tmp_path, **over), ray)


def test_a_ddp_workload_on_cpus_of_one_node_keeps_survivors_and_spares_at_a_fixed_world(tmp_path: Path) -> None:
    p = plan(tmp_path)
    assert (p.entry, p.workers, p.backend, p.use_gpu) == (Entry.LOOP, 2, "gloo", False)
    assert p.resources_per_worker == (("CPU", 1.0),)
    assert (p.placement_strategy, p.sized) == ("PACK", False)
    assert "fixed world of 2" in p.sized_why
    assert p.survivors and p.spares and not p.survivors_off_said and not p.ray_datasets
    assert "keep their processes" in p.survivors_why


def test_the_plan_is_frozen() -> None:
    assert dataclasses.fields(Plan) and Plan.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_gpu_workers_use_nccl_and_keep_neither_survivors_nor_spares(tmp_path: Path) -> None:
    p = plan(tmp_path, trainer={"gpus_per_worker": 1.0})
    assert (p.backend, p.use_gpu, p.resources_per_worker) == ("nccl", True, (("CPU", 1.0), ("GPU", 1.0)))
    assert not p.survivors and "NCCL" in p.survivors_why and p.survivors_off_said
    assert not p.spares and "holds no GPU" in p.spares_why


def test_a_region_of_several_nodes_spreads_its_workers_and_sizes_each_group(tmp_path: Path) -> None:
    p = plan(tmp_path, nodes=3)
    assert (p.placement_strategy, p.sized) == ("SPREAD", True)
    assert "3 nodes" in p.sized_why and "one worker per node" in p.placement_why


def test_a_min_workers_below_the_world_is_an_elastic_world_sized_each_time(tmp_path: Path) -> None:
    p = plan(tmp_path, trainer={"workers": 3, "min_workers": 2})
    assert p.sized and "trainer.min_workers=2" in p.sized_why and p.placement_strategy == "PACK"
    assert not plan(tmp_path, trainer={"workers": 3, "min_workers": 3}).sized


def test_a_train_func_runs_the_users_function_with_spares_and_without_survivors(tmp_path: Path) -> None:
    p = plan(tmp_path, job=TRAIN_FUNC)
    assert p.entry is Entry.TRAIN_FUNC and not p.survivors and "train_func" in p.survivors_why and p.spares


def test_a_search_runs_its_trials_on_their_own(tmp_path: Path) -> None:
    p = plan(tmp_path, hpo={"enabled": True})
    assert p.entry is Entry.SEARCH and not p.survivors and not p.spares
    assert "trials restart on their own" in p.survivors_why and "trials restart on their own" in p.spares_why


def test_ray_data_keeps_neither_survivors_nor_spares_and_hands_ray_train_the_dataset(tmp_path: Path) -> None:
    p = plan(tmp_path, data={"loader": "ray_data"})
    assert p.ray_datasets and not p.survivors and not p.spares and "ray_data" in p.spares_why


def test_a_ray_without_replica_groups_restarts_the_group_and_says_so(tmp_path: Path) -> None:
    p = plan(tmp_path, RayOffers(replicas=False, hooks=True))
    assert not p.survivors and p.survivors_why == "this Ray cannot replace one worker" and p.survivors_off_said
    assert p.spares


def test_a_ray_whose_hooks_moved_keeps_neither_survivors_nor_spares(tmp_path: Path) -> None:
    p = plan(tmp_path, RayOffers(replicas=True, hooks=False))
    assert not p.survivors and not p.spares and "hook" in p.spares_why


def test_survivors_off_by_the_config_or_with_one_worker_is_not_said_again(tmp_path: Path) -> None:
    off = plan(tmp_path, survivors="off")
    assert not off.survivors and off.survivors_why == "recovery.survivors=off" and not off.survivors_off_said
    one = plan(tmp_path, trainer={"workers": 1})
    assert not one.survivors and "one worker" in one.survivors_why and not one.survivors_off_said


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"survivors": "off"}, "recovery.survivors=off"),
        ({"trainer": {"workers": 1}}, "one worker"),
        ({"trainer": {"gpus_per_worker": 1.0}}, "NCCL"),
        ({"data": {"loader": "ray_data"}}, "ray_data"),
        ({"job": TRAIN_FUNC}, "train_func"),
    ],
)
def test_what_restarts_the_whole_group_says_why(tmp_path: Path, over: dict[str, Any], why: str) -> None:
    assert why in (why_not_survivors(spec(tmp_path, **over)) or "")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_workload_on_cpus_keeps_its_survivors_under_either_strategy(tmp_path: Path, strategy: str) -> None:
    assert why_not_survivors(spec(tmp_path, trainer={"strategy": strategy})) is None


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"survivors": "off"},
        {"trainer": {"workers": 1}},
        {"trainer": {"strategy": "fsdp"}},
        {"job": TRAIN_FUNC},
        {"peer_restore": "off"},
    ],
)
def test_a_group_restarted_whole_on_cpus_keeps_spares_too(tmp_path: Path, over: dict[str, Any]) -> None:
    assert why_no_spares(spec(tmp_path, **over)) is None


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"trainer": {"gpus_per_worker": 1.0}}, "holds no GPU"),
        ({"data": {"loader": "ray_data"}}, "ray_data"),
        ({"spares": "off"}, "recovery.spares=off"),
    ],
)
def test_what_keeps_no_spares_says_why(tmp_path: Path, over: dict[str, Any], why: str) -> None:
    assert why in (why_no_spares(spec(tmp_path, **over)) or "")
    p = plan(tmp_path, **over)
    assert not p.spares and why in p.spares_why


@pytest.mark.parametrize(
    ("raised", "user_error", "final", "preempted", "code"),
    [
        (True, True, False, False, EXIT_USER_ERROR),
        (True, False, False, False, EXIT_WORKERS_EXHAUSTED),
        (False, False, True, False, EXIT_OK),
        (False, False, False, True, EXIT_PREEMPTED),
        (False, False, False, False, EXIT_INFRA),
    ],
)
def test_the_exit_after_fit(raised: bool, user_error: bool, final: bool, preempted: bool, code: int) -> None:
    assert exit_after_fit(raised=raised, user_error=user_error, final=final, preempted=preempted) == code
