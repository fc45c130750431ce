"""``python -m orchestrator [GROUP=OPTION ...] [KEY=VALUE ...]``: parse, compose, dispatch.

Each action lives in ``orchestrator.commands``; this module only reads the command line,
turns it into a typed config, and hands it to the action's ``main``.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config


def _register_stack_dump() -> None:
    """`kill -USR1 <pid>` prints every thread's stack: how to see what a stuck controller
    waits on. Skipped when stderr has no file descriptor (main called in-process with
    captured output), where faulthandler cannot write."""
    import faulthandler
    import io

    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass


def main(argv: list[str] | None = None) -> int:
    _register_stack_dump()
    args = list(sys.argv[1:] if argv is None else argv)
    from orchestrator.config.cli import HELP_WORDS

    if any(a in HELP_WORDS for a in args):
        from orchestrator.commands.usage import usage

        print(usage())
        return 0
    from orchestrator.commands import run
    from orchestrator.commands.output import forgiving_stdout
    from orchestrator.config.cli import parse_args
    from orchestrator.config.compose import compose
    from orchestrator.errors import ConfigError, error
    from orchestrator.runstate import rundir
    from orchestrator.runstate.runfiles import DamagedFile

    try:
        opts = parse_args(args)
        if opts.multirun:
            from orchestrator.commands import sweep

            with forgiving_stdout():
                return sweep.main(opts)
        if opts.cfg is not None or opts.info is not None:
            from orchestrator.commands import showcfg

            return showcfg.main(opts)
        cfg = compose(opts.overrides)
        if cfg.run_id is not None and cfg.action != "list":
            # A FIFO, a folder or a link under one of a run's file names is refused before
            # any action reads, locks or writes in the run's folder.
            rundir.check_run_folder(rundir.run_path(cfg.home_path, str(cfg.run_id)))
        if cfg.action in ("run", "plan"):
            run.check_new_run(cfg)
    except ConfigError as exc:
        return error(str(exc))
    except DamagedFile as exc:
        return error(f"{exc}; {exc.fix}")
    try:
        return _dispatch(cfg, args)
    except DamagedFile as exc:
        return error(f"{exc}; {exc.fix}")


def _dispatch(cfg: Config, args: list[str]) -> int:
    """The action ``cfg`` names, run; what it refuses said in one line (``error``)."""
    from orchestrator.commands import run
    from orchestrator.commands.output import forgiving_stdout
    from orchestrator.errors import error

    if cfg.action in ("list", "status", "report") and cfg.cloud.control_store:
        # Runs from any machine: the store's verified mirrors besides this home's runs.
        from orchestrator.commands import remote

        return remote.main(cfg)
    if cfg.action == "status":
        from orchestrator.commands import status

        return status.main(cfg.home_path, str(cfg.run_id))
    if cfg.action == "report":
        from orchestrator.commands import report

        return report.main(cfg.home_path, str(cfg.run_id), cfg.junit)
    if cfg.action == "resume" and cfg.detach:
        from orchestrator.commands import detach

        return detach.main(cfg, args, str(cfg.run_id))
    if cfg.action in ("run", "resume") and os.environ.get(run.SUPERVISE_ENV) and not os.environ.get(run.SUPERVISED_ENV):
        # A detached run's first process: its supervisor, the controller its child.
        return run.supervise(cfg, args, cfg.recovery.controller_restarts)
    if cfg.action == "resume":
        with forgiving_stdout():
            return run.resume(cfg)
    if cfg.action == "list":
        from orchestrator.commands import runs_list

        return runs_list.main(cfg.home_path, str(cfg.format))
    if cfg.action == "logs":
        from orchestrator.commands import logs

        return logs.main(cfg)
    if cfg.action == "drill":
        from orchestrator.commands import drill

        return drill.main(cfg)
    if cfg.action in ("stop", "cancel"):
        from orchestrator.commands import stop

        return stop.main(cfg.home_path, str(cfg.run_id), action=str(cfg.action))
    if cfg.action == "watch":
        from orchestrator.commands import watch

        with forgiving_stdout():
            return watch.leave_quietly(watch.main(cfg.home_path, str(cfg.run_id)))
    if cfg.action == "plan":
        from orchestrator.commands.plan import main as plan

        return plan(cfg)
    if cfg.action == "console":
        from orchestrator.console import server

        return server.main(cfg)
    if cfg.action != "run":
        # An action added to the schema and not dispatched above must not start a run.
        return error(f"action: {cfg.action!s} is not handled by python -m orchestrator")
    if cfg.detach:
        from orchestrator.commands import detach

        return detach.main(cfg, args, cfg.run_id or run.new_run_id(cfg))
    if (
        cfg.chaos.supervise
        and any(f.kind == "controller_crash" for f in cfg.chaos.faults)
        and not os.environ.get(run.SUPERVISED_ENV)
    ):
        with forgiving_stdout():
            return run.supervise(cfg, args)
    with forgiving_stdout():
        return run.run(cfg)


if __name__ == "__main__":
    # Everything the run creates on this machine (its home, checkpoints in file://
    # stores, its Ray clusters' files) is this user's alone; tests call main() in-process
    # and keep their own umask.
    os.umask(0o077)
    from orchestrator.commands.output import main_quietly

    sys.exit(main_quietly(main))
