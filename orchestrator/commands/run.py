"""``action=run`` and ``action=resume``: a run's controller, from the command line to its
summary, and the supervising parent a ``controller_crash`` drill runs under.

Everything a new run needs beyond its config is checked here, before anything is written
or launched: the provider's checks of its regions, the user's code, notify's targets, and
that run_id names no run already started.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from orchestrator.config.notify_targets import check_notify_program, notify_from_env
from orchestrator.config.schema import READ_ONLY_ACTIONS, Config
from orchestrator.control.controlstate import ControlStoreError
from orchestrator.control.lease import LeaseHeld
from orchestrator.control.mirror import MirrorError
from orchestrator.control.takeover import TakeoverError
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USER_ERROR, ConfigError, error, printable
from orchestrator.runstate import rundir
from orchestrator.runstate.events import ControllerRestarted, Event, MirrorRestored
from orchestrator.runstate.objectives import EXIT_OBJECTIVE_MISSED, missed_line
from providers.local.stores import EXTRA_HINT, LocalStores, LocalStoresError, missing_packages
from recovery.controlkey import ControlKeyError, key_for, read_key
from recovery.signing import SigningError

if TYPE_CHECKING:
    from providers.base import Provider

# Set for a controller that a supervising parent restarts after a crash.
SUPERVISED_ENV = "ORCHESTRATOR_SUPERVISED"
# Set for a detached run's first process: it becomes the run's supervisor.
SUPERVISE_ENV = "ORCHESTRATOR_SUPERVISE"
# Set by the supervisor for a controller it resumed: why the last one died, and how many so far.
RESTART_CAUSE_ENV = "ORCHESTRATOR_RESTART_CAUSE"
RESTARTS_ENV = "ORCHESTRATOR_RESTARTS"
MAX_RESUMES = 10
# A controller that cannot start on the run, each one line: its secret, its control key,
# another controller's lease, a control store out of reach.
REFUSALS = (SigningError, ControlKeyError, LeaseHeld, ControlStoreError)
# A takeover from the control store that cannot be made (nothing written here).
TAKEOVER_REFUSALS = (TakeoverError, LeaseHeld, ControlKeyError, MirrorError)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interruptible() -> None:
    """SIGINT and SIGTERM end the run cleanly (INTERRUPTED, checkpoints kept, clusters
    torn down; action=resume goes on). SIGINT explicitly: a shell starting us in the
    background sets it to ignored, and Python then installs no handler of its own."""
    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_interrupt)


def new_run_id(cfg: Config) -> str:
    return f"{cfg.job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def check_regions(cfg: Config) -> Config:
    """The run's provider's own checks of ``cloud.regions``, and of ``chaos.faults`` against
    what it can do (ConfigError naming the key), for every action that launches or plans;
    the config's own checks know no provider."""
    from providers.registry import check_config as provider_checks

    if cfg.action not in READ_ONLY_ACTIONS:
        provider_checks(cfg)
    return cfg


def check_new_run(cfg: Config) -> None:
    """What a new run (or plan) needs beyond its config, before anything is written or
    launched: the provider's checks of its regions, the user's code (and a run's listeners)
    imports, notify's targets can be reached, and run_id names no run that exists.
    ConfigError naming the key."""
    from orchestrator.config.usercode import check_listeners, check_user_code

    check_regions(cfg)
    check_user_code(cfg)
    if cfg.action == "run":
        check_listeners(cfg)
    if cfg.action == "run":
        check_workload_constructs(cfg)
    # notify.webhook=env:VARNAME: the URL, read now (the run keeps it in notify.secret).
    cfg.notify = notify_from_env(cfg.notify)
    check_notify_program(cfg.notify)
    if cfg.action == "run":
        refuse_finished(cfg)
        refuse_unfinished(cfg)


# A constructor slower than this (it loads a data set, say) is left to the workers.
CONSTRUCT_TIMEOUT_S = 60.0


