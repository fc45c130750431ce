"""The user's control key: its sources, checked and named in one line, the key itself never;
and the run's secret and state key derived from it (the same on any machine).

Here the sources that start no process; a ``cmd:`` key's command runs in
tests/integration/recovery/test_controlkey.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from recovery.controlkey import (
    DEFAULT,
    MAX_BYTES,
    ControlKeyError,
    KeySource,
    checked,
    forget_key,
    key_for,
    parse_source,
    read_key,
)
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
    with pytest.raises(ControlKeyError, match="gives 5 characters; a control key is 32 to 4096 characters") as err:
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


def test_a_variable_set_but_blank_is_refused_not_taken_for_no_key() -> None:
    env = {"K": " " * 40}
    with pytest.raises(ControlKeyError, match=r"^cloud.control_key: env:K is set but blank; .* or unset it for no key"):
        read_key("env:K", env)
    assert env == {}  # taken out of the environment all the same
    with pytest.raises(ControlKeyError, match="env:K is set but blank"):
        read_key("env:K", {"K": ""})
    assert read_key("env:K", {}) is None  # only an unset variable is no key


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b" " * 40, "gives a blank key (only white space); a control key is 32 to 4096 characters"),
        (b"\n\t\r ", "gives a blank key"),
        (b"", "gives a blank key"),
        (b"k" * 31, "gives 31 characters; a control key is 32 to 4096 characters"),
        (b"k" * (MAX_BYTES + 1), "gives more than 4096 bytes; a control key is 32 to 4096 characters"),
        (b" " * MAX_BYTES + b"k" * 32, "gives more than 4096 bytes"),  # measured as given, never cut
    ],
)
def test_a_blank_short_or_oversize_key_is_refused_by_its_source_alone(raw: bytes, why: str) -> None:
    for source in (KeySource("file", "/keys/control.key"), KeySource("env", "K")):
        with pytest.raises(ControlKeyError, match=re.escape(why)) as err:
            checked(raw, source)
        assert str(err.value).startswith(f"cloud.control_key: {source} gives")
        assert "kkkk" not in str(err.value)
    assert checked(b"k" * MAX_BYTES, KeySource("env", "K")) == b"k" * MAX_BYTES
    assert checked(b"\n" + b"k" * 32 + b"\n", KeySource("env", "K")) == b"k" * 32


def test_a_command_is_named_by_its_first_word_never_its_arguments() -> None:
    source = parse_source("cmd:vault kv get -field=key secret/SECRETNAME")
    assert source.named() == "cmd:vault ..."
    assert parse_source("cmd:print-key").named() == "cmd:print-key"
    with pytest.raises(ControlKeyError) as err:
        checked(b"short", source)
    assert "SECRETNAME" not in str(err.value) and "cmd:vault ..." in str(err.value)


def test_an_oversize_key_file_is_refused_and_read_no_further_than_one_byte_past(tmp_path: Path) -> None:
    path = tmp_path / "control.key"
    path.write_bytes(b"k" * (5 * 2**20))
    path.chmod(0o600)
    with pytest.raises(ControlKeyError, match=rf"^cloud.control_key: file:{path} gives more than 4096 bytes; "):
        read_key(f"file:{path}")
    blank = tmp_path / "blank.key"
    blank.write_bytes(b" " * 40)
    blank.chmod(0o600)
    with pytest.raises(ControlKeyError, match="gives a blank key"):
        read_key(f"file:{blank}")


def test_a_key_file_that_is_a_folder_or_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    with pytest.raises(ControlKeyError, match="is not a regular file"):
        read_key(f"file:{folder}")
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo, 0o600)  # opened for reading with no writer: would block, if not opened without
    with pytest.raises(ControlKeyError, match="is not a regular file"):
        read_key(f"file:{fifo}")


def test_without_a_control_store_no_key_is_read_and_an_env_key_is_forgotten(tmp_path: Path) -> None:
    env = {"K": KEY, "OTHER": "x"}
    assert key_for(None, "env:K", env) is None and env == {"OTHER": "x"}
    assert key_for("", f"file:{tmp_path}/missing") is None  # not read: nothing uses it
    env = {"K": KEY}
    assert key_for("file:///ctl", "env:K", env) == KEY.encode() and env == {}
    with pytest.raises(ControlKeyError, match="cannot read"):
        key_for("file:///ctl", f"file:{tmp_path}/missing")
