"""A listener of a run's events as a user adds one (``metrics.listeners=[tests.support.listeners:Recorder]``):
it writes each event it is told, in order, to ``listened.jsonl`` in the run's folder."""

from __future__ import annotations

import json
import os

from orchestrator.control.listeners import ListenerRun
from orchestrator.runstate.events import Event, type_of
from orchestrator.runstate.state import RunView

LISTENED = "listened.jsonl"


class Recorder:
    def __init__(self, run: ListenerRun) -> None:
        self.path = os.path.join(run.run_dir, LISTENED)
        self.closed = False

    def on_event(self, event: Event, view: RunView) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"type": type_of(event), "ts": event.ts, "state": str(view.state)}) + "\n")

    def close(self) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"closed": True}) + "\n")


def listened(run_dir: object) -> list[dict[str, object]]:
    """What the Recorder of the run in ``run_dir`` wrote, line by line."""
    with open(os.path.join(str(run_dir), LISTENED), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


class Broken:
    """Named by metrics.listeners, it cannot even be made."""

    def __init__(self, run: ListenerRun) -> None:
        raise OSError(f"no exporter for {run.run_id}")