def construct_answer(stdout: str) -> ConfigError | None:
    """The constructing process's answer (orchestrator/workloads/__main__.py): the
    ConfigError it names, or None (constructed, or no answer to go by)."""
    import json

    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("key"), str):
        return None
    return ConfigError(answer["key"], str(answer.get("message", "")))


def check_workload_constructs(cfg: Config) -> None:
    """The job's workload class constructed with job.params, in a process of its own, before
    any cluster starts: a constructor that raises is one line naming it, not two cluster
    launches. A process that cannot tell (it timed out, or died) leaves it to the workers."""
    import json
    import subprocess

    from orchestrator.wire.codec import to_plain
    from orchestrator.workloads import is_builtin

    job = cfg.job
    if job.train_func or not job.workload or is_builtin(job.workload):
        return
    request = json.dumps({"job": to_plain(job), "path": [p for p in sys.path if p]})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.workloads"],
            input=request,
            capture_output=True,
            text=True,
            timeout=CONSTRUCT_TIMEOUT_S,
        )
    except (subprocess.TimeoutExpired, OSError):
        return
    problem = construct_answer(done.stdout)
    if problem is not None:
        raise problem


def refuse_finished(cfg: Config) -> None:
    """A run_id that names a finished run is refused before a store or cluster is touched."""
    from orchestrator.runstate.result import read_result

    if cfg.run_id is None:
        return
    done = read_result(rundir.run_path(cfg.home_path, cfg.run_id))
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


def refuse_unfinished(cfg: Config) -> None:
    """``action=run`` of a run that has a journal and no result would start it again at
    generation 1 under the same run_id: refused before a store is touched (its fences
    stay as they are), pointing to ``action=resume``, the way back into such a run."""
    if cfg.run_id is None:
        return
    journal = rundir.journal_path(rundir.run_path(cfg.home_path, cfg.run_id))
    if not os.path.lexists(journal):
        return  # no journal: nothing was started under this name
    # An empty or unreadable journal is a damaged run, never a name free for a new one.
    refuse_damaged_journal(journal)
    raise ConfigError(
        "run_id",
        f"run {cfg.run_id!r} has a journal and no result: it has not finished (its controller died, "
        f"or still runs); continue it with action=resume run_id={cfg.run_id}, or omit run_id for a new run",
    )


def refuse_damaged_journal(journal: str) -> None:
    """DamagedFile for a journal that exists and is no started run's: not a regular file,
    unreadable, or empty (a run's first act is to journal its start)."""
    from orchestrator.runstate.runfiles import DamagedFile, read_span

    try:
        first = read_span(journal, 0, 1)
    except FileNotFoundError:
        return  # no journal: nothing was started under this name
    if not first:
        raise DamagedFile(journal, "is empty: a run journals its start first, so this run is damaged, not new")


class ProviderPrecheckFailed(Exception):
    pass


def provider_precheck(cfg: Config, provider: Provider | None = None) -> None:
    """The run's provider's own precheck of the candidate regions (its SDK, credentials,
    reachability), before a store is touched or anything launched; ``provider``: the run's,
    made from ``cfg`` when not given."""
    from providers.base import ProviderUnavailable, ProvisionError
    from providers.registry import get_provider

    if provider is None:
        provider = get_provider(cfg.cloud.provider, cfg.home_path, cfg.cloud, cfg.job)
    try:
        provider.precheck(cfg.candidate_regions())
    except ProviderUnavailable as exc:
        raise ProviderPrecheckFailed(f"cloud.provider: {exc}") from None
    except ProvisionError as exc:
        detail = str(exc).split(": ", 1)[-1]
        raise ProviderPrecheckFailed(f"cloud.regions.{exc.region}: {detail}; nothing was launched") from None


