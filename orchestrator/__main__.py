"""``python -m orchestrator [GROUP=OPTION ...] [KEY=VALUE ...]``."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time

# Set for a controller that a supervising parent restarts after a crash.
SUPERVISED_ENV = "ORCHESTRATOR_SUPERVISED"
# A run stopped by Ctrl-C or SIGTERM (status INTERRUPTED): 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130
MAX_RESUMES = 10


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _interruptible() -> None:
    """SIGINT and SIGTERM end the run cleanly (INTERRUPTED, checkpoints kept, clusters
    torn down; action=resume goes on). SIGINT explicitly: a shell starting us in the background sets it to ignored,
    and Python then installs no handler of its own."""
    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_interrupt)


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
    from orchestrator.cli import HELP_WORDS

    if any(a in HELP_WORDS for a in args):
        from orchestrator.usage import usage

        print(usage())
        return 0
    from orchestrator.cli import parse_args
    from orchestrator.compose import compose
    from orchestrator.config import ConfigError
    from orchestrator.journal import DamagedFile

    try:
        opts = parse_args(args)
        if opts.multirun:
            return _sweep(opts)
        if opts.cfg is not None or opts.info is not None:
            return _show(opts)
        cfg = compose(opts.overrides)
        if cfg.action in ("run", "plan"):
            check_new_run(cfg)
    except ConfigError as exc:
        return error(str(exc))
    except DamagedFile as exc:
        return error(f"{exc}; restore it from a copy or move it aside")
    try:
        if cfg.action == "status":
            return _status(cfg.home_path, str(cfg.run_id))
        if cfg.action == "report":
            return _report(cfg.home_path, str(cfg.run_id))
        if cfg.action == "resume":
            return _resume(cfg)
        if cfg.action == "list":
            return _list(cfg.home_path, str(cfg.format))
        if cfg.action == "logs":
            return _logs(cfg)
    except DamagedFile as exc:
        return error(f"{exc}; restore it from a copy or move it aside")
    if cfg.action == "plan":
        from orchestrator.plan import main as plan

        return plan(cfg)
    if cfg.action != "run":
        # An action added to the schema and not dispatched above must not start a run.
        return error(f"action: {cfg.action!s} is not handled by python -m orchestrator")
    if (
        cfg.chaos.supervise
        and any(f.kind == "controller_crash" for f in cfg.chaos.faults)
        and not os.environ.get(SUPERVISED_ENV)
    ):
        return _supervise(cfg, args)
    return _run(cfg)


def error(message: str) -> int:
    """A refused input: one line on stderr (control characters escaped), exit status 2."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    print(f"error: {line}", file=sys.stderr)
    return 2


def config_dir_overrides(args: list[str]) -> list[str]:
    """The overrides of a command line, ``--config-dir DIR`` among them as Hydra's
    ``hydra.searchpath=[file://DIR]`` (orchestrator.cli)."""
    from orchestrator.cli import parse_args

    return parse_args(args).overrides


def check_new_run(cfg: object) -> None:
    """What a new run (or plan) needs beyond its config, before anything is written or
    launched: the user's code imports, notify's targets can be reached, and run_id names
    no run that exists. ConfigError naming the key."""
    from orchestrator.config import Config, check_notify_program, notify_from_env
    from orchestrator.usercode import check_user_code

    assert isinstance(cfg, Config)
    check_user_code(cfg)
    # notify.webhook=env:VARNAME: the URL, read now (the run keeps it in notify.secret).
    cfg.notify = notify_from_env(cfg.notify)
    check_notify_program(cfg.notify)
    if cfg.action == "run":
        _refuse_finished(cfg)
        _refuse_unfinished(cfg)


def _show(opts: object) -> int:
    """--cfg (the config as YAML) or --info (where configs come from): launch nothing."""
    from orchestrator.cli import Options
    from orchestrator.compose import compose_full
    from orchestrator.showcfg import cfg_yaml
    from orchestrator.usage import info

    assert isinstance(opts, Options)
    composed = compose_full(opts.overrides)
    text = cfg_yaml(composed, opts.cfg) if opts.cfg is not None else info(composed, str(opts.info))
    print(text.rstrip("\n"))
    return 0


