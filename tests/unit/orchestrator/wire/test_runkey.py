"""The run's key on its way to the runtime (orchestrator/wire/runkey.py): out of the environment, never shown."""

from __future__ import annotations

import pytest

from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.unit


def test_the_key_is_taken_out_of_the_environment_and_errors_never_show_it() -> None:
    from orchestrator.wire import runkey

    keys = TEST_KEY.for_attempt(3)
    env = {runkey.ENV: keys.to_wire(), "OTHER": "1"}
    assert runkey.take_from_env(env) == keys
    assert env == {"OTHER": "1"}
    assert runkey.take_from_env(env) is None
    with pytest.raises(runkey.RunKeyError) as info:
        runkey.parse("zz-not-hex-secretvalue")
    assert "secretvalue" not in str(info.value)
