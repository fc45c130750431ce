"""A ``cmd:`` control key: the command run, what it prints read no further than a key may
be long, and a command that fails, prints nothing, prints too much or takes too long
refused in one line that shows none of its output, stdout or stderr.

Here the tests that start a process; the rest are unit tests (the same path under tests/unit)."""

from __future__ import annotations

import shlex
import time

import pytest

import recovery.controlkey
from recovery.controlkey import MAX_BYTES, ControlKeyError, read_key

pytestmark = pytest.mark.integration
SECRET = "SECRETKEY" * 8


def sh(script: str) -> str:
    return "cmd:" + shlex.join(["sh", "-c", script])


def refusal(spec: str) -> str:
    with pytest.raises(ControlKeyError) as err:
        read_key(spec)
    line = str(err.value)
    assert "\n" not in line and line.startswith("cloud.control_key: ")
    assert "SECRETKEY" not in line, line  # no part of the key, of its stdout or of its stderr
    return line


def test_a_command_that_prints_a_key_gives_it_stripped() -> None:
    assert read_key(sh(f"echo '  {SECRET}  '")) == SECRET.encode()


@pytest.mark.parametrize(
    ("script", "why"),
    [
        # Its stderr held the key (the secret manager quoted it): only the status is said.
        (f"echo {SECRET} >&2; exit 3", "cmd:sh ... exited 3; its output is not shown"),
        (f"echo {SECRET}; exit 1", "cmd:sh ... exited 1; its output is not shown"),
        (f"echo {SECRET}; kill -9 $$", "cmd:sh ... was killed by signal 9"),
        ("true", "cmd:sh ... exited 0 and printed no key"),
        ("printf '%40s' ''", "cmd:sh ... exited 0 and printed no key"),
        ("echo SECRETKEY", "cmd:sh ... gives 9 characters; a control key is 32 to 4096 characters"),
        (f"echo {SECRET} >&2; head -c 27000000 /dev/zero | tr '\\0' k", "gives more than 4096 bytes"),
    ],
)
def test_a_command_that_gives_no_key_is_refused_by_its_status_never_its_output(script: str, why: str) -> None:
    assert why in refusal(sh(script))


def test_a_command_that_prints_without_end_is_stopped_one_byte_past_a_key() -> None:
    started = time.monotonic()
    assert f"gives more than {MAX_BYTES} bytes" in refusal(f"cmd:yes {SECRET}")
    assert time.monotonic() - started < 5


def test_a_command_that_is_none_or_cannot_run_is_one_line() -> None:
    assert "'no-such-key-command' (from cmd:) is not a command here" in refusal("cmd:no-such-key-command --key x")
    assert "cannot run cmd:/dev/null" in refusal("cmd:/dev/null")


def test_a_command_slower_than_its_time_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery.controlkey, "CMD_TIMEOUT_S", 0.5)
    started = time.monotonic()
    assert "printed no key within" in refusal(sh(f"echo {SECRET} >&2; exec sleep 30"))
    assert "printed no key within" in refusal(sh(f"echo {SECRET}; exec sleep 30"))  # printed, never exited
    assert time.monotonic() - started < 5


def test_a_key_printed_by_a_command_whose_child_holds_its_output_open_is_taken() -> None:
    # The command exits once it printed; what it left running is not waited for.
    started = time.monotonic()
    assert read_key(sh(f"echo {SECRET}; sleep 3 &")) == SECRET.encode()
    assert time.monotonic() - started < 2.5