def _sweep(opts: object) -> int:
    """-m: every run of the sweep composed and checked, then run one after another
    (orchestrator/sweep.py); with --cfg, each run's config printed instead."""
    from pathlib import Path

    from orchestrator import sweep
    from orchestrator.cli import Options
    from orchestrator.compose import CONF_DIR, compose_full, config_groups
    from orchestrator.config import Action, ConfigError
    from orchestrator.showcfg import cfg_yaml

    assert isinstance(opts, Options)
    dirs = [CONF_DIR, *(Path(d) for d in opts.config_dirs)]
    swept = sweep.expand(opts.overrides, lambda group: config_groups(dirs).get(group, []))
    plan: list[sweep.Planned] = []
    shown: list[str] = []
    for i, run in enumerate(sweep.named(swept)):
        composed = compose_full(list(run))
        cfg = composed.config
        values = swept.values(i)
        if opts.cfg is not None:
            given = " ".join(f"{k}={v}" for k, v in zip(swept.keys, values, strict=True))
            shown.append(f"# run {i + 1} of {len(swept.runs)}: {given}\n{cfg_yaml(composed, opts.cfg)}")
            continue
        if cfg.action is not Action.run:
            raise ConfigError("action", f"a sweep (-m) starts runs (action=run); got action={cfg.action}: drop -m")
        check_new_run(cfg)
        run_id = cfg.run_id or _new_run_id(cfg)
        while any(p.run_id == run_id for p in plan):
            run_id = _new_run_id(cfg)
        overrides = run if cfg.run_id else (*run, f"run_id={run_id}")
        plan.append(sweep.Planned(tuple(overrides), cfg, run_id, values))
    if opts.cfg is not None:
        print("---\n".join(shown).rstrip("\n"))
        return 0
    return sweep.run_sweep(plan, swept.keys, sweep.runner())


def _report(home: str, run_id: str) -> int:
    from orchestrator.report import write

    run_dir = os.path.join(home, "runs", run_id)
    done = write(run_dir)
    if done is None:
        return error(f"run_id: no run named {run_id!r} under {home}")
    text, png = done
    print(text)
    print(f"plot: {png}")
    return 0


def _supervise(cfg: object, args: list[str]) -> int:
    """Run the controller as a child and resume it each time it dies, as a service
    manager would: a controller_crash drill then ends with its report like any other."""
    import subprocess

    from orchestrator.config import Config

    assert isinstance(cfg, Config)
    run_id = cfg.run_id or _new_run_id(cfg)
    env = {**os.environ, SUPERVISED_ENV: "1"}
    base = [sys.executable, "-m", "orchestrator"]
    argv = [*base, *[a for a in args if not a.startswith("run_id=")], f"run_id={run_id}"]
    for _ in range(MAX_RESUMES + 1):
        child = subprocess.Popen(argv, env=env)
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                # Ctrl-C reaches the child too (same process group): it ends the run
                # cleanly; we wait for it rather than leave it behind.
                continue
        if code != -signal.SIGKILL:
            return code
        print(f"supervisor: the controller of run {run_id} was killed; resuming it", file=sys.stderr)
        argv = [
            *base,
            "action=resume",
            f"run_id={run_id}",
            f"home={cfg.home_path}",
            f"progress={cfg.progress}",
            f"show_logs={cfg.show_logs}",
        ]
    print(f"error: run {run_id}: the controller died {MAX_RESUMES + 1} times; giving up", file=sys.stderr)
    return 1


def _new_run_id(cfg: object) -> str:
    return f"{cfg.job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"  # type: ignore[attr-defined]


