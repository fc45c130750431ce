"""The run's state, on the controller's machine.

- ``events``: every event the controller journals, as typed records; ``journal``: the
  append-only file they are written to and read from.
- ``state``: the one fold of the events (``RunView``) that resume, status, the report and the
  result all read; ``lifecycle``: the run's state machine; ``replay``: what a resumed
  controller rebuilds.
- ``incidents``, ``result``, ``losses``: what a run reports.
- ``rundir``: the run's folder and every name in it.

Imports ``recovery`` and the errors; nothing of the providers, the control loop or the commands.
"""
