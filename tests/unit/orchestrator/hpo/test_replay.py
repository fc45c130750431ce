"""Optuna's TPE rebuilt from its log: the same proposals as the searcher it replaces, and a
log it could not have written refused in one line."""

from __future__ import annotations

import random
from typing import Any

import pytest

from orchestrator.hpo.replay import ASK, TELL, OptunaReplay, ReplayError, check_events, startup_trials

pytestmark = pytest.mark.unit
SPACE = {
    "job.lr": "loguniform 0.001 0.3",
    "job.params.hidden": "choice 8 16 32",
    "job.params.q": "quniform 8 64 8",
    "trainer.grad_clip_norm": "uniform 0.5 2.0",
    "job.params.g": "qloguniform 0.01 1.0 0.01",
    "job.params.k": "randint 1 4",
}
N = 12


def drive(searcher: OptunaReplay, steps: int, rng: random.Random, running: list[int], configs: list) -> None:
    """An asynchronous search, two trials at a time: ask while a slot is free, else tell one
    (a random one of those running), some errored."""
    for _ in range(steps):
        if len(running) < 2 and searcher.asked < N:
            index, values = searcher.ask()
            configs.append(values)
            running.append(index)
        elif running:
            index = running.pop(rng.randrange(len(running)))
            searcher.tell(index, None if rng.random() < 0.15 else rng.random())


@pytest.mark.parametrize("cut", [3, 9, 14])
def test_a_searcher_replayed_from_its_log_proposes_next_what_the_lost_one_would(cut: int) -> None:
    whole, whole_configs = OptunaReplay(SPACE, 7, "max", N), []
    drive(whole, 40, random.Random(1), [], whole_configs)
    # The same search, lost after ``cut`` events; replayed from its log and the records.
    lost, configs, running = OptunaReplay(SPACE, 7, "max", N), [], []
    rng = random.Random(1)
    drive(lost, cut, rng, running, configs)
    again = OptunaReplay.replay(SPACE, 7, "max", N, [list(e) for e in lost.events], list(configs))
    assert again.events == lost.events and again.asked == lost.asked and set(again.pending) == set(running)
    drive(again, 40 - cut, rng, running, configs)
    assert configs == whole_configs and again.events == whole.events
    assert len(configs) == N and startup_trials(N) == 6 < N  # TPE modelled some: not only its random start


def test_proposals_are_values_of_the_space() -> None:
    searcher = OptunaReplay(SPACE, 0, "min", 30)
    for _ in range(30):
        index, v = searcher.ask()
        searcher.tell(index, v["job.lr"])
        assert 0.001 <= v["job.lr"] <= 0.3 and v["job.params.hidden"] in (8, 16, 32)
        assert v["job.params.q"] in range(8, 65, 8) and isinstance(v["job.params.q"], int)
        assert v["job.params.k"] in (1, 2, 3) and 0.5 <= v["trainer.grad_clip_norm"] <= 2.0
        assert abs(v["job.params.g"] * 100 - round(v["job.params.g"] * 100)) < 1e-9


def test_a_log_whose_replay_proposes_other_values_than_the_records_is_refused() -> None:
    searcher = OptunaReplay(SPACE, 3, "max", N)
    configs: list[dict[str, Any]] = []
    for _ in range(3):
        index, values = searcher.ask()
        configs.append(values)
        searcher.tell(index, 0.5)
    forged = [dict(c) for c in configs]
    forged[2]["job.lr"] = 0.1
    with pytest.raises(ReplayError, match=r"^the searcher proposes other values for trial 2"):
        OptunaReplay.replay(SPACE, 3, "max", N, searcher.events, forged)
    with pytest.raises(ReplayError, match="trial 0"):  # another seed: another searcher
        OptunaReplay.replay(SPACE, 4, "max", N, searcher.events, configs)


@pytest.mark.parametrize(
    ("events", "words"),
    [
        ({"ask": 0}, "not a list"),
        ([[ASK, 0]] * 30, "not a list of at most 24"),
        ([["run", 0]], "not an ask or a tell"),
        ([[ASK, "0"]], "names no trial"),
        ([[ASK, True]], "names no trial"),
        ([[ASK, 1]], "asks for trial 1; the next is 0"),
        ([[ASK, 0], [TELL, 1, 0.5]], "was not asked"),
        ([[ASK, 0], [TELL, 0, 0.5], [TELL, 0, 0.5]], "told before"),
        ([[ASK, 0], [TELL, 0, "0.5"]], "not a finite number"),
        ([[ASK, 0], [TELL, 0, float("inf")]], "not a finite number"),
        ([[ASK, 0, 1]], "not \\[ask, index\\]"),
    ],
)
def test_a_log_it_could_not_have_written_is_refused_in_one_line(events: Any, words: str) -> None:
    with pytest.raises(ReplayError, match=words):
        check_events(events, N)
