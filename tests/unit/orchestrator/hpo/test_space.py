"""The search space: config paths, distributions, the trials drawn from it."""

from __future__ import annotations

import math

import pytest

from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from orchestrator.hpo.space import parse_distribution, sample_configs, trial_count
from orchestrator.hpo.trials import trial_key


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
        ("hpo.search_space.hidden_size=choice 32 6.5", "hpo.search_space.hidden_size", "expected an integer"),
        ("+hpo.search_space.momentum=choice 0.9", "hpo.search_space.momentum", "not a config path"),
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
