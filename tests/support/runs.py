"""Helpers for the tiers that run the orchestrator for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.support.paths import REPO

RAY_NAMES = ("gcs_server", "raylet")


# Set by .ci/run: there, what a test needs from the machine (the Slurm cluster, a
# tmpfs mount) must be present, so a missing piece fails instead of skipping.
STRICT_ENV = "ORCHESTRATOR_STRICT_SKIPS"


def skip_unless_strict(why: str) -> None:
    """Skip with ``why`` on a developer's machine; fail with it in CI."""
    import pytest

    if os.environ.get(STRICT_ENV) == "1":
        pytest.fail(f"{why} ({STRICT_ENV}=1: CI must run this test)")
    pytest.skip(why)


# CI installs its packages and brings the Slurm cluster up in the background, beside the
# install and the first tests, then writes the file this names (see .ci/run).
CI_SETUP_DONE_ENV = "ORCH_CI_SETUP_DONE"


def wait_for_ci_setup(timeout_s: float = 1200.0) -> str | None:
    """Wait for CI's background set-up to end; None once it has (or where none runs),
    else why a test that needs it cannot run."""
    done = os.environ.get(CI_SETUP_DONE_ENV)
    if not done:
        return None
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(done):
        if time.monotonic() > deadline:
            return f"CI's set-up (packages, Slurm) did not end within {timeout_s:.0f} s ({CI_SETUP_DONE_ENV}={done})"
        time.sleep(2.0)
    return None


# A full run's groups run apart (tests/support/apart.py): each pytest names itself here,
# and every process it starts inherits the name, Ray's daemons and workers through the
# cluster they belong to. A Slurm job's processes are the Slurm group's.
SESSION_ENV = "ORCH_TEST_SESSION"
SLURM_SESSION = "slurm"
SLURM_NAMES = frozenset({"slurmstepd", "srun", "sbatch", "salloc"})
# The Slurm cluster's node user (.ci/slurm/setup): only the Slurm group's runs act as it.
SLURM_USER = os.environ.get("ORCH_SLURM_USER", "skyuser")


def session_of(proc: psutil.Process, depth: int = 16) -> str | None:
    """The test session that started ``proc``: the nearest of it and its ancestors that
    names one (a Ray worker's environment is overwritten by its title: its raylet's is
    read); a Slurm job's processes, and the commands that run in one, the Slurm group's;
    None where none tells (an orphan)."""
    current: psutil.Process | None = proc
    for _ in range(depth):
        if current is None or current.pid <= 1:
            return None
        try:
            if current.name() in SLURM_NAMES or _user(current) == SLURM_USER:
                # A job's step, a command run in it over ssh (SkyPilot's), or the shell on the
                # login node that runs one (its ssh session, in no job and no session of ours).
                return SLURM_SESSION
            try:
                env = current.environ()
            except psutil.AccessDenied:  # another user's (not root here): its parent may tell
                env = {}
            if env.get(SESSION_ENV):
                return env[SESSION_ENV]
            if "SLURM_JOB_ID" in env or _in_slurm_job(current.pid):
                return SLURM_SESSION  # a daemon a job started, since reparented (Ray's, by SkyPilot)
            current = current.parent()
        except (psutil.Error, OSError):
            return None
    return None


def _user(proc: psutil.Process) -> str | None:
    try:
        return proc.username()
    except (psutil.Error, KeyError):  # KeyError: a uid with no name
        return None


