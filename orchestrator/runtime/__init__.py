"""What runs on a cluster: ``python -m orchestrator.runtime SPEC.json``.

- ``__main__``: the driver; ``trainer``, ``world``: Ray Train's worker group;
  ``process_group``: its torch process group, the store bound to the master's address.
- ``worker``, ``train_loop``, ``func_mode``: what each Ray Train worker runs, for a
  workload class or a user's Ray Train function.
- ``checkpoint``: asynchronous, signed checkpoints; ``search``: a Ray Tune search.
- ``dataflow``, ``telemetry``, ``notices``, ``rendezvous``, ``rank_log``, ``weights``.

A side of its own: imports only the wire, the workloads, the search space, the errors and
``recovery``, never the controller's side (which imports none of it).
"""