def run(cfg: Config) -> int:
    """A new run: its local stores' servers (cloud.local_servers), preflight, then the controller to the run's end."""
    run_id = cfg.run_id or new_run_id(cfg)
    run_dir = rundir.run_path(cfg.home_path, run_id)
    # The control key, read once before anything is printed, written or started (the local
    # stores' servers write the run's folder): a bad one is its one line, and no folder.
    try:
        control_key = key_for(cfg.cloud.control_store, cfg.cloud.control_key)
    except ControlKeyError as exc:
        return error(str(exc))
    hint = local_stores_hint(cfg)
    if hint:
        return error(hint)
    # Before preflight, which writes to the stores.
    try:
        stores = LocalStores(cfg.cloud, run_dir).__enter__()
    except LocalStoresError as exc:
        return error(str(exc))
    try:
        return _run(cfg, run_id, run_dir, control_key)
    finally:
        stores.stop()


def _run(cfg: Config, run_id: str, run_dir: str, control_key: bytes | None = None) -> int:
    from orchestrator.config.preflight import PreflightError, preflight, takeover_warning
    from orchestrator.control.wiring import build_controller
    from providers.registry import UnknownProvider, get_provider

    try:
        provider = get_provider(cfg.cloud.provider, cfg.home_path, cfg.cloud, cfg.job)
        provider_precheck(cfg, provider)
        preflight(cfg)
    except UnknownProvider as exc:
        return error(exc.args[0])
    except (ProviderPrecheckFailed, PreflightError) as exc:
        return error(str(exc))
    print(
        f"run {run_id}: job {cfg.job.name} on {cfg.cloud.name} ({', '.join(cfg.candidate_regions())})",
        file=sys.stderr,
    )
    warning = takeover_warning(cfg)
    if warning:
        print(warning, file=sys.stderr)
    lock = rundir.lock_controller(run_dir)
    if lock is None:
        return error(f"run_id: run {run_id!r} is running under another controller")
    interruptible()
    try:
        ctl = build_controller(cfg, provider, run_id, control_key=control_key)
    except REFUSALS as exc:
        return error(str(exc))
    try:
        result = ctl.run()
    finally:
        ctl.close()
    return finish(cfg, run_id, result)


def resume(cli: Config) -> int:
    """``action=resume``: the run's saved config and journal, a new controller on them. A
    run this machine has no folder for is taken over from the control store's mirror
    first; from there the two are one path (``Controller.resume``)."""
    from orchestrator.config.saved import config_from_plain
    from orchestrator.config.usercode import check_user_code
    from orchestrator.control.wiring import build_controller
    from orchestrator.notify.secret import NotifySecretError
    from orchestrator.runstate.journal import DamagedFile, load_object, read_events
    from orchestrator.runstate.result import read_result
    from providers.registry import get_provider

    run_id = str(cli.run_id)
    run_dir = rundir.run_path(cli.home_path, run_id)
    config_path = rundir.config_path(run_dir)
    restored = None
    # The control key, read once before anything is printed or written here (a taken-over
    # run's folder included): a bad one is its one line.
    control_key = None
    if cli.cloud.control_store:
        try:
            control_key = read_key(cli.cloud.control_key)
        except ControlKeyError as exc:
            return error(str(exc))
    if cli.cloud.control_store and not os.path.exists(config_path):
        # Not a run of this machine's: taken over from the control store's mirror.
        from orchestrator.control.takeover import describe_error, rebuild

        try:
            restored = rebuild(cli, run_id, run_dir, control_key)
        except TAKEOVER_REFUSALS as exc:
            return error(describe_error(exc, cli.cloud.control_store))
        print(
            f"run {run_id}: taken over from {cli.cloud.control_store} (controller {restored.controller}'s "
            f"mirror, written {time.strftime('%H:%M:%S UTC', time.gmtime(restored.written_at))})",
            file=sys.stderr,
        )
    try:
        saved = load_object(config_path)
    except FileNotFoundError:
        return error(f"run_id: no run named {run_id!r} under {cli.home_path} to resume")
    done = read_result(run_dir)
    if done is not None and done["status"] != "INTERRUPTED":
        print(f"run {run_id} already finished ({done['status']}); nothing to resume", file=sys.stderr)
        return 0 if done["status"] == "SUCCEEDED" else 1
    try:
        cfg = check_regions(config_from_plain(saved))
        check_user_code(cfg)
    except ConfigError as exc:
        return error(f"{config_path}: {exc}")
    # The journal is the run's state: read whole before anything is locked, torn down or launched.
    journal = rundir.journal_path(run_dir)
    refuse_damaged_journal(journal)
    if os.path.lexists(journal) and sum(1 for _ in read_events(journal)) == 0:
        raise DamagedFile(journal, "holds no event: the run is damaged")
    cfg.progress, cfg.show_logs = cli.progress, cli.show_logs
    # This machine's home, and its way to the control store and the control key: a run
    # taken over from another machine keeps nothing of that machine's but its config.
    cfg.home = cli.home
    cfg.cloud.control_key = cli.cloud.control_key
    if cli.cloud.control_store:
        cfg.cloud.control_store, cfg.cloud.control_options = cli.cloud.control_store, cli.cloud.control_options
    else:
        # The control store the run's own config names, if any: its key read now, still
        # before the lock, the local stores or the controller write anything.
        try:
            control_key = key_for(cfg.cloud.control_store, cfg.cloud.control_key)
        except ControlKeyError as exc:
            return error(str(exc))
    lock = rundir.lock_controller(run_dir)
    if lock is None:
        return error(f"run {run_id} has a live controller; resume is for a run whose controller died")
    hint = local_stores_hint(cfg)
    if hint:
        return error(hint)
    print(f"run {run_id}: resuming from its journal", file=sys.stderr)
    interruptible()
    try:
        with LocalStores(cfg.cloud, run_dir):
            try:
                provider = get_provider(cfg.cloud.provider, cfg.home_path, cfg.cloud, cfg.job)
                ctl = build_controller(cfg, provider, run_id, control_key=control_key)
            except (*REFUSALS, NotifySecretError) as exc:
                return error(str(exc))
            try:
                result = ctl.resume(said=resumed_by(restored))
            finally:
                ctl.close()
    except LocalStoresError as exc:
        return error(str(exc))
    return finish(cfg, run_id, result)


