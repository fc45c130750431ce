"""A run's configuration: the typed schema (``schema``), the checks the schema cannot
express, Hydra's composition of the config groups (``compose``, ``compose_cache``, ``cli``),
the checks before launch (``preflight``: stores; ``usercode``: the user's workload).

Imports the wire, the workloads, the search space, the errors and ``recovery``; nothing of
the providers (their own checks of their regions are the commands'), the run state or the
control loop.
"""
