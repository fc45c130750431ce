"""``launch`` a run in the background and ``run`` one to its end, from a composed Config.

Both start the run's controller as ``python -m orchestrator ... detach=true`` does
(``orchestrator.commands.detach.start``): a supervisor in a session of its own, its
output in the run folder's ``controller.log``, with the words that compose the config
again (``orchestrator.api.config``). Before that, the same checks the command line makes
of a new run (``orchestrator.commands.run.check_new_run``), so that a refusal is an
exception here rather than a line in a log.
"""

from __future__ import annotations

from orchestrator.api.background import start
from orchestrator.api.config import composed_again
from orchestrator.api.handle import POLL_S, START_WAIT_S, Run, one_line
from orchestrator.api.result import Result
from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.runstate import rundir


def launch(config: Config, *, wait_s: float = START_WAIT_S) -> Run:
    """Start the run ``config`` describes (made by ``compose``, changed since or not) in
    the background; its handle once its first attempt has started, or ``wait_s`` has
    passed. ConfigError for a config the run would refuse, RunError when its controller
    refused to start (the reason its log gave)."""
    from orchestrator.commands.run import check_new_run, new_run_id

    words, cfg = composed_again(config)
    if cfg.action != "run":
        raise ConfigError(
            "action",
            f"got {cfg.action!s}; launch starts a run (action=run): a run's other actions are "
            "its handle's methods (orchestrator.attach(run_id).stop(), .resume(), .status())",
        )
    run_id = cfg.run_id or new_run_id(cfg)
    with one_line(run_id):
        if cfg.run_id is not None:
            # A FIFO, a folder or a link under one of a run's file names: refused first.
            rundir.check_run_folder(rundir.run_path(cfg.home_path, run_id))
        check_new_run(cfg)
    start(cfg, words, run_id, wait_s)
    return Run(run_id, cfg.home_path)


def run(config: Config, *, timeout: float | None = None, poll_s: float = POLL_S) -> Result:
    """Run ``config`` to its end and return its result, as ``python -m orchestrator`` does
    in the foreground: ``launch``, then ``Run.wait``. An interrupt (Ctrl-C, a notebook's
    stop button) stops the run as Ctrl-C would (INTERRUPTED, checkpoints kept,
    resumable: ``orchestrator.attach(run_id).resume()``) before it is raised again.
    ``timeout``: RunTimeout after so many seconds, the run going on in the background."""
    handle = launch(config)
    try:
        return handle.wait(timeout, poll_s)
    except KeyboardInterrupt:
        try:
            handle.stop()
        except OrchestratorError:
            pass  # ended meanwhile, or its controller is gone: nothing left to stop
        raise
