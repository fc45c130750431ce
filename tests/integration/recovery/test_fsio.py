"""A run's own files: written whole and durably, private to the user who ran it, and on
a shared folder with a default ACL, writable by the nodes' user only where the runtime
writes (the control channel).

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import CONTROL_DIR, make_control_dir, make_run_dir
from orchestrator.wire.control import ControlChannel
from recovery.fsio import write_private
from tests.support.runs import skip_unless_strict, wait_for_ci_setup

pytestmark = pytest.mark.integration


def _as_nobody(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def acl_shared() -> Iterator[Path]:
    """A shared folder like the on-prem set-up's: sticky, world-writable, with a default
    ACL that gives another user (here: nobody) everything created below it."""
    waited = wait_for_ci_setup()  # CI installs acl in the background
    if waited:
        skip_unless_strict(waited)
    if os.geteuid() != 0 or not shutil.which("setfacl") or not shutil.which("setpriv"):
        skip_unless_strict("needs root, setfacl (package acl) and setpriv to act as another user")
    top = Path(tempfile.mkdtemp(prefix="orch-acl-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        shared = top / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        subprocess.run(
            ["setfacl", "-m", "u:nobody:rwx,d:u:nobody:rwx,d:u::rwx,d:g::rx,d:o::rx,d:m::rwx", str(shared)],
            check=True,
        )
        yield shared
    finally:
        shutil.rmtree(top)


def test_on_a_shared_folder_the_nodes_user_writes_the_control_channel_and_nothing_else(acl_shared: Path) -> None:
    # The ACL really grants the other user: what it may do in a folder made without care.
    careless = acl_shared / "careless"
    os.makedirs(careless)
    (careless / "journal.jsonl").write_text("{}\n")
    assert _as_nobody(f"echo x >> {careless}/journal.jsonl && mv {careless}/journal.jsonl {careless}/j").returncode == 0

    run_dir = acl_shared / "home" / "runs" / "r1"
    make_run_dir(str(run_dir))
    make_control_dir(str(run_dir))
    Journal(str(run_dir / "journal.jsonl")).append("run_started")
    write_private(str(run_dir / "config.json"), b"{}")
    write_private(str(run_dir / "result.json"), b"{}")
    (run_dir / "report.txt").write_text("controller's")  # a plain open(): the umask's mode
    (run_dir / "attempts").mkdir()
    control = run_dir / CONTROL_DIR

    refused = {
        "append to the journal": f"echo x >> {run_dir}/journal.jsonl",
        "rewrite config.json": f"echo x > {run_dir}/config.json",
        "rewrite result.json": f"echo x > {run_dir}/result.json",
        "rewrite a report": f"echo x > {run_dir}/report.txt",
        "rename the journal": f"mv {run_dir}/journal.jsonl {run_dir}/j",
        "create beside it": f"touch {run_dir}/result.json.new",
        "write under attempts": f"touch {run_dir}/attempts/spec.json",
        "list the run folder": f"ls {run_dir}",
        "replace the run folder": f"mv {run_dir} {run_dir}.x",
        "create in runs": f"mkdir {run_dir.parent}/r2",
    }
    for what, script in refused.items():
        assert _as_nobody(script).returncode != 0, f"the nodes' user could {what}"
    assert Journal(str(run_dir / "journal.jsonl")).events()[0]["type"] == "run_started"

    allowed = (
        f"mkdir -p {control}/g1/events && echo '{{}}' > {control}/g1/heartbeat.json && cat {control}/g1/heartbeat.json"
    )
    done = _as_nobody(allowed)
    assert done.returncode == 0, done.stderr
    assert (control / "g1" / "heartbeat.json").read_text() == "{}\n"
    # What the controller writes there (an activation), the runtime reads.
    ControlChannel(f"file://{control}").activate(2)
    written = [str(p) for p in control.rglob("*") if p.is_file() and "g2" in p.parts]
    assert written
    assert all(_as_nobody(f"cat {path}").returncode == 0 for path in written)
