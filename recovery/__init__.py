"""Recovery's building blocks, below everything else: the checkpoint store over fsspec
(``store``, ``manifest``, ``signing``, ``fetch``), fencing, replication, failure detection,
the failure policy, elastic world sizes, retries, and bounded storage access.

Imports nothing of ``orchestrator`` or ``providers``; its decisions are pure functions."""
