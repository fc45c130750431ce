"""A run taken over on a machine that has no folder for it: rebuilt from the control
store's mirror with the secret derived from the user's control key, or refused in one
line with nothing written (no key, another key, a live controller's lease)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.control.lease import ControllerLease, LeaseHeld
from orchestrator.control.mirror import MirrorError, StateMirror
from orchestrator.control.takeover import TakeoverError, describe_error, rebuild
from recovery.signing import derive_state_key, secret_from_key

pytestmark = pytest.mark.unit
KEY = "c0ffee" * 11


def _cli(tmp_path: Path, key: str | None = KEY) -> SimpleNamespace:
    env = {} if key is None else {"MY_KEY": key}
    cloud = SimpleNamespace(control_store=f"file://{tmp_path}/ctl", control_key="env:MY_KEY", control_options={})
    cli = SimpleNamespace(cloud=cloud, recovery=SimpleNamespace(controller_lease_s=10.0), home_path=str(tmp_path / "b"))
    cli.env = env
    return cli


def _mirrored(tmp_path: Path, key: str = KEY) -> None:
    from recovery.storage import open_fs

    run = tmp_path / "a" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text('{"job": {}}')
    (run / "journal.jsonl").write_text('{"type": "run_started"}\n')
    fs, root = open_fs(f"file://{tmp_path}/ctl/r1")
    state_key = derive_state_key(secret_from_key(key.encode(), "r1"), "r1")
    StateMirror(fs, root, state_key, "r1", 1, str(run)).flush()


def _rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: SimpleNamespace):  # type: ignore[no-untyped-def]
    for name, value in cli.env.items():
        monkeypatch.setenv(name, value)
    return rebuild(cli, "r1", str(tmp_path / "b" / "runs" / "r1"))


def test_the_run_is_rebuilt_from_the_mirror_with_its_secret_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mirrored(tmp_path)
    line = _rebuild(tmp_path, monkeypatch, _cli(tmp_path))
    run = tmp_path / "b" / "runs" / "r1"
    assert (line.controller, line.seq, line.files) == (1, 1, ("config.json", "journal.jsonl"))
    assert (run / "journal.jsonl").read_text() == '{"type": "run_started"}\n'
    assert (run / "run.secret").read_bytes() == secret_from_key(KEY.encode(), "r1")


def test_no_key_another_key_or_a_live_lease_refuse_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recovery.storage import open_fs

    _mirrored(tmp_path)
    run = tmp_path / "b" / "runs" / "r1"
    with pytest.raises(TakeoverError, match="give the control key its controller had"):
        _rebuild(tmp_path, monkeypatch, _cli(tmp_path, key=None))
    with pytest.raises(MirrorError, match="no mirror that verifies") as err:
        _rebuild(tmp_path, monkeypatch, _cli(tmp_path, key="f" * 64))
    assert describe_error(err.value, "file:///ctl").startswith("cloud.control_store: file:///ctl holds no mirror")
    fs, root = open_fs(f"file://{tmp_path}/ctl/r1")
    state_key = derive_state_key(secret_from_key(KEY.encode(), "r1"), "r1")
    ControllerLease(fs, root, state_key, "r1", 30.0, sleep=lambda s: None).take()
    with pytest.raises(LeaseHeld, match="run r1 is driven by controller 1 on "):
        _rebuild(tmp_path, monkeypatch, _cli(tmp_path))
    assert not run.exists()
