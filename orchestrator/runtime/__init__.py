"""What runs on a cluster: ``python -m orchestrator.runtime SPEC.json``.

By concern:

- ``__main__``: the driver, which carries out the attempt's ``plan`` (what runs, the
  group's size and placement, survivors, spares: decided from the spec, pure);
  ``trainer``: Ray Train's trainer, its controller run in the driver.
- ``loop/``: what each Ray Train worker runs (the built-in training loop, a user's Ray
  Train function) and what it measures.
- ``group/``: the worker group and its recovery: the group's rendezvous, survivors
  restoring from peers, spare workers and nodes, lost nodes, world size and placement.
- ``checkpoint/``: asynchronous, signed checkpoints, sharded ones included.
- ``search/``: a Ray Tune search.
- ``fault_rendezvous`` (the chaos rendezvous) and ``notices`` (preemption notices): leaf
  modules, which import only the wire (the loop meets both; a search, the rendezvous).

Inside, each imports only its own layer or one below, bottom first: the leaf modules
(``fault_rendezvous``, ``notices``, ``plan``), ``checkpoint/``, ``group/``, ``loop/``,
``search/``, then the driver's ``trainer`` and ``__main__`` (tests/unit/test_import_graph.py).

A side of its own: imports only the wire, the workloads, the search space, the errors and
``recovery``, never the controller's side (which imports none of it).
"""
