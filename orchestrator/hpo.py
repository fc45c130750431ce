"""Hyperparameter search: the parts that need no Ray (search space, search steps, trial records).

A search's progress is counted in *search steps*: every trial iteration reported
plus every trial that finished (completed, stopped by the scheduler, or errored).
The count only grows, also across a restore (Tune keeps each trial's last result
in the experiment state), so it orders the experiment snapshots in the store and
is the step a chaos fault's ``at_step`` names.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.errors import ConfigError

# Job keys a trial may vary, and the distributions it may draw them from: the first word
# of an hpo.search_space value (a string, so parsed here rather than typed by OmegaConf).
HPO_SEARCHABLE = ("lr", "hidden_size", "batch_size")


class Distribution(StrEnum):
    choice = "choice"
    grid = "grid"
    uniform = "uniform"
    loguniform = "loguniform"
    randint = "randint"


HPO_DISTRIBUTIONS = tuple(Distribution)

# Trial states as Tune names them.
TERMINATED, ERROR = "TERMINATED", "ERROR"
FINISHED = (TERMINATED, ERROR)


def max_search_steps(num_trials: int, max_t: int) -> int:
    """The most search steps a search can take: every trial runs to max_t, then finishes."""
    return num_trials * (max_t + 1)


# A search's trials are listed up front (sample_configs); more than this is a typo.
MAX_TRIALS = 10_000


def trial_count(space: dict[str, str], num_samples: int) -> int:
    """How many trials a search runs: num_samples times every combination of its grid keys."""
    n = num_samples
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        if kind == Distribution.grid:
            n *= len(args)
    return n


def trial_key(index: int) -> str:
    """A trial's id: its place in sample_configs, the same in every attempt of the run."""
    return f"trial_{index:05d}"


def sample_configs(space: dict[str, str], num_samples: int, seed: int) -> list[dict[str, int | float]]:
    """Every trial's values, drawn once from ``seed``: each of ``num_samples`` rounds takes every
    combination of the grid keys (in order) and draws the other keys afresh, as Tune's
    variant generator does. Listing them up front, rather than letting Tune draw them as
    it goes, is what makes a trial the same trial in every attempt: a resumed search
    rebuilds the list from the run's config and never reads it back from a store."""
    rng = random.Random(seed)
    parsed = {key: parse_distribution(key, text) for key, text in space.items()}
    grids = {key: args for key, (kind, args) in parsed.items() if kind == Distribution.grid}
    out: list[dict[str, int | float]] = []
    for _ in range(num_samples):
        for combo in itertools.product(*grids.values()):
            fixed = dict(zip(grids, combo, strict=True))
            config: dict[str, int | float] = {}
            for key, (kind, args) in parsed.items():
                if key in fixed:
                    config[key] = fixed[key]
                elif kind == Distribution.choice:
                    config[key] = rng.choice(args)
                elif kind == Distribution.uniform:
                    config[key] = rng.uniform(float(args[0]), float(args[1]))
                elif kind == Distribution.loguniform:
                    config[key] = math.exp(rng.uniform(math.log(args[0]), math.log(args[1])))
                else:  # randint: high excluded, as Tune's
                    config[key] = rng.randrange(int(args[0]), int(args[1]))
            out.append(config)
    return out


class AshaRungs:
    """ASHA's bookkeeping as plain data (one bracket, Tune's rule), so that it travels in a
    search snapshot as JSON and is rebuilt, never unpickled, on restore.

    At each rung (an iteration below max_t, see asha_rungs) a trial's first result is
    recorded; it is stopped if it is worse than the ``1 - 1/reduction_factor`` quantile
    of the results recorded there before it. Trials are named by trial_key, so a
    restored search's trials meet the values their earlier selves left at each rung.
    """

    def __init__(self, rungs: list[int], reduction_factor: int, mode: str) -> None:
        self.reduction_factor, self.sign = reduction_factor, 1.0 if mode == "max" else -1.0
        self.recorded: dict[int, dict[str, float]] = {r: {} for r in rungs}

    def on_result(self, trial_id: str, iteration: int, value: float) -> bool:
        """Record the result at the highest rung it reached; True: stop the trial."""
        for rung in sorted(self.recorded, reverse=True):
            seen = self.recorded[rung]
            if iteration < rung or trial_id in seen:
                continue
            cutoff = quantile(list(seen.values()), 1 - 1 / self.reduction_factor)
            seen[trial_id] = self.sign * value
            return cutoff is not None and self.sign * value < cutoff
        return False

    def to_json(self) -> dict[str, dict[str, float]]:
        return {str(r): dict(sorted(v.items())) for r, v in sorted(self.recorded.items())}

    def load(self, data: dict[str, dict[str, float]]) -> None:
        """Values a snapshot recorded (already checked: rungs and trials known, numbers finite)."""
        for rung, values in data.items():
            self.recorded[int(rung)] = dict(values)


def quantile(values: list[float], q: float) -> float | None:
    """numpy's nanpercentile (linear), as Tune's ASHA takes it; None for no values."""
    xs = sorted(v for v in values if not math.isnan(v))
    if not xs:
        return None
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def asha_rungs(max_t: int, grace_period: int, reduction_factor: int) -> list[int]:
    """Iterations at which ASHA may stop a trial (below max_t), ascending."""
    rungs, t = [], grace_period
    while t < max_t:
        rungs.append(t)
        t *= reduction_factor
    return rungs


def parse_distribution(key: str, text: str) -> tuple[Distribution, list[int | float]]:
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
    kind, args = Distribution(parts[0]), []
    for raw in parts[1:]:
        try:
            args.append(int(raw) if raw.lstrip("-").isdigit() else float(raw))
        except ValueError:
            raise ConfigError(where, f"got {raw!r} in {text!r}; expected numbers") from None
    if not args:
        raise ConfigError(where, f"got {text!r}; {kind} needs numbers after it")
    if kind in (Distribution.uniform, Distribution.loguniform, Distribution.randint):
        if len(args) != 2 or not args[0] < args[1]:
            raise ConfigError(where, f"got {text!r}; {kind} takes two numbers, low < high")
        if kind == Distribution.loguniform and args[0] <= 0:
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
        if kind == Distribution.choice:
            out[key] = tune.choice(args)
        elif kind == Distribution.grid:
            out[key] = tune.grid_search(args)
        elif kind == Distribution.uniform:
            out[key] = tune.uniform(*args)
        elif kind == Distribution.loguniform:
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
    # The hash of the trial's weights at its last result (the best trial's is the run's).
    weights_sha256: str | None = None

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
