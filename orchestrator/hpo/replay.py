"""A searcher that proposes trials from earlier results (Optuna's TPE), rebuilt by replay.

Its state never crosses a store as a pickle. What it was told and asked is a log of
plain events, kept in the search's snapshot: ``["ask", index]`` (trial ``index`` was
proposed; its values are in its record) and ``["tell", index, value]`` (its result: the
searched metric, or None for a trial that errored). A resumed search feeds the log into
a fresh searcher with the same seed (``OptunaReplay.replay``), checking that every
proposal it makes again is the recorded trial's values: it is then in the state the
lost one was in, and proposes next what the lost one would have, given the same
results in the same order.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.hpo.space import QUANTIZED, Distribution, parse_distribution, quantize

ASK, TELL = "ask", "tell"


class ReplayError(ValueError):
    """A log that is not one this searcher could have written; the message is one line."""


def startup_trials(num_samples: int) -> int:
    """TPE's random start-up before it models the results: Optuna's 10, fewer for small searches."""
    return max(1, min(10, num_samples // 2))


def _distributions(space: dict[str, str]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        if kind == Distribution.choice:
            out[key] = CategoricalDistribution(list(args))
        elif kind == Distribution.randint:
            out[key] = IntDistribution(int(args[0]), int(args[1]) - 1)
        elif kind == Distribution.quniform and all(isinstance(a, int) for a in args):
            out[key] = IntDistribution(int(args[0]), int(args[1]), step=int(args[2]))
        else:  # drawn continuous; the quantized ones rounded to q (values())
            log = kind in (Distribution.loguniform, Distribution.qloguniform)
            out[key] = FloatDistribution(float(args[0]), float(args[1]), log=log)
    return out


class OptunaReplay:
    """Optuna's TPE over the search space, seeded, with the log of what it was asked and told."""

    def __init__(self, space: dict[str, str], seed: int, mode: str, num_samples: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space, self.num_samples = space, num_samples
        self.dists = _distributions(space)
        # Quantized keys Optuna draws as plain floats (an integer quniform it draws on its grid).
        self.rounded = {
            key: args
            for key, (kind, args) in ((k, parse_distribution(k, t)) for k, t in space.items())
            if kind in QUANTIZED and type(self.dists[key]).__name__ == "FloatDistribution"
        }
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(num_samples))
        self.study = optuna.create_study(sampler=sampler, direction="maximize" if mode == "max" else "minimize")
        self.pending: dict[int, Any] = {}
        self.events: list[list[Any]] = []
        self.asked = 0

    def ask(self) -> tuple[int, dict[str, Any]]:
        """The next trial: its index and its values."""
        trial = self.study.ask(self.dists)
        index = self.asked
        self.pending[index] = trial
        self.asked += 1
        self.events.append([ASK, index])
        return index, self.values(trial.params)

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        """Optuna's draws as the trial's values: the quantized float keys rounded to their q."""
        return {key: quantize(v, *self.rounded[key]) if key in self.rounded else v for key, v in params.items()}

    def tell(self, index: int, value: float | None) -> None:
        """Trial ``index``'s result: its metric, or None (it errored: Optuna's FAIL)."""
        import optuna

        trial = self.pending.pop(index)
        if value is None or not math.isfinite(value):
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            value = None
        else:
            self.study.tell(trial, value)
        self.events.append([TELL, index, value])

    @classmethod
    def replay(
        cls,
        space: dict[str, str],
        seed: int,
        mode: str,
        num_samples: int,
        events: Any,
        configs: list[dict[str, Any]],
    ) -> OptunaReplay:
        """A fresh searcher fed ``events`` (a snapshot's, checked here); each proposal it makes
        again must be ``configs[index]``, the recorded trial's values. ReplayError if not."""
        check_events(events, num_samples)
        searcher = cls(space, seed, mode, num_samples)
        for event in events:
            if event[0] == ASK:
                index, values = searcher.ask()
                if index >= len(configs) or values != configs[index]:
                    raise ReplayError(f"the searcher proposes other values for trial {index} than its record holds")
            else:
                searcher.tell(int(event[1]), None if event[2] is None else float(event[2]))
        return searcher


MAX_EVENT_VALUE = 1e300


def check_events(events: Any, num_samples: int) -> None:
    """A log as OptunaReplay writes it: asks numbered 0, 1, ... (at most ``num_samples``), each
    trial told at most once and only after it was asked, values finite numbers or None."""
    if not isinstance(events, list) or len(events) > 2 * num_samples:
        raise ReplayError(f"the searcher's log is not a list of at most {2 * num_samples} events")
    asked, told = 0, set()
    for i, event in enumerate(events):
        where = f"the searcher's event {i}"
        if not isinstance(event, list) or not event or event[0] not in (ASK, TELL):
            raise ReplayError(f"{where} is not an ask or a tell")
        index = event[1] if len(event) > 1 else None
        if isinstance(index, bool) or not isinstance(index, int):
            raise ReplayError(f"{where} names no trial")
        if event[0] == ASK:
            if len(event) != 2:
                raise ReplayError(f"{where} is not [ask, index]")
            if index != asked:
                raise ReplayError(f"{where} asks for trial {index}; the next is {asked}")
            asked += 1
            continue
        if len(event) != 3 or not 0 <= index < asked or index in told:
            raise ReplayError(f"{where} tells trial {index}, which was not asked or was told before")
        value = event[2]
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) < MAX_EVENT_VALUE
        ):
            raise ReplayError(f"{where} tells a value that is not a finite number")
        told.add(index)
