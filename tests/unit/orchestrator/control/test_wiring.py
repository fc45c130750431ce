"""The run's wiring (orchestrator/control/wiring.py): every collaborator made from the config and
handed to the controller; the listeners told in their order, one the caller adds among them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from orchestrator.control.wiring import build_controller, policy_for
from orchestrator.runstate.events import Event, type_of
from orchestrator.runstate.state import RunView
from tests.support.fakecloud import FakeCloud, Script
from tests.unit.orchestrator.control.test_controller import RUN, _config, _fast  # noqa: F401 (autouse)

pytestmark = pytest.mark.unit


class Seen:
    name = "seen"

    def __init__(self) -> None:
        self.types: list[str] = []
        self.closed = False

    def on_event(self, event: Event, view: RunView) -> None:
        self.types.append(type_of(event))

    def close(self) -> None:
        self.closed = True


class Fails:
    name = "fails"

    def on_event(self, event: Event, view: RunView) -> None:
        raise RuntimeError(f"cannot take {type_of(event)}\nmore")


def test_the_built_in_listeners_come_first_then_the_callers_and_each_hears_the_whole_run(tmp_path: Path) -> None:
    seen = Seen()
    cloud = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    ctl = build_controller(_config(tmp_path), cloud, RUN, out=io.StringIO(), listeners=[Fails(), seen])
    assert ctl.events.listeners == ("notifier", "tensorboard", "progress", "chaos", "fails", "seen")
    assert ctl.run()["status"] == "SUCCEEDED"
    journaled = [e["type"] for e in ctl.journal.events()]
    # Told every event the journal holds, in its order; closed after the last.
    assert seen.types == journaled and seen.closed and journaled[-1] == "run_finished"
    # The listener that raised on every event cost the run nothing and was journaled once.
    (failed,) = [e for e in ctl.journal.events() if e["type"] == "listener_failed"]
    assert (failed["listener"], failed["error"], failed["event"]) == (
        "fails",
        "RuntimeError: cannot take run_started",
        "run_started",
    )


def test_the_failure_policy_has_the_runs_budgets_and_passes_over_regions_too_small() -> None:
    from orchestrator.config.compose import compose

    cfg = compose(["recovery.max_failovers=5", "trainer.workers=2", "cloud.regions.local-b.num_cpus=1"])
    policy = policy_for(cfg)
    assert policy.candidates == ["local-a", "local-b", "local-c"] and policy.budgets.max_failovers == 5
    assert list(policy.budgets.too_small) == ["local-b"]


def test_a_listener_the_config_names_hears_every_event_and_one_that_cannot_be_made_costs_the_run_nothing(
    tmp_path: Path,
) -> None:
    from tests.support.listeners import listened

    named = "metrics.listeners=[tests.support.listeners:Recorder,tests.support.listeners:Broken]"
    cloud = FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})
    ctl = build_controller(_config(tmp_path, named), cloud, RUN, out=io.StringIO())
    assert ctl.events.listeners[4:] == ("tests.support.listeners:Recorder", "tests.support.listeners:Broken")
    assert ctl.run()["status"] == "SUCCEEDED"
    journal = ctl.journal.events()
    heard = listened(ctl.run_dir)
    assert [e["type"] for e in heard[:-1]] == [e["type"] for e in journal] and heard[-1] == {"closed": True}
    assert [e["ts"] for e in heard[:-1]] == [e["ts"] for e in journal]
    (failed,) = [e for e in journal if e["type"] == "listener_failed"]
    assert failed["listener"] == "tests.support.listeners:Broken" and failed["event"] == "run_started"
    assert failed["error"] == "OSError: no exporter for loop"
