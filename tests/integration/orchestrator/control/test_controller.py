"""The controller's loop, step by step, without Ray: ``Controller.step()`` over a scripted
provider (tests/support/fakecloud.py) and real file stores and control channel in a temp folder.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.runstate.lifecycle import RunState
from providers.base import ProvisionErrorKind
from tests.support.fakecloud import FakeCloud
from tests.unit.orchestrator.control.test_controller import (
    _controller,
    _events,
    _fast,  # noqa: F401 (autouse: these tests run under it too)
    _live,
    _replayed,
    _start,
)

pytestmark = pytest.mark.integration


class _NodeDiesIn(FakeCloud):
    """Worker node 1 of each cluster in ``dead_in`` is gone from the start."""

    dead_in: tuple[str, ...] = ("local-a",)

    def launch(self, region: Any, cluster_name: str, timeout_s: float, env: Any = None) -> Any:
        handle = super().launch(region, cluster_name, timeout_s, env)
        if region.name in self.dead_in:
            proc = self.node_procs[cluster_name][1]
            proc.kill()
            proc.wait()
        return handle


TWO_NODES_A = ("cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1")


def test_a_lost_node_replaced_keeps_the_run_in_its_region(tmp_path: Path) -> None:
    cloud = _NodeDiesIn({}, steps_per_poll=1)
    ctl = _controller(tmp_path, cloud, *TWO_NODES_A)
    _start(ctl)
    assert ctl.step() is True and ctl.view.state is RunState.SUCCEEDED
    (lost,) = _events(ctl, "node_lost")
    assert (lost["node"], lost["health"], lost["replacing"], lost["fits"]) == (1, "gone", True, 1)
    assert [e["node"] for e in _events(ctl, "node_replaced")] == [1]
    assert len(cloud.replaced) == 1 and not _events(ctl, "decision")
    assert _live(ctl) == _replayed(ctl)


def test_a_lost_node_not_replaced_with_too_few_workers_left_fails_the_region_over(tmp_path: Path) -> None:
    cloud = _NodeDiesIn({}, steps_per_poll=1, node_replacements=[ProvisionErrorKind.TIMEOUT])
    ctl = _controller(tmp_path, cloud, *TWO_NODES_A)
    _start(ctl)
    assert ctl.step() is False
    (failed,) = _events(ctl, "node_replace_failed")
    assert failed["node"] == 1 and failed["fits"] == 1
    (failure,) = _events(ctl, "failure_detected")
    assert failure["kind"] == "node_lost" and "fewer than 2 (trainer.min_workers)" in failure["detail"]
    (decision,) = _events(ctl, "decision")
    assert (decision["action"], decision["region"], decision["failure"]) == ("failover", "local-b", "node_lost")
    assert ctl.step() is True and ctl.view.state is RunState.SUCCEEDED
    assert _live(ctl) == _replayed(ctl)


def test_an_elastic_run_that_lost_a_node_goes_on_in_its_region(tmp_path: Path) -> None:
    cloud = _NodeDiesIn({}, steps_per_poll=1, node_replacements=[ProvisionErrorKind.TIMEOUT])
    ctl = _controller(tmp_path, cloud, *TWO_NODES_A, "trainer.min_workers=1")
    _start(ctl)
    assert ctl.step() is True and ctl.view.state is RunState.SUCCEEDED
    assert len(_events(ctl, "node_replace_failed")) == 1 and not _events(ctl, "failure_detected")
    word = ctl.control.read_nodes_word(1)
    assert word is not None and (word.fits, word.wait_until, word.lost) == (1, 0.0, (1,))
