"""The errors a user meets (orchestrator/errors.py): a key named, and one line on stderr with exit status 2."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError, error

pytestmark = pytest.mark.unit


def test_a_config_error_names_its_key_first() -> None:
    exc = ConfigError("job.steps", "got -1; expected at least 1")
    assert (exc.key, str(exc)) == ("job.steps", "job.steps: got -1; expected at least 1")


def test_error_prints_one_line_with_control_characters_escaped_and_returns_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert error("bad\nvalue\x1b[31m") == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: bad\\nvalue\\x1b[31m\n"