def resumed_by(restored: MirrorRestored | None) -> list[Event]:
    """What a resumed controller says first of how it came to the run: the mirror it was
    taken over from, and the supervisor's restart (why the last controller died)."""
    said: list[Event] = [] if restored is None else [restored]
    cause = os.environ.get(RESTART_CAUSE_ENV)
    if cause:
        restarts = os.environ.get(RESTARTS_ENV, "")
        said.append(ControllerRestarted(cause=cause[:200], restart=int(restarts) if restarts.isdigit() else 1))
    return said


def local_stores_hint(cfg: Config) -> str | None:
    """cloud.local_servers's one line when its servers' packages are missing, before anything launches."""
    return EXTRA_HINT if cfg.cloud.local_servers and missing_packages() else None


def supervise(cfg: Config, args: list[str], restarts: int | None = None) -> int:
    """Run the controller as a child and resume it each time it dies abnormally, as a
    service manager would: killed by a signal (SIGKILL, an OOM kill), or ended by an
    uncaught exception (status 1) without the run's result. A run that ended (its
    result.json written: SUCCEEDED, FAILED, or stopped, cancelled), or a controller that
    refused to start (a config error, status 2), is not a death. The resumed controller
    journals ``controller_restarted`` with the cause. At most ``restarts`` times
    (recovery.controller_restarts for a detached run; MAX_RESUMES for the drill)."""
    import subprocess

    from orchestrator.runstate.result import read_result

    run_id = cfg.run_id or new_run_id(cfg)
    run_dir = rundir.run_path(cfg.home_path, run_id)
    most = MAX_RESUMES if restarts is None else restarts
    # Held while this process lives: action=watch waits through a restart while it is.
    held = rundir.lock_controller(run_dir, rundir.SUPERVISOR_LOCK)
    if held is None:
        return error(f"run_id: run {run_id!r} already has a supervisor")
    env = {**os.environ, SUPERVISED_ENV: "1"}
    env.pop(SUPERVISE_ENV, None)
    base = [sys.executable, "-m", "orchestrator"]
    argv = [*base, *[a for a in args if not a.startswith("run_id=")], f"run_id={run_id}"]
    for restart in range(most + 1):
        child = subprocess.Popen(argv, env=env)
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                # Ctrl-C reaches the child too (same process group): it ends the run
                # cleanly; we wait for it rather than leave it behind.
                continue
        cause = died_of(code)
        if cause is None or read_result(run_dir) is not None:
            return code
        if restart == most:
            break
        print(f"supervisor: the controller of run {run_id} died ({cause}); resuming it", file=sys.stderr)
        env = {**env, RESTART_CAUSE_ENV: cause, RESTARTS_ENV: str(restart + 1)}
        argv = [
            *base,
            "action=resume",
            f"run_id={run_id}",
            f"home={cfg.home_path}",
            f"progress={cfg.progress}",
            f"show_logs={cfg.show_logs}",
        ]
    print(f"error: run {run_id}: the controller died {most + 1} times; giving up", file=sys.stderr)
    return 1