def _resume(cli: object) -> int:
    from orchestrator.compose import config_from_plain
    from orchestrator.config import Config, ConfigError
    from orchestrator.controller import CONFIG_NAME, Controller
    from orchestrator.journal import load_json, read_events
    from orchestrator.notify_secret import NotifySecretError
    from orchestrator.result import read_result
    from orchestrator.rundir import lock_controller
    from providers.registry import get_provider
    from recovery.signing import SigningError

    assert isinstance(cli, Config)
    run_id = str(cli.run_id)
    run_dir = os.path.join(cli.home_path, "runs", run_id)
    try:
        saved = load_json(os.path.join(run_dir, CONFIG_NAME))
    except FileNotFoundError:
        return error(f"run_id: no run named {run_id!r} under {cli.home_path} to resume")
    done = read_result(run_dir)
    if done is not None and done["status"] != "INTERRUPTED":
        print(f"run {run_id} already finished ({done['status']}); nothing to resume", file=sys.stderr)
        return 0 if done["status"] == "SUCCEEDED" else 1
    try:
        cfg = config_from_plain(saved)
        from orchestrator.usercode import check_user_code

        check_user_code(cfg)
    except ConfigError as exc:
        return error(f"{run_dir}/{CONFIG_NAME}: {exc}")
    # The journal is the run's state: read whole before anything is locked, torn down or launched.
    for _ in read_events(os.path.join(run_dir, "journal.jsonl")):
        pass
    cfg.progress, cfg.show_logs = cli.progress, cli.show_logs
    lock = lock_controller(run_dir)
    if lock is None:
        return error(f"run {run_id} has a live controller; resume is for a run whose controller died")
    print(f"run {run_id}: resuming from its journal", file=sys.stderr)
    _interruptible()
    try:
        ctl = Controller(cfg, get_provider(cfg.cloud.provider, cfg.home_path, cfg.cloud, cfg.job), run_id)
    except (SigningError, NotifySecretError) as exc:
        return error(str(exc))
    result = ctl.resume()
    return _finish(cfg, run_id, result)


def _status(home: str, run_id: str) -> int:
    from orchestrator.status import render, run_ids, summarize

    s = summarize(os.path.join(home, "runs", run_id))
    if s is None:
        known = run_ids(home)
        hint = f"; runs under {home}: {', '.join(known[-5:])}" if known else f"; no runs under {home}"
        return error(f"run_id: no run named {run_id!r}{hint}")
    print(render(run_id, s))
    return 0


def _logs(cfg: object) -> int:
    from orchestrator.config import Config, ConfigError
    from orchestrator.logs import follow, show

    assert isinstance(cfg, Config)
    run_dir = os.path.join(cfg.home_path, "runs", str(cfg.run_id))
    try:
        if cfg.follow:
            follow(run_dir, str(cfg.run_id), cfg.attempt, cfg.rank, sys.stdout)
        else:
            show(run_dir, str(cfg.run_id), cfg.attempt, cfg.rank, sys.stdout)
    except ConfigError as exc:
        return error(str(exc))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED  # Ctrl-C ends a follow: nothing to clean up
    except BrokenPipeError:
        # `action=logs ... | head`: the reader left; so do we, quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _list(home: str, fmt: str) -> int:
    import shutil

    from orchestrator.runs_list import list_runs, no_runs, render_json, render_table

    rows = list_runs(home)
    if fmt == "json":
        print(render_json(rows))
    elif not rows:
        print(no_runs(home))
    else:
        # On a terminal the notes under the table are cut to its width; piped, they stay whole.
        print(render_table(rows, shutil.get_terminal_size().columns if sys.stdout.isatty() else None))
    return 0


def _run(cfg: object) -> int:
    from orchestrator.config import Config
    from orchestrator.controller import Controller
    from orchestrator.preflight import PreflightError, preflight
    from orchestrator.rundir import lock_controller
    from providers.registry import UnknownProvider, get_provider
    from recovery.signing import SigningError

    assert isinstance(cfg, Config)
    run_id = cfg.run_id or _new_run_id(cfg)
    run_dir = os.path.join(cfg.home_path, "runs", run_id)
    try:
        provider = get_provider(cfg.cloud.provider, cfg.home_path, cfg.cloud, cfg.job)
        _provider_precheck(cfg)
        preflight(cfg)
    except UnknownProvider as exc:
        return error(exc.args[0])
    except (ProviderPrecheckFailed, PreflightError) as exc:
        return error(str(exc))
    print(
        f"run {run_id}: job {cfg.job.name} on {cfg.cloud.name} ({', '.join(cfg.candidate_regions())})",
        file=sys.stderr,
    )
    lock = lock_controller(run_dir)
    if lock is None:
        return error(f"run_id: run {run_id!r} is running under another controller")
    _interruptible()
    try:
        ctl = Controller(cfg, provider, run_id)
    except SigningError as exc:
        return error(str(exc))
    result = ctl.run()
    return _finish(cfg, run_id, result)


