"""console.*: action=console's alone, a port 0..65535, a host to bind."""

from __future__ import annotations

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.schema import Action
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


def test_the_console_defaults_to_loopback_a_free_port_and_actions() -> None:
    cfg = compose(["action=console"])
    assert cfg.action is Action.console
    assert (cfg.console.port, cfg.console.host, cfg.console.actions) == (0, "127.0.0.1", True)
    named = compose(["action=console", "console.port=8888", "console.host=::1", "console.actions=false"])
    assert (named.console.port, named.console.host, named.console.actions) == (8888, "::1", False)
    assert compose(["action=console", "console.host=0.0.0.0"]).console.host == "0.0.0.0"


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["action=console", "console.port=70000"], "console.port", "expected an integer in 0..65535"),
        (["action=console", "console.port=-1"], "console.port", "0..65535"),
        (["action=console", "console.host=http://x"], "console.host", "without a scheme or a port"),
        (["action=console", "console.host=a b"], "console.host", "a host name or an address"),
        (["action=console", "console.host=''"], "console.host", "a host name"),
        (["action=console", "run_id=r1"], "run_id", "action=console shows every run"),
        (["action=list", "console.port=8000"], "console", "only action=console takes console"),
    ],
)
def test_a_bad_console_key_is_refused_naming_it(overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(overrides)
    assert err.value.key == key and words in str(err.value)
