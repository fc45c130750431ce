"""The user's control key: its sources, checked and named in one line, the key itself never;
and the run's secret and state key derived from it (the same on any machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recovery.controlkey import DEFAULT, ControlKeyError, forget_key, parse_source, read_key
from recovery.signing import derive_state_key, load_or_create_secret, secret_from_key

pytestmark = pytest.mark.unit
KEY = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("ORCH_KEY", "expected env:VARNAME, file:PATH or cmd:COMMAND"),
        ("vault:x", "expected env:VARNAME"),
        ("env:", "expected env:VARNAME"),
        ("env:A-B", "letters, digits and _"),
        ("cmd:echo 'x", "the command does not parse"),
    ],
)
def test_a_source_that_is_none_is_refused_by_name(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_source(spec)


def test_an_env_key_is_read_once_and_taken_out_of_the_environment() -> None:
    env = {"ORCHESTRATOR_CONTROL_KEY": f"  {KEY}\n"}
    assert read_key(DEFAULT, env) == KEY.encode()
    assert "ORCHESTRATOR_CONTROL_KEY" not in env  # nothing the controller starts inherits it
    assert read_key(DEFAULT, {}) is None  # unset: no key, a random secret
    unused = {"ORCHESTRATOR_CONTROL_KEY": KEY, "OTHER": "x"}
    forget_key(DEFAULT, unused)  # no control store: the key is used for nothing, and inherited by nothing
    assert unused == {"OTHER": "x"}
    with pytest.raises(ControlKeyError, match="gives 5 characters; a control key is at least 32") as err:
        read_key("env:K", {"K": "short"})
    assert "short" not in str(err.value)


def test_a_key_file_must_be_its_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "control.key"
    path.write_text(KEY)
    path.chmod(0o644)
    with pytest.raises(ControlKeyError, match=r"readable by others .*chmod 600"):
        read_key(f"file:{path}")
    path.chmod(0o600)
    assert read_key(f"file:{path}") == KEY.encode()
    with pytest.raises(ControlKeyError, match=r"cannot read file:.*missing"):
        read_key(f"file:{tmp_path}/missing")


def test_the_secret_from_a_key_is_the_same_anywhere_and_per_run(tmp_path: Path) -> None:
    a, b = secret_from_key(KEY.encode(), "run-1"), secret_from_key(KEY.encode(), "run-2")
    assert a == secret_from_key(KEY.encode(), "run-1") and a != b and len(a) == 32
    assert derive_state_key(a, "run-1") not in (a, derive_state_key(b, "run-2"))
    run = tmp_path / "run"
    assert load_or_create_secret(str(run), a) == (a, False)  # derived: not a new random one
    assert (run / "run.secret").read_bytes() == a and os.stat(run / "run.secret").st_mode & 0o077 == 0
    assert load_or_create_secret(str(run), b) == (a, False)  # the run's own stays
