"""Which test session a process belongs to, when a full run's groups run apart
(tests/support/runs.py: session_of, ours)."""

from __future__ import annotations

from typing import Any

import psutil
import pytest

from tests.support import runs


class Proc:
    """A process as psutil shows it: a name, an environment (None: not ours to read), a parent."""

    def __init__(
        self, pid: int, name: str, env: dict[str, str] | None, parent: Proc | None = None, user: str = "root"
    ) -> None:
        self.pid, self._name, self._env, self._parent, self._user = pid, name, env, parent, user

    def name(self) -> str:
        return self._name

    def username(self) -> str:
        return self._user

    def environ(self) -> dict[str, str]:
        if self._env is None:
            raise psutil.AccessDenied(self.pid)
        return self._env

    def parent(self) -> Proc | None:
        return self._parent


@pytest.fixture(autouse=True)
def no_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "_in_slurm_job", lambda pid: False)


def chain(*links: tuple[str, dict[str, str] | None]) -> Any:
    """The last process of a chain, each the parent of the next (the first's parent is init)."""
    proc: Proc | None = Proc(1, "init", {})
    for pid, (name, env) in enumerate(links, start=100):
        proc = Proc(pid, name, env, proc)
    return proc


def test_a_ray_worker_whose_title_overwrote_its_environment_is_its_raylets_session() -> None:
    named = {runs.SESSION_ENV: "slurm"}
    worker = chain(("ray start", named), ("raylet", named), ("ray::IDLE", {}))
    assert runs.session_of(worker) == "slurm"


def test_a_slurm_jobs_processes_and_what_runs_in_one_are_the_slurm_groups() -> None:
    assert runs.session_of(chain(("slurmstepd", {}), ("bash", {}), ("raylet", {}))) == runs.SLURM_SESSION
    assert runs.session_of(chain(("sshd", {}), ("srun", {}))) == runs.SLURM_SESSION
    assert runs.session_of(chain(("raylet", {"SLURM_JOB_ID": "14"}))) == runs.SLURM_SESSION  # reparented
    assert runs.session_of(chain(("sshd", None), ("raylet", None), ("ray::IDLE", {}))) is None
    # The login node's shell that runs a step over ssh (its command line names Ray's start),
    # in no job and no session: the node user's, so the Slurm group's.
    shell = Proc(200, "bash", None, Proc(199, "sshd", None, user=runs.SLURM_USER), user=runs.SLURM_USER)
    assert runs.session_of(shell) == runs.SLURM_SESSION


def test_each_session_counts_its_own_and_the_orphans(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = chain(("python", {runs.SESSION_ENV: "main"}), ("raylet", {}))
    theirs = chain(("python", {runs.SESSION_ENV: "slurm"}), ("raylet", {}))
    orphan = chain(("raylet", {}))
    monkeypatch.setenv(runs.SESSION_ENV, "main")
    assert [runs.ours(p) for p in (mine, theirs, orphan)] == [True, False, True]
    monkeypatch.delenv(runs.SESSION_ENV)
    assert all(runs.ours(p) for p in (mine, theirs, orphan))  # not run apart: every process counts
