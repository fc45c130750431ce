"""Credentials on their way to a cluster: secrets apart from envs, only what stores need."""

from __future__ import annotations

import pytest

from orchestrator.wire.runkey import ENV as RUN_KEY_ENV
from providers.skypilot.credentials import RAY_TOKEN_ENV, forwarded_secrets, split_secrets, stdin_env

pytestmark = pytest.mark.unit


def test_credentials_go_to_secrets_and_the_rest_to_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    envs, secrets = split_secrets({"A": "1", "MY_TOKEN": "t"}, ("AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN"))
    assert envs == {"A": "1"} and secrets == {"MY_TOKEN": "t", "AWS_ACCESS_KEY_ID": "AK"}


def test_only_an_s3_store_forwards_aws_keys() -> None:
    assert forwarded_secrets(["gs://b", "file:///x", ""]) == ()
    assert "AWS_SECRET_ACCESS_KEY" in forwarded_secrets(["gs://b", "s3://c"])


def test_the_run_key_and_credentials_travel_on_stdin_one_line_each() -> None:
    hidden = stdin_env({RUN_KEY_ENV: "ab", RAY_TOKEN_ENV: "t", "PLAIN": "x"})
    assert hidden == {RUN_KEY_ENV: "ab", RAY_TOKEN_ENV: "t"}
    with pytest.raises(ValueError, match="cannot be passed on stdin"):
        stdin_env({"A_SECRET": "two\nlines"})
