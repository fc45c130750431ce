"""What crosses between the controller and a cluster, and nothing else.

- ``spec``: the runtime spec, the controller's orders to an attempt (written once,
  read by ``python -m orchestrator.runtime SPEC`` on the cluster), its sections typed
  and checked in ``sections``.
- ``control``: the control channel, small JSON objects under the control URL
  (heartbeat, progress, events, final, exit code, preemption notices, the chaos
  rendezvous), each generation in a folder of its own.
- ``schema``: a schema per object the runtime writes; the controller believes
  nothing from the channel that has not passed it.
- ``codec``: the one way JSON text from outside a process is read (bounded in size,
  depth and numbers) and its fields typed (``read_*``), for the wire, the config's
  saved copy and the journal alike.
- ``logfiles``: the ranks' log files on a node (their names, the cap of a kept copy,
  the tar stream a node's files travel to the controller in).
- ``faults``, ``triggers``: every fault kind, and when a fault fires (pure; both the
  controller's injector and the runtime's rendezvous name them).

Both sides import this package; it imports nothing of either (only ``recovery``'s
lineage and file helpers), so the controller's code never reaches a cluster and the
cluster's code never reaches the controller's state.
"""
