"""notify_targets: webhooks and commands refused before the run, never showing a token."""

from __future__ import annotations

import pytest

from orchestrator.config.notify_targets import check_notify_program, notify_from_env, refuse_kept, validate_notify
from orchestrator.config.schema import NOTIFY_KEPT, NotifyConfig
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit
TOKEN = "T0KEN-abcdef"


@pytest.mark.parametrize(
    ("notify", "key"),
    [
        (NotifyConfig(webhook=f"ftp://host/{TOKEN}"), "notify.webhook"),
        (NotifyConfig(webhook=f"https://user:{TOKEN}@host/"), "notify.webhook"),
        (NotifyConfig(webhook=f"https://host/ {TOKEN}"), "notify.webhook"),
        (NotifyConfig(webhook="env:1BAD"), "notify.webhook"),
        (NotifyConfig(webhook=f"{NOTIFY_KEPT}https://host/{TOKEN}"), "notify.webhook"),
        (NotifyConfig(command=f"'unclosed {TOKEN}"), "notify.command"),
        (NotifyConfig(command="   "), "notify.command"),
        (NotifyConfig(timeout_s=61.0), "notify.timeout_s"),
    ],
)
def test_a_target_that_could_never_work_is_refused_without_its_token(notify: NotifyConfig, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_notify(notify)
    assert err.value.key == key and TOKEN not in str(err.value)


def test_sound_targets_pass() -> None:
    validate_notify(NotifyConfig(webhook="https://hooks.example.com/x?t=1", command="python3 notify.py"))
    validate_notify(NotifyConfig(webhook="env:HOOK_URL"))
    validate_notify(NotifyConfig(webhook=f"{NOTIFY_KEPT}https://hooks.example.com", command=f"{NOTIFY_KEPT}python3"))


def test_env_webhook_is_read_at_the_start_and_never_shown() -> None:
    notify = NotifyConfig(webhook="env:HOOK")
    assert (
        notify_from_env(notify, {"HOOK": f"https://h.example.com/{TOKEN}"}).webhook == f"https://h.example.com/{TOKEN}"
    )
    with pytest.raises(ConfigError, match=r"HOOK is not set"):
        notify_from_env(notify, {})
    with pytest.raises(ConfigError) as err:
        notify_from_env(notify, {"HOOK": f"ftp://{TOKEN}"})
    assert TOKEN not in str(err.value)


def test_kept_names_are_a_saved_configs_not_a_users() -> None:
    with pytest.raises(ConfigError, match=r"^notify.webhook:"):
        refuse_kept(NotifyConfig(webhook=f"{NOTIFY_KEPT}https://h"))
    refuse_kept(NotifyConfig(webhook="https://h"))


def test_a_command_whose_program_is_not_there_is_refused() -> None:
    check_notify_program(NotifyConfig(command="python3 -c pass"))
    with pytest.raises(ConfigError, match=r"is not a program"):
        check_notify_program(NotifyConfig(command="no-such-program-zz arg"))
