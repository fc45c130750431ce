"""The search's config, trials, search steps, best trial and ASHA's rule, without a cluster."""

from __future__ import annotations

import math

import pytest

from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from orchestrator.hpo import (
    AshaRungs,
    TrialRecord,
    asha_rungs,
    best_of,
    max_search_steps,
    parse_distribution,
    progress_text,
    quantile,
    sample_configs,
    search_step,
    trial_count,
    trial_key,
)


def test_digits_hpo_composes_with_the_search_in_the_job_config() -> None:
    cfg = compose(["job=digits_hpo"])
    assert cfg.hpo.enabled and cfg.hpo.scheduler == "asha"
    assert cfg.hpo.search_space == {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128"}
    assert (cfg.recovery.resume_errored, cfg.recovery.restart_errored) == (True, False)
    assert not compose(["job=digits"]).hpo.enabled


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("hpo.search_space.lr=beta 1 2", "hpo.search_space.lr", "choice, grid, uniform"),
        ("hpo.search_space.lr=uniform 0.3 0.2", "hpo.search_space.lr", "low < high"),
        ("hpo.search_space.lr=loguniform 0 1", "hpo.search_space.lr", "low > 0"),
        ("hpo.search_space.hidden_size=choice 32 6.5", "hpo.search_space.hidden_size", "integers"),
        ("+hpo.search_space.momentum=choice 0.9", "hpo.search_space.momentum", "lr, hidden_size, batch_size"),
        ("hpo.mode=maximize", "hpo.mode", "max, min"),
        ("hpo.scheduler=pbt", "hpo.scheduler", "asha, fifo"),
        ("hpo.grace_period=9", "hpo.grace_period", "hpo.max_t"),
        ("hpo.reduction_factor=1", "hpo.reduction_factor", ">= 2"),
        ("hpo.cpus_per_trial=4", "hpo.cpus_per_trial", "no trial could start"),
        ("data.loader=ray_data", "data.loader", "sharded"),
        ("recovery.restart_errored=true", "recovery.restart_errored", "pick one"),
        ("chaos.faults=[{kind:kill_worker,at_step:3}]", "chaos.faults[0].kind", "kill_region"),
        ("chaos.faults=[{kind:kill_region,at_step:43}]", "chaos.faults[0].at_step", "1..42"),
    ],
)
def test_a_bad_search_config_names_its_key(override: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(["job=digits_hpo", override])
    assert err.value.key == key
    assert words in str(err.value)


def test_distributions_parse_to_numbers() -> None:
    assert parse_distribution("lr", "loguniform 1e-3 0.2") == ("loguniform", [0.001, 0.2])
    assert parse_distribution("hidden_size", "grid 32 64") == ("grid", [32, 64])
    assert parse_distribution("batch_size", "randint 16 128") == ("randint", [16, 128])


def test_search_steps_count_iterations_and_finished_trials() -> None:
    trials = [
        TrialRecord("a", "TERMINATED", iteration=6),
        TrialRecord("b", "TERMINATED", iteration=2),
        TrialRecord("c", "RUNNING", iteration=3),
        TrialRecord("d", "ERROR", iteration=1),
        TrialRecord("e", "PENDING"),
    ]
    assert search_step(trials) == 6 + 2 + 3 + 1 + 3
    assert max_search_steps(6, 6) == 42
    assert asha_rungs(6, 2, 2) == [2, 4]
    assert asha_rungs(9, 1, 3) == [1, 3]


def test_best_trial_follows_metric_and_mode_and_never_an_errored_one() -> None:
    trials = [
        TrialRecord("a", "TERMINATED", metrics={"accuracy": 0.90, "eval_loss": 0.30}),
        TrialRecord("b", "TERMINATED", metrics={"accuracy": 0.95, "eval_loss": 0.40}),
        TrialRecord("c", "ERROR", metrics={"accuracy": 0.99, "eval_loss": 0.01}),
    ]
    best_acc, best_loss = best_of(trials, "accuracy", "max"), best_of(trials, "eval_loss", "min")
    assert best_acc is not None and best_acc.trial_id == "b"
    assert best_loss is not None and best_loss.trial_id == "a"
    assert best_of([TrialRecord("x", "ERROR", metrics={"accuracy": 1.0})], "accuracy", "max") is None


def test_progress_text_shows_trials_and_the_best_so_far() -> None:
    text = progress_text(
        {"trials": {"running": 2, "terminated": 3}, "best": {"metric": "accuracy", "value": 0.9688, "trial_id": "t3"}}
    )
    assert text == "  trials 2 running 3 terminated  best accuracy 0.9688 (t3)"
    assert progress_text({"step": 3}) == ""


# --- the trials, listed up front ------------------------------------------------------------------


def test_trials_are_drawn_once_from_the_seed_within_their_distributions() -> None:
    space = {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128", "batch_size": "randint 16 20"}
    configs = sample_configs(space, 50, seed=0)
    assert configs == sample_configs(space, 50, seed=0) != sample_configs(space, 50, seed=1)
    assert len(configs) == trial_count(space, 50) == 50
    assert all(0.01 <= c["lr"] <= 0.2 and c["hidden_size"] in (32, 64, 128) for c in configs)
    assert {c["batch_size"] for c in configs} == {16, 17, 18, 19}  # high excluded, as Tune's
    assert all(isinstance(c["hidden_size"], int) and isinstance(c["lr"], float) for c in configs)
    # Log-uniform: as many draws below the geometric mean as above it, roughly.
    below = sum(c["lr"] < math.sqrt(0.01 * 0.2) for c in sample_configs(space, 2000, seed=3))
    assert 900 < below < 1100


def test_every_round_takes_every_grid_combination() -> None:
    space = {"hidden_size": "grid 32 64", "batch_size": "grid 8 16 32", "lr": "uniform 0.1 0.2"}
    configs = sample_configs(space, 2, seed=0)
    assert trial_count(space, 2) == len(configs) == 12
    grid = [(c["hidden_size"], c["batch_size"]) for c in configs]
    assert grid[:6] == grid[6:] == [(32, 8), (32, 16), (32, 32), (64, 8), (64, 16), (64, 32)]
    assert len({c["lr"] for c in configs}) == 12
    assert trial_key(3) == "trial_00003"


# --- ASHA as data -----------------------------------------------------------------------------------


def test_quantile_is_numpys_linear_percentile() -> None:
    np = pytest.importorskip("numpy")
    for values in ([1.0], [3.0, 1.0], [0.5, 0.1, 0.9, 0.7], [float(i) ** 1.5 for i in range(17)]):
        for q in (0.0, 0.5, 2 / 3, 0.75, 1.0):
            assert quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))
    assert quantile([], 0.5) is None
    assert quantile([float("nan"), 1.0, 3.0], 0.5) == 2.0  # NaN ignored, as nanpercentile


