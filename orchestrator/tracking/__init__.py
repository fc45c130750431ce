"""The run in an experiment tracker (tracking=mlflow|wandb, docs/guides/tracking.md).

One tracker run per orchestrator run, whatever the attempts, regions and controllers:
its id is journaled (``tracking_started``), so a resumed controller, here or after a
takeover, logs to the same one. A metric step reaches the tracker only once a committed
checkpoint covers it (``series``): the steps a failover loses are never logged, and the
ones trained again after the restore are the only values of theirs. The listener
(``tracker``) does its work on a thread of its own; the sinks (``mlflow_sink``,
``wandb_sink``) import their SDK only when a run tracks.
"""
