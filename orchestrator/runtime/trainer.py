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

They are dropped through two of the trainer's own hooks. Should a Ray release move
them, ``make_trainer`` falls back to the stock trainer: slower, never wrong.
"""

from __future__ import annotations

from typing import Any

from ray.train.torch import TorchTrainer

try:
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy
except ImportError:  # another Ray: the stock trainer
    LEAN = False
else:
    LEAN = all(hasattr(TorchTrainer, m) for m in ("_create_default_callbacks", "_initialize_and_run_controller"))


def make_trainer(*args: Any, **kwargs: Any) -> TorchTrainer:
    """A ``TorchTrainer(*args, **kwargs)``, lean where this Ray allows it."""
    return (LeanTorchTrainer if LEAN else TorchTrainer)(*args, **kwargs)


if LEAN:

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

    class LeanTorchTrainer(TorchTrainer):
        def _create_default_callbacks(self) -> list[Any]:
            drop: tuple[type, ...] = (PlacementGroupCleanerCallback,)
            if not getattr(self, "datasets", None):
                drop += (DatasetsCallback,)
            return [c for c in super()._create_default_callbacks() if not isinstance(c, drop)]

        def _initialize_and_run_controller(self, **kwargs: Any) -> Any:
            if type(kwargs.get("scaling_policy")) is FixedScalingPolicy:
                kwargs["scaling_policy"] = UncoordinatedPolicy(kwargs["scaling_policy"].scaling_config)
            return super()._initialize_and_run_controller(**kwargs)
