"""Checkpoints written by the runtime: signed, committed last, uploaded in the background.

The path of one checkpoint, in order:

- ``snapshot``: what a rank hands over, its state already serialised to named files
  (``Snapshot``). The seam: the training loop serialises, this package stores.
- ``background``: ``AsyncCheckpointer``, the upload thread with a queue of one (a newer
  snapshot replaces a waiting one); then the copies and retention after each commit.
- ``commit``: the files into the current store and the manifest last (``Committer``),
  retried, falling back to the next region's store, fenced; how the files get there
  is a ``PutFiles`` it is given.
- ``shared_puts``: rank 0's ``PutFiles`` (``SharedPuts``), which lets the other ranks
  put shares of the files and checks them; ``puts``: concurrent puts into one store.
- ``shares``: who puts which file and what rank 0 makes of it (pure);
  ``share_uploader``: the other ranks' side (``ShareUploader``).
- ``replicate``: the committed checkpoint copied to the other regions' stores.
- ``scratch``: a copy on the node's scratch disk, which a restart in place reads.

A writer of sharded state (each rank its own files, rank 0 one manifest) plugs in as
another ``PutFiles`` for ``Committer``: put this rank's files, collect the other ranks'
entries, return them; the commit, fallback and fencing stay as they are.

May import: ``recovery`` (stores, manifests, fencing) and itself; nothing else of the
orchestrator (the training loop and the search import it, not the other way round).
"""
