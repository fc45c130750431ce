"""orchestrator: a declarative training orchestrator with disaster recovery.

Where things are (each package's ``__init__`` says what it may import):

- ``__main__``: ``python -m orchestrator``: parse, compose, hand the action to ``commands``.
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
