"""The control loop of one run, on the controller's machine.

- ``wiring``: the one place a run's collaborators are made from its config and handed to
  the controller (``build_controller``).
- ``listeners``: how an event reaches the journal, the run's folded state and every
  listener of the run (``RunEvents``).
- ``controller``: the run's lifecycle (PROVISIONING, RUNNING, RECOVERING, ... SUCCEEDED or
  FAILED), stepping on the run's folded state, asking the failure policy at each failure.
- ``attempt``: one attempt: provision a region, prepare the restore, start the runtime,
  watch it (``watch``, its state a fold in ``watchstate``, ``cadence``, ``nodewatch``),
  tear it down (``cleanup``).
- ``standby``: the warm standby; ``resume``: a new controller picking up a run's journal,
  its plan pure; ``takeover``: the run's folder rebuilt from the control store's mirror.
- ``context``, ``outcome``: what the parts share, and what one attempt came to.
- ``progress``, ``livelogs``: what the terminal shows while the run goes on.

Imports the run state, the listeners (notify, metrics, chaos), the providers, the config,
the wire and ``recovery``; nothing of the commands or the runtime.
"""
