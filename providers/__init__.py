"""Providers: launch a Ray cluster in a region, run the runtime on it, watch it, tear it down.

- ``base``: the ``Provider`` protocol and the errors a provider raises.
- ``registry``: providers by the name ``cloud.provider`` uses.
- ``local``: real Ray clusters on this machine, one per simulated region.
- ``skypilot``: AWS, GCP, Kubernetes and Slurm through SkyPilot's SDK (imported lazily).
- ``procs``, ``raystart``, ``warm``: processes, Ray's start, and interpreters that import ahead.

Imports the config, the wire and ``recovery``; nothing of the run state, the control loop
or the runtime.
"""
