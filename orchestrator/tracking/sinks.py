"""What a tracker is to the listener: a few calls, each run in the listener's thread.

A sink owns one tracker run and its children (a search's trials, ``child`` names them by
trial id); ``RUN`` ("") is the run itself. Each tracker's SDK is imported by its sink's
module alone, which the listener imports when a run names it (tracking.kind,
``tracker.make_sink``): a run without tracking imports neither MLflow nor W&B.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.tracking.series import Point


@dataclass(frozen=True)
class Started:
    tracker_run: str  # the tracker's id of the run
    resumed: bool  # an existing one, taken up again


class Sink(Protocol):
    def start(self, known: str | None, params: Mapping[str, str], tags: Mapping[str, str]) -> Started:
        """The run's tracker run: ``known`` (the journal's) taken up again, else the one the
        tracker has for this run_id, else a new one with ``params``."""
        ...

    def child(self, trial: str, known: str | None, params: Mapping[str, str]) -> Started:
        """A trial's child run, as ``start``."""
        ...

    def written(self, child: str) -> dict[str, int]:
        """The highest step the tracker has of each metric of the run (``child``: "" for
        the run itself): where a resumed series goes on."""
        ...

    def metrics(self, child: str, points: Sequence[Point]) -> None: ...

    def tags(self, tags: Mapping[str, str]) -> None: ...

    def incident(self, number: int, record: Mapping[str, Any], line: str) -> None:
        """The run's ``number``-th incident (1-based), as it is known now (it may be told again)."""
        ...

    def checkpoint(self, url: str, step: int | None, sha256: str | None) -> None:
        """The final checkpoint's location: a reference, never its bytes."""
        ...

    def finish(self, status: str) -> None:
        """The run's end (MLflow's FINISHED, FAILED or KILLED), children included."""
        ...


def missing(package: str, error: ImportError) -> ImportError:
    return ImportError(f"tracking needs {package}, which does not import here ({error}): pip install -e '.[tracking]'")
