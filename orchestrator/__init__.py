"""orchestrator: a declarative training orchestrator with disaster recovery.

``import orchestrator as orch`` is the Python API (``orchestrator.api``): ``orch.compose``,
``orch.launch``, ``orch.run``, ``orch.attach``, ``orch.runs`` and the ``Run``, ``Result``,
``Status`` and ``Progress`` they give, imported on first use so that this import stays cheap.

Where things are (each package's ``__init__`` says what it may import):

- ``__main__``: ``python -m orchestrator``: parse, compose, hand the action to ``commands``.
- ``api``: the Python API, on the functions the command line's actions use.
- ``commands``: one module per action (run and resume, status, report, logs, list, plan,
  sweep, ``--cfg``/``--info``, ``--help``).
- ``control``: the controller's loop for one run: the controller, an attempt, the watch over
  a running attempt, lost nodes, the warm standby, resume, clean-up.
- ``config``: the typed schema, its checks, Hydra composition, preflight and user-code checks.
- ``runstate``: the run journal, its typed events, the one fold of them, incidents, result.json
  and the run's folder on this machine.
- ``notify``, ``metrics``, ``chaos``: what listens to a run (notifications, TensorBoard) and
  what injects faults into it.
- ``wire``: what crosses between the controller and a cluster (the runtime spec, the
  control channel, fault kinds and triggers).
- ``runtime``: what runs on a cluster (``python -m orchestrator.runtime SPEC``): the training
  loop, checkpoints, the search driver.
- ``workloads``, ``hpo``: the built-in workloads and the workload protocol; the search space.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.api import Progress, Result, Run, RunRow, Status, attach, compose, launch, run, runs

# The API's names, each imported from orchestrator.api when first asked for: an import of
# the package alone (a worker's, python -m orchestrator's) pays nothing for them.
__all__ = ["Progress", "Result", "Run", "RunRow", "Status", "attach", "compose", "launch", "run", "runs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from orchestrator import api

        return getattr(api, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
