"""The SkyPilot provider: Ray clusters on AWS, GCP, Kubernetes and on-prem Slurm through
SkyPilot's SDK.

- ``provider``: ``SkyPilotProvider``, the class the registry builds (launch, runtime,
  health, logs, teardown).
- ``regions``: a region's checks at config time and the cloud its ``infra`` names.
- ``task``: the SkyPilot task of a region's cluster (resources, set-up, envs, names).
- ``scripts``: the shell the nodes run (Ray on every node) and the controller runs on the
  head over ssh (ready probe, remote kill, the runtime detached and followed).
- ``credentials``: secrets, forwarded store credentials, the clouds' credential check.
- ``errors``: SkyPilot's exceptions classified for the failure policy.
- ``sdk``: SkyPilot's SDK imported on first use, the one retried gate for its calls.
- ``ssh``, ``slurm``: reaching a cluster's nodes; on Slurm through the login node.
- ``logs``: the nodes' rank logs brought back before teardown.
- ``nodes``: run on the nodes (``python -m providers.skypilot.nodes``): wait for every
  node to join the head's Ray.

Imports ``providers.base``, the wire, the config's types and ``recovery``. SkyPilot
itself (``sky``) is imported only inside functions (``sdk.import_sky`` and the error
checks), never at module level: ``cloud=local`` imports none of it, and this package's
modules are importable without it.
"""
