"""The fault injector's part that the run's events set off, as a listener of them
(``orchestrator/control/listeners.py``): a fault ``during: failover`` fires once the run
moves to RECOVERING after a failed attempt (the policy's decision made, nothing launched
yet), and a drawn ``kill_node`` or ``hang_node`` knows the nodes the training group runs
on from the run's state (the runtime's last ``train_started``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from orchestrator.chaos.injector import FaultInjector, Injected
from orchestrator.runstate.events import AttemptEnded, Event, Transition
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.state import RunView
from orchestrator.wire.faults import During
from recovery.detection import FailureKind


class FaultPoints:
    """Told every event the run journals; fires the faults its events set off."""

    name = "chaos"

    def __init__(self, injector: FaultInjector, note: Callable[[Injected], object]) -> None:
        """``note``: shows a fault it fired (the progress line's words for it)."""
        self.injector = injector
        self.note = note
        # The last step the newest attempt knew done (its attempt_ended): where a fault at
        # the failover point strikes, as far as anyone can tell.
        self.last_step = 0

    def on_event(self, event: Event, view: RunView) -> None:
        self.injector.state.worker_nodes = list(view.worker_nodes)
        if isinstance(event, AttemptEnded):
            self.last_step = event.last_step or 0
        elif _failover(event) and event.to_region:
            for fired in self.injector.at_point(During.failover, None, event.to_region, self.last_step):
                if not fired.said:
                    self.injector.state.say(fired.event())
                self.note(fired)


def _failover(event: Event) -> TypeGuard[Transition]:
    """The run recovering from a failed attempt; not a resumed controller recovering from
    its predecessor's death, which is no failover of the run's."""
    return (
        isinstance(event, Transition)
        and event.to is RunState.RECOVERING
        and event.failure != FailureKind.CONTROLLER_LOST
    )
