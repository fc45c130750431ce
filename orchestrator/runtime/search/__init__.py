"""A Ray Tune search as an attempt's workload, resumable in another region.

- ``run``: ``run_search``, the entry (``python -m orchestrator.runtime`` with an hpo
  section), the Tune experiment it runs (``build_tuner``), and ``finish``, the search's
  result to the controller.
- ``restore``: the newest snapshot, checked before it is believed; ``snapshot``: a
  snapshot as data (pack, unpack, the resume plan), no pickle.
- ``driver``: Tune's callback and the driver that snapshots the search, reports
  progress and meets chaos faults; ``records``: trials as records, live or ended.
- ``trial``: one trial's training; ``scheduler``: ASHA
  over our own rungs, or FIFO; ``section``: what a search reads of the spec.

May import: the runtime's own modules (``checkpoint``, ``loop``: the worker's store
helpers, the loop's pieces and telemetry; ``fault_rendezvous``), the wire, the
workloads, ``orchestrator.hpo`` (the search's pure parts), ``recovery``, and Ray Tune;
nothing of the controller's side.
"""
