"""Storage options: bounded by default, standard endpoint variables honoured, no credentials in configs."""

from __future__ import annotations

import pytest

from orchestrator.compose import compose
from orchestrator.config import ConfigError
from recovery.storage import Bounded, bounded_options


def test_s3_calls_get_timeouts_and_few_retries_and_user_options_win() -> None:
    opts = bounded_options("s3://b/p", {"config_kwargs": {"read_timeout": 3}})
    assert opts["config_kwargs"]["connect_timeout"] == 5
    assert opts["config_kwargs"]["read_timeout"] == 3
    assert opts["config_kwargs"]["retries"]["max_attempts"] <= 2


def test_aws_endpoint_url_is_honoured_unless_the_config_names_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9999")
    assert bounded_options("s3://b", {})["endpoint_url"] == "http://127.0.0.1:9999"
    assert bounded_options("s3://b", {"endpoint_url": "http://x:1"})["endpoint_url"] == "http://x:1"


def test_storage_emulator_host_is_honoured_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")
    opts = bounded_options("gs://b", {})
    assert opts["endpoint_url"] == "http://127.0.0.1:4443"
    assert opts["token"] == "anon"
    assert opts["requests_timeout"] > 0


def test_op_timeout_is_not_passed_to_the_filesystem() -> None:
    assert "op_timeout_s" not in bounded_options("s3://b", {"op_timeout_s": 3})


def test_async_filesystem_calls_get_a_deadline_and_local_ones_do_not() -> None:
    seen: dict[str, object] = {}

    class FakeAsync:
        async_impl = True

        def cat_file(self, path: str, **kw: object) -> bytes:
            seen.update(kw)
            return b""

    Bounded(FakeAsync(), 7.0).cat_file("x")
    assert seen == {"timeout": 7.0}

    class FakeLocal:
        async_impl = False

        def cat_file(self, path: str, **kw: object) -> bytes:
            assert kw == {}
            return b""

    Bounded(FakeLocal(), 7.0).cat_file("x")


@pytest.mark.parametrize("key", ["secret", "key", "token", "password"])
def test_a_credential_in_storage_options_is_refused(key: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose([f"+cloud.regions.local-a.storage_options.{key}=hunter2"])
    assert err.value.key == f"cloud.regions.local-a.storage_options.{key}"
    assert "hunter2" not in str(err.value)


def test_token_anon_is_not_a_credential() -> None:
    cfg = compose(["cloud=local_cloudstores"])
    assert cfg.cloud.regions["local-c"].storage_options["token"] == "anon"
    assert cfg.cloud.regions["local-a"].store == "s3://orch-a/stores"


def test_a_storage_fault_needs_a_store_behind_an_http_endpoint() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["chaos.faults=[{kind:storage_outage,at_step:10}]"])  # cloud=local: file:// stores
    assert err.value.key == "chaos.faults[0].kind"
    assert "local_cloudstores" in str(err.value)
