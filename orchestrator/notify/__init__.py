"""Notifications: a run's incidents, failovers and end, told to a command and a webhook
(``notifier``), and the run's notify targets kept whole in ``notify.secret`` (``secret``).
Imports the run state, the config and the providers' base; nothing of the control loop."""