def _refuse_finished(cfg: object) -> None:
    """A run_id that names a finished run is refused before a store or cluster is touched."""
    from orchestrator.config import Config, ConfigError
    from orchestrator.result import read_result

    assert isinstance(cfg, Config)
    if cfg.run_id is None:
        return
    done = read_result(os.path.join(cfg.home_path, "runs", cfg.run_id))
    if done is not None and done["status"] == "INTERRUPTED":
        raise ConfigError(
            "run_id",
            f"run {cfg.run_id!r} was interrupted; go on with it: {resume_command(cfg, cfg.run_id)}, "
            "or omit run_id for a new run",
        )
    if done is not None:
        raise ConfigError(
            "run_id",
            f"run {cfg.run_id!r} already finished ({done['status']}); omit run_id for a new run, or pick another name",
        )


def _refuse_unfinished(cfg: object) -> None:
    """``action=run`` of a run that has a journal and no result would start it again at
    generation 1 under the same run_id: refused before a store is touched (its fences
    stay as they are), pointing to ``action=resume``, the way back into such a run."""
    from orchestrator.config import Config, ConfigError

    assert isinstance(cfg, Config)
    if cfg.run_id is None:
        return
    journal = os.path.join(cfg.home_path, "runs", cfg.run_id, "journal.jsonl")
    try:
        started = os.path.getsize(journal) > 0
    except OSError:
        return  # no journal: nothing was started under this name
    if started:
        raise ConfigError(
            "run_id",
            f"run {cfg.run_id!r} has a journal and no result: it has not finished (its controller died, "
            f"or still runs); continue it with action=resume run_id={cfg.run_id}, or omit run_id for a new run",
        )


class ProviderPrecheckFailed(Exception):
    pass


def _provider_precheck(cfg: object) -> None:
    """Credentials of every cloud the candidate regions use, before a store is touched
    or anything launched (cloud.provider=skypilot)."""
    from orchestrator.config import Config

    assert isinstance(cfg, Config)
    if cfg.cloud.provider != "skypilot":
        return
    from providers.base import ProvisionError
    from providers.skypilot import SkyPilotMissing, precheck

    try:
        precheck({r: cfg.cloud.regions[r] for r in cfg.candidate_regions()})
    except SkyPilotMissing as exc:
        raise ProviderPrecheckFailed(f"cloud.provider: {exc}") from None
    except ProvisionError as exc:
        detail = str(exc).split(": ", 1)[-1]
        raise ProviderPrecheckFailed(f"cloud.regions.{exc.region}: {detail}; nothing was launched") from None


def _finish(cfg: object, run_id: str, result: dict[str, object]) -> int:
    from orchestrator.report import write
    from orchestrator.status import render, summarize

    run_dir = os.path.join(cfg.home_path, "runs", run_id)  # type: ignore[attr-defined]
    summary = summarize(run_dir)
    print(render(run_id, summary) if summary else result)
    print(f"result: {os.path.join(run_dir, 'result.json')}")
    if result.get("incidents") or result["status"] != "SUCCEEDED":
        done = write(run_dir)
        if done is not None:
            print(done[0])
            print(f"plot: {done[1]}")
    if result["status"] == "INTERRUPTED":
        print(f"interrupted: go on from the newest checkpoint with: {resume_command(cfg, run_id)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if result["status"] == "SUCCEEDED" else 1


def resume_command(cfg: object, run_id: str) -> str:
    """The command that takes ``run_id`` on, with the home it lives under."""
    import shlex

    return f"python -m orchestrator action=resume run_id={run_id} home={shlex.quote(str(cfg.home_path))}"  # type: ignore[attr-defined]


if __name__ == "__main__":
    # Everything the run creates on this machine (its home, checkpoints in file://
    # stores, its Ray clusters' files) is this user's alone; tests call main() in-process
    # and keep their own umask.
    os.umask(0o077)
    sys.exit(main())
