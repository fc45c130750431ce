"""A home of synthetic runs for the console's tests (tests/support/console_runs.py), one
of them live (this process holds its controller's lock), one named and filled with
markup, and the console's app over it, driven in-process by Starlette's TestClient."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.console.app import Console, build
from orchestrator.console.security import Secrets
from orchestrator.runstate import events as E
from orchestrator.runstate import rundir
from orchestrator.runstate.rundir import lock_controller
from tests.support.console_runs import config, journal, live_run, make_run

with warnings.catch_warnings():
    # Starlette 1.x asks for httpx2 in its test client; httpx (pinned) works as before.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

HOSTILE_RUN = "<script>alert('run')<"
HOSTILE_JOB = "<script>alert('job')</script>"
HOSTILE_DETAIL = "<img src=x onerror=alert('event')>"
LIVE = "digits-live"


def hostile_run(home: Path) -> Path:
    """A run whose name, job name and events hold markup (a folder anyone could name)."""
    run_dir = Path(rundir.run_path(str(home), HOSTILE_RUN))
    cfg = config(home, job=HOSTILE_JOB)
    cfg["cloud"]["regions"][HOSTILE_DETAIL] = {"store": "file:///<b>x</b>", "hourly_cost": 1.0}
    journal(
        run_dir,
        E.RunStarted(run_id=HOSTILE_RUN, pid=1, host="<b>box</b>", config=cfg),
        E.AttemptStarted(generation=1, region=HOSTILE_DETAIL),
        E.FaultInjected(kind="<script>alert('fault')</script>", step=3, extra={"generation": 1}),
        E.FailureDetected(kind="cluster_lost", region=HOSTILE_DETAIL, detail=HOSTILE_DETAIL, last_step=3),
        E.StandbyFailed(region=HOSTILE_DETAIL, generation=2, error="<script>alert('standby')</script>"),
    )
    return run_dir


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """Two ended runs, a live one and a hostile one; the live one's lock held while the test runs."""
    home = tmp_path / "home"
    now = time.time()
    make_run(home, "digits-clean", "clean", t0=now - 600)
    make_run(home, "digits-failover", "failover", t0=now - 300)
    held = lock_controller(str(live_run(home, LIVE)))
    assert held is not None
    hostile_run(home)
    yield home
    held.close()


def client_of(home: Path, actions: bool = True) -> tuple[TestClient, Secrets]:
    keys = Secrets.new(8000)
    return TestClient(build(Console(str(home), keys, actions)), follow_redirects=False), keys


def signed_in(home: Path, actions: bool = True) -> tuple[TestClient, Secrets]:
    """A client that opened the printed URL once: its cookie carries the token."""
    client, keys = client_of(home, actions)
    assert client.get(f"/?token={keys.token}").status_code == 303
    return client, keys
