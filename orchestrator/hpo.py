"""Hyperparameter search: the parts that need no Ray (search space, search steps, trial records).

A search's progress is counted in *search steps*: every trial iteration reported
plus every trial that finished (completed, stopped by the scheduler, or errored).
The count only grows, also across a restore (Tune keeps each trial's last result
in the experiment state), so it orders the experiment snapshots in the store and
is the step a chaos fault's ``at_step`` names.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.config import HPO_DISTRIBUTIONS, HPO_SEARCHABLE, ConfigError

# Trial states as Tune names them.
TERMINATED, ERROR = "TERMINATED", "ERROR"
FINISHED = (TERMINATED, ERROR)


def max_search_steps(num_samples: int, max_t: int) -> int:
    """The most search steps a search can take: every trial runs to max_t, then finishes."""
    return num_samples * (max_t + 1)


def asha_rungs(max_t: int, grace_period: int, reduction_factor: int) -> list[int]:
    """Iterations at which ASHA may stop a trial (below max_t), ascending."""
    rungs, t = [], grace_period
    while t < max_t:
        rungs.append(t)
        t *= reduction_factor
    return rungs


def parse_distribution(key: str, text: str) -> tuple[str, list[int | float]]:
    """``"loguniform 0.01 0.2"`` -> ("loguniform", [0.01, 0.2]); ConfigError naming the key."""
    where = f"hpo.search_space.{key}"
    parts = str(text).split()
    if not parts or parts[0] not in HPO_DISTRIBUTIONS:
        raise ConfigError(
            where,
            f"got {text!r}; expected a distribution and its numbers, one of: "
            + ", ".join(HPO_DISTRIBUTIONS)
            + " (e.g. 'loguniform 0.01 0.2', 'choice 32 64 128')",
        )
    kind, args = parts[0], []
    for raw in parts[1:]:
        try:
            args.append(int(raw) if raw.lstrip("-").isdigit() else float(raw))
        except ValueError:
            raise ConfigError(where, f"got {raw!r} in {text!r}; expected numbers") from None
    if not args:
        raise ConfigError(where, f"got {text!r}; {kind} needs numbers after it")
    if kind in ("uniform", "loguniform", "randint"):
        if len(args) != 2 or not args[0] < args[1]:
            raise ConfigError(where, f"got {text!r}; {kind} takes two numbers, low < high")
        if kind == "loguniform" and args[0] <= 0:
            raise ConfigError(where, f"got {text!r}; loguniform needs low > 0")
    for value in args:
        if key in ("hidden_size", "batch_size") and (not isinstance(value, int) or value < 1):
            raise ConfigError(where, f"got {text!r}; {key} takes integers >= 1")
        if key == "lr" and (value <= 0 or math.isnan(value)):
            raise ConfigError(where, f"got {text!r}; lr takes numbers > 0")
    return kind, args


def validate_search_space(space: dict[str, str]) -> None:
    """Each key a job key a trial may vary, each value a distribution (see parse_distribution)."""
    if not space:
        raise ConfigError("hpo.search_space", "is empty; give e.g. hpo.search_space.lr='loguniform 0.01 0.2'")
    for key, text in space.items():
        if key not in HPO_SEARCHABLE:
            raise ConfigError(
                f"hpo.search_space.{key}", f"not a key a trial can vary; allowed: {', '.join(HPO_SEARCHABLE)}"
            )
        parse_distribution(key, text)


def param_space(space: dict[str, str]) -> dict[str, Any]:
    """The search space as Tune's sampling domains."""
    from ray import tune

    out: dict[str, Any] = {}
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        if kind == "choice":
            out[key] = tune.choice(args)
        elif kind == "grid":
            out[key] = tune.grid_search(args)
        elif kind == "uniform":
            out[key] = tune.uniform(*args)
        elif kind == "loguniform":
            out[key] = tune.loguniform(*args)
        else:
            out[key] = tune.randint(int(args[0]), int(args[1]))
    return out


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
