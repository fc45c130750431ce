"""The control loop of one run, on the controller's machine.

- ``controller``: the run's lifecycle (PROVISIONING, RUNNING, RECOVERING, ... SUCCEEDED or
  FAILED), asking the failure policy at each failure.
- ``attempt``: one attempt: provision a region, prepare the restore, start the runtime,
  watch it (``watch``, ``cadence``, ``nodewatch``), tear it down (``cleanup``).
- ``standby``: the warm standby; ``resume``: a new controller picking up a run's journal.
- ``context``, ``outcome``: what the parts share, and what one attempt came to.
- ``progress``, ``livelogs``: what the terminal shows while the run goes on.

Imports the run state, the listeners (notify, metrics, chaos), the providers, the config,
the wire and ``recovery``; nothing of the commands or the runtime.
"""
