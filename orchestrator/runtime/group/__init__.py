"""The worker group and its recovery: who is in the group, where it runs, how it forms again.

- ``rendezvous``: the group's rendezvous (the driver's store, each formation's signed
  members); ``survivors``: a survivor leaves the broken group, joins the next one and
  restores from its peers (``GroupRecovery``, a helper the training loop holds;
  ``peer_state``: the bytes each rank holds, and their exchange); ``process_group``: Ray
  Train's torch process group, and the survivors' own.
- ``world``: each worker group's size; ``placement``: its placement group, kept across a
  restart; ``lost_nodes``: nodes the controller saw die, acted on before Ray does;
  ``node_label``: which node a rank runs on.
- ``spares``: a spare worker process on each node, started before it is needed;
  ``spare_nodes``: the room for workers on nodes beyond the group's.

May import: ``checkpoint``, the runtime's leaf modules, the wire and ``recovery``; never
``loop`` (which holds a ``survivors.GroupRecovery`` and hands it what it needs, and whose
modules the spares import by name), ``search`` or the driver's modules, which import it.
"""
