"""Clean-up runs every step even when one fails; a standby whose runtime cannot start
is torn down, not leaked."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.control.cleanup import run_all

pytestmark = pytest.mark.unit


def test_every_step_runs_and_the_first_error_is_raised() -> None:
    ran: list[str] = []

    def step(name: str, fail: bool = False) -> Any:
        def run() -> None:
            ran.append(name)
            if fail:
                raise RuntimeError(name)

        return run

    with pytest.raises(RuntimeError, match=r"^replicator$"):
        run_all([step("standby"), step("replicator", True), step("teardown", True), step("proxies")])
    assert ran == ["standby", "replicator", "teardown", "proxies"]
    run_all([step("again")])
    assert ran[-1] == "again"


def test_an_interrupt_during_clean_up_still_runs_the_rest() -> None:
    ran: list[str] = []

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_all([interrupted, lambda: ran.append("teardown")])
    assert ran == ["teardown"]
