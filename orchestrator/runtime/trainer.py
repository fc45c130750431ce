"""Ray Train's TorchTrainer without the helpers an attempt's cluster has no use for.

Each of Ray Train's helper actors is a Python process of its own, which imports Ray
Train (and torch) before it is ready, and the worker group waits for them: on a
2-core node that was 5-7 s of an attempt's 18 s start-up. An attempt's cluster is
its own (made for the attempt, torn down after it, never autoscaled), so three of
them do nothing for us:

- the autoscaling coordinator, which asks an autoscaler for the worker group's
  resources: no autoscaler serves these clusters (a fixed worker count only; an
  elastic policy keeps it);
- the placement-group cleaner, which removes the worker group's placement group if
  the Train controller dies while the driver lives on: here the driver is the
  attempt, and the cluster goes with it;
- the dataset manager, which Ray Train starts even when the trainer has no datasets
  (it is kept when ``data.loader=ray_data`` passes one).

They are dropped through two of the trainer's own hooks.

Ray Train's controller, too, is an actor of its own: one more process that imports
torch and Ray Train (5 s of a core) before the first worker is even asked for. Here
it runs in the driver instead, which has both imported already and does nothing but
wait for it: the same ``TrainController``, its same loop (worker group start, polling,
restarts within ``trainer.max_worker_restarts``), on the driver's event loop. What it
gives up: the workers get no handle on the controller, which only
``ray.train.get_all_reported_checkpoints()`` uses (a ``job.train_func`` function is
told so in one line: its checkpoints go through the run's stores), and the
controller dies with the driver, as the actor did (it was the driver's).

Ray Train's worker actors carry a runtime environment: the ``RAY_TRAIN_*`` variables
it copies from the driver. A raylet hands an actor only an idle worker process started
for the same environment, so they never took the ones Ray starts with each node (the
local provider turns that on): every worker was a new interpreter started after it was
asked for. The cluster already gives every process those variables with the same
values (``TRAIN_ENV``, set at launch), so they are left out where they match
(``cluster_runtime_env``): a worker group with no other environment of its own starts
on processes that are already up (0.45 s of a local cold start's 5.3 s).

A group restarted whole at its size takes the placement group the one before it left
(``KeptHandle``, orchestrator/runtime/group/placement.py) rather than wait for Ray to free
those CPUs and place a new one.

Should a Ray release move any of these hooks, ``make_trainer`` falls back to the
stock trainer: slower, never wrong.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ray.train.torch import TorchTrainer

from orchestrator.runtime.group.world import WAIT_POLL_S
from orchestrator.wire.spec import TRAIN_ENV

try:
    from ray.runtime_context import RuntimeContext
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    from ray.train.v2._internal.execution.controller.controller import TrainController
    from ray.train.v2._internal.execution.controller.state import ShuttingDownState
    from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy
    from ray.train.v2._internal.execution.worker_group.placement_group_handle import DefaultPlacementGroupHandle
    from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup
except ImportError:  # another Ray: the stock trainer
    RAY_TRAIN_HOOKS = False
else:
    # Whether every Ray Train internal this module hooks is where it expects: only then
    # the lean trainer, the driver's controller, spares and kept placement groups.
    RAY_TRAIN_HOOKS = (
        all(hasattr(TorchTrainer, m) for m in ("_create_default_callbacks", "_initialize_and_run_controller"))
        and hasattr(WorkerGroup, "_init_train_context_on_workers")
        and hasattr(WorkerGroup, "_create_placement_group")
        and hasattr(TrainController, "_shutdown_worker_group")
        and getattr(TrainController, "worker_group_cls", None) is WorkerGroup
        and asyncio.iscoroutinefunction(getattr(TrainController, "run", None))
        and isinstance(RuntimeContext.__dict__.get("current_actor"), property)
    )


def cluster_runtime_env(runtime_env: dict[str, Any], cluster_env: dict[str, str]) -> dict[str, Any]:
    """``runtime_env`` less the ``env_vars`` that ``cluster_env`` (what every process of
    the cluster sees) already sets to the same value; no ``env_vars`` key when none is left."""
    env_vars = {k: v for k, v in (runtime_env.get("env_vars") or {}).items() if cluster_env.get(k) != v}
    rest = {k: v for k, v in runtime_env.items() if k != "env_vars"}
    return {**rest, "env_vars": env_vars} if env_vars else rest


def make_trainer(*args: Any, world: Any = None, **kwargs: Any) -> TorchTrainer:
    """A ``TorchTrainer(*args, **kwargs)``, lean where this Ray allows it. ``world``: a
    ``WorldPolicy`` (orchestrator/runtime/group/world.py) that sizes each worker group; the
    stock trainer (another Ray) keeps the fixed ``num_workers``."""
    trainer = (LeanTorchTrainer if RAY_TRAIN_HOOKS else TorchTrainer)(*args, **kwargs)
    trainer._orchestrator_world = world  # type: ignore[attr-defined]
    return trainer


if RAY_TRAIN_HOOKS:

    class UncoordinatedPolicy(FixedScalingPolicy):
        """A fixed worker group that never talks to the autoscaling coordinator."""

        def after_controller_start(self, train_run_context: Any) -> None:
            pass

        def _maybe_send_resource_request(self) -> None:
            pass

        def _send_resource_request(self) -> None:
            pass

        def _cancel_resource_request(self) -> None:
            pass

    class SizedPolicy(UncoordinatedPolicy):
        """Each worker group as large as the run's WorldPolicy says; while it says wait,
        the controller's loop asks again (it would spin: the wait is here)."""

        def __init__(self, scaling_config: Any, world: Any) -> None:
            super().__init__(scaling_config)
            self.world = world

        def on_controller_start_worker_group(self, *, scaling_config: Any, num_workers: int) -> Any:
            # Off the nodes the driver knows dead while Ray still counts them (lost_nodes.py).
            from orchestrator.runtime.group import lost_nodes

            return lost_nodes.exclude_selector(lost_nodes.dead())

        def make_decision_for_non_running_worker_group(self) -> Any:
            size = self.world.decide()
            if size is None:
                time.sleep(WAIT_POLL_S)
                return NoopDecision()
            per_worker = self.scaling_config._resources_per_worker_not_none
            return ResizeDecision(num_workers=size, resources_per_worker=per_worker)

    class LeanTorchTrainer(TorchTrainer):
        def _create_default_callbacks(self) -> list[Any]:
            drop: tuple[type, ...] = (PlacementGroupCleanerCallback,)
            if not getattr(self, "datasets", None):
                drop += (DatasetsCallback,)
            return [c for c in super()._create_default_callbacks() if not isinstance(c, drop)]

        def _initialize_and_run_controller(self, **kwargs: Any) -> Any:
            if type(kwargs.get("scaling_policy")) is FixedScalingPolicy:
                config = kwargs["scaling_policy"].scaling_config
                world = getattr(self, "_orchestrator_world", None)
                kwargs["scaling_policy"] = UncoordinatedPolicy(config) if world is None else SizedPolicy(config, world)
            controller = DriverController(**kwargs)
            asyncio.run(controller.run())
            return controller.get_result()

    def _asked_once(ask: Callable[[], bool]) -> Callable[[], bool]:
        """``ask`` at the first call only: a node that did not answer costs its wait once
        per failure, not at each of the scaling policy's looks."""
        said: list[bool] = []

        def once() -> bool:
            if not said:
                said.append(ask())
            return said[0]

        return once

    @contextmanager
    def _no_controller_actor() -> Iterator[None]:
        """The worker group hands the workers ``current_actor``, which outside an actor
        raises: for the span of that call it is None (see the module's docstring)."""
        actor = RuntimeContext.__dict__["current_actor"]
        RuntimeContext.current_actor = property(lambda _: None)  # type: ignore[assignment,method-assign]
        try:
            yield
        finally:
            RuntimeContext.current_actor = actor  # type: ignore[method-assign]

    class KeptHandle(DefaultPlacementGroupHandle):
        """A worker group's placement group, handed to ``placement`` when the group shuts
        down (kept for the next group when that is a restart)."""

        def __init__(self, pg: Any, resources: dict[str, float], strategy: str) -> None:
            super().__init__(pg)
            self._resources, self._strategy = resources, strategy

        def shutdown(self) -> None:
            from orchestrator.runtime.group import placement

            placement.release(self._pg, self._resources, self._strategy)

    class DriverWorkerGroup(WorkerGroup):
        @staticmethod
        def _get_worker_runtime_env(custom_runtime_env: Any) -> Any:
            return cluster_runtime_env(dict(WorkerGroup._get_worker_runtime_env(custom_runtime_env)), TRAIN_ENV)

        def _create_placement_group(self, scaling_config: Any, worker_group_context: Any) -> Any:
            from orchestrator.runtime.group import lost_nodes, placement

            ctx = worker_group_context
            resources, strategy = dict(ctx.resources_per_worker), str(ctx.placement_strategy)
            taken = placement.take(resources, strategy, int(ctx.num_workers), lost_nodes.dead())
            if taken is not None:
                # Its bundles are 0..num_workers-1, all placed: Ray Train's defaults hold.
                return KeptHandle(taken[0], resources, strategy)
            handle = super()._create_placement_group(scaling_config, worker_group_context)
            if type(handle) is not DefaultPlacementGroupHandle:
                return handle  # a TPU slice: Ray's own, removed as Ray removes it
            return KeptHandle(handle.placement_group, resources, strategy)

        def _init_train_context_on_workers(self, *args: Any, **kwargs: Any) -> Any:
            with _no_controller_actor():
                return super()._init_train_context_on_workers(*args, **kwargs)

        def _create_workers(self, num_workers: int, placement_group: Any, resources_per_worker: Any, **kw: Any) -> Any:
            """A worker whose bundle lies on a node where a spare waits is that spare
            (orchestrator/runtime/group/spares.py): a lost worker's replacement, and each worker
            of a group started again whole (a smaller world after a lost node, a restart
            where survivors are not kept); the rest are new actors. A bundle whose node
            is lost takes the spare of a node with room (a spare node's). Every node
            that fits a worker is left with a spare."""
            from orchestrator.runtime.group import lost_nodes, spares

            if not spares.enabled():
                return super()._create_workers(num_workers, placement_group, resources_per_worker, **kw)
            given = kw.pop("placement_group_bundle_indices", None)
            indices = list(range(num_workers)) if given is None else list(given)
            ranks = {k: kw.pop(k) for k in ("starting_world_rank", "world_size", "replica_group_size") if k in kw}
            # A bundle on a lost node takes the spare of a node with room (a spare node).
            dead = lost_nodes.dead()
            spare_nodes = spares.SpareNodes(self._kept_nodes(), dict(resources_per_worker), dead)
            taken, rest = spares.split(
                indices, lambda i: spares.take_spare(placement_group, i, resources_per_worker, spare_nodes.node, dead)
            )
            fresh = (
                super()._create_workers(
                    len(rest), placement_group, resources_per_worker, placement_group_bundle_indices=rest, **kw
                )
                if rest
                else []
            )
            workers = WorkerGroup._assign_worker_ranks([*(w for w, _ in taken), *fresh], **ranks)
            spares.journal_taken(taken, "group" if given is None else "replacement")
            nodes = [w.metadata.node_id for w in workers]
            spares.start_spares(self, nodes, dict(resources_per_worker), lost_nodes.dead)
            return workers

        def _kept_nodes(self) -> list[str]:
            """The node of each worker the group keeps through this round (its active
            replica groups; none for a group started whole)."""
            try:
                groups = list(getattr(self, "_replica_groups", None) or [])
                return [str(w.metadata.node_id) for g in groups if g.is_active() for w in g.get_workers()]
            except Exception:
                return []

    class DriverController(TrainController):
        """Ray Train's controller, run in the driver's process rather than as an actor."""

        worker_group_cls = DriverWorkerGroup

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            from orchestrator.runtime.group import lost_nodes, spares

            world = getattr(self._scaling_policy, "world", None)
            if world is not None and spares.enabled():
                # The controller's word on lost nodes, acted on before Ray's health checks.
                lost_nodes.watch(world.control, world.spec.generation, self._group_workers)

        def _shutdown_worker_group(self) -> None:
            # A group shut down to start the next one keeps its placement group for it.
            from orchestrator.runtime.group import placement

            if isinstance(self.get_state(), ShuttingDownState):
                super()._shutdown_worker_group()
                placement.drop()
                return
            with placement.keeping():
                super()._shutdown_worker_group()

        def _group_workers(self) -> list[Any]:
            group = self._worker_group
            return list(group.get_workers()) if group is not None else []

        def _execute_failure_decision(self, failure_decision: Any, training_failed_error: Any, **kw: Any) -> Any:
            # The next group's size waits a moment for a node that may have died with its
            # worker (world.WORD_SETTLE_S), unless the lost workers' nodes answer now.
            from orchestrator.runtime.group import spares

            world = getattr(self._scaling_policy, "world", None)
            if world is not None:
                nodes = self._failing_nodes()
                world.vouched = _asked_once(lambda: spares.vouch(nodes)) if nodes else None
            return super()._execute_failure_decision(failure_decision, training_failed_error, **kw)

        def _failing_nodes(self) -> set[str]:
            """The nodes of the workers whose last poll failed (empty if unknown)."""
            group = self._worker_group
            status = group.get_latest_poll_status() if group is not None else None
            if status is None:
                return set()
            workers = group.get_workers()
            return {str(workers[rank].metadata.node_id) for rank in status.errors if rank < len(workers)}

        def _replace_bad_workers(self, poll_status: Any) -> None:
            # Tell the survivors' backend (process_group.SurvivorBackend) every rank this round
            # replaces, so that one epoch names them all.
            from orchestrator.runtime.group import rendezvous

            failing = sorted(poll_status.failing_replica_group_indices or ())
            rendezvous.pending_replacements.clear()
            rendezvous.pending_replacements.update(failing)
            # Ray 2.60 clears the result queue of every other active replica group before it
            # replaces one: with two lost at once, the second is still "active" and dead, and
            # the whole controller fails. Each lost one is shut down (it is dead) first.
            groups = self._worker_group.get_replica_groups() if self._worker_group is not None else None
            for index in failing if groups else ():
                groups[index].shutdown()
            try:
                super()._replace_bad_workers(poll_status)
            finally:
                rendezvous.pending_replacements.clear()
