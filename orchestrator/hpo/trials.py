"""Trials as records, and a search's progress counted in search steps.

A search's progress is counted in *search steps*: every trial iteration reported
plus every trial that finished (completed, stopped by the scheduler, or errored).
The count only grows, also across a restore (Tune keeps each trial's last result
in the experiment state), so it orders the experiment snapshots in the store and
is the step a chaos fault's ``at_step`` names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Trial states as Tune names them.
TERMINATED, ERROR = "TERMINATED", "ERROR"
FINISHED = (TERMINATED, ERROR)


def max_search_steps(num_trials: int, max_t: int) -> int:
    """The most search steps a search can take: every trial runs to max_t, then finishes."""
    return num_trials * (max_t + 1)


def trial_key(index: int) -> str:
    """A trial's id: its place in the search's list of trials, the same in every attempt of the run."""
    return f"trial_{index:05d}"


@dataclass
class TrialRecord:
    """One trial as the runtime reports it (progress, snapshots, result.json)."""

    trial_id: str
    status: str
    iteration: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # The iteration of the newest checkpoint Tune holds for the trial (None: none yet).
    checkpoint_iteration: int | None = None
    error: str | None = None
    # The hash of the trial's weights at its last result (the best trial's is the run's).
    weights_sha256: str | None = None
    # A train function's trial (weights it alone knows): the digest of its newest
    # checkpoint's files (recovery.manifest.checkpoint_digest), as a function's run reports.
    checkpoint_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ray_train_trial(workers: int, train_func: str | None, loader: str) -> bool:
    """Whether each trial of a search is a Ray Train run: more than one worker, a train
    function (Ray Train's context at any world size) or Ray Data (which Ray Train splits
    to its workers); else it trains in its Tune trial's process."""
    return workers > 1 or bool(train_func) or loader == "ray_data"


def search_step(trials: list[TrialRecord]) -> int:
    return sum(t.iteration for t in trials) + sum(1 for t in trials if t.status in FINISHED)


def best_of(trials: list[TrialRecord], metric: str, mode: str) -> TrialRecord | None:
    """The trial whose last reported ``metric`` is best; errored trials never win. Ties: the first."""
    scored = [t for t in trials if t.status != ERROR and metric in t.metrics]
    if not scored:
        return None
    sign = 1.0 if mode == "max" else -1.0
    return max(scored, key=lambda t: sign * float(t.metrics[metric]))


def counts(trials: list[TrialRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in trials:
        out[t.status.lower()] = out.get(t.status.lower(), 0) + 1
    return out


def progress_text(prog: dict[str, Any]) -> str:
    """The search's part of the progress line: trials by state and the best so far."""
    trials = prog.get("trials")
    if not isinstance(trials, dict):
        return ""
    states = " ".join(f"{n} {state}" for state, n in sorted(trials.items()))
    best = prog.get("best")
    text = f"  trials {states}"
    if isinstance(best, dict) and best.get("value") is not None:
        text += f"  best {best.get('metric')} {float(best['value']):.4f} ({best.get('trial_id')})"
    return text
