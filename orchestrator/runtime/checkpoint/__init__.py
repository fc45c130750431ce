"""Checkpoints written by the runtime: signed, committed last, uploaded in the background.

The words, each for one thing:

- a *snapshot*: one checkpoint's files, serialised, as a rank hands them over;
- a *put*: one file written into one store;
- a rank's *share*: the files of a snapshot that a rank other than 0 puts (rank 0's
  bytes of them, checked by sha256; or, sharded, the files only that rank holds);
- an *upload*: every file of a snapshot put into a store, by rank 0 and by the ranks
  with a share; rank 0's part checks the shares in the store and puts what is missing;
- a *commit*: the manifest, written last, once every file is in; a *replica*: the
  committed checkpoint copied into another region's store.

The path of one checkpoint, in order:

- ``snapshot``: what a rank hands over (``Snapshot``). The seam: the training loop
  serialises, this package stores.
- ``background``: ``AsyncCheckpointer``, the upload thread with a queue of one (a newer
  snapshot replaces a waiting one); then the copies and retention after each commit.
- ``commit``: the files into the current store and the manifest last (``Committer``),
  retried, falling back to the next region's store, fenced; how the files get there
  is a ``PutFiles`` it is given.
- ``rank0_upload``: rank 0's part of an upload (``Rank0Upload``, the ``PutFiles``);
  ``share_upload``: another rank's part, its share put (``ShareUpload``);
  ``share_plan``: who puts which file, how long rank 0 waits, what it reports (pure);
  ``puts``: concurrent puts into one store.
- ``replicate``: the committed checkpoint copied to the other regions' stores.
- ``scratch``: a copy on the node's scratch disk, which a restart in place reads.
- ``sharding``, ``shard_index``: a sharded model's state (trainer.strategy=fsdp) and
  the index that says which rows each rank's file holds.

May import: ``recovery`` (stores, manifests, fencing) and itself; nothing else of the
orchestrator (the training loop and the search import it, not the other way round).
"""