def _in_slurm_job(pid: int) -> bool:
    """Whether the process's cgroup is a Slurm job's (``.../job_<id>/...``)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            return "/job_" in fh.read()
    except OSError:
        return False


def ours(proc: psutil.Process) -> bool:
    """Whether ``proc`` is this test session's to count: started by it, or by no session
    that can be told (an orphan counts for every session)."""
    me = os.environ.get(SESSION_ENV)
    return me is None or session_of(proc) in (me, None)


def ray_pids() -> set[int]:
    """Every Ray process on the machine, by name or process title, of this test session's
    (``ours``)."""
    out = set()
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            name = p.info["name"] or ""
            cmd = " ".join(p.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if (
            name in RAY_NAMES
            or name.startswith("ray::")
            or cmd.startswith("ray::")
            or "bin/ray start" in cmd
            or "providers.raystart" in cmd
            or "orchestrator.runtime" in cmd
        ) and ours(p):
            out.add(p.pid)
    return out


def wait_no_new_ray(before: set[int], timeout_s: float = 10.0) -> set[int]:
    """Ray processes that appeared since ``before`` and are still alive after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {p for p in ray_pids() - before if psutil.pid_exists(p)}
        left = {p for p in left if _alive(p)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def describe(pids: set[int]) -> list[str]:
    """Each process as ``pid name cmdline`` (its session's, where one names it), for a
    failure's message."""
    out = []
    for pid in sorted(pids):
        try:
            proc = psutil.Process(pid)
            out.append(f"{pid} [{session_of(proc)}] {' '.join(proc.cmdline())[:200] or proc.name()}")
        except psutil.Error:
            out.append(f"{pid} (gone)")
    return out


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path
    result: dict[str, Any] | None

    def journal(self) -> list[dict[str, Any]]:
        path = self.run_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def events(self, type_: str) -> list[dict[str, Any]]:
        """The controller's events of this type and the runtime's of this kind (runtime.<kind>)."""
        return [e for e in self.journal() if e["type"] in (type_, f"runtime.{type_}")]


def env_for(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env["ORCHESTRATOR_HOME"] = str(home)
    env.pop("RAY_ADDRESS", None)
    return env


def loop_spec(
    root: Path,
    run_id: str,
    generation: int,
    job: dict[str, Any],
    trainer: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
    **fields: Any,
) -> Any:
    """A RuntimeSpec for a worker run in this process (no Ray): one worker, its stores and
    control channel under ``root``, a checkpoint every 20 steps unless told otherwise."""
    from orchestrator.wire.spec import RuntimeSpec

    return RuntimeSpec(
        run_id=run_id,
        generation=generation,
        region="r",
        store_url=f"file://{root}/store",
        control_url=f"file://{root}/control",
        ray_address="",
        ray_storage_path=str(root / "ray"),
        job=job,
        trainer={
            "workers": 1,
            "cpus_per_worker": 1.0,
            "gpus_per_worker": 0.0,
            "max_worker_restarts": 3,
            **(trainer or {}),
        },
        checkpoint={"interval_steps": 20, "keep_last": 3, **(checkpoint or {})},
        **fields,
    )


def run_example(
    project: Path,
    home: Path,
    run_id: str,
    *overrides: str,
    code_dir: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 400,
) -> Run:
    """The example project's ``job=seq`` as its user runs it: ``--config-dir`` with its own
    job configs, from its folder with it on PYTHONPATH, or (``code_dir``) from elsewhere
    with nothing of it on the path but ``job.code_dir``."""
    full = env_for(home, env)
    full.pop("PYTHONPATH", None)
    if not code_dir:
        full["PYTHONPATH"] = str(project)
    cwd = project if not code_dir else home
    argv = [sys.executable, "-m", "orchestrator", "--config-dir", str(project / "conf"), "job=seq"]
    argv += [*([f"job.code_dir={project}"] if code_dir else []), f"run_id={run_id}", "progress=false"]
    argv += [*spares_off(overrides), *overrides]
    proc = subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)
    run_dir = home / "runs" / run_id
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return Run(proc.returncode, proc.stdout, proc.stderr, run_dir, result)


# What loses a worker or a node, the one thing a spare (recovery.spares) serves.
LOSES_WORKERS = ("kill_worker", "kill_node", "hang_node", "kill_head", "corrupt_peer_state", "worker_loss", "soak")


def spares_off(overrides: tuple[str, ...]) -> list[str]:
    """``recovery.spares=off`` for a new run that loses no worker: its spare would never
    be taken, and each attempt would spend about 3.5 CPU-s of a loaded two-core machine
    importing it while the group trains. A run that names the key, loses a worker or a
    node, resumes, or runs detached (a drill may come) keeps the product's default."""
    if any(o.startswith(("action=", "detach=", "recovery.spares")) for o in overrides):
        return []
    if any(kind in o for o in overrides for kind in LOSES_WORKERS):
        return []
    return ["recovery.spares=off"]


def orchestrate(
    home: Path, run_id: str, *overrides: str, timeout: float = 400, env: dict[str, str] | None = None
) -> Run:
    # job=digits unless the overrides pick a job of their own.
    job = [] if any(o.startswith("job=") for o in overrides) else ["job=digits"]
    argv = [
        sys.executable,
        "-m",
        "orchestrator",
        *job,
        f"run_id={run_id}",
        "progress=false",
        *spares_off(overrides),
        *overrides,
    ]
    proc = subprocess.run(argv, cwd=REPO, env=env_for(home, env), capture_output=True, text=True, timeout=timeout)
    run_dir = home / "runs" / run_id
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return Run(proc.returncode, proc.stdout, proc.stderr, run_dir, result)


def orch(home: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator ARGS`` as a user types it (an action on a run, a watch), under ``home``."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _forked_rank(
    target: Any, args: tuple[Any, ...], deadline_s: float, env: dict[str, str], cwd: str, keys: Any
) -> None:
    """One rank: ``target(*args)`` in the test's environment, folder and installed run keys
    as they are now (the forkserver has those of its own start), then out at once with
    ``os._exit`` (nothing of the server it was forked from to shut down); past
    ``deadline_s`` less 5 s it prints its stack to say where it hangs."""
    import faulthandler
    import traceback

    from orchestrator.wire import runkey

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    if keys is not None:
        runkey.install(keys)
    faulthandler.dump_traceback_later(max(1.0, deadline_s - 5.0), exit=False)
    code = 1
    try:
        target(*args)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_forked_ranks(target: Any, args: list[tuple[Any, ...]], deadline_s: float = 60.0) -> list[int | None]:
    """``target(*args[r])`` in a process per rank, all started at once, each killed past
    ``deadline_s``; their exit codes. The ranks fork from a forkserver that imported torch
    once: a rank forked from the test process itself inherits its threads' locks as they
    were (pytest's, torch's, Ray's), and one in four of a 4-rank DDP test hung so in CI;
    spawning each would import torch again, seconds a rank."""
    import multiprocessing
    import time as _time

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "tests.support.runs"])
    from orchestrator.wire import runkey

    here = (dict(os.environ), os.getcwd(), runkey.current())
    procs = [ctx.Process(target=_forked_rank, args=(target, a, deadline_s, *here)) for a in args]
    for p in procs:
        p.start()
    deadline = _time.monotonic() + deadline_s
    for p in procs:
        p.join(timeout=max(0.0, deadline - _time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in procs]
