"""Chaos: real faults, injected when their trigger comes, so the suite can prove recovery.

- ``injector``: the controller's side: answers the runtime's requests on the control
  channel and fires each fault when its trigger comes (``FaultInjector``).
- ``handlers``: the table of how each fault kind strikes, one handler a kind, checked
  against the wire's kinds; the handlers by family: ``processes`` (kills, hangs,
  preemption, the controller's crash), ``storage`` (store faults, corrupt checkpoints),
  ``disk`` (a full scratch disk), ``network`` (partitions, a cut ssh, flapping checks).
- ``firing``: what a handler gets (the fault being fired, the injector's state).
- ``proxy``: the TCP proxy in front of a store that storage faults shape (refuse,
  black-hole, slow, cut an upload).

The fault kinds and their triggers, which both sides name, are the wire's
(``orchestrator.wire.faults``, ``orchestrator.wire.triggers``). Imports the run state, the
providers and the wire; nothing of the control loop.
"""