def died_of(code: int) -> str | None:
    """Why a controller that exited with ``code`` died, or None when it did not die (it ended,
    or refused to start)."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return "an uncaught exception (exit 1)" if code == 1 else None


def finish(cfg: Config, run_id: str, result: dict[str, Any]) -> int:
    """The run's summary, its report when anything happened, and the exit status."""
    from orchestrator.commands.report import write
    from orchestrator.commands.status import render, summarize

    run_dir = rundir.run_path(cfg.home_path, run_id)
    code, line = verdict(cfg.home_path, run_id, result)
    # A bug in the user's code: what raised, where and in which step, before the rest.
    first = line if code == EXIT_USER_ERROR else None
    if first:
        print(first, file=sys.stderr, flush=True)
    summary = summarize(run_dir)
    print(render(run_id, summary) if summary else result)
    print(f"result: {rundir.result_path(run_dir)}")
    if result.get("incidents") or result["status"] != "SUCCEEDED":
        done = write(run_dir)
        if done is not None:
            print(done[0])
            print(f"plot: {done[1]}")
    if line and not first:
        print(line, file=sys.stderr)
    return code


def verdict(home: str, run_id: str, result: dict[str, Any]) -> tuple[int, str | None]:
    """A run's exit status from its result, and the line that says what to do next, if
    any: the foreground run's and action=watch's, so the two always agree."""
    from orchestrator.commands.status import resume_line

    if result["status"] == "INTERRUPTED":
        return EXIT_INTERRUPTED, f"interrupted: go on from the newest checkpoint with: {resume_line(home, run_id)}"
    if result["status"] == "CANCELLED":
        return EXIT_INTERRUPTED, f"cancelled: {result.get('reason') or 'by action=cancel'}"
    objectives = result.get("objectives")
    if result["status"] == "SUCCEEDED" and isinstance(objectives, dict) and not objectives.get("met", True):
        return EXIT_OBJECTIVE_MISSED, f"error: run {run_id}: {missed_line(objectives)}"
    bug = result.get("user_error") if result["status"] == "FAILED" else None
    if bug:
        return EXIT_USER_ERROR, f"error: run {run_id}: {user_error_advice(bug)}"
    return (0 if result["status"] == "SUCCEEDED" else 1), None


def user_error_advice(bug: dict[str, Any]) -> str:
    """One line for a run the workload's own code failed: what raised, where, what to do."""
    from recovery.detection import user_error_line

    step = bug.get("step") if isinstance(bug.get("step"), int) else None
    site = bug.get("site") if isinstance(bug.get("site"), str) else None
    line = user_error_line(str(bug.get("error") or "the workload raised"), step, site)
    # What a cluster sent reaches a terminal: control characters shown, not obeyed.
    line = printable(line)
    return f"the workload raised {line}; fix the code, then run it again (a FAILED run is not resumed)"


def resume_command(cfg: Config, run_id: str) -> str:
    """The command that takes ``run_id`` on, with the home it lives under."""
    from orchestrator.commands.status import resume_line

    return resume_line(cfg.home_path, run_id)
