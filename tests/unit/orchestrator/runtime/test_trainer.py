"""The attempt's TorchTrainer starts none of the helper actors an attempt's cluster has no use for."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_the_pinned_ray_gets_the_lean_trainer() -> None:
    # A Ray upgrade that moves the hooks falls back to the stock trainer: this says so here.
    from orchestrator.runtime import trainer

    assert trainer.RAY_TRAIN_HOOKS


def _callbacks(**kwargs: object) -> list[str]:
    from ray.train import ScalingConfig

    from orchestrator.runtime.trainer import make_trainer

    t = make_trainer(lambda: None, scaling_config=ScalingConfig(num_workers=2), **kwargs)
    return [type(c).__name__ for c in t._create_default_callbacks()]


def test_no_placement_group_cleaner_and_no_dataset_manager_without_datasets() -> None:
    names = _callbacks()
    assert "PlacementGroupCleanerCallback" not in names and "DatasetsCallback" not in names
    # What the worker group needs stays: the process group (gloo/NCCL) and the accelerators.
    assert {"BackendSetupCallback", "AcceleratorSetupCallback"} <= set(names)


def test_a_ray_data_loader_keeps_its_dataset_manager() -> None:
    import ray

    # A dataset factory (Ray Train calls it on the cluster): nothing starts Ray here.
    names = _callbacks(datasets={"train": lambda: None})
    assert not ray.is_initialized()
    assert "DatasetsCallback" in names and "PlacementGroupCleanerCallback" not in names


def test_a_fixed_worker_group_never_asks_the_autoscaling_coordinator() -> None:
    from ray.train import ScalingConfig
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

    from orchestrator.runtime import trainer

    seen: dict[str, object] = {}

    class Probe:
        def __init__(self, **kwargs: object) -> None:
            seen.update(kwargs)

        async def run(self) -> None:
            pass

        def get_result(self) -> str:
            return "result"

    # The swap happens on the way to the controller: catch what reaches it.
    base = trainer.DriverController
    try:
        trainer.DriverController = Probe  # type: ignore[assignment,misc]
        got = trainer.LeanTorchTrainer(
            lambda: None, scaling_config=ScalingConfig(num_workers=2)
        )._initialize_and_run_controller(scaling_policy=FixedScalingPolicy(ScalingConfig(num_workers=2)))
    finally:
        trainer.DriverController = base  # type: ignore[misc]
    assert got == "result"
    policy = seen["scaling_policy"]
    assert isinstance(policy, trainer.UncoordinatedPolicy)
    policy.after_controller_start(None)  # no coordinator actor, no error
    assert policy._coordinator_client is None
    assert policy.make_decision_for_non_running_worker_group().num_workers == 2


def test_the_controller_runs_in_the_driver_with_the_same_loop() -> None:
    # Ray Train's own controller class and loop, only hosted by the driver: what it
    # decides (start, poll, restart within max_failures) is Ray's, unchanged.
    from ray.train.v2._internal.execution.controller.controller import TrainController
    from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup

    from orchestrator.runtime import trainer

    assert issubclass(trainer.DriverController, TrainController)
    assert trainer.DriverController.run is TrainController.run
    assert issubclass(trainer.DriverController.worker_group_cls, WorkerGroup)


def test_workers_get_no_controller_handle_and_the_driver_keeps_its_context() -> None:
    from ray.runtime_context import RuntimeContext

    from orchestrator.runtime.trainer import _no_controller_actor

    before = RuntimeContext.__dict__["current_actor"]
    with _no_controller_actor():
        assert RuntimeContext.current_actor.fget(None) is None  # type: ignore[attr-defined]
    assert RuntimeContext.__dict__["current_actor"] is before
    with pytest.raises(KeyError), _no_controller_actor():
        raise KeyError("restored on the way out too")
    assert RuntimeContext.__dict__["current_actor"] is before


def test_worker_actors_leave_out_the_variables_the_cluster_already_sets() -> None:
    # An actor with no environment of its own takes the idle workers each raylet starts.
    from orchestrator.runtime.trainer import cluster_runtime_env

    cluster = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2", "OMP_NUM_THREADS": "1"}
    assert cluster_runtime_env({"env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}}, cluster) == {}
    # A value the cluster does not have (or has otherwise) still travels with the actor.
    got = cluster_runtime_env(
        {"env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1.0", "RAY_TRAIN_V2_ENABLED": "1"}, "pip": ["x"]},
        cluster,
    )
    assert got == {"env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1.0", "RAY_TRAIN_V2_ENABLED": "1"}, "pip": ["x"]}
    assert cluster_runtime_env({}, cluster) == {}


def test_the_lean_worker_group_asks_for_no_environment_the_cluster_has(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup

    from orchestrator.runtime.trainer import DriverWorkerGroup
    from orchestrator.wire.spec import TRAIN_ENV

    for k, v in TRAIN_ENV.items():  # as the driver has them (orchestrator/runtime/__main__.py)
        monkeypatch.setenv(k, v)
    stock = WorkerGroup._get_worker_runtime_env({"env_vars": {"MY_VAR": "x"}})
    assert set(stock["env_vars"]) > {"MY_VAR"}  # Ray Train copies the driver's RAY_TRAIN_* to the actors
    assert DriverWorkerGroup._get_worker_runtime_env({"env_vars": {"MY_VAR": "x"}}) == {"env_vars": {"MY_VAR": "x"}}
    assert DriverWorkerGroup._get_worker_runtime_env({}) == {}