def _results(seed: int, trials: int = 12, max_t: int = 9) -> list[tuple[str, int, float]]:
    """Results as an asynchronous search would send them: trials interleaved, each one's
    iterations in order."""
    import random

    rng = random.Random(seed)
    pending = {trial_key(i): 1 for i in range(trials)}
    quality = {t: rng.random() for t in pending}
    out = []
    while pending:
        t = rng.choice(sorted(pending))
        it = pending[t]
        out.append((t, it, quality[t] + 0.01 * it + rng.gauss(0, 0.05)))
        pending[t] = it + 1
        if it == max_t:
            del pending[t]
    return out


def _drive(rungs: AshaRungs, results: list[tuple[str, int, float]]) -> list[tuple[str, int]]:
    """Feed results, skipping a stopped trial's later ones; the (trial, iteration) stops."""
    stopped: dict[str, int] = {}
    for trial, it, value in results:
        if trial not in stopped and rungs.on_result(trial, it, value):
            stopped[trial] = it
    return sorted(stopped.items())


@pytest.mark.parametrize("mode", ["max", "min"])
def test_asha_rungs_decide_as_tunes_asha(mode: str) -> None:
    """The same results through Tune's own bracket and through AshaRungs: the same stops."""
    from ray.tune.schedulers.async_hyperband import _Bracket

    for seed in range(20):
        results = _results(seed)
        bracket = _Bracket(min_t=1, max_t=9, reduction_factor=3, s=0)
        sign = 1.0 if mode == "max" else -1.0
        theirs: dict[str, int] = {}
        for trial, it, value in results:
            if trial not in theirs and it < 9:
                if bracket.on_result(type("T", (), {"trial_id": trial})(), it, sign * value) == "STOP":
                    theirs[trial] = it
        ours = _drive(AshaRungs(asha_rungs(9, 1, 3), 3, mode), [r for r in results if r[1] < 9])
        assert ours == sorted(theirs.items()), seed
        assert ours, "no trial stopped: the comparison proves nothing"


def test_rungs_saved_mid_search_and_restored_decide_as_if_never_stopped() -> None:
    results = _results(7)
    whole = _drive(AshaRungs([1, 3], 3, "max"), results)
    first = AshaRungs([1, 3], 3, "max")
    stopped_early = _drive(first, results[:40])
    saved = first.to_json()
    assert saved.keys() == {"1", "3"} and all(saved.values())
    again = AshaRungs([1, 3], 3, "max")
    again.load(saved)
    # The restored half: trials the first half stopped stay stopped (they never report again).
    done = {t for t, _ in stopped_early}
    rest = _drive(again, [r for r in results[40:] if r[0] not in done])
    assert sorted(stopped_early + rest) == whole
