"""Chaos: real faults, injected when their trigger comes, so the suite can prove recovery.

- ``kinds``: every fault kind (``FaultKind``) and the groups the rest of the code asks
  about (storage faults, faults that take a region, what a search or a controller-side
  point takes). Pure and dependency-free: the config, the controller and the runtime
  import it.
- ``triggers``: when a fault fires (a step, a random step, seconds into an attempt, a
  point such as an upload or a failover); pure functions over a fault as the runtime spec carries it (``FaultSpec``).
- ``injector``: the controller's side, which carries faults out (signals to a
  cluster's own processes, bytes flipped in a store, a full disk, a crashed
  controller) and answers the runtime's requests on the control channel.
- ``proxy``: the TCP proxy in front of a store that storage faults shape (refuse,
  black-hole, slow, cut an upload).

Nothing is imported here, so that reading the kinds costs nothing.
"""
