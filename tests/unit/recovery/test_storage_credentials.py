"""Credential option names however they are written (recovery.storage.credential_name)."""

from __future__ import annotations

import pytest

from recovery.storage import credential_name, find_secret, squashed

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name",
    [
        "SSECustomerKey",
        "sse_customer_key",
        "secretaccesskey",
        "SECRET-ACCESS-KEY",
        "Passw0rd",
        "p4ssw0rd",
        "s3cr3t",
        "credentia1s",
        "client_secret",
        "private_key",
        "token",
        "TOKEN",
        "connection_string",
        "pkey",
        "auth",
        "ｓｅｃｒｅｔ",  # fullwidth letters
        "k3y",
    ],
)
def test_credential_names_are_recognised_however_written(name: str) -> None:
    assert credential_name(name)


@pytest.mark.parametrize(
    "name",
    ["SSEKMSKeyId", "s3_additional_kwargs", "max_tokens", "ServerSideEncryption", "consistency", "access", "use_ssl"],
)
def test_option_names_that_hold_no_credential_pass(name: str) -> None:
    assert not credential_name(name)


def test_squashed_reads_one_both_ways() -> None:
    assert squashed("Cred-1") == {"credi", "credl"}


def test_a_customer_key_deep_in_the_options_is_found() -> None:
    options = {"s3_additional_kwargs": {"ServerSideEncryption": "AES256", "SSECustomerKey": "k"}}
    assert find_secret(options) == ("s3_additional_kwargs.SSECustomerKey", "credential")
