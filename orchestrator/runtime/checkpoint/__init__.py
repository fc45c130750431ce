"""Checkpoints written by the runtime: a snapshot in memory, uploaded in the background,
committed last by a signed manifest (``checkpointer``), and a copy on the node's scratch
disk (``scratch``)."""
