"""A run's configuration: the typed schema (``schema``); the checks the schema cannot
express (``validate``, with ``validate_cloud``, ``validate_chaos``, ``notify_targets`` and the
small shared ``checks``); values derived from a config (``derived``); Hydra's composition of
the config groups (``compose``, ``compose_cache``, ``cli``, its refusals worded by
``hydra_errors``); a run's saved config.json (``saved``); the checks before launch
(``preflight``: stores; ``usercode``: the user's workload).

Imports the wire, the workloads, the search space, the errors and ``recovery``; nothing of
the providers (their own checks of their regions are the commands'), the run state or the
control loop.
"""
