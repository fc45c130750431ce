"""What each Ray Train worker runs: the built-in training loop, or a user's Ray Train function.

- ``worker``: what every worker of an attempt does, whatever trains on it (``WorkerAttempt``:
  the stores and the uploader, the restore's choice, the chaos points, the preemption watch;
  ``run_worker``: a worker's entry, telling a user's error from the platform's).
- ``train_loop``: the built-in loop (``job.workload``): exact resumes, elastic worlds,
  sharded checkpoints; ``func_mode``: a user's Ray Train function (``job.train_func``)
  with its reports and restores through the run's stores.
- ``dataflow``: a worker's data and ``telemetry``; ``ddp``: DDP's options for an exact
  restore; ``fsdp``: a model sharded in place (trainer.strategy=fsdp); ``weights``: the
  weights' digest; ``rank_log``: a rank's output to its file; ``user_site``: where in
  the user's code an error was raised.

May import: ``checkpoint`` and ``group`` (a survivor's way back into the group), the
runtime's leaf modules (``fault_rendezvous``, ``notices``), the wire, the workloads, the errors
and ``recovery``; never ``search`` or the driver's modules, which import it.
"""
