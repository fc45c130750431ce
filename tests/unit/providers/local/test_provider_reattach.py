"""The connection to the runtime is not the runtime: each provider's connection can be cut
(chaos ssh_drop) while the runtime lives, and re-attached; the runtime's status comes
back through it. Health checks say GONE only when sure. And the injector's two faults
that act on the controller's view (status_flap, ssh_drop). No Ray: the local provider's
runtime is a sleeper, the SkyPilot head's shell runs here with bash."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.chaos.injector import FaultInjector, FlappedCheck
from orchestrator.runstate.events import FaultEnded, FaultFailed
from orchestrator.wire.control import ControlChannel
from providers.base import Capability, ClusterHandle
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import RUNTIME_GONE
from providers.skypilot.sdk import sky_health
from providers.skypilot.ssh import SshRuntime
from recovery.detection import Health, HealthCheck

pytestmark = pytest.mark.unit


# --- the local provider ------------------------------------------------------------------------


# --- SkyPilot: the head's shell, run here --------------------------------------------------------


class _Ended:
    def __init__(self, code: int) -> None:
        self.pid, self.returncode = 1, code

    def poll(self) -> int:
        return self.returncode


@pytest.mark.parametrize(
    ("ssh_status", "seen", "reattach"),
    [
        (0, 0, False),
        (4, 4, False),
        (137, -9, False),  # the runtime killed by SIGKILL: the waiting shell's 128+9
        (RUNTIME_GONE, RUNTIME_GONE, False),
        (97, 97, False),  # no Slurm allocation any more
        (255, 255, True),  # ssh lost its session
        (-9, -9, True),  # the local ssh was killed (ssh_drop)
    ],
)
def test_an_ssh_that_failed_is_reattached_and_one_that_brought_the_runtimes_status_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ssh_status: int, seen: int, reattach: bool
) -> None:
    refreshed: list[int] = []
    proc = SshRuntime(_Ended(ssh_status), lambda: refreshed.append(1), "/tmp/osky-x/spec-1.json", os.devnull)  # type: ignore[arg-type]
    assert proc.poll() == seen and proc.connection_failed is reattach
    assert refreshed == ([1] if ssh_status else []), "an ssh that fails has the cluster looked at at once"
    provider = SkyPilotProvider({}, out=io.StringIO())
    started: list[list[str]] = []

    def popen(argv: list[str], **kwargs: Any) -> _Ended:
        started.append(argv)
        return _Ended(0)

    monkeypatch.setattr(SkyPilotProvider, "_record", lambda self, c: None)
    monkeypatch.setattr("providers.skypilot.provider.subprocess.Popen", popen)
    cluster = ClusterHandle("c", "r", "skypilot", "", {"sky_cluster": "c", "infra": "aws/us-east-1"})
    again = provider.reattach(cluster, proc)
    assert (again is not None) is reattach
    if again is not None:
        assert isinstance(again, SshRuntime) and again.remote_spec == proc.remote_spec
        assert "--pid=" in started[0][-1] and "spec-1.pid" in started[0][-1]


@pytest.mark.parametrize(
    ("statuses", "health"),
    [
        (["UP"], Health.UP),
        (["INIT"], Health.NOT_UP),  # a node or Ray not answering: may pass
        ([], Health.GONE),  # no record
        (["STOPPED"], Health.GONE),
    ],
)
def test_skypilots_statuses_are_gone_only_for_no_record_or_a_stopped_cluster(
    statuses: list[str], health: Health
) -> None:
    assert sky_health(statuses) is health


# --- the injector's status_flap and ssh_drop -----------------------------------------------------


def _injector(tmp_path: Path, fault: dict[str, Any], provider: object) -> tuple[FaultInjector, list[object]]:
    events: list[object] = []
    control = ControlChannel(f"file://{tmp_path}/control")
    inj = FaultInjector([fault], control, provider, lambda: [], "r", on_event=events.append)  # type: ignore[arg-type]
    return inj, events


CLUSTER = ClusterHandle("c", "local-a", "local", "")


def test_status_flap_fails_count_checks_in_turn_not_up_and_raising_then_answers_as_the_provider(
    tmp_path: Path,
) -> None:
    inj, events = _injector(tmp_path, {"kind": "status_flap", "after_s": 1.0, "count": 3}, object())
    real = HealthCheck(Health.UP, 1.0)
    assert inj.health(CLUSTER, lambda: real) is real
    (fired,) = inj.timed(CLUSTER, None, 1, training_for_s=1.5)
    assert (fired.kind, fired.detail["count"]) == ("status_flap", 3)
    first = inj.health(CLUSTER, lambda: real)
    assert first.health is Health.NOT_UP and "1 of 3" in first.detail
    with pytest.raises(FlappedCheck, match="2 of 3"):
        inj.health(CLUSTER, lambda: real)
    assert inj.health(CLUSTER, lambda: real).health is Health.NOT_UP
    assert events == [FaultEnded(0, "status_flap", region="local-a")]
    assert inj.health(CLUSTER, lambda: real) is real


def test_ssh_drop_cuts_through_the_provider_or_fails_where_it_has_no_connection_to_cut(tmp_path: Path) -> None:
    class Cuts:
        name = "x"
        capabilities = frozenset({Capability.CUT_CONNECTION})

        def cut_connection(self, cluster: ClusterHandle) -> int:
            return 2

    inj, _ = _injector(tmp_path / "a", {"kind": "ssh_drop", "after_s": 1.0}, Cuts())
    (fired,) = inj.timed(CLUSTER, None, 1, training_for_s=2.0)
    assert fired.detail["cut"] == 2
    cannot = type("P", (), {"name": "p", "capabilities": frozenset()})()
    inj, events = _injector(tmp_path / "b", {"kind": "ssh_drop", "after_s": 1.0}, cannot)
    (fired,) = inj.timed(CLUSTER, None, 1, training_for_s=2.0)
    assert fired.detail["failed"] == "ssh_drop needs the provider capability cut_connection, which provider p lacks"
    assert [type(e) for e in events] == [FaultFailed]
