"""Storage options: bounded by default, standard endpoint variables honoured, no credentials in configs."""

from __future__ import annotations

import json

import pytest

from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from recovery.storage import Bounded, SecretInConfig, bounded_options, credential_name, find_secret


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


# --- credentials at any depth ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "aws_secret_access_key",
        "aws_access_key_id",
        "aws_session_token",
        "client_secret",
        "sas_token",
        "Authorization",
        "AccountKey",
        "private_key_id",
        "api-key",
        "passwd",
        "credentials",
    ],
)
def test_credential_names_are_recognised(name: str) -> None:
    assert credential_name(name)


@pytest.mark.parametrize(
    "name",
    ["endpoint_url", "region_name", "anon", "project", "read_timeout", "op_timeout_s", "SSEKMSKeyId", "max_tokens"],
)
def test_benign_names_are_not_credentials(name: str) -> None:
    assert not credential_name(name)


@pytest.mark.parametrize(
    ("options", "found"),
    [
        ({"client_kwargs": {"aws_secret_access_key": "s"}}, ("client_kwargs.aws_secret_access_key", "credential")),
        ({"a": [{"b": {"password": "s"}}]}, ("a[0].b.password", "credential")),
        ({"headers": {"Authorization": "Bearer s"}}, ("headers.Authorization", "credential")),
        ({"token": "ya29.s"}, ("token", "credential")),
        ({"token": {"client_id": "x"}}, ("token", "credential")),
        ({"endpoint_url": "http://u:s@host:9000"}, ("endpoint_url", "userinfo")),
        ({"proxies": ["http://u@proxy"]}, ("proxies[0]", "userinfo")),
    ],
)
def test_find_secret_names_the_path_at_any_depth(options: dict[str, object], found: tuple[str, str]) -> None:
    assert find_secret(options) == found


@pytest.mark.parametrize(
    "options",
    [
        {"token": "anon", "endpoint_url": "http://127.0.0.1:9103", "project": "p"},
        {"token": None, "use_auth": True},
        {"token": "google_default"},
        {"config_kwargs": {"read_timeout": 3, "connect_timeout": 2}, "op_timeout_s": 3},
        {"s3_additional_kwargs": {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "arn:aws:kms:k"}},
    ],
)
def test_options_without_credentials_pass(options: dict[str, object]) -> None:
    assert find_secret(options) is None


A = "cloud.regions.local-a.storage_options"
C = "cloud.control_options"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (f"+{A}.client_kwargs.aws_secret_access_key=hunter2", f"{A}.client_kwargs.aws_secret_access_key"),
        (f"+{A}.client_kwargs={{aws_session_token:hunter2}}", f"{A}.client_kwargs.aws_session_token"),
        (f"+{A}.endpoint_url='http://u:hunter2@127.0.0.1:9'", f"{A}.endpoint_url"),
        (f"+{C}.config_kwargs.password=hunter2", f"{C}.config_kwargs.password"),
        (f"+{C}.endpoint_url='http://hunter2@127.0.0.1:9'", f"{C}.endpoint_url"),
        (f"+{C}.headers=[{{Authorization:hunter2}}]", f"{C}.headers[0].Authorization"),
    ],
)
def test_a_credential_at_any_depth_is_refused_by_its_key_and_not_echoed(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose([override])
    assert err.value.key == key
    assert "hunter2" not in str(err.value)


def test_timeouts_and_kms_key_ids_in_nested_options_pass() -> None:
    cfg = compose(
        [
            "+cloud.regions.local-a.storage_options.op_timeout_s=3",
            "+cloud.regions.local-a.storage_options.config_kwargs={read_timeout:3,connect_timeout:2}",
            "+cloud.regions.local-a.storage_options.s3_additional_kwargs={SSEKMSKeyId:arn-k}",
        ]
    )
    assert cfg.cloud.regions["local-a"].storage_options["config_kwargs"]["read_timeout"] == 3


def test_config_json_holds_no_credential_and_refuses_one(tmp_path) -> None:
    from orchestrator.control.controller import save_config
    from orchestrator.runstate.rundir import CONFIG_NAME

    cfg = compose(["cloud=local_cloudstores"])
    save_config(str(tmp_path), cfg)
    assert find_secret(json.loads((tmp_path / CONFIG_NAME).read_text())["cloud"]) is None
    cfg.cloud.regions["local-a"].storage_options["client_kwargs"] = {"aws_secret_access_key": "hunter2"}
    with pytest.raises(SecretInConfig):
        save_config(str(tmp_path / "other"), cfg)
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize(
    "field",
    [
        {"store_options": {"client_kwargs": {"aws_secret_access_key": "hunter2"}}},
        {"store_url": "s3://u:hunter2@b/x"},
        {"control_options": {"token": "hunter2"}},
        {"fallback_stores": [{"region": "b", "url": "s3://b/x", "options": {"password": "hunter2"}}]},
    ],
)
def test_a_runtime_spec_cannot_carry_a_credential(tmp_path, field: dict[str, object]) -> None:
    from orchestrator.wire.spec import RuntimeSpec

    base = {
        "run_id": "r",
        "generation": 1,
        "region": "a",
        "store_url": "s3://b/x",
        "control_url": "file:///tmp/c",
        "ray_address": "",
        "ray_storage_path": "",
        "job": {"name": "t"},
        "trainer": {},
        "checkpoint": {},
    }
    RuntimeSpec(**base).dump(str(tmp_path / "ok.json"))  # type: ignore[arg-type]
    with pytest.raises(SecretInConfig):
        RuntimeSpec(**{**base, **field}).dump(str(tmp_path / "spec.json"))  # type: ignore[arg-type]
    assert not (tmp_path / "spec.json").exists()
