"""Chaos: real faults, injected when their trigger comes, so the suite can prove recovery.

- ``injector``: the controller's side, which carries faults out (signals to a cluster's own
  processes, bytes flipped in a store, a full disk, a crashed controller) and answers the
  runtime's requests on the control channel.
- ``proxy``: the TCP proxy in front of a store that storage faults shape (refuse,
  black-hole, slow, cut an upload).

The fault kinds and their triggers, which both sides name, are the wire's
(``orchestrator.wire.faults``, ``orchestrator.wire.triggers``). Imports the run state, the
providers and the wire; nothing of the control loop.
"""
