"""The Python API: what ``python -m orchestrator`` does, from a notebook or a pipeline step.

``import orchestrator as orch`` gives these names (imported on first use, so that the
package itself stays cheap to import)::

    cfg = orch.compose("job=digits", "job.steps=200", home="/tmp/orch")  # the typed Config
    run = orch.launch(cfg)            # its controller in the background: a Run
    for event in run.events(follow=True):
        ...                           # the journal's typed events, to the run's end
    result = run.wait()               # result.json as a Result
    result = orch.run(cfg)            # the same in the foreground: launch, then wait

A run's controller always runs in a process of its own (the command line's
``detach=true``): a kernel restarted or a cell interrupted never takes a run down with
it, and ``orch.attach(run_id)`` finds it again. What a user can be refused is an
``orchestrator.errors.OrchestratorError`` with a one-line message.

The layer above the commands: it calls the same functions the command line does
(``orchestrator.commands.detach.start``, ``stop.ask`` and ``stop.await_end``,
``status.describe``, ``watch.look``, ``runs_list.list_runs``) and nothing imports it
but the package's ``__init__``.

- ``config``: ``compose`` and the command line that makes a config again.
- ``result``: ``Result``, a run's result.json.
- ``handle``: ``Run``, a handle on one run (its status, events, progress, result, stop,
  cancel and resume), ``Status``, ``Progress``, ``attach`` and ``runs``.
- ``launcher``: ``launch`` and ``run``; ``background``: the start both they and
  ``Run.resume`` make.
"""

from __future__ import annotations

from orchestrator.api.config import compose
from orchestrator.api.handle import Progress, Run, Status, attach, runs
from orchestrator.api.launcher import launch, run
from orchestrator.api.result import Result
from orchestrator.commands.runs_list import RunRow

__all__ = ["Progress", "Result", "Run", "RunRow", "Status", "attach", "compose", "launch", "run", "runs"]
