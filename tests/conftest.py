"""Markers by folder (``pytest -m unit`` runs the fast tier in seconds) and shared runs."""

from __future__ import annotations

import pathlib

import pytest

_TIERS = ("unit", "integration", "chaos")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest -m unit`` alone: the pure tier spread over this machine's cores (pytest-xdist),
    which it can be since no unit test starts a process, opens a socket or shares a file.
    The other tiers share Ray clusters and servers across a session: they stay in one."""
    import os

    if (
        (config.option.markexpr or "").strip() != "unit"
        or getattr(config.option, "numprocesses", None) is not None
        or hasattr(config, "workerinput")
        or not config.pluginmanager.hasplugin("xdist")
        or config.getoption("usepdb", False)
    ):
        return
    cores = min(os.cpu_count() or 1, 4)
    if cores > 1:
        config.option.numprocesses = cores


# What the processes the tests start import from this checkout (a controller, a runtime,
# every Ray worker of every run): compiled once here where Python is told not to cache what
# it compiles (PYTHONDONTWRITEBYTECODE), else each of those thousands of processes compiles
# it again (0.3-0.4 s of a digits run's 8 s here).
_COMPILED = ("orchestrator", "providers", "recovery", "benchmarks", "tests", "examples")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The checkout's modules compiled where Python caches none; then a full run starts its
    groups apart, beside the Ray tiers (tests/support/apart.py)."""
    import compileall
    import sys

    from tests.support import apart

    root = pathlib.Path(str(session.config.rootpath))
    if sys.dont_write_bytecode and not hasattr(session.config, "workerinput"):
        for folder in _COMPILED:
            if (root / folder).is_dir():
                compileall.compile_dir(root / folder, quiet=2, workers=0)
    if apart.started is None and apart.wanted(session.config):
        apart.started = apart.start(root)


def pytest_ignore_collect(collection_path: pathlib.Path, config: pytest.Config) -> bool | None:
    """Under ``-m TIER`` (one tier alone), the other tiers' folders are not even imported:
    their tests carry their folder's marker, so none could be selected. A full run whose
    groups run apart does not collect theirs here."""
    from tests.support import apart

    if apart.started is not None and apart.started.owns(collection_path):
        return True
    tier = (config.option.markexpr or "").strip()
    if tier not in _TIERS:
        return None
    for other in _TIERS:
        if other != tier and collection_path.is_dir() and collection_path.name == other:
            if collection_path.parent.name == "tests":
                return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = pathlib.Path(str(item.fspath)).parts
        for tier in _TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


def pytest_collection_finish(session: pytest.Session) -> None:
    """The install resolution's downloads take minutes: started now, beside the tests
    before it, unless CI started it before the suite (tests/support/resolution.py)."""
    import os
    import tempfile

    from tests.support import resolution

    if os.environ.get(resolution.CI_DIR_ENV) or not any(i.get_closest_marker("install") for i in session.items):
        return
    out = pathlib.Path(tempfile.mkdtemp(prefix="orch-resolve-"))
    resolution.started = (out, resolution.start(out))


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.support import apart, resolution

    for group in apart.started.groups if apart.started is not None else []:
        if session.shouldstop or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            apart.stop(group)
        elif apart.wait(group) != 0 and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    if resolution.started is not None and resolution.started[1] is not None and resolution.started[1].poll() is None:
        resolution.started[1].kill()
        resolution.started[1].wait()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.support import apart, onprem

    for folder in onprem.KEPT:
        terminalreporter.write_line(f"on-prem: a test failed; its runs' homes and stores are kept in {folder}")
    for group in apart.started.groups if apart.started is not None else []:
        if group.returncode is not None:
            for line in apart.summary(group):
                terminalreporter.write_line(line)
            apart.cleanup(group)


@pytest.fixture(scope="session")
def orch_home(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("orchestrator-home")


@pytest.fixture(scope="session")
def baseline(orch_home: pathlib.Path):
    """One uninterrupted digits run: the weights every surviving run must end with."""
    from tests.support.runs import orchestrate, ray_pids, wait_no_new_ray

    before = ray_pids()
    run = orchestrate(orch_home, "baseline")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not wait_no_new_ray(before), "the baseline run left Ray processes behind"
    return run


@pytest.fixture(scope="session")
def long_baseline(orch_home: pathlib.Path):
    """The digits job at 2000 steps, never failed: the weights of every run whose faults
    need training still going while they last (a partition, a storage outage). Where
    the checkpoints go does not change the weights, so runs on object stores compare
    with it too."""
    from tests.support.runs import orchestrate

    run = orchestrate(orch_home, "long-baseline", "job.steps=2000")
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="session")
def cloud_stores():
    """Two moto S3 servers and a fake-gcs-server for cloud=local_cloudstores; the env to reach them."""
    from tests.support.servers import S3_ENV, make_bucket, start_fake_gcs, start_moto

    a, b, c = start_moto(), start_moto(), start_fake_gcs()
    try:
        make_bucket(a, "orch-a")
        make_bucket(b, "orch-b")
        make_bucket(c, "orch-c")
        yield {
            "servers": {"local-a": a, "local-b": b, "local-c": c},
            "env": {
                **S3_ENV,
                "ORCH_LOCAL_S3_A": a.endpoint,
                "ORCH_LOCAL_S3_B": b.endpoint,
                "ORCH_LOCAL_GCS_C": c.endpoint,
            },
        }
    finally:
        for server in (a, b, c):
            server.stop()


@pytest.fixture(scope="session")
def onprem(request: pytest.FixtureRequest):
    """The real one-node Slurm cluster through SkyPilot (tests/support/onprem.py); skipped when it is not up."""
    from tests.support.onprem import session, slurm_up
    from tests.support.runs import skip_unless_strict

    why = slurm_up()
    if why:
        skip_unless_strict(why)
    yield from session(failed=lambda: request.session.testsfailed > 0)


@pytest.fixture(scope="session")
def example_project(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """examples/seqproj copied outside the repository, into a folder only its owner may
    read (on-prem, the node user cannot see it: only job.code_dir's sync brings it there)."""
    import shutil

    from tests.support.paths import REPO

    private = tmp_path_factory.mktemp("private")
    dest = private / "seqproj"
    shutil.copytree(REPO / "examples" / "seqproj", dest, ignore=shutil.ignore_patterns("__pycache__"))
    private.chmod(0o700)
    return dest


@pytest.fixture(scope="session")
def example_baseline(example_project: pathlib.Path, tmp_path_factory: pytest.TempPathFactory):
    """One uninterrupted run of the example project on the local provider, from its own folder."""
    from tests.support.runs import run_example

    home = tmp_path_factory.mktemp("orchestrator-home-example")
    return run_example(example_project, home, "seq-example", timeout=400)
